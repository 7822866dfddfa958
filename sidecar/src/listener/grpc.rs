//! The gRPC listener (h2c): `switchyard.v1.Gateway` (`Call`, `Connect`) and server reflection.
//!
//! A message's `method` names a gRPC route of the Router spec, which maps it to an event type; the
//! event then takes the same path as an HTTP request ([`crate::dispatch`]: broker -> router ->
//! manager). The app's answer, whatever its status, is the reply; gRPC errors are for requests that
//! never got one (bad payload, unknown method, overload, deadline).

use super::Edge;
use crate::dispatch::{self, Clock, Failure};
use crate::edge::{self, Rejection};
use crate::metrics::EventLabel;
use crate::middleware::{Denial, Head};
use crate::otel::request::RequestTrace;
use crate::router::CallError;
use crate::routes::RouteError;
use crate::timing::StageTimes;
use crate::traceparent;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::router::RouterSpec;
use switchyard_protocol::gateway::v1::gateway_server::{self, GatewayServer};
use switchyard_protocol::gateway::v1::{
    CallReply, CallRequest, ConnectReply, ConnectRequest, FILE_DESCRIPTOR_SET,
};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::codegen::Service as _;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::service::Routes;
use tonic::{Code, Status, Streaming};

/// Largest gRPC message, either way, when no `bodyLimit` middleware is set.
pub const DEFAULT_MAX_MESSAGE: usize = 4 << 20;
/// Requests of one `Connect` stream dispatched at once; past it the stream is not read (backpressure).
pub const CONNECT_IN_FLIGHT: usize = 64;
/// A manager's 504 that arrives this close to the deadline is the deadline passing there.
const DEADLINE_SLACK: Duration = Duration::from_millis(50);
/// Concurrent streams per HTTP/2 connection.
const MAX_STREAMS: u32 = 1024;

// ---------------------------------------------------------------- routes (pure)

/// A compiled gRPC route.
pub struct GrpcRoute {
    /// The `method` of `Call`/`Connect` messages.
    pub method: String,
    /// Event type the message becomes.
    pub event: Arc<str>,
    /// Reply deadline of this route.
    pub timeout: Duration,
    /// Payload schema, compiled.
    pub schema: Option<Arc<jsonschema::Validator>>,
}

/// The gRPC routes of a Router spec, by method.
pub struct GrpcRoutes {
    by_method: HashMap<String, GrpcRoute>,
    /// Largest message accepted or sent.
    pub max_message: usize,
}

impl GrpcRoutes {
    /// Compiles the gRPC routes; when two routes name the same method, the first one wins.
    pub fn build(spec: &RouterSpec) -> Result<GrpcRoutes, RouteError> {
        let default_timeout: Duration = spec.broker.response_timeout.into();
        let mut by_method = HashMap::new();
        for (i, r) in spec.routes.iter().enumerate() {
            let Some(grpc) = &r.grpc else { continue };
            if by_method.contains_key(&grpc.method) {
                tracing::warn!(method = %grpc.method, "a second gRPC route names this method; the first one wins");
                continue;
            }
            let schema = crate::routes::compile_schema(i, r.schema.as_ref())?;
            by_method.insert(
                grpc.method.clone(),
                GrpcRoute {
                    method: grpc.method.clone(),
                    event: Arc::from(r.event.as_str()),
                    timeout: r.timeout.map(Into::into).unwrap_or(default_timeout),
                    schema,
                },
            );
        }
        let max_message = crate::routes::body_limit(spec, DEFAULT_MAX_MESSAGE);
        Ok(GrpcRoutes {
            by_method,
            max_message,
        })
    }

    /// The route of `method`.
    pub fn get(&self, method: &str) -> Option<&GrpcRoute> {
        self.by_method.get(method)
    }

    /// The routes, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &GrpcRoute> {
        self.by_method.values()
    }
}

/// Parses a `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// When the reply must be out for a client that allows `timeout`: a little early, so that the
/// answer (DEADLINE_EXCEEDED from here) reaches the client before its own timer fires.
fn client_deadline(arrival: Instant, timeout: Duration) -> Instant {
    let margin = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
    arrival + timeout.saturating_sub(margin)
}

