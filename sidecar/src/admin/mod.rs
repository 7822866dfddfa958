//! The admin server of both roles: `/healthz`, `/readyz`, `/metrics`, and `/routes` (the routing
//! table as JSON); the manager role adds `GET /drain`, which starts its drain, and `/drained`,
//! which waits for it (see [`DrainHook`]). `GET /tap` streams the events through this sidecar
//! (`switchyard tap`; see `crate::tap`). `/routes`, `/drain` and `/tap` answer clients inside the
//! pod only (`gate`). And the probe server (`/healthz`, `/readyz` on a port of their own). Both serve
//! under caps and timers (`conns`). `/metrics` carries no secrets and no addresses: its labels are
//! event types, statuses and fixed reasons.

use crate::metrics::Metrics;
use crate::tap::Taps;
use crate::upstream::Upstream;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tap::AdminBody;
use tokio::net::TcpListener;

mod conns;
mod drain_call;
mod drain_hook;
mod gate;
mod tap;

pub(crate) use drain_call::{DrainCallError, call as call_drain};
pub(crate) use drain_hook::DrainHook;

/// Readiness: true once the listeners are bound, false again when a drain starts.
#[derive(Clone, Default)]
pub(crate) struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready or not.
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether it is ready.
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Serves the kubelet's probes on `listener` forever: `/healthz` (200 while the process runs) and
/// `/readyz` (200 while ready). A port of their own, started before anything else, so probes
/// answer while the certificate is fetched and however busy or flooded the serving ports are.
pub(crate) async fn serve_probes(listener: TcpListener, metrics: Arc<Metrics>, ready: Readiness) {
    conns::serve(listener, conns::PROBES, &metrics, move |req, _peer| {
        let (status, body): (StatusCode, &'static [u8]) = match req.uri().path() {
            "/healthz" => (StatusCode::OK, b"ok\n"),
            "/readyz" if ready.get() => (StatusCode::OK, b"ready\n"),
            "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, b"not ready\n"),
            _ => (StatusCode::NOT_FOUND, b"not found\n"),
        };
        std::future::ready(text(status, Bytes::from_static(body)))
    })
    .await;
}

/// Serves admin requests on `listener` forever: `/healthz`, `/readyz`, `/metrics`, `GET /routes`
/// showing `upstream`'s routing table, and `GET /tap` streaming `taps`. Runs until the process
/// exits, so probes see the drain.
pub(crate) async fn serve_router(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Arc<Upstream>,
    taps: Arc<Taps>,
) {
    serve_with(listener, metrics, ready, Some(upstream), None, taps).await;
}

/// As [`serve_router`], plus `GET /drain` (loopback clients only) starting and awaiting the
/// manager's drain, and `/drained` (anyone) awaiting it.
pub(crate) async fn serve_manager(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Arc<Upstream>,
    drain: DrainHook,
    taps: Arc<Taps>,
) {
    serve_with(listener, metrics, ready, Some(upstream), Some(drain), taps).await;
}

/// What the admin port answers with: the process's state and the role's hooks.
struct Admin {
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Option<Arc<Upstream>>,
    drain: Option<DrainHook>,
    taps: Arc<Taps>,
    refusals: gate::Refusals,
}

impl Admin {
    /// The answer to `method uri` from `peer`.
    async fn respond(
        &self,
        method: &Method,
        uri: &hyper::Uri,
        peer: IpAddr,
    ) -> Response<AdminBody> {
        let path = uri.path();
        if let Err(refusal) = gate::check(method, path, peer) {
            self.refusals.record(&self.metrics, refusal, peer);
            return whole(refusal.answer());
        }
        match (path, &self.drain) {
            (gate::TAP, _) => tap::open(&self.taps, uri.query()),
            (gate::DRAIN, Some(hook)) => whole(waited(hook.drain().await)),
            (gate::DRAINED, Some(hook)) => whole(waited(hook.drained().await)),
            _ => whole(answer(
                path,
                &self.metrics,
                &self.ready,
                self.upstream.as_deref(),
            )),
        }
    }
}

/// The answer of `/drain` or `/drained`. Nothing to wait for is a success: the app's preStop hook
/// should let the app stop, and a failed hook would only add a `FailedPreStopHook` event.
fn waited(w: drain_hook::Waited) -> Response<Full<Bytes>> {
    use drain_hook::Waited;
    let (status, body): (StatusCode, &'static [u8]) = match w {
        Waited::Drained => (StatusCode::OK, b"drained\n"),
        Waited::NoneStarted => (
            StatusCode::OK,
            b"no drain started within the start window: nothing to wait for\n",
        ),
        Waited::NotFinished => (StatusCode::SERVICE_UNAVAILABLE, b"drain not finished\n"),
    };
    text(status, Bytes::from_static(body))
}

async fn serve_with(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Option<Arc<Upstream>>,
    drain: Option<DrainHook>,
    taps: Arc<Taps>,
) {
    let admin = Arc::new(Admin {
        metrics: metrics.clone(),
        ready,
        upstream,
        drain,
        taps,
        refusals: gate::Refusals::default(),
    });
    conns::serve(listener, conns::ADMIN, &metrics, move |req, peer| {
        let admin = admin.clone();
        async move { admin.respond(req.method(), req.uri(), peer.ip()).await }
    })
    .await;
}

fn answer(
    path: &str,
    metrics: &Metrics,
    ready: &Readiness,
    upstream: Option<&Upstream>,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/routes" => match upstream {
            Some(r) => match serde_json::to_vec_pretty(&r.view()) {
                Ok(json) => (StatusCode::OK, "application/json", Bytes::from(json)),
                Err(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    Bytes::from_static(b"cannot encode the routing table\n"),
                ),
            },
            None => (
                StatusCode::NOT_FOUND,
                "text/plain",
                Bytes::from_static(b"no routing table in this role\n"),
            ),
        },
        "/healthz" => (StatusCode::OK, "text/plain", Bytes::from_static(b"ok\n")),
        "/readyz" if ready.get() => (StatusCode::OK, "text/plain", Bytes::from_static(b"ready\n")),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            Bytes::from_static(b"not ready\n"),
        ),
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Bytes::from(metrics.encode()),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"not found\n"),
        ),
    };
    with_type(status, content_type, body)
}

/// A whole answer as an admin answer.
fn whole(resp: Response<Full<Bytes>>) -> Response<AdminBody> {
    resp.map(http_body_util::BodyExt::boxed_unsync)
}

fn text(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    with_type(status, "text/plain", body)
}

fn with_type(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}
