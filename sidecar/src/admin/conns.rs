//! The admin and probe ports' connections: served by the accept loop every listener shares, under
//! small caps and short timers. Their clients are few (the kubelet, a metrics scraper, someone in
//! the pod), and these ports are reachable from the whole cluster network, so a client that opens
//! connections and sends nothing, or keeps them idle, must not crowd the probes out: a failed
//! liveness probe restarts the sidecar.

use crate::metrics::Metrics;
use crate::net::accept::{Policy, accept_loop};
use crate::net::conn::limits::{Caps, Tracker};
use crate::net::conn::meters::Meters;
use crate::net::conn::timers::{IDLE_CLOSE_GRACE, Timeouts};
use crate::net::conn::tracked::track;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How a port's connections live.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Its name in logs and in the connection metrics' `listener` label.
    pub name: &'static str,
    /// Most connections at once.
    pub total: usize,
    /// Most from one client address: one noisy client leaves room for the kubelet and a scraper.
    pub per_client: usize,
    /// From accept to the end of the first request's head.
    pub first_byte: Duration,
    /// With no request in flight: a request in flight (a `/drain` lasting the drain limit) is not
    /// idle.
    pub idle: Duration,
    /// Whether a connection serves more than one request.
    pub keep_alive: bool,
}

/// The admin port: scrapes and `kubectl port-forward` keep connections, so a keep-alive that
/// outlives a 30 s scrape interval.
pub(super) const ADMIN: Limits = Limits {
    name: "admin",
    total: 64,
    per_client: 16,
    first_byte: Duration::from_secs(5),
    idle: Duration::from_secs(45),
    keep_alive: true,
};

/// The probe port: the kubelet opens one connection per probe.
pub(super) const PROBES: Limits = Limits {
    name: "probes",
    total: 64,
    per_client: 16,
    first_byte: Duration::from_secs(5),
    idle: Duration::from_secs(5),
    keep_alive: false,
};

impl Limits {
    fn policy(&self, metrics: &Metrics) -> Policy {
        let c = &metrics.conns;
        let name = self.name;
        Policy {
            tracker: Tracker::new(Caps {
                total: self.total,
                per_client: self.per_client,
            }),
            timeouts: Timeouts {
                first_byte: Some(self.first_byte),
                idle: Some(self.idle),
                max_age: None,
                max_age_grace: Duration::ZERO,
            },
            meters: Meters::new(
                c.open(name),
                c.accept_errors(name),
                |reason| c.refused(name, reason),
                |reason| c.closed(name, reason),
            ),
        }
    }
}

/// Serves HTTP/1.1 on `listener` under `limits` for as long as the process runs, each request
/// answered by `answer` (given the client's address).
pub(super) async fn serve<A, F, B>(
    listener: TcpListener,
    limits: Limits,
    metrics: &Metrics,
    answer: A,
) where
    A: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes, Error = Infallible> + Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper's header timer covers a slow head on a kept-alive connection, which the first-byte
    // timer does not; a little longer than that timer, so that a silent new connection is ended
    // (and counted) by the timer.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.first_byte + IDLE_CLOSE_GRACE)
        .keep_alive(limits.keep_alive);
    // Never cancelled: probes and scrapes are answered until the process exits, so they see the
    // drain.
    let forever = CancellationToken::new();
    accept_loop(
        listener,
        forever,
        limits.name,
        None,
        limits.policy(metrics),
        move |io, peer, conn| {
            let answer = answer.clone();
            let svc = hyper::service::service_fn(move |req| {
                let answer = answer.clone();
                async move { Ok::<_, Infallible>(answer(req, peer).await) }
            });
            http.serve_connection(TokioIo::new(io), track(conn, svc))
        },
    )
    .await;
}