/// The HTTP-style payload detail, said of a payload rather than a body.
fn payload_detail(r: Rejection) -> String {
    match r.detail.strip_prefix("body") {
        Some(rest) => format!("payload{rest}"),
        None => r.detail,
    }
}

/// Upper-case name of a gRPC code, as the spec writes it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

// ---------------------------------------------------------------- one message

/// The app's answer.
struct AppAnswer {
    status: u16,
    payload: Bytes,
    content_type: String,
}

/// A message that got no answer from the app.
struct Refusal {
    code: Code,
    /// The HTTP listener's status for the same case (metrics, `ConnectReply.status`).
    http: u16,
    message: String,
    /// The request was not handled; trying again later is safe.
    retry_after: bool,
}

impl Refusal {
    fn new(code: Code, http: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            http,
            message: message.into(),
            retry_after: false,
        }
    }

    fn retry(mut self) -> Refusal {
        self.retry_after = true;
        self
    }
}

struct Outcome {
    result: Result<AppAnswer, Refusal>,
    times: StageTimes,
}

/// One `Call` or `Connect` message, from checks to the manager's answer.
struct Message<'a> {
    /// `Call` or `Connect`.
    rpc: &'static str,
    method: &'a str,
    payload: Bytes,
    traceparent: Option<&'a [u8]>,
    /// When it arrived.
    start: Instant,
    /// The client's deadline, if it set one.
    client_deadline: Option<Instant>,
}

async fn handle(edge: &Edge, routes: &GrpcRoutes, msg: Message<'_>) -> Outcome {
    let mut clock = Clock::new(msg.start);
    if let Some(otel) = &edge.otel {
        clock.trace = Some(RequestTrace::grpc(
            otel,
            msg.traceparent,
            msg.rpc,
            msg.method,
        ));
    }
    let (result, label) = process(edge, routes, msg, &mut clock).await;
    let times = clock.stages();
    let status = match &result {
        Ok(a) => a.status,
        Err(r) => r.http,
    };
    edge.metrics
        .observe(&label, status, times.total.as_secs_f64());
    if let Some(t) = clock.trace.take() {
        match &result {
            Ok(a) => t.finish_grpc("OK", Some(a.status), ""),
            Err(r) => t.finish_grpc(code_name(r.code), None, &r.message),
        }
    }
    Outcome { result, times }
}

async fn process(
    edge: &Edge,
    routes: &GrpcRoutes,
    msg: Message<'_>,
    clock: &mut Clock,
) -> (Result<AppAnswer, Refusal>, EventLabel) {
    let Some(route) = routes.get(msg.method) else {
        let r = Refusal::new(
            Code::NotFound,
            404,
            format!("no gRPC route for method {}", msg.method),
        );
        return (Err(r), edge.unmatched.clone());
    };
    let label = EventLabel(route.event.clone());
    let _underway = edge.metrics.arrive(&route.event);
    if let Some(t) = &clock.trace {
        t.matched(None, &route.event);
    }
    let mut deadline = clock.start + route.timeout;
    if let Some(d) = msg.client_deadline {
        deadline = deadline.min(d);
    }
    // An empty payload is the empty object, like an HTTP GET without parameters.
    let payload = if msg.payload.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        msg.payload
    };
    let checked = match &route.schema {
        None => edge::check_syntax(&payload),
        Some(schema) => edge::parse_json(&payload).and_then(|v| edge::check_schema(schema, &v)),
    };
    if let Err(r) = checked {
        let r = Refusal::new(Code::InvalidArgument, 400, payload_detail(r));
        return (Err(r), label);
    }
    let tp = traceparent::extract_or_new(msg.traceparent);
    let result = dispatch::dispatch(edge, &route.event, payload, tp, deadline, clock).await;
    let answer = match result {
        // The manager bounds delivery by the same deadline and may answer 504 a moment before the
        // router's own timer fires: that is the deadline, not the app's answer.
        Ok(resp)
            if resp.status == 504
                && deadline.saturating_duration_since(Instant::now()) < DEADLINE_SLACK =>
        {
            Err(deadline_exceeded(deadline, clock.start))
        }
        Ok(resp) => Ok(AppAnswer {
            status: if (100..=599).contains(&resp.status) {
                resp.status
            } else {
                502
            },
            payload: resp.payload,
            content_type: resp.content_type,
        }),
        Err(Failure::Shed) => Err(Refusal::new(
            Code::ResourceExhausted,
            503,
            "too many requests pending in this router; retry shortly",
        )
        .retry()),
        Err(Failure::NoManager) => Err(Refusal::new(
            Code::Unavailable,
            503,
            format!("no Manager handles event type {}", route.event),
        )
        .retry()),
        Err(Failure::Call(CallError::NoEndpoint)) => Err(Refusal::new(
            Code::Unavailable,
            503,
            format!(
                "no endpoint of the Manager for {} is reachable; retry shortly",
                route.event
            ),
        )
        .retry()),
        Err(Failure::Call(CallError::NoCredit)) => Err(Refusal::new(
            Code::ResourceExhausted,
            503,
            format!(
                "the Manager for {} is saturated; the request was not sent",
                route.event
            ),
        )
        .retry()),
        Err(Failure::Call(CallError::Timeout)) => Err(deadline_exceeded(deadline, clock.start)),
        // Not UNAVAILABLE: that tells clients a retry is safe, and this one may have been handled.
        Err(Failure::Call(CallError::Lost)) => Err(Refusal::new(
            Code::Unknown,
            502,
            "the connection to the Manager failed after the request was sent; it may have been handled",
        )),
    };
    (answer, label)
}

