//! The admin server of both roles: `/healthz`, `/readyz`, `/metrics`, and `/routes`
//! (its current routing table as JSON).

use crate::metrics::Metrics;
use crate::upstream::Upstream;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// Readiness: true once the listeners are bound, false again when a drain starts.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready or not.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether it is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Serves admin requests on `listener` forever: `/healthz`, `/readyz`, `/metrics`, and `GET /routes`
/// showing `upstream`'s routing table. Runs until the process exits, so probes see the drain.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Arc<Upstream>,
) {
    serve_with(listener, metrics, ready, Some(upstream)).await;
}

async fn serve_with(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    upstream: Option<Arc<Upstream>>,
) {
    // Probes and scrapes are few; a small bound keeps a flood of admin connections from costing memory.
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            continue;
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = answer(req.uri().path(), &metrics, &ready, upstream.as_deref());
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            drop(permit);
        });
    }
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
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}
