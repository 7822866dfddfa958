//! PROTOTYPE: the full path with each hop: a router-side process with an HTTP/1.1 front door
//! (`GET /noop`, `GET /bytes/N`, `POST /echo`) that turns each request into an event over the hop, and
//! a manager-side process that delivers it to the example app in CloudEvents HTTP binary mode. Bodies
//! stream through both processes in both directions; nothing holds a whole body. The same front door
//! and the same app client serve both hops, so only the hop differs.

use super::frames::client::{self as fc, Call};
use super::frames::server::{InBody, Task, head, response};
use super::wire::Frame;
use super::{Proto, Settings, ce_id, h2, traceparent};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as HttpBody;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The one body type of the relays.
pub type Body = BoxBody<Bytes, BoxError>;

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

fn incoming(b: Incoming) -> Body {
    b.map_err(Into::into).boxed()
}

/// The example app, as a manager delivers to it.
pub struct App {
    client: Client<HttpConnector, Body>,
    uri: Uri,
}

impl App {
    /// The app at `addr` (`host:port`).
    pub fn new(addr: &str) -> anyhow::Result<App> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(App {
            client: Client::builder(TokioExecutor::new()).build(connector),
            uri: format!("http://{addr}/events").parse()?,
        })
    }

    /// Delivers one event; the answer's body streams.
    async fn deliver(
        &self,
        event: &str,
        ce_id: &str,
        traceparent: &str,
        content_type: &str,
        body: Body,
    ) -> Result<Response<Incoming>, BoxError> {
        let mut req = Request::new(body);
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = self.uri.clone();
        let h = req.headers_mut();
        h.insert("ce-specversion", HeaderValue::from_static("1.0"));
        h.insert("ce-type", HeaderValue::from_str(event)?);
        h.insert("ce-id", HeaderValue::from_str(ce_id)?);
        h.insert("ce-source", HeaderValue::from_static("/switchyard/manager"));
        if !content_type.is_empty() {
            h.insert(CONTENT_TYPE, HeaderValue::from_str(content_type)?);
        }
        if !traceparent.is_empty() {
            h.insert("traceparent", HeaderValue::from_str(traceparent)?);
        }
        Ok(self.client.request(req).await?)
    }
}

fn in_body(payload: Bytes, body: InBody) -> Body {
    let first = (!payload.is_empty()).then_some(payload);
    let stream = futures::stream::unfold((first, Some(body)), |(first, body)| async move {
        if let Some(f) = first {
            return Some((Ok(hyper::body::Frame::data(f)), (None, body)));
        }
        let mut body = body?;
        match body.chunk().await {
            Ok(Some(c)) => Some((Ok(hyper::body::Frame::data(c)), (None, Some(body)))),
            Ok(None) => None,
            Err(()) => Some((Err("the router reset the stream".into()), (None, None))),
        }
    });
    http_body_util::StreamBody::new(stream).boxed()
}

/// The frame hop's manager side delivering to the app: a small answer goes back in one RESPONSE,
/// a longer one as a head, DATA within the window, and an end.
pub async fn deliver_frames(
    app: &App,
    task: Task,
    req: switchyard_protocol::frame::Request,
    body: Option<InBody>,
) {
    let start = Instant::now();
    let id = task.id();
    let out = match body {
        Some(b) => in_body(req.payload, b),
        None => full(req.payload),
    };
    let answer = tokio::select! {
        a = app.deliver(&req.event, &req.ce_id, &req.traceparent, &req.content_type, out) => a,
        _ = task.cancelled().cancelled() => return task.finish(None).await,
    };
    let resp = match answer {
        Ok(r) => r,
        Err(_) => {
            let mut r = response(
                id,
                502,
                0,
                "text/plain",
                Bytes::from_static(b"app unreachable"),
            );
            r.from_mesh = true;
            return task.finish(Some(head(r, false))).await;
        }
    };
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut body = resp.into_body();
    let mut first = Bytes::new();
    let mut trailers = None;
    // Wait for the first chunk: an answer that ends with it fits one RESPONSE, as today.
    if !body.is_end_stream() {
        match next_frame(&task, &mut body).await {
            Next::Data(d) => first = d,
            Next::Trailers(t) => trailers = Some(t),
            Next::End => {}
            Next::Failed => return task.finish(None).await,
        }
    }
    let app_us = start.elapsed().as_micros() as u32;
    if trailers.is_none() && body.is_end_stream() {
        let r = response(id, status, app_us, &content_type, first);
        return task.finish(Some(head(r, false))).await;
    }
    let r = response(id, status, app_us, &content_type, Bytes::new());
    if !task.send_head(r).await || !task.send_data(first).await {
        return task.finish(None).await;
    }
    while trailers.is_none() && !body.is_end_stream() {
        match next_frame(&task, &mut body).await {
            Next::Data(d) => {
                if !task.send_data(d).await {
                    return task.finish(None).await;
                }
            }
            Next::Trailers(t) => trailers = Some(t),
            Next::End => break,
            Next::Failed => return task.finish(None).await,
        }
    }
    let fields = trailers
        .unwrap_or_default()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    task.finish(Some(Frame::Trailers { id, fields })).await;
}