fn deadline_exceeded(deadline: Instant, start: Instant) -> Refusal {
    Refusal::new(
        Code::DeadlineExceeded,
        504,
        format!(
            "no reply within {}",
            humanize(deadline.saturating_duration_since(start))
        ),
    )
}

fn timing_metadata(meta: &mut MetadataMap, times: &StageTimes) {
    if let Ok(v) = MetadataValue::try_from(times.header_value()) {
        meta.insert("server-timing", v);
    }
}

fn into_status(r: Refusal, times: &StageTimes) -> Status {
    let mut status = Status::new(r.code, r.message);
    timing_metadata(status.metadata_mut(), times);
    if r.retry_after {
        status
            .metadata_mut()
            .insert("retry-after", MetadataValue::from_static("1"));
    }
    status
}

fn connect_reply(id: u64, outcome: Outcome) -> ConnectReply {
    match outcome.result {
        Ok(a) => ConnectReply {
            id,
            status: a.status.into(),
            payload: a.payload.to_vec(),
            content_type: a.content_type,
            error: String::new(),
        },
        Err(r) => ConnectReply {
            id,
            status: r.http.into(),
            payload: Vec::new(),
            content_type: String::new(),
            error: format!("{}: {}", code_name(r.code), r.message),
        },
    }
}

// ---------------------------------------------------------------- the service

/// When a gRPC request arrived and the deadline its client set; put in the request's extensions by
/// the connection's service, before tonic reads the body.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    at: Instant,
    deadline: Option<Instant>,
}

fn arrival_of<T>(req: &tonic::Request<T>) -> Arrival {
    req.extensions()
        .get::<Arrival>()
        .copied()
        .unwrap_or_else(|| Arrival {
            at: Instant::now(),
            deadline: None,
        })
}

#[derive(Clone)]
struct Gateway {
    edge: Arc<Edge>,
    routes: Arc<GrpcRoutes>,
    drain: CancellationToken,
}

