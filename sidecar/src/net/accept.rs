//! The accept loop every listener shares: connections under caps (an over-cap one is accepted and
//! closed at once, so the loop never stops accepting and the kernel's backlog never fills with
//! sockets nobody serves), back-off on accept errors, optional TLS, each connection's timers
//! (first byte, idle, age; see `net::conn::timers`), and a graceful drain that lets open requests
//! finish.

use super::conn::limits::Tracker;
use super::conn::meters::Meters;
use super::conn::timers::{self, Due, Timeouts};
use super::conn::tracked::Conn;
use crate::shutdown::DRAIN_LIMIT;
use hyper_util::server::graceful::GracefulConnection;
use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A client connection: plain TCP, or TLS over it when the listener has TLS (boxed: a TLS
/// session's state is large, and every plain connection would carry its room).
pub(crate) type Io = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// Longest a client has to finish the TLS handshake (the first-byte timeout, when shorter, wins).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// First and longest pause after a failed accept (EMFILE, ENFILE, ENOBUFS): long enough not to
/// spin, short enough that the listener is back as soon as descriptors are free again.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(500));

/// What a listener's connections live under.
#[derive(Clone)]
pub(crate) struct Policy {
    /// The caps, shared by every listener of the process that counts against them.
    pub tracker: Arc<Tracker>,
    /// Each connection's timers; `max_age` is jittered per connection.
    pub timeouts: Timeouts,
    /// The listener's connection metrics.
    pub meters: Meters,
}

/// Accepts connections until `drain` fires, serving each with the connection `serve` makes (given
/// the client's address and the connection's [`Conn`], whose activity the service must track for
/// the idle and first-byte timers: `net::conn::tracked::track`), then lets open ones finish (up to
/// the drain limit). With `tls`, each handshake runs on the connection's own task, so a slow client
/// never holds the loop. `what` names the listener in logs.
pub(crate) async fn accept_loop<C, F>(
    listener: TcpListener,
    drain: CancellationToken,
    what: &'static str,
    tls: Option<TlsAcceptor>,
    policy: Policy,
    serve: F,
) where
    F: Fn(Io, SocketAddr, Arc<Conn>) -> C + Send + Sync + 'static,
    C: GracefulConnection + Send + 'static,
    C::Error: Display,
{
    let tasks = TaskTracker::new();
    // Shared, not cloned per connection: every idle connection's task stays small (the closure
    // holds the protocol builders).
    let serve = Arc::new(serve);
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => {
                    backoff = ACCEPT_BACKOFF.0;
                    s
                }
                Err(e) => {
                    policy.meters.accept_errors.inc();
                    tracing::warn!(listener = what, error = %e, pause = ?backoff, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = drain.cancelled() => break,
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                    continue;
                }
            },
            _ = drain.cancelled() => break,
        };
        let slot = match policy.tracker.admit(peer.ip(), &policy.meters.open) {
            Ok(s) => s,
            Err(refusal) => {
                // Closed at once: the client sees its connection end instead of waiting in a backlog.
                policy.meters.refused(refusal).inc();
                tracing::debug!(listener = what, %peer, reason = refusal.label(), "connection refused");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn::new(Instant::now(), Some(slot));
        let mut timeouts = policy.timeouts;
        timeouts.max_age = timeouts
            .max_age
            .map(|a| timers::jittered(a, fastrand::f64()));
        let (tls, serve, drain, meters) = (
            tls.clone(),
            serve.clone(),
            drain.clone(),
            policy.meters.clone(),
        );
        tasks.spawn(async move {
            let io = match tls {
                None => Either::Left(stream),
                Some(acceptor) => {
                    let limit = timeouts
                        .first_byte
                        .map_or(HANDSHAKE_TIMEOUT, |f| f.min(HANDSHAKE_TIMEOUT));
                    let handshake = tokio::select! {
                        // Boxed: the handshake's state is large, and a plain connection's task
                        // would carry its room for as long as it lives.
                        r = tokio::time::timeout(limit, Box::pin(acceptor.accept(stream))) => r,
                        _ = drain.cancelled() => return,
                    };
                    match handshake {
                        Ok(Ok(tls)) => Either::Right(Box::new(tls)),
                        Ok(Err(e)) => {
                            tracing::debug!(listener = what, %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            meters.closed(Due::FirstByte).inc();
                            tracing::debug!(listener = what, %peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            // Boxed once: moved by value through this task and `watch`, the connection's state
            // would be laid out in the task more than once.
            let served = Box::pin(serve(io, peer, conn.clone()));
            watch(served, &conn, timeouts, &drain, &meters, what).await;
        });
    }
    drop(listener);
    tasks.close();
    tracing::info!(
        listener = what,
        open = tasks.len(),
        "listener closed; finishing open requests"
    );
    // Each connection ends itself by the drain limit; the margin covers its last writes.
    if tokio::time::timeout(DRAIN_LIMIT + Duration::from_secs(1), tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = what,
            "drain limit reached with requests still open"
        );
    }
}

/// Drives `served` until it ends, asking it to end (HTTP/2 GOAWAY, HTTP/1.1 close once idle) when
/// a timer is due or the drain starts, and closing it when its grace is over.
async fn watch<C>(
    mut served: std::pin::Pin<Box<C>>,
    conn: &Conn,
    t: Timeouts,
    drain: &CancellationToken,
    meters: &Meters,
    what: &'static str,
) where
    C: GracefulConnection,
    C::Error: Display,
{
    let mut closing: Option<Instant> = None;
    let mut draining = false;
    loop {
        let now = Instant::now();
        let plan = timers::next(&t, conn.activity.started(), conn.activity.seen(), closing);
        if let Some((at, due)) = plan
            && at <= now
        {
            meters.closed(due).inc();
            if due == Due::Grace {
                tracing::debug!(listener = what, "connection closed at the end of its grace");
                return;
            }
            tracing::debug!(
                listener = what,
                reason = due.label(),
                "asking the connection to end"
            );
            served.as_mut().graceful_shutdown();
            closing = Some(now + timers::grace(&t, due));
            continue;
        }
        let wake = async {
            match plan {
                Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(listener = what, error = %e, "client connection ended with an error");
                }
                return;
            }
            _ = wake => {}
            _ = drain.cancelled(), if !draining => {
                draining = true;
                served.as_mut().graceful_shutdown();
                let limit = now + DRAIN_LIMIT;
                closing = Some(closing.map_or(limit, |c| c.min(limit)));
            }
        }
    }
}