// The caps and timers are the accept loop's, tested there; these tests show the ports are wired
// to them.
#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn started(limits: Limits) -> (SocketAddr, Arc<Metrics>) {
        started_answering_after(limits, Duration::ZERO).await
    }

    /// A port whose every answer takes `hold` (a `/drain` or `/drained` waiting for the drain).
    async fn started_answering_after(limits: Limits, hold: Duration) -> (SocketAddr, Arc<Metrics>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let metrics = Metrics::new(crate::metrics::Role::Router);
        let m = metrics.clone();
        tokio::spawn(async move {
            serve(listener, limits, &m, move |_req, _peer| async move {
                tokio::time::sleep(hold).await;
                Response::new(Full::new(Bytes::from_static(b"ok\n")))
            })
            .await;
        });
        (addr, metrics)
    }

    /// Reads until the server closes the connection; what it sent.
    async fn until_closed(s: &mut TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        got
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_at_the_first_byte_timeout() {
        let limits = Limits {
            first_byte: Duration::from_millis(100),
            ..ADMIN
        };
        let (addr, metrics) = started(limits).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // The server ends it (the test's own limit only stops a hang).
        let closed = tokio::time::timeout(Duration::from_secs(10), until_closed(&mut s)).await;
        assert!(closed.is_ok(), "a silent connection stayed open");
        assert!(
            metrics
                .encode()
                .contains(r#"switchyard_connections_closed_total{listener="admin",reason="first_byte_timeout"} 1"#),
            "{}",
            metrics.encode()
        );
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed() {
        // The watcher re-reads a connection's activity when its last deadline passes (the first
        // byte's here), so a short one keeps the test short.
        let limits = Limits {
            first_byte: Duration::from_millis(300),
            idle: Duration::from_millis(100),
            ..ADMIN
        };
        let (addr, metrics) = started(limits).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let got = tokio::time::timeout(Duration::from_secs(10), until_closed(&mut s))
            .await
            .expect("the idle connection was closed");
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            metrics.encode().contains(
                r#"switchyard_connections_closed_total{listener="admin",reason="idle_timeout"} 1"#
            ),
            "{}",
            metrics.encode()
        );
    }

    #[tokio::test]
    async fn a_request_waiting_longer_than_the_timers_is_answered_and_its_connection_still_ends() {
        // The app's preStop hook (`/drained`) and the sidecar's (`/drain`) wait for the drain, up
        // to the drain limit; in flight, their connections are not idle. Every timer comes due
        // during the wait (hyper's header timer too, 2 s past the first-byte one): had ours counted
        // it, its close would be on the count at the answer; had hyper's, there would be no answer.
        let limits = Limits {
            first_byte: Duration::from_millis(100),
            idle: Duration::from_millis(300),
            ..ADMIN
        };
        let hold = limits.first_byte + IDLE_CLOSE_GRACE + Duration::from_millis(400);
        let (addr, metrics) = started_answering_after(limits, hold).await;
        let closed = |reason: &str, n: u32| {
            format!(
                r#"switchyard_connections_closed_total{{listener="admin",reason="{reason}"}} {n}"#
            )
        };
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /drained HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut got = vec![0; 256];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut got))
            .await
            .expect("an answer or a close")
            .expect("read");
        assert!(
            got[..n].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got[..n])
        );
        let text = metrics.encode();
        assert!(
            text.contains(&closed("first_byte_timeout", 0))
                && text.contains(&closed("idle_timeout", 0)),
            "{text}"
        );
        // Kept alive after the answer, the connection still ends: a stranger's `/drained` holds
        // it for the wait and a few seconds more. (Which timer ends it is not the point: when the
        // watcher last looked the request was in flight, so hyper's header timer, 2 s past the
        // first-byte one, which also runs while a kept-alive connection awaits its next request,
        // comes first.)
        let ended = tokio::time::timeout(Duration::from_secs(10), until_closed(&mut s)).await;
        assert!(ended.is_ok(), "the connection stayed open after its answer");
    }

    #[tokio::test]
    async fn connections_over_the_per_client_cap_are_refused() {
        let limits = Limits {
            per_client: 2,
            ..ADMIN
        };
        let (addr, metrics) = started(limits).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        let mut third = TcpStream::connect(addr).await.expect("connect");
        let closed = tokio::time::timeout(Duration::from_secs(10), until_closed(&mut third)).await;
        assert!(
            closed.is_ok_and(|got| got.is_empty()),
            "the third was served"
        );
        assert!(
            metrics.encode().contains(
                r#"switchyard_connections_refused_total{listener="admin",reason="max_connections_per_client"} 1"#
            ),
            "{}",
            metrics.encode()
        );
    }
}
