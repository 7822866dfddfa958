//! The accept loop of the operator's plain HTTP servers (admin, probes): each connection admitted
//! under the listener's caps at accept, given the handshake timeout to send its request headers,
//! and closed after the idle timeout with no request in progress. `axum::serve` has none of these:
//! connections it accepted stayed open for as long as their clients liked, so a few thousand idle
//! ones took the process's descriptors, and with them the probes and the control plane's accepts.

use super::idle::{self, Activity};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::sync::Arc;
use std::time::Duration;
use switchyard_identity::limit::ConnLimiter;
use tokio::net::TcpListener;
use tonic::codegen::Service as _;

/// Pause after a failed accept (out of file descriptors, say) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` forever; `on_refused` hears every connection refused at accept
/// (`connections`, `peer_connections`) and closed idle (`idle`).
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limiter: Arc<ConnLimiter>,
    on_refused: impl Fn(&'static str) + Send + Sync + 'static,
) {
    let limits = limiter.limits();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.handshake_timeout);
    builder.http2().timer(TokioTimer::new());
    let on_refused = Arc::new(on_refused);
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let permit = match limiter.admit(remote.ip()) {
            Ok(p) => p,
            Err(r) => {
                on_refused(r.reason());
                continue;
            }
        };
        let activity = Activity::default();
        let service = {
            let (app, activity) = (app.clone(), activity.clone());
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let busy = activity.begin();
                let mut app = app.clone();
                async move {
                    let response = app.call(req).await?;
                    Ok::<_, std::convert::Infallible>(
                        response.map(|b| axum::body::Body::new(idle::hold(b, busy))),
                    )
                }
            })
        };
        let builder = builder.clone();
        let on_refused = on_refused.clone();
        tokio::spawn(async move {
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%remote, error = %e, "admin connection ended");
                },
                () = activity.idle_for(limits.idle_timeout) => on_refused("idle"),
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_identity::limit::Limits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const LIMITS: Limits = Limits {
        max_connections: 8,
        max_per_peer: 2,
        handshake_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
    };

    async fn server() -> (std::net::SocketAddr, Arc<ConnLimiter>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limiter = ConnLimiter::new(LIMITS);
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(listener, app, limiter.clone(), |_| {}));
        (addr, limiter)
    }

    /// Reads until the server closes; what it sent.
    async fn until_closed(tcp: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the server kept the connection open");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn one_peer_past_its_share_is_closed_at_accept_and_idle_ones_are_closed() {
        let (addr, limiter) = server().await;
        let mut held = Vec::new();
        for _ in 0..LIMITS.max_per_peer {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        crate::test_util::until(|| limiter.open() == LIMITS.max_per_peer).await;
        let mut over = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(
            until_closed(&mut over).await,
            "",
            "over its share: closed unanswered"
        );
        // The ones that never sent a request are closed by the header timeout.
        for tcp in &mut held {
            until_closed(tcp).await;
        }
        crate::test_util::until(|| limiter.open() == 0).await;
        let mut tcp = TcpStream::connect(addr).await.expect("connect again");
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("request");
        // Answered, then closed once idle for the idle timeout after the answer.
        let answer = until_closed(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }
}