#[tonic::codegen::async_trait]
impl gateway_server::Gateway for Gateway {
    async fn call(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, Status> {
        let arrival = arrival_of(&request);
        let (meta, _, req) = request.into_parts();
        let tp = meta.get(traceparent::HEADER).map(|v| v.as_bytes());
        let outcome = handle(
            &self.edge,
            &self.routes,
            Message {
                rpc: "Call",
                method: &req.method,
                payload: Bytes::from(req.payload),
                traceparent: tp,
                start: arrival.at,
                client_deadline: arrival.deadline,
            },
        )
        .await;
        match outcome.result {
            Ok(a) => {
                let mut resp = tonic::Response::new(CallReply {
                    status: a.status.into(),
                    payload: a.payload.to_vec(),
                    content_type: a.content_type,
                });
                timing_metadata(resp.metadata_mut(), &outcome.times);
                Ok(resp)
            }
            Err(r) => Err(into_status(r, &outcome.times)),
        }
    }

    type ConnectStream = ReceiverStream<Result<ConnectReply, Status>>;

    async fn connect(
        &self,
        request: tonic::Request<Streaming<ConnectRequest>>,
    ) -> Result<tonic::Response<Self::ConnectStream>, Status> {
        let arrival = arrival_of(&request);
        let (meta, _, inbound) = request.into_parts();
        let tp: Option<Arc<[u8]>> = meta.get(traceparent::HEADER).map(|v| v.as_bytes().into());
        let (tx, rx) = mpsc::channel(CONNECT_IN_FLIGHT);
        tokio::spawn(read_stream(self.clone(), inbound, tx, tp, arrival.deadline));
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

/// Reads a `Connect` stream: each message is dispatched on its own task, at most
/// [`CONNECT_IN_FLIGHT`] at once; at the bound the stream is not read until one finishes, so HTTP/2
/// flow control holds the client back (nothing is dropped). Replies go out as they complete. The
/// stream ends (OK) after the client half-closes, or a drain starts, and every reply is out.
async fn read_stream(
    gw: Gateway,
    mut inbound: Streaming<ConnectRequest>,
    tx: mpsc::Sender<Result<ConnectReply, Status>>,
    traceparent: Option<Arc<[u8]>>,
    stream_deadline: Option<Instant>,
) {
    let slots = Arc::new(Semaphore::new(CONNECT_IN_FLIGHT));
    let past_deadline = async {
        match stream_deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(past_deadline);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = tx.closed() => return,
            _ = gw.drain.cancelled() => break,
            _ = &mut past_deadline => break,
        };
        let next = tokio::select! {
            m = inbound.message() => m,
            _ = tx.closed() => return,
            _ = gw.drain.cancelled() => break,
            _ = &mut past_deadline => break,
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                // The stream itself is broken (undecodable message, reset): end it with that status.
                let _ = tx.send(Err(status)).await;
                return;
            }
        };
        let start = Instant::now();
        let gw = gw.clone();
        let tx = tx.clone();
        let tp = traceparent.clone();
        tokio::spawn(async move {
            let work = handle(
                &gw.edge,
                &gw.routes,
                Message {
                    rpc: "Connect",
                    method: &msg.method,
                    payload: Bytes::from(msg.payload),
                    traceparent: tp.as_deref(),
                    start,
                    client_deadline: stream_deadline,
                },
            );
            // A client gone away cancels the work (the router sends CANCEL to the manager).
            let outcome = tokio::select! {
                o = work => o,
                _ = tx.closed() => return,
            };
            let _ = tx.send(Ok(connect_reply(msg.id, outcome))).await;
            drop(permit);
        });
    }
}

/// The gRPC service tree: Gateway and reflection (v1 and v1alpha).
pub fn service(
    edge: Arc<Edge>,
    routes: Arc<GrpcRoutes>,
    drain: CancellationToken,
) -> Result<Routes, String> {
    let max = routes.max_message;
    let gateway = GatewayServer::new(Gateway {
        edge,
        routes,
        drain,
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    Ok(Routes::new(gateway)
        .add_service(v1)
        .add_service(v1alpha)
        .prepare())
}

/// Accepts HTTP/2 connections (h2c, or TLS with ALPN h2 when `tls` is set) until `drain` fires, then
/// lets open calls finish (up to the drain limit). `Connect` streams stop reading at the drain and end
/// once their replies are out. The auth and rate-limit middleware of `edge` refuse calls before tonic
/// reads them.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    edge: Arc<Edge>,
    drain: CancellationToken,
    tls: Option<TlsAcceptor>,
) {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .keep_alive_interval(Duration::from_secs(20));
    super::accept::accept_loop(listener, drain, "grpc", tls, move |io, peer: SocketAddr| {
        let routes = routes.clone();
        let edge = edge.clone();
        let svc = service_fn(move |mut req: hyper::Request<Incoming>| {
            let at = Instant::now();
            let refused = if edge.middleware.gates.is_empty() {
                None
            } else {
                let head = Head {
                    headers: req.headers(),
                    peer: peer.ip(),
                };
                edge.middleware.admit(&head, &edge.metrics).err()
            };
            let deadline = req
                .headers()
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_grpc_timeout)
                .map(|t| client_deadline(at, t));
            req.extensions_mut().insert(Arrival { at, deadline });
            let mut routes = routes.clone();
            async move {
                match refused {
                    Some(d) => Ok(denial_status(&d).into_http()),
                    None => routes.call(req).await,
                }
            }
        });
        builder.serve_connection(TokioIo::new(io), svc)
    })
    .await;
}

/// The gRPC status of a middleware refusal: UNAUTHENTICATED, or RESOURCE_EXHAUSTED with `retry-after`.
fn denial_status(d: &Denial) -> Status {
    let mut status = match d.status {
        401 => Status::unauthenticated(d.detail.clone()),
        429 => Status::resource_exhausted(d.detail.clone()),
        _ => Status::permission_denied(d.detail.clone()),
    };
    if let Some(secs) = d.retry_after {
        status
            .metadata_mut()
            .insert("retry-after", MetadataValue::from(secs));
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_grpc_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("1x"), None);
        assert_eq!(parse_grpc_timeout("-1S"), None);
    }

