//! The HTTP listener (HTTP/1.1 and h2c on one port): request -> checks -> event -> manager -> answer.

use super::{Edge, access_log};
use crate::answer::Answer;
use crate::answer::http::{Reply, SERVER_TIMING, TIMING_ALLOW_ORIGIN};
use crate::dispatch::{Clock, new_ce_id};
use crate::edge::{self, Rejection};
use crate::metrics::EventLabel;
use crate::net::accept::Policy;
use crate::net::body::{Unconsumed, Unread, linger, read_limited};
use crate::net::budget::Held;
use crate::net::conn::tracked::track;
use crate::net::stream;
use crate::net::stream::body::StreamBody;
use crate::net::stream::out_body::OutBody;
use crate::otel::request::{Remote, RequestTrace};
use crate::routes::http::{HttpRoute, Lookup};
use crate::tap::{Seen, copy_headers, now_ms};
use crate::traceparent;
use crate::upstream::Outgoing;
use crate::upstream::upload::Upload;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TE, TRAILER};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_protocol::headers;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Accepts connections until `drain` fires, then lets open ones finish (up to the drain limit).
/// With `tls` it serves HTTPS (h2 or HTTP/1.1 by ALPN). Middleware, when the spec has any, wraps
/// the service of each connection; without it requests go straight to `handle`. `policy` caps the
/// connections and times them (first byte, idle, age); hyper's own header timeout is off, since the
/// first-byte and idle timers cover a slow request head on every connection and protocol alike.
pub(crate) async fn serve(
    listener: TcpListener,
    edge: Arc<Edge>,
    drain: CancellationToken,
    tls: Option<TlsAcceptor>,
    policy: Policy,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Duration::from_secs(20));
    if edge.middleware.is_empty() {
        crate::net::accept::accept_loop(
            listener,
            drain,
            "http",
            tls,
            policy,
            move |io, peer: SocketAddr, conn| {
                let edge = edge.clone();
                let svc = track(
                    conn,
                    service_fn(move |req| {
                        let e = edge.clone();
                        access_log::logged(edge.access_log, peer, req, move |req| {
                            handle(e, peer, req)
                        })
                    }),
                );
                // With upgrades, so the WebSocket path can take the connection over (HTTP/1.1 only).
                builder
                    .serve_connection_with_upgrades(TokioIo::new(io), svc)
                    .into_owned()
            },
        )
        .await;
    } else {
        crate::net::accept::accept_loop(
            listener,
            drain,
            "http",
            tls,
            policy,
            move |io, peer: SocketAddr, conn| {
                let e = edge.clone();
                let inner = tower::service_fn(move |req| handle(e.clone(), peer, req));
                let stack = edge.middleware.wrap(inner, peer.ip(), &edge.metrics);
                let on = edge.access_log;
                // Outside the middleware, so a refused request (a 429, a 401) is logged too.
                let svc = track(
                    conn,
                    service_fn(move |req| {
                        let stack = stack.clone();
                        access_log::logged(on, peer, req, move |req| stack.oneshot(req))
                    }),
                );
                // With upgrades, so the WebSocket path can take the connection over (HTTP/1.1 only).
                builder
                    .serve_connection_with_upgrades(TokioIo::new(io), svc)
                    .into_owned()
            },
        )
        .await;
    }
}

