//! The HTTP listener (HTTP/1.1 and h2c on one port): request -> checks -> event -> manager -> answer.

use super::Edge;
use super::reply::Reply;
use crate::dispatch::{Clock, Failure, dispatch};
use crate::edge::{self, Rejection};
use crate::metrics::EventLabel;
use crate::otel::request::RequestTrace;
use crate::router::CallError;
use crate::routes::Lookup;
use crate::traceparent;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Time a client has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until `drain` fires, then lets open ones finish (up to the drain limit).
/// With `tls` it serves HTTPS (h2 or HTTP/1.1 by ALPN). Middleware, when the spec has any, wraps
/// the service of each connection; without it requests go straight to `handle`.
pub async fn serve(
    listener: TcpListener,
    edge: Arc<Edge>,
    drain: CancellationToken,
    tls: Option<TlsAcceptor>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Duration::from_secs(20));
    if edge.middleware.is_empty() {
        super::accept::accept_loop(listener, drain, "http", tls, move |io, _peer| {
            let edge = edge.clone();
            let svc = service_fn(move |req| handle(edge.clone(), req));
            // With upgrades, so the WebSocket path can take the connection over (HTTP/1.1 only).
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), svc)
                .into_owned()
        })
        .await;
    } else {
        super::accept::accept_loop(listener, drain, "http", tls, move |io, peer: SocketAddr| {
            let e = edge.clone();
            let inner = tower::service_fn(move |req| handle(e.clone(), req));
            let stack = edge.middleware.wrap(inner, peer.ip(), &edge.metrics);
            let svc = service_fn(move |req| stack.clone().oneshot(req));
            // With upgrades, so the WebSocket path can take the connection over (HTTP/1.1 only).
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), svc)
                .into_owned()
        })
        .await;
    }
}

async fn handle(
    edge: Arc<Edge>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(ws) = &edge.ws
        && req.uri().path() == ws.routes.path
    {
        return Ok(super::ws::upgrade(&edge, req));
    }
    let mut clock = Clock::new(Instant::now());
    if let Some(otel) = &edge.otel {
        clock.trace = Some(RequestTrace::http(
            otel,
            req.headers()
                .get(traceparent::HEADER)
                .map(HeaderValue::as_bytes),
            req.method().as_str(),
            req.uri().path(),
        ));
    }
    let (reply, label) = process(&edge, req, &mut clock).await;
    let times = clock.stages();
    edge.metrics
        .observe(&label, reply.status, times.total.as_secs_f64());
    if let Some(t) = clock.trace.take() {
        t.finish_http(reply.status);
    }
    let mut resp = reply.into_response(&times);
    if let Some(tao) = &edge.timing_allow_origin {
        resp.headers_mut()
            .insert(super::reply::TIMING_ALLOW_ORIGIN.clone(), tao.clone());
    }
    Ok(resp)
}

fn rejected(r: Rejection) -> Reply {
    Reply::problem(r.status, &r.detail)
}

async fn process(edge: &Edge, req: Request<Incoming>, clock: &mut Clock) -> (Reply, EventLabel) {
    let (parts, body) = req.into_parts();
    let (route, params) = match edge.table.lookup(parts.method.as_str(), parts.uri.path()) {
        Lookup::Found { route, params } => (route, params),
        Lookup::NotFound => {
            let detail = format!("no route for {}", parts.uri.path());
            return (Reply::problem(404, &detail), edge.unmatched.clone());
        }
        Lookup::MethodNotAllowed(allow) => {
            let mut r = Reply::problem(
                405,
                &format!("{} is not allowed here; use {allow}", parts.method),
            );
            r.allow = Some(allow);
            return (r, edge.unmatched.clone());
        }
        Lookup::BadParam(bad) => {
            let detail = format!("path parameter `{}` must be {}", bad.name, bad.expected);
            return (Reply::problem(400, &detail), edge.unmatched.clone());
        }
    };
    let label = EventLabel(route.event.clone());
    let _underway = edge.metrics.arrive(&route.event);
    let deadline = clock.start + route.timeout;
    if let Some(t) = &clock.trace {
        t.matched(Some((parts.method.as_str(), &route.template)), &route.event);
    }

    let payload = if route.has_body() {
        let content_type = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let declared_len = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Err(r) = edge::check_content_type(content_type, declared_len) {
            return (rejected(r), label);
        }
        let limit = edge.table.body_limit;
        if declared_len.is_some_and(|n| n > limit as u64) {
            return (
                Reply::problem(413, &format!("body is larger than {limit} bytes")),
                label,
            );
        }
        let raw =
            match tokio::time::timeout_at(deadline.into(), Limited::new(body, limit).collect())
                .await
            {
                Ok(Ok(c)) => c.to_bytes(),
                Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    return (
                        Reply::problem(413, &format!("body is larger than {limit} bytes")),
                        label,
                    );
                }
                Ok(Err(_)) => {
                    return (
                        Reply::problem(400, "the request body could not be read"),
                        label,
                    );
                }
                Err(_) => {
                    return (
                        Reply::problem(408, "the request body did not arrive in time"),
                        label,
                    );
                }
            };
        match edge::body_event(route, raw, params) {
            Ok(p) => p,
            Err(r) => return (rejected(r), label),
        }
    } else {
        match edge::params_payload(route, parts.uri.query(), params) {
            Ok(p) => p,
            Err(r) => return (rejected(r), label),
        }
    };
    let traceparent = traceparent::extract_or_new(
        parts
            .headers
            .get(traceparent::HEADER)
            .map(HeaderValue::as_bytes),
    );
    let result = dispatch(edge, &route.event, payload, traceparent, deadline, clock).await;
    let reply = match result {
        Ok(resp) => {
            let content_type = HeaderValue::from_str(&resp.content_type)
                .ok()
                .filter(|_| !resp.content_type.is_empty())
                .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"));
            let status = if (100..=599).contains(&resp.status) {
                resp.status
            } else {
                502
            };
            Reply {
                status,
                content_type,
                body: resp.payload,
                allow: None,
                retry_after: status == 503,
            }
        }
        Err(Failure::Shed) => Reply::problem(
            503,
            "too many requests pending in this router; retry shortly",
        ),
        Err(Failure::NoManager) => Reply::problem(
            503,
            &format!("no Manager handles event type {}", route.event),
        ),
        Err(Failure::Call(CallError::NoEndpoint)) => Reply::problem(
            503,
            &format!(
                "no endpoint of the Manager for {} is reachable; retry shortly",
                route.event
            ),
        ),
        Err(Failure::Call(CallError::NoCredit)) => Reply::problem(
            503,
            &format!(
                "the Manager for {} is saturated; the request was not sent",
                route.event
            ),
        ),
        Err(Failure::Call(CallError::Timeout)) => {
            Reply::problem(504, &format!("no reply within {}", humanize(route.timeout)))
        }
        Err(Failure::Call(CallError::Lost)) => Reply::problem(
            502,
            "the connection to the Manager failed after the request was sent; it may have been handled",
        ),
    };
    (reply, label)
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
