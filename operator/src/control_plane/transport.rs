//! The h2 server under the control plane's gRPC services: hyper's connection builder rather than
//! tonic's `Server`, because a routing-table stream must stop pulling messages once a little waits
//! for a slow reader, and only hyper exposes how much one stream may queue (`max_send_buf_size`,
//! 400 KiB by default, which tonic 0.14 keeps). In a heap profile at 1,000 Managers and 500 router
//! streams those queues held 130 of 176 MB (docs/performance-log.md, "The control plane at scale"): a
//! message pulled too early is a copy per stream, where one pulled late is built from the table as
//! it is then.
//!
//! Each connection's requests carry its [`PeerInfo`] (who the TLS client certificate names), which
//! `caller` reads. A connection holds its place under the listener's caps (its permit) until it
//! closes, and is closed once it has had no request in progress for the idle timeout
//! (`conn::idle`): keepalive pings alone would keep a client that does nothing connected forever.

use crate::conn::idle::{self, Activity};
use futures::{Stream, StreamExt};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::io;
use std::time::Duration;
use switchyard_identity::incoming::PeerInfo;
use switchyard_identity::limit::{ConnLimiter, ConnPermit};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::codegen::Service;
use tonic::service::Routes;

/// What one stream may queue ahead of its reader besides the chunk being sent: one part of a whole
/// table (`delta::PART_BYTES`). Enough to keep a reader that keeps up busy; a stalled one costs at
/// most this and a chunk.
pub(super) const MAX_SEND_BUF: usize = 16 * 1024;
/// Pings find sidecars that vanished without closing their stream (node loss, partitions).
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the connection is dropped.
pub(super) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a shutdown waits for connections to finish once every stream was told to end; a
/// client that stopped reading must not hold the operator's exit.
pub(super) const DRAIN: Duration = Duration::from_secs(5);
/// Pause after a failed accept (out of file descriptors, say) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The h2 settings of every control-plane connection.
fn builder() -> http2::Builder<TokioExecutor> {
    let mut b = http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .max_send_buf_size(MAX_SEND_BUF);
    b
}

/// One accepted connection: the stream, who is on the other end, and its place under the caps
/// (`None` when the stream holds it itself, as a TLS connection of `incoming_limited` does).
pub(super) type Accepted<IO> = (IO, PeerInfo, Option<ConnPermit>);

/// Serves `routes` on every connection `incoming` yields until `shutdown` resolves, closing each
/// one that has had no request in progress for `idle` (and telling `on_idle`); then takes no
/// more, lets each connection finish its streams (which `shutdown` must have ended) within
/// [`DRAIN`], and returns.
pub(super) async fn serve<I, IO>(
    incoming: I,
    routes: Routes,
    idle: Duration,
    on_idle: impl Fn() + Send + Sync + 'static,
    shutdown: impl Future<Output = ()>,
) where
    I: Stream<Item = io::Result<Accepted<IO>>>,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let on_idle = std::sync::Arc::new(on_idle);
    let builder = builder();
    let graceful = GracefulShutdown::new();
    // Boxed so that it can be dropped before the drain: the TLS accept loop stops with it.
    let mut incoming = Box::pin(incoming);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let next = tokio::select! {
            () = &mut shutdown => break,
            next = incoming.next() => next,
        };
        let (io, info, permit) = match next {
            None => break,
            Some(Ok(conn)) => conn,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "control-plane accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let remote = info.remote;
        let activity = Activity::default();
        let service = {
            let (routes, activity) = (routes.clone(), activity.clone());
            hyper::service::service_fn(move |mut req| {
                req.extensions_mut().insert(info.clone());
                let busy = activity.begin();
                let call = routes.clone().call(req);
                async move {
                    let response = call.await?;
                    Ok::<_, std::convert::Infallible>(
                        response.map(|b| tonic::body::Body::new(idle::hold(b, busy))),
                    )
                }
            })
        };
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        let on_idle = on_idle.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%remote, error = %e, "control-plane connection ended");
                },
                () = activity.idle_for(idle) => {
                    on_idle();
                    tracing::debug!(%remote, "idle control-plane connection closed");
                }
            }
            drop(permit);
        });
    }
    drop(incoming);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "control-plane connections still open {DRAIN:?} after shutdown; dropping them"
        );
    }
}

