//! The accept loop every listener shares: bounded connections, back-off on accept errors, and a
//! graceful drain that lets open requests finish.

use crate::shutdown::DRAIN_LIMIT;
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Most client connections at once per listener; more wait in the kernel's accept backlog.
pub const MAX_CONNECTIONS: usize = 16 * 1024;

/// Accepts connections until `drain` fires, serving each with the connection `serve` makes, then
/// lets open ones finish (up to the drain limit). `what` names the listener in logs.
pub async fn accept_loop<C>(
    listener: TcpListener,
    drain: CancellationToken,
    what: &'static str,
    mut serve: impl FnMut(TcpStream) -> C,
) where
    C: GracefulConnection + Send + 'static,
    C::Error: Display,
{
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = drain.cancelled() => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Usually EMFILE: back off instead of spinning.
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = drain.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = graceful.watch(serve(stream));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(listener = what, error = %e, "client connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(
        listener = what,
        open = graceful.count(),
        "listener closed; finishing open requests"
    );
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = what,
            "drain limit reached with requests still open"
        );
    }
}