enum Next {
    Data(Bytes),
    Trailers(hyper::HeaderMap),
    End,
    Failed,
}

async fn next_frame(task: &Task, body: &mut Incoming) -> Next {
    let f = tokio::select! {
        f = body.frame() => f,
        _ = task.cancelled().cancelled() => return Next::Failed,
    };
    match f {
        None => Next::End,
        Some(Err(_)) => Next::Failed,
        Some(Ok(f)) => match f.into_data() {
            Ok(d) => Next::Data(d),
            Err(f) => match f.into_trailers() {
                Ok(t) => Next::Trailers(t),
                Err(_) => Next::End,
            },
        },
    }
}

/// The h2 hop's manager side delivering to the app: the request body and the answer's body are
/// passed through as they come.
pub async fn serve_h2(listener: TcpListener, s: Settings, app: Arc<App>) {
    let builder = h2::server_builder(&s);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |req| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(deliver_h2(&app, req).await) }
            }),
        );
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

async fn deliver_h2(app: &App, req: Request<Incoming>) -> Response<Body> {
    let start = Instant::now();
    let text = |req: &Request<Incoming>, name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let event = req.uri().path().trim_start_matches('/').to_owned();
    let (ce, tp, ct) = (
        text(&req, "ce-id"),
        text(&req, "traceparent"),
        text(&req, "content-type"),
    );
    let answer = app
        .deliver(&event, &ce, &tp, &ct, incoming(req.into_body()))
        .await;
    match answer {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let mut out = Response::new(incoming(body));
            *out.status_mut() = parts.status;
            if let Some(ct) = parts.headers.get(CONTENT_TYPE) {
                out.headers_mut().insert(CONTENT_TYPE, ct.clone());
            }
            out.headers_mut()
                .insert(h2::QUEUE_US, HeaderValue::from(0u32));
            out.headers_mut().insert(
                h2::APP_US,
                HeaderValue::from(start.elapsed().as_micros() as u32),
            );
            out
        }
        Err(_) => {
            let mut out = Response::new(full(&b"app unreachable"[..]));
            *out.status_mut() = StatusCode::BAD_GATEWAY;
            out
        }
    }
}

/// What the front door asks the mesh for.
struct Routed {
    event: &'static str,
    payload: Bytes,
    body: Option<Incoming>,
    content_type: String,
}

fn route(req: Request<Incoming>) -> Option<Routed> {
    let path = req.uri().path().to_owned();
    if req.method() == hyper::Method::GET && path == "/noop" {
        return Some(Routed {
            event: "noop",
            payload: Bytes::from_static(b"{}"),
            body: None,
            content_type: "application/json".into(),
        });
    }
    if req.method() == hyper::Method::GET
        && let Some(n) = path.strip_prefix("/bytes/")
    {
        let n: u64 = n.parse().ok()?;
        return Some(Routed {
            event: "bytes",
            payload: Bytes::from(format!("{{\"n\":{n}}}")),
            body: None,
            content_type: "application/json".into(),
        });
    }
    if req.method() == hyper::Method::POST && path == "/echo" {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        return Some(Routed {
            event: "echo",
            payload: Bytes::new(),
            body: Some(req.into_body()),
            content_type,
        });
    }
    None
}

