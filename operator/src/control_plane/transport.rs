//! The h2 server under the control plane's gRPC services: hyper's connection builder rather than
//! tonic's `Server`, because a routing-table stream must stop pulling messages once a little waits
//! for a slow reader, and only hyper exposes how much one stream may queue (`max_send_buf_size`,
//! 400 KiB by default, which tonic 0.14 keeps). In a heap profile at 1,000 Managers and 500 router
//! streams those queues held 130 of 176 MB (docs/performance.md, "The control plane at scale"): a
//! message pulled too early is a copy per stream, where one pulled late is built from the table as
//! it is then.
//!
//! Each connection's requests carry its [`PeerInfo`] (who the TLS client certificate names), which
//! `caller` reads.

use futures::{Stream, StreamExt};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::io;
use std::time::Duration;
use switchyard_identity::incoming::PeerInfo;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::codegen::Service;
use tonic::service::Routes;

/// What one stream may queue ahead of its reader besides the chunk being sent: one part of a whole
/// table (`delta::PART_BYTES`). Enough to keep a reader that keeps up busy; a stalled one costs at
/// most this and a chunk.
pub const MAX_SEND_BUF: usize = 16 * 1024;
/// Pings find sidecars that vanished without closing their stream (node loss, partitions).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a shutdown waits for connections to finish once every stream was told to end; a
/// client that stopped reading must not hold the operator's exit.
pub const DRAIN: Duration = Duration::from_secs(5);
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

/// Serves `routes` on every connection `incoming` yields until `shutdown` resolves; then takes no
/// more, lets each connection finish its streams (which `shutdown` must have ended) within
/// [`DRAIN`], and returns.
pub async fn serve<I, IO>(incoming: I, routes: Routes, shutdown: impl Future<Output = ()>)
where
    I: Stream<Item = io::Result<(IO, PeerInfo)>>,
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
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
        let (io, info) = match next {
            None => break,
            Some(Ok(conn)) => conn,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "control-plane accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let remote = info.remote;
        let routes = routes.clone();
        let service = hyper::service::service_fn(move |mut req| {
            req.extensions_mut().insert(info.clone());
            routes.clone().call(req)
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%remote, error = %e, "control-plane connection ended");
            }
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

/// Plain TCP connections of `listener` (mesh TLS off: nobody is known by a certificate).
pub fn plain(
    listener: tokio::net::TcpListener,
) -> impl Stream<Item = io::Result<(tokio::net::TcpStream, PeerInfo)>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        let stream = accepted?;
        // Table deltas are small and latency is the point of them.
        stream.set_nodelay(true)?;
        let remote = stream.peer_addr()?;
        Ok((stream, PeerInfo { remote, peer: None }))
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
        let one = futures::stream::iter([Ok((server_io, PeerInfo { remote, peer: None }))]);
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            one.chain(futures::stream::pending()),
            app(pulled.clone(), go.clone()),
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
        let server = tokio::spawn(serve(plain(listener), routes, async move {
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
}
