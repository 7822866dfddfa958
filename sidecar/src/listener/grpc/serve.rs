//! Accepting gRPC connections: HTTP/2 (h2c, or TLS with ALPN h2), the arrival time and client
//! deadline of each call, and the middleware gates before tonic reads a call.

use super::gateway::Arrival;
use super::message::client_deadline;
use crate::answer::grpc::status;
use crate::listener::Edge;
use crate::middleware::Head;
use crate::net::accept::Policy;
use crate::net::conn::tracked::track;
use crate::net::grpc_timeout::parse_grpc_timeout;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tonic::codegen::Service as _;
use tonic::service::Routes;

/// Concurrent streams per HTTP/2 connection.
const MAX_STREAMS: u32 = 1024;

/// Accepts HTTP/2 connections (h2c, or TLS with ALPN h2 when `tls` is set) until `drain` fires, then
/// lets open calls finish (up to the drain limit). `Connect` streams stop reading at the drain and end
/// once their replies are out. The auth and rate-limit middleware of `edge` refuse calls before tonic
/// reads them. `policy` caps the connections and times them (first byte, idle, age: a `Connect`
/// stream is in flight until it ends, so it is never idle).
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Routes,
    edge: Arc<Edge>,
    drain: CancellationToken,
    tls: Option<TlsAcceptor>,
    policy: Policy,
) {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .keep_alive_interval(Duration::from_secs(20));
    crate::net::accept::accept_loop(
        listener,
        drain,
        "grpc",
        tls,
        policy,
        move |io, peer: SocketAddr, conn| {
            let routes = routes.clone();
            let edge = edge.clone();
            let svc = service_fn(move |mut req: hyper::Request<Incoming>| {
                let at = Instant::now();
                // Work the gates need first (an OIDC key fetch), already bounded in time.
                let wait = if edge.middleware.gates.is_empty() {
                    None
                } else {
                    edge.middleware.prepare(&Head {
                        headers: req.headers(),
                        peer: peer.ip(),
                    })
                };
                let edge = edge.clone();
                let mut routes = routes.clone();
                async move {
                    if let Some(w) = wait {
                        w.await;
                    }
                    let refused = if edge.middleware.gates.is_empty() {
                        None
                    } else {
                        let head = Head {
                            headers: req.headers(),
                            peer: peer.ip(),
                        };
                        match edge.middleware.admit(&head, &edge.metrics) {
                            Err(d) => Some(d),
                            Ok(grant) => {
                                // A `Connect` stream keeps it, to end when the credential lapses.
                                if let Some(g) = grant {
                                    req.extensions_mut().insert(g);
                                }
                                None
                            }
                        }
                    };
                    let deadline = req
                        .headers()
                        .get("grpc-timeout")
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_grpc_timeout)
                        .map(|t| client_deadline(at, t));
                    req.extensions_mut().insert(Arrival { at, deadline });
                    match refused {
                        Some(d) => Ok(status(&d.answer(), None).into_http()),
                        None => routes.call(req).await,
                    }
                }
            });
            builder.serve_connection(TokioIo::new(io), track(conn, svc))
        },
    )
    .await;
}