async fn handle(
    edge: Arc<Edge>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<OutBody>, Infallible> {
    if let Some(ws) = &edge.ws
        && req.uri().path() == ws.routes.path
    {
        return Ok(super::ws::upgrade(&edge, req).map(OutBody::from));
    }
    let mut clock = Clock::new(Instant::now());
    if let Some(otel) = &edge.otel {
        let tp = req
            .headers()
            .get(traceparent::HEADER)
            .map(HeaderValue::as_bytes);
        let ts = traceparent::tracestate_in(tp, req.headers());
        clock.trace = Some(RequestTrace::http(
            otel,
            Remote {
                traceparent: tp,
                tracestate: &ts,
            },
            req.method().as_str(),
            req.uri().path(),
        ));
    }
    let trailers_ok = takes_trailers(&req);
    let h2 = req.version() == hyper::Version::HTTP_2;
    // Copied only while someone taps: otherwise one atomic read.
    let mut seen = edge.taps.watching().then(|| tapped(&edge, &req, peer));
    let (reply, label, stream) = process(&edge, req, &mut clock, seen.as_mut()).await;
    let times = clock.stages();
    edge.metrics
        .observe(&label, reply.status, times.total.as_secs_f64());
    if let Some(mut s) = seen {
        s.event = label.0.clone();
        s.status = reply.status;
        s.latency = times.total;
        s.server_timing = Some(times.header_value());
        edge.taps.publish(&s);
    }
    if let Some(t) = clock.trace.take() {
        t.finish_http(reply.status);
    }
    // A streamed answer of known length keeps it (else it reaches an HTTP/1.1 client chunked);
    // HTTP/1.1 has no trailers after a body of declared length.
    let length = stream.as_ref().and_then(|_| reply.passed_length());
    let trailers_ok = trailers_ok && (length.is_none() || h2);
    let mut resp = reply.into_response(Some(&times));
    if let Some(n) = length {
        resp.headers_mut().insert(CONTENT_LENGTH, n);
    }
    let mut resp = match stream {
        None => resp.map(OutBody::from),
        Some(body) if trailers_ok => {
            let mut resp =
                resp.map(|_| OutBody::Stream(with_timing_trailer(body, times, clock.start)));
            // HTTP/1.1 sends only the trailer fields its head announced.
            resp.headers_mut()
                .insert(TRAILER, HeaderValue::from_static("server-timing"));
            resp
        }
        Some(body) => resp.map(|_| OutBody::Stream(body)),
    };
    if let Some(tao) = &edge.timing_allow_origin {
        resp.headers_mut()
            .insert(TIMING_ALLOW_ORIGIN.clone(), tao.clone());
    }
    Ok(resp)
}

/// What a tap is shown of `req` from `peer`, before the request is taken apart.
fn tapped(edge: &Edge, req: &Request<Incoming>, peer: SocketAddr) -> Seen {
    Seen {
        at_ms: now_ms(),
        method: Some(req.method().as_str().to_owned()),
        path: Some(req.uri().path().to_owned()),
        client: Some(peer.ip().to_canonical()),
        headers: copy_headers(req.headers(), edge.taps.hidden()),
        ..Seen::default()
    }
}

/// Whether the client takes trailers: h2 always, HTTP/1.1 when it says `TE: trailers`.
fn takes_trailers(req: &Request<Incoming>) -> bool {
    req.version() == hyper::Version::HTTP_2
        || req
            .headers()
            .get_all(TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
}

/// A streamed answer's `Server-Timing` header says what was known at its head (`app` up to the
/// head); the one in its trailers (where the client takes trailers: `TE: trailers` on HTTP/1.1, or
/// h2; hyper leaves them out otherwise) has `app` to the end of the body and the total.
fn with_timing_trailer(
    body: StreamBody,
    mut times: crate::timing::StageTimes,
    start: Instant,
) -> StreamBody {
    body.with_trailers(Box::new(move |t, h| {
        times.app = Some(Duration::from_micros(t.app_us.into()));
        times.total = start.elapsed();
        if let Ok(v) = HeaderValue::try_from(times.header_value()) {
            h.insert(SERVER_TIMING.clone(), v);
        }
    }))
}

/// Bodies that pass as they came stream to the app above this size (or when it is not declared);
/// smaller ones go whole in the event's one frame, the small-event path.
const STREAM_ABOVE: u64 = 64 * 1024;

/// The 503 of a body the router's byte budget has no room for now.
fn no_room(edge: &Edge) -> Reply {
    let mut r = Reply::problem(
        503,
        &format!(
            "this router holds {} bytes of request bodies at most (broker.bodyBudgetBytes) and has no room for this one now",
            edge.body_budget.total()
        ),
    );
    r.retry_after = Some(1);
    r
}

/// The 413 of a body over `limit`; one read whole under a larger `bodyLimit` says why it stopped.
fn too_large(edge: &Edge, limit: usize) -> Reply {
    let detail = match limit < edge.table.body_limit {
        true => format!(
            "body is larger than {limit} bytes, the most read whole; only a body that is not JSON, on a route without a schema or path parameters, streams up to bodyLimit ({} bytes)",
            edge.table.body_limit
        ),
        false => format!("body is larger than {limit} bytes"),
    };
    Reply::problem(413, &detail)
}

fn rejected(r: Rejection) -> Reply {
    Reply::problem(r.status, &r.detail)
}

/// What a request came to: the answer's head, and the app's streamed body when it streams.
type Processed = (Reply, EventLabel, Option<StreamBody>);

async fn process(
    edge: &Edge,
    req: Request<Incoming>,
    clock: &mut Clock,
    seen: Option<&mut Seen>,
) -> Processed {
    let (reply, label) = match process_head(edge, req, clock, seen).await {
        Ok(done) => return done,
        Err(early) => early,
    };
    (reply, label, None)
}

/// A request's way up to its answer's head: match a route → read its body → make its event →
/// dispatch. An `Err` is an answer given before dispatch, under the route's label when matched.
async fn process_head(
    edge: &Edge,
    req: Request<Incoming>,
    clock: &mut Clock,
    seen: Option<&mut Seen>,
) -> Result<Processed, (Reply, EventLabel)> {
    let (parts, body) = req.into_parts();
    // Any refusal below, before the body is read, lingers on it (see `Unconsumed`).
    let body = Unconsumed::new(body);
    let (route, params) = matched(edge, &parts).map_err(|r| (*r, edge.unmatched.clone()))?;
    let label = EventLabel(route.event.clone());
    let _underway = edge.metrics.arrive(&route.event);
    let deadline = clock.start + route.timeout;
    if let Some(t) = &clock.trace {
        t.matched(Some((parts.method.as_str(), &route.template)), &route.event);
    }
    let read = match route.has_body() {
        true => read_body(edge, route, params, &parts, body, deadline).await,
        false => edge::params_payload(route, parts.uri.query(), params)
            .map(EventBody::of)
            .map_err(rejected),
    };
    let read = match read {
        Ok(read) => read,
        Err(r) => return Err((r, label)),
    };
    // Held until this request is answered: its bytes live as long as it does.
    let body_bytes = read.held;
    let out = match outgoing(&parts, route, read.payload, read.passed_type, read.upload) {
        Ok(out) => out,
        Err(r) => return Err((rejected(r), label)),
    };
    if let Some(s) = seen {
        s.ce_id.clone_from(&out.ce_id);
        s.traceparent.clone_from(&out.traceparent);
        s.payload_len = out.payload.len();
        s.payload = out
            .payload
            .slice(..edge.taps.payload_wanted().min(out.payload.len()));
    }
    let done = match edge.dispatch.call_streamed(out, deadline, clock).await {
        Ok(a) => (
            Reply::app(a.head.status, &a.head.content_type, a.head.payload).with(a.head.headers),
            label,
            a.body,
        ),
        Err(f) => (
            Reply::answer(&Answer::of(&f, &route.event, route.timeout)),
            label,
            None,
        ),
    };
    drop(body_bytes);
    Ok(done)
}

/// The route a request's method and path match, with its path parameters; else the answer (boxed:
/// the rare path does not size the common one).
fn matched<'e>(
    edge: &'e Edge,
    parts: &Parts,
) -> Result<(&'e HttpRoute, Map<String, Value>), Box<Reply>> {
    match edge.table.lookup(parts.method.as_str(), parts.uri.path()) {
        Lookup::Found { route, params } => Ok((route, params)),
        Lookup::NotFound => {
            let detail = format!("no route for {}", parts.uri.path());
            Err(Box::new(Reply::problem(404, &detail)))
        }
        Lookup::MethodNotAllowed(allow) => {
            let mut r = Reply::problem(
                405,
                &format!("{} is not allowed here; use {allow}", parts.method),
            );
            r.allow = HeaderValue::from_str(&allow).ok();
            Err(Box::new(r))
        }
        Lookup::BadParam(bad) => {
            let detail = format!("path parameter `{}` must be {}", bad.name, bad.expected);
            Err(Box::new(Reply::problem(400, &detail)))
        }
    }
}

/// What a request's body makes of its event.
struct EventBody {
    /// The payload the head carries.
    payload: Bytes,
    /// The client's media type, when its body passes as it came (not JSON).
    passed_type: Option<String>,
    /// The client's body still to stream after the head.
    upload: Option<Upload>,
    /// The body budget its bytes hold.
    held: Held,
}

impl EventBody {
    /// A payload made whole (from the path and query, or read), holding no budget.
    fn of(payload: Bytes) -> EventBody {
        EventBody {
            payload,
            passed_type: None,
            upload: None,
            held: Held::default(),
        }
    }
}

/// Checks a body route's body by its headers, then streams it (a large body passed as it came) or
/// reads it whole, within its limit and the router's body budget.
async fn read_body(
    edge: &Edge,
    route: &HttpRoute,
    params: Map<String, Value>,
    parts: &Parts,
    body: Unconsumed,
    deadline: Instant,
) -> Result<EventBody, Reply> {
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let declared_len = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let any = edge::takes_any_body(route, &params);
    if !any && let Err(r) = edge::check_content_type(content_type, declared_len) {
        return Err(rejected(r));
    }
    // A body that is not JSON passes as it came, with its media type, on routes that take any.
    let passed_type = content_type
        .filter(|ct| any && !edge::is_json_media_type(ct))
        .map(str::to_owned);
    // A streamed body may reach `bodyLimit`; one read whole stops at what one event carries.
    let streams = passed_type.is_some() && declared_len.is_none_or(|n| n > STREAM_ABOVE);
    let limit = match streams {
        true => edge.table.body_limit,
        false => edge.table.whole_limit,
    };
    if declared_len.is_some_and(|n| n > limit as u64) {
        return Err(too_large(edge, limit));
    }
    if streams {
        // Streamed to the app under the window: it holds one window of the body budget (what
        // can be in this router at once), not its size.
        let mut held = Held::default();
        if !edge.body_budget.grow(&mut held, stream::WINDOW as usize) {
            edge.metrics.shed.inc();
            return Err(no_room(edge));
        }
        return Ok(EventBody {
            payload: Bytes::new(),
            passed_type,
            upload: Some(Upload::new(body.into_inner(), limit)),
            held,
        });
    }
    let (raw, held) = read_whole(edge, body, limit, declared_len, deadline).await?;
    let payload = match passed_type.is_some() {
        true => raw,
        false => edge::body_event(route, raw, params).map_err(rejected)?,
    };
    Ok(EventBody {
        payload,
        passed_type,
        upload: None,
        held,
    })
}

/// Reads a body whole (up to `limit`, by `deadline`), with the budget its bytes hold.
async fn read_whole(
    edge: &Edge,
    body: Unconsumed,
    limit: usize,
    declared_len: Option<u64>,
    deadline: Instant,
) -> Result<(Bytes, Held), Reply> {
    let read = read_limited(body.into_inner(), limit, declared_len, &edge.body_budget);
    match tokio::time::timeout_at(deadline.into(), read).await {
        Ok(Ok(whole)) => Ok(whole),
        Ok(Err(Unread::NoRoom(rest))) => {
            linger(rest);
            edge.metrics.shed.inc();
            Err(no_room(edge))
        }
        Ok(Err(Unread::TooLarge(rest))) => {
            linger(rest);
            Err(too_large(edge, limit))
        }
        Ok(Err(Unread::Failed)) => Err(Reply::problem(400, "the request body could not be read")),
        Err(_) => Err(Reply::problem(
            408,
            "the request body did not arrive in time",
        )),
    }
}

/// The event a request sends: its payload, trace context, id (the client's retry key when it
/// gave one) and the HTTP fields that pass to the app.
fn outgoing(
    parts: &Parts,
    route: &HttpRoute,
    payload: Bytes,
    passed_type: Option<String>,
    upload: Option<Upload>,
) -> Result<Outgoing, Rejection> {
    let tp = parts
        .headers
        .get(traceparent::HEADER)
        .map(HeaderValue::as_bytes);
    let (traceparent, tracestate) = (
        traceparent::extract_or_new(tp),
        traceparent::tracestate_in(tp, &parts.headers),
    );
    // The client's retry key is the event's id, so its retries are one event to a deduplicating app.
    let key = parts
        .headers
        .get(edge::IDEMPOTENCY_KEY)
        .map(HeaderValue::as_bytes);
    let ce_id = edge::idempotency_key(key)?.unwrap_or_else(new_ce_id);
    Ok(Outgoing {
        headers: headers::pick(headers::REQUEST, |n| {
            parts.headers.get(n).map(HeaderValue::as_bytes)
        }),
        event: route.event.clone(),
        ce_id,
        traceparent,
        tracestate,
        payload,
        content_type: passed_type,
        upload,
    })
}