fn answer(
    status: u16,
    content_type: &str,
    queue_us: u32,
    app_us: u32,
    body: Body,
) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, ct);
    }
    let timing = format!(
        "queue;dur={:.3}, app;dur={:.3}",
        f64::from(queue_us) / 1e3,
        f64::from(app_us) / 1e3
    );
    if let Ok(v) = HeaderValue::from_str(&timing) {
        resp.headers_mut().insert(h2::SERVER_TIMING, v);
    }
    resp
}

fn refusal(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// The router side's hop to the manager.
#[derive(Clone)]
enum Hop {
    Frames(Arc<fc::Conn>),
    H2(h2::SenderOf<Body>),
}

/// The router side: an HTTP/1.1 front door forwarding every request over one hop connection.
pub async fn router(
    listener: TcpListener,
    proto: Proto,
    manager: &str,
    s: Settings,
) -> anyhow::Result<()> {
    let hop = match proto {
        Proto::Frames => Hop::Frames(fc::connect(manager, s).await?),
        Proto::H2 => Hop::H2(h2::connect(manager, s).await?),
    };
    let seq = Arc::new(AtomicU64::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (hop, seq) = (hop.clone(), seq.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let (hop, n) = (hop.clone(), seq.fetch_add(1, Ordering::Relaxed));
                async move { Ok::<_, Infallible>(forward(hop, req, n).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn forward(hop: Hop, req: Request<Incoming>, n: u64) -> Response<Body> {
    let Some(r) = route(req) else {
        return refusal(StatusCode::NOT_FOUND);
    };
    match hop {
        Hop::Frames(conn) => {
            let call = Call {
                event: r.event.to_owned(),
                ce_id: ce_id(n),
                traceparent: traceparent(n),
                content_type: r.content_type,
                deadline_ms: 30_000,
                inline: r.payload,
                stream: r.body,
            };
            match conn.call(call).await {
                Ok(reply) => {
                    let h = reply.head;
                    let body = match reply.body {
                        None => full(h.payload),
                        Some(b) => {
                            let rest = b.into_http().map_err(BoxError::from);
                            if h.payload.is_empty() {
                                rest.boxed()
                            } else {
                                let first = futures::stream::once(async move {
                                    Ok::<_, BoxError>(hyper::body::Frame::data(h.payload))
                                });
                                let rest = http_body_util::BodyStream::new(rest);
                                http_body_util::StreamBody::new(futures::StreamExt::chain(
                                    first, rest,
                                ))
                                .boxed()
                            }
                        }
                    };
                    answer(h.status, &h.content_type, h.queue_us, h.app_us, body)
                }
                Err(_) => refusal(StatusCode::BAD_GATEWAY),
            }
        }
        Hop::H2(mut sender) => {
            let uri: Uri = match format!("http://manager/{}", r.event).parse() {
                Ok(u) => u,
                Err(_) => return refusal(StatusCode::BAD_REQUEST),
            };
            let body = match r.body {
                Some(b) => incoming(b),
                None => full(r.payload),
            };
            let Ok(mut req) = h2::request(&uri, &ce_id(n), &traceparent(n), 30_000, body) else {
                return refusal(StatusCode::BAD_REQUEST);
            };
            if let Ok(ct) = HeaderValue::from_str(&r.content_type) {
                req.headers_mut().insert(CONTENT_TYPE, ct);
            }
            match sender.send_request(req).await {
                Ok(resp) => {
                    let (queue_us, app_us) = h2::timing(&resp);
                    let status = resp.status().as_u16();
                    let ct = resp
                        .headers()
                        .get(CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    answer(status, &ct, queue_us, app_us, incoming(resp.into_body()))
                }
                Err(_) => refusal(StatusCode::BAD_GATEWAY),
            }
        }
    }
}
