//! PROTOTYPE: the hop as plain HTTP/2 (h2c), with hyper's http2 client and server: one connection per
//! pod pair, a request per event (`POST /<event type>`, CloudEvents fields as headers), the manager's
//! `max_concurrent_streams` as the credit, h2's own per-stream and connection windows, RST_STREAM for
//! cancel (dropping the response future or body), PING keepalive and GOAWAY.

use super::body::{self, Chunks};
use super::{DEAD_AFTER, NOOP_ANSWER, PING_EVERY, Scenario, Settings, answer};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Microseconds the event waited in the manager's queue.
pub const QUEUE_US: HeaderName = HeaderName::from_static("sy-queue-us");
/// Microseconds the app took.
pub const APP_US: HeaderName = HeaderName::from_static("sy-app-us");
/// The CloudEvents id.
pub const CE_ID: HeaderName = HeaderName::from_static("ce-id");
/// The W3C traceparent.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// Milliseconds the router waits.
pub const DEADLINE_MS: HeaderName = HeaderName::from_static("sy-deadline-ms");
/// Server-Timing, as a trailer of streamed answers.
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// The connection window: what every stream's window may add up to, so the connection bounds no
/// tighter than the frame hop's credits times its stream window.
fn connection_window(s: &Settings) -> u32 {
    (u64::from(s.credits) * u64::from(s.window)).min(i32::MAX as u64) as u32
}

/// The router side: a request sender on one connection (cloned by every caller).
pub type SenderOf<B> = hyper::client::conn::http2::SendRequest<B>;
/// The sender of the hop-only measurements.
pub type Sender = SenderOf<Chunks>;

/// Connects to a manager; the connection runs in a task.
pub async fn connect<B>(addr: &str, s: Settings) -> anyhow::Result<SenderOf<B>>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(s.window)
        .initial_connection_window_size(connection_window(&s))
        .max_frame_size(s.max_frame)
        // No stream before the manager's SETTINGS say how many it takes, as the frame hop waits for
        // its first CREDIT: h2 otherwise assumes 100 and the manager refuses the excess (REFUSED_STREAM).
        .initial_max_send_streams(0)
        .keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(DEAD_AFTER - PING_EVERY)
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(stream))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!(error = %e, "h2 connection failed");
        }
    });
    Ok(sender)
}

/// The event to send, as the router would build it.
pub fn request<B>(
    uri: &hyper::Uri,
    ce_id: &str,
    traceparent: &str,
    deadline_ms: u32,
    body: B,
) -> anyhow::Result<Request<B>> {
    let mut req = Request::new(body);
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = uri.clone();
    let h = req.headers_mut();
    h.insert(CE_ID, unique(ce_id)?);
    h.insert(TRACEPARENT, unique(traceparent)?);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(DEADLINE_MS, HeaderValue::from(deadline_ms));
    Ok(req)
}

/// A value that differs on every request: sent as a never-indexed literal, so HPACK does not churn
/// its dynamic table inserting values that will never repeat.
fn unique(v: &str) -> anyhow::Result<HeaderValue> {
    let mut v = HeaderValue::from_str(v)?;
    v.set_sensitive(true);
    Ok(v)
}

/// What the router reads of an answer's head: status and the manager's timing.
pub fn timing(resp: &Response<Incoming>) -> (u32, u32) {
    let num = |n: &HeaderName| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (num(&QUEUE_US), num(&APP_US))
}

/// The manager side's connection settings.
pub fn server_builder(s: &Settings) -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(s.window)
        .initial_connection_window_size(connection_window(s))
        .max_frame_size(s.max_frame)
        .max_concurrent_streams(s.credits)
        .keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(DEAD_AFTER - PING_EVERY)
        .auto_date_header(false);
    builder
}

/// Accepts router connections until the process ends.
pub async fn serve(listener: TcpListener, s: Settings) {
    let builder = server_builder(&s);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |req| handle(req, s)),
        );
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "h2 connection ended");
            }
        });
    }
}

fn answer_of(
    status: StatusCode,
    content_type: &'static str,
    app_us: u32,
    body: Chunks,
) -> Response<Chunks> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(QUEUE_US, HeaderValue::from(0u32));
    let mut app = HeaderValue::from(app_us);
    app.set_sensitive(true);
    h.insert(APP_US, app);
    resp
}

async fn handle(req: Request<Incoming>, s: Settings) -> Result<Response<Chunks>, Infallible> {
    let start = Instant::now();
    let app_us = || start.elapsed().as_micros() as u32;
    let scenario = answer::scenario(req.uri().path());
    let mut body = req.into_body();
    Ok(match scenario {
        Some(Scenario::Noop) => {
            // A manager reads the event's data to deliver it.
            if body.collect().await.is_err() {
                return Ok(answer_of(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    0,
                    Chunks::full(Bytes::new()),
                ));
            }
            answer_of(
                StatusCode::OK,
                "application/json",
                app_us(),
                Chunks::full(NOOP_ANSWER.into()),
            )
        }
        Some(Scenario::Upload) => {
            let mut n = 0usize;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => n += f.data_ref().map_or(0, Bytes::len),
                    Err(_) => {
                        return Ok(answer_of(
                            StatusCode::BAD_REQUEST,
                            "text/plain",
                            0,
                            Chunks::full(Bytes::new()),
                        ));
                    }
                }
            }
            let answer = Bytes::from(format!("{{\"bytes\":{n}}}"));
            answer_of(
                StatusCode::OK,
                "application/json",
                app_us(),
                Chunks::full(answer),
            )
        }
        Some(Scenario::Download) => {
            let asked = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => Bytes::new(),
            };
            let n = answer::download_size(&asked);
            let mut trailers = HeaderMap::new();
            // Known at the end: the trailer is made when the body is, as an app's timing would be.
            let timing = answer::timing_trailer(0, app_us());
            if let Ok(v) = HeaderValue::from_str(&timing) {
                trailers.insert(SERVER_TIMING, v);
            }
            let body = Chunks::new(body::chunks(n, s.chunk), Some(trailers));
            answer_of(StatusCode::OK, "application/octet-stream", 0, body)
        }
        None => answer_of(
            StatusCode::NOT_FOUND,
            "text/plain",
            0,
            Chunks::full(Bytes::new()),
        ),
    })
}