/// Plain TCP connections of `listener` (mesh TLS off: nobody is known by a certificate), each
/// admitted under `limiter`'s caps; one over a cap is closed at once and `on_refused` hears why.
pub(super) fn plain(
    listener: tokio::net::TcpListener,
    limiter: std::sync::Arc<ConnLimiter>,
    on_refused: impl Fn(&'static str) + Send + 'static,
) -> impl Stream<Item = io::Result<Accepted<tokio::net::TcpStream>>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |accepted| {
        let admitted = (|| {
            let stream = accepted?;
            let remote = stream.peer_addr()?;
            match limiter.admit(remote.ip()) {
                Err(r) => {
                    on_refused(r.reason());
                    Ok(None)
                }
                Ok(permit) => {
                    // Table deltas are small and latency is the point of them.
                    stream.set_nodelay(true)?;
                    Ok(Some((
                        stream,
                        PeerInfo { remote, peer: None },
                        Some(permit),
                    )))
                }
            }
        })();
        std::future::ready(admitted.transpose())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Bytes;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use tokio::io::{DuplexStream, ReadBuf};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Notify;

    const CHUNK: usize = 1024;
    /// The in-memory pipe's buffer: the stand-in for the kernel's socket buffers.
    const PIPE: usize = 8 * 1024;
    /// h2's largest DATA frame, which its writer may hold besides the queue.
    const FRAME: usize = 16 * 1024;

    /// `/pull`: once `go` is notified, an endless body of 1 KiB chunks, counting the bytes pulled.
    /// `/peer`: the remote address the request carries.
    fn app(pulled: Arc<AtomicUsize>, go: Arc<Notify>) -> Routes {
        let app = axum::Router::new()
            .route(
                "/pull",
                axum::routing::get(move || async move {
                    let start = futures::stream::once(async move {
                        go.notified().await;
                        Ok::<_, io::Error>(Bytes::new())
                    });
                    let chunks = futures::stream::repeat_with(move || {
                        pulled.fetch_add(CHUNK, Ordering::SeqCst);
                        Ok(Bytes::from(vec![7u8; CHUNK]))
                    });
                    axum::body::Body::from_stream(start.chain(chunks))
                }),
            )
            .route(
                "/peer",
                axum::routing::get(
                    |axum::Extension(info): axum::Extension<PeerInfo>| async move {
                        info.remote.to_string()
                    },
                ),
            );
        Routes::from(app)
    }

    /// The client's end of the pipe; once `stalled`, it reads nothing more (a reader gone quiet
    /// with its flow-control window wide open: only the server's own queue limits it).
    struct Gated {
        io: DuplexStream,
        stalled: Arc<AtomicBool>,
    }

    impl AsyncRead for Gated {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.stalled.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Gated {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.io).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    fn get(path: &str) -> http::Request<http_body_util::Empty<Bytes>> {
        http::Request::get(format!("http://control-plane{path}"))
            .body(http_body_util::Empty::new())
            .expect("request")
    }

    async fn stopped(stop: tokio::sync::oneshot::Sender<()>, server: tokio::task::JoinHandle<()>) {
        let _ = stop.send(());
        tokio::time::timeout(DRAIN + Duration::from_secs(5), server)
            .await
            .expect("serve returned after shutdown")
            .expect("serve task");
    }

    #[tokio::test]
    async fn a_stream_queues_little_for_a_reader_that_stopped_reading() {
        let (pulled, go) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let (client_io, server_io) = tokio::io::duplex(PIPE);
        let remote = "127.0.0.1:1".parse().expect("addr");
        let one = futures::stream::iter([Ok((server_io, PeerInfo { remote, peer: None }, None))]);
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            one.chain(futures::stream::pending()),
            app(pulled.clone(), go.clone()),
            Duration::from_secs(60),
            || {},
            async move {
                let _ = stopping.await;
            },
        ));
        let stalled = Arc::new(AtomicBool::new(false));
        let io = Gated {
            io: client_io,
            stalled: stalled.clone(),
        };
        let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(8 << 20)
            .handshake(TokioIo::new(io))
            .await
            .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let response = send.send_request(get("/pull")).await.expect("response");
        assert_eq!(response.status(), http::StatusCode::OK);
        stalled.store(true, Ordering::SeqCst);
        go.notify_one();
        // The pipe fills, then h2's queue, then the body is no longer polled. hyper's default
        // queue (400 KiB) would pull over ten times this bound.
        let bound = PIPE + FRAME + MAX_SEND_BUF + 4 * CHUNK;
        let filled = tokio::time::timeout(Duration::from_secs(10), async {
            while pulled.load(Ordering::SeqCst) < PIPE {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(filled.is_ok(), "the server never filled the pipe");
        // That no more is pulled can only be watched for a while.
        let until = tokio::time::Instant::now() + Duration::from_millis(300);
        while tokio::time::Instant::now() < until {
            let now = pulled.load(Ordering::SeqCst);
            assert!(
                now <= bound,
                "pulled {now} bytes ahead of a stalled reader (bound {bound})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(response);
        conn.abort();
        stopped(stop, server).await;
    }

    #[tokio::test]
    async fn requests_carry_their_connections_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let routes = app(Arc::default(), Arc::default());
        let limiter = ConnLimiter::new(crate::conn::CONTROL_PLANE);
        let incoming = plain(listener, limiter, |_| {});
        let idle = Duration::from_secs(60);
        let server = tokio::spawn(serve(incoming, routes, idle, || {}, async move {
            let _ = stopping.await;
        }));
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let local = tcp.local_addr().expect("local addr");
        let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let response = send.send_request(get("/peer")).await.expect("response");
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(body, local.to_string().as_bytes());
        drop(send);
        stopped(stop, server).await;
        // The server said goodbye: the client's connection ends by itself.
        tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("client connection closed after the server's shutdown")
            .expect("client connection task")
            .expect("client connection ended cleanly");
    }

    /// A served listener with small caps and a short idle timeout; the limiter and the idle count.
    async fn limited() -> (std::net::SocketAddr, Arc<ConnLimiter>, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limiter = ConnLimiter::new(switchyard_identity::limit::Limits {
            max_connections: 16,
            max_per_peer: 2,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_millis(300),
        });
        let idled = Arc::new(AtomicUsize::new(0));
        let incoming = plain(listener, limiter.clone(), |_| {});
        let on_idle = {
            let idled = idled.clone();
            move || {
                idled.fetch_add(1, Ordering::SeqCst);
            }
        };
        let idle = limiter.limits().idle_timeout;
        let routes = app(Arc::default(), Arc::new(Notify::new()));
        tokio::spawn(serve(
            incoming,
            routes,
            idle,
            on_idle,
            std::future::pending(),
        ));
        (addr, limiter, idled)
    }

    async fn h2(
        addr: std::net::SocketAddr,
    ) -> (
        hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
        tokio::task::JoinHandle<hyper::Result<()>>,
    ) {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
        (send, tokio::spawn(conn))
    }

    #[tokio::test]
    async fn a_peer_past_its_share_is_closed_and_idle_connections_go_while_streams_stay() {
        let (addr, limiter, idled) = limited().await;
        // One connection holds a stream open (a sidecar's table stream), one does nothing.
        let (mut streaming, streaming_conn) = h2(addr).await;
        let response = streaming
            .send_request(get("/pull"))
            .await
            .expect("response");
        assert_eq!(response.status(), http::StatusCode::OK);
        let (_quiet, quiet_conn) = h2(addr).await;
        crate::test_util::until(|| limiter.open() == 2).await;
        // A third from the same peer is closed before any h2.
        let mut over = TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(&mut over, &mut buf),
        )
        .await
        .expect("the connection over the peer's share was closed");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        // The quiet one is closed once idle; the one with a stream is not.
        tokio::time::timeout(Duration::from_secs(5), quiet_conn)
            .await
            .expect("the idle connection was closed")
            .expect("task")
            .ok();
        assert_eq!(idled.load(Ordering::SeqCst), 1);
        assert!(
            !streaming_conn.is_finished(),
            "a connection with a stream was closed"
        );
        assert_eq!(limiter.open(), 1, "the idle connection gave its place back");
        // Once its stream ends, it is idle too.
        drop(response);
        tokio::time::timeout(Duration::from_secs(5), streaming_conn)
            .await
            .expect("closed once its stream ended and it idled")
            .expect("task")
            .ok();
        crate::test_util::until(|| limiter.open() == 0).await;
    }
}
