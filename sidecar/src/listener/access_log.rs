//! The access log (`spec.accessLog`): one line per HTTP request, under the log target `access`,
//! with the client's address as the listener saw it.
//!
//! The client is the TCP peer, the same address the rate limit keys on: a header such as
//! `X-Forwarded-For` is never trusted for it, since any client can send one. Behind a NodePort or
//! LoadBalancer Service the peer is the client only with `externalTrafficPolicy: Local`.

use crate::net::stream::out_body::OutBody;
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Instant;

/// Log target of the access lines (`RUST_LOG=access=off` silences them).
pub(crate) const TARGET: &str = "access";

/// `call`'s answer to `req` from the client at `peer`, logged once its head is ready when `on`.
/// The path is logged without its query, which may carry credentials.
pub(crate) async fn logged<F>(
    on: bool,
    peer: SocketAddr,
    req: Request<Incoming>,
    call: impl FnOnce(Request<Incoming>) -> F,
) -> Result<Response<OutBody>, Infallible>
where
    F: Future<Output = Result<Response<OutBody>, Infallible>>,
{
    if !on {
        return call(req).await;
    }
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let version = req.version();
    let answer = call(req).await;
    if let Ok(resp) = &answer {
        tracing::info!(
            target: TARGET,
            client = %peer.ip(),
            method = %method,
            path = %path,
            version = ?version,
            status = resp.status().as_u16(),
            duration_ms = start.elapsed().as_secs_f64() * 1000.0,
            "request"
        );
    }
    answer
}
