//! The accept loop: HTTP/1.1 with keep-alive on every connection, graceful drain on shutdown.

use crate::handler::Handlers;
use crate::listener::Listener;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::time::Duration;

/// How long in-flight requests get to finish once shutdown starts; the kubelet's default grace period is 30 s and
/// the sidecar drains first, so this is generous.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves events on `listener` until `shutdown` completes, then stops accepting and lets open requests finish
/// (up to [`DRAIN_TIMEOUT`]).
pub async fn serve(
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(listener, shutdown, None).await
}

/// As [`serve`], each event in a span exported by `tracing`.
pub async fn serve_with(
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()>,
    tracing: Option<crate::otel::Tracing>,
) -> std::io::Result<()> {
    let listener = listener.into();
    let local_api = std::env::var(crate::relay::LOCAL_API_ENV).ok();
    let handlers = Handlers::new(local_api.as_deref()).with_tracing(tracing);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Running out of file descriptors or a connection reset before accept is transient: back
                    // off a little instead of dying or spinning.
                    eprintln!("switchyard-example-app: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let handlers = handlers.clone();
        let service = service_fn(move |req| {
            let handlers = handlers.clone();
            async move { handlers.handle(req).await }
        });
        let conn = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A peer closing mid-request is normal for a server; nothing to report.
            let _ = conn.await;
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "switchyard-example-app: drain timed out after {DRAIN_TIMEOUT:?}; closing open connections"
        );
    }
    Ok(())
}