    #[test]
    fn client_deadline_is_a_little_early() {
        let t0 = Instant::now();
        assert_eq!(
            client_deadline(t0, Duration::from_millis(500)),
            t0 + Duration::from_millis(450)
        );
        assert_eq!(
            client_deadline(t0, Duration::from_secs(10)),
            t0 + Duration::from_millis(9_900)
        );
        assert_eq!(client_deadline(t0, Duration::ZERO), t0);
    }

    fn spec(routes: serde_json::Value, middleware: serde_json::Value) -> RouterSpec {
        serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}, "grpc": {"port": 50051}},
            "routes": routes,
            "middleware": middleware,
            "broker": {"queueCapacity": 10, "responseTimeout": "3s"},
        }))
        .expect("spec")
    }

    #[test]
    fn builds_routes_by_method_first_wins() {
        let s = spec(
            serde_json::json!([
                {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
                {"event": "noop", "grpc": {"method": "noop"}},
                {"event": "echo", "grpc": {"method": "echo"}, "timeout": "1s",
                 "schema": {"type": "object"}},
                {"event": "other", "grpc": {"method": "noop"}},
            ]),
            serde_json::json!([]),
        );
        let t = GrpcRoutes::build(&s).expect("routes");
        assert_eq!(&*t.get("noop").expect("noop").event, "noop");
        assert_eq!(t.get("noop").expect("noop").timeout, Duration::from_secs(3));
        let echo = t.get("echo").expect("echo");
        assert_eq!(echo.timeout, Duration::from_secs(1));
        assert!(echo.schema.is_some());
        assert!(t.get("GET").is_none());
        assert_eq!(t.iter().count(), 2);
        assert_eq!(t.max_message, DEFAULT_MAX_MESSAGE);
    }

    #[test]
    fn body_limit_sets_the_message_size_and_bad_schemas_name_the_field() {
        let s = spec(
            serde_json::json!([{"event": "e", "grpc": {"method": "m"}, "schema": {"type": 12}}]),
            serde_json::json!([{"bodyLimit": {"maxBytes": 1000}}]),
        );
        let err = GrpcRoutes::build(&s).err().expect("bad schema");
        assert_eq!(err.field, "spec.routes[0].schema");
        let s = spec(
            serde_json::json!([{"event": "e", "grpc": {"method": "m"}}]),
            serde_json::json!([{"bodyLimit": {"maxBytes": 1000}}]),
        );
        assert_eq!(GrpcRoutes::build(&s).expect("routes").max_message, 1000);
    }

    #[test]
    fn payload_details_and_code_names() {
        let r = Rejection {
            status: 400,
            detail: "body is not valid JSON at line 1 column 2: x".into(),
        };
        assert_eq!(
            payload_detail(r),
            "payload is not valid JSON at line 1 column 2: x"
        );
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
    }
}
