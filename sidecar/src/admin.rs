//! The admin server of both roles: `/healthz`, `/readyz`, `/metrics`.

use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
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

/// Binds the admin port; the server then runs until the process exits, so probes see the drain.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves admin requests on `listener` forever.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, ready: Readiness) {
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
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = answer(req.uri().path(), &metrics, &ready);
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

fn answer(path: &str, metrics: &Metrics, ready: &Readiness) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
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
