//! The accept loop every listener shares: bounded connections, back-off on accept errors, optional
//! TLS, and a graceful drain that lets open requests finish.

use crate::shutdown::DRAIN_LIMIT;
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

/// A client connection: plain TCP, or TLS over it when the listener has TLS.
pub type Io = Either<TcpStream, TlsStream<TcpStream>>;

/// Time a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most client connections at once per listener; more wait in the kernel's accept backlog.
pub const MAX_CONNECTIONS: usize = 16 * 1024;

/// Accepts connections until `drain` fires, serving each with the connection `serve` makes (given
/// the client's address), then lets open ones finish (up to the drain limit). With `tls`, each
/// handshake runs on the connection's own task, so a slow client never holds the loop. `what` names
/// the listener in logs.
pub async fn accept_loop<C, F>(
    listener: TcpListener,
    drain: CancellationToken,
    what: &'static str,
    tls: Option<TlsAcceptor>,
    serve: F,
) where
    F: Fn(Io, SocketAddr) -> C + Clone + Send + 'static,
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
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
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
        let Some(acceptor) = &tls else {
            let conn = graceful.watch(serve(Either::Left(stream), peer));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(listener = what, error = %e, "client connection ended with an error");
                }
                drop(permit);
            });
            continue;
        };
        let (acceptor, watcher, serve, drain) = (
            acceptor.clone(),
            graceful.watcher(),
            serve.clone(),
            drain.clone(),
        );
        tokio::spawn(async move {
            let handshake = tokio::select! {
                r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => r,
                _ = drain.cancelled() => return,
            };
            match handshake {
                Ok(Ok(tls)) => {
                    let conn = watcher.watch(serve(Either::Right(tls), peer));
                    if let Err(e) = conn.await {
                        tracing::debug!(listener = what, error = %e, "client connection ended with an error");
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(listener = what, %peer, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    tracing::debug!(listener = what, %peer, "TLS handshake timed out");
                }
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
