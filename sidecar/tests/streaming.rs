//! Streamed answers end to end (issue 14): an app's `text/event-stream` and chunked answers reach the
//! client through both sidecars as the app writes them, under per-stream windows, with bounded
//! memory in each sidecar; a client that goes away stops the app's stream. And a route without a
//! schema passes any body with its media type.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use switchyard_protocol::frame::{
    Frame as RawFrame, FrameCodec, Request as RawRequest, Response as RawResponse,
};
use switchyard_protocol::gateway::v1::CallRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tokio::net::{TcpListener, TcpStream};

/// Events of the SSE answer.
const EVENTS: usize = 10_000;
/// Bytes of the download.
const DOWNLOAD: u64 = 1 << 30;
const CHUNK: usize = 64 * 1024;

/// What the streaming app saw.
#[derive(Default)]
struct Seen {
    /// The `ticks` stream found its reader gone (the client's went away through both sidecars).
    ticks_stopped: AtomicBool,
    /// Ticks written before that.
    ticks: AtomicU64,
}

type Body = BoxBody<Bytes, Infallible>;

/// An app answering `sse` with 10,000 events, `ticks` with an event every 10 ms until its reader
/// goes away, `download` with 1 GiB in chunks, everything chunked (no Content-Length).
async fn streaming_app() -> (u16, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| answer(state.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, seen)
}

async fn answer(seen: Arc<Seen>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let ce_type = req
        .headers()
        .get("ce-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let their_type = req.headers().get("content-type").cloned();
    if ce_type == "upload" {
        // Reads the body as it comes, checking every byte, and says how much it read.
        let mut body = req.into_body();
        let (mut n, mut ok) = (0u64, true);
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                ok = false;
                break;
            };
            if let Ok(d) = frame.into_data() {
                ok &= d.iter().all(|b| *b == b'u');
                n += d.len() as u64;
            }
        }
        let out = json!({"bytes": n, "ok": ok}).to_string();
        let mut resp = Response::new(BodyExt::boxed(http_body_util::Full::new(Bytes::from(out))));
        resp.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        return Ok(resp);
    }
    if ce_type == "file" {
        return Ok(file_answer(req.headers()));
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    if ce_type == "blob" {
        // Echoes the body and its media type.
        let mut resp = Response::new(BodyExt::boxed(http_body_util::Full::new(body)));
        if let Some(t) = their_type {
            resp.headers_mut().insert("content-type", t);
        }
        return Ok(resp);
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let content_type = match ce_type.as_str() {
        "sse" => {
            tokio::spawn(async move {
                for i in 0..EVENTS {
                    if tx
                        .send(Bytes::from(format!("data: {i}\n\n")))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
            "text/event-stream"
        }
        "ticks" => {
            tokio::spawn(async move {
                loop {
                    if tx
                        .send(Bytes::from_static(b"data: tick\n\n"))
                        .await
                        .is_err()
                    {
                        seen.ticks_stopped.store(true, Ordering::SeqCst);
                        return;
                    }
                    seen.ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            "text/event-stream"
        }
        "download" => {
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b'x'; CHUNK]);
                for _ in 0..DOWNLOAD / CHUNK as u64 {
                    if tx.send(chunk.clone()).await.is_err() {
                        return;
                    }
                }
            });
            "application/octet-stream"
        }
        _ => {
            drop(tx);
            "application/json"
        }
    };
    let body = http_body_util::StreamBody::new(futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|o| o.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    }));
    let mut resp = Response::new(BodyExt::boxed(body));
    resp.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    Ok(resp)
}

/// Bytes of the app's `file`, larger than the small-answer size so that its answers stream.
const FILE: usize = 1 << 20;
const FILE_ETAG: &str = "\"file-v1\"";

fn file_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// The app's `file` as a file server answers it: `bytes=a-b` gives 206 with `Content-Range` and
/// its length, unless an `If-Range` names another version; else 200, the whole of it. Always
/// `Accept-Ranges`, `ETag` and a `Content-Length`, the body streamed in chunks.
fn file_answer(h: &hyper::HeaderMap) -> Response<Body> {
    let range = h
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
        .filter(|(a, b)| a <= b && *b < FILE);
    let fresh = h.get("if-range").is_none_or(|v| v == FILE_ETAG);
    let (status, from, to) = match range {
        Some((a, b)) if fresh => (206, a, b),
        _ => (200, 0, FILE - 1),
    };
    let mut left: Vec<u8> = (from..=to).map(file_byte).collect();
    let body = http_body_util::StreamBody::new(futures::stream::poll_fn(move |_| {
        if left.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let rest = left.split_off(left.len().min(CHUNK));
        let chunk = std::mem::replace(&mut left, rest);
        std::task::Poll::Ready(Some(Ok::<_, Infallible>(Frame::data(Bytes::from(chunk)))))
    }));
    let mut resp = Response::new(BodyExt::boxed(body));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    let hs = resp.headers_mut();
    hs.insert("content-type", "application/octet-stream".parse().unwrap());
    hs.insert("accept-ranges", "bytes".parse().unwrap());
    hs.insert("etag", FILE_ETAG.parse().unwrap());
    hs.insert("content-length", (to - from + 1).into());
    if status == 206 {
        hs.insert(
            "content-range",
            format!("bytes {from}-{to}/{FILE}").parse().unwrap(),
        );
    }
    resp
}

struct StreamMesh {
    _dir: tempfile::TempDir,
    manager: Proc,
    router: Proc,
    http_port: u16,
    grpc_port: u16,
    manager_port: u16,
    seen: Arc<Seen>,
}

async fn start() -> StreamMesh {
    start_limited(2 << 30).await
}

/// The mesh with a `bodyLimit` of `limit` bytes.
async fn start_limited(limit: u64) -> StreamMesh {
    let dir = tempfile::tempdir().unwrap();
    let (app_port, seen) = streaming_app().await;
    let events = ["noop", "sse", "ticks", "download", "blob", "upload", "file"];
    let mut mcfg = manager_config(app_port, &Opts::default());
    mcfg["events"] = json!(events);
    // The upload's answer comes once the app read all of it.
    mcfg["workers"]["timeout"] = json!("120s");
    let mcfg = write_json(dir.path(), "manager.json", &mcfg);
    let (manager, ports) = start_manager(dir.path(), &mcfg, &[]).await;
    let mut rcfg = router_config(ports.listen, "3s");
    let dest = rcfg["destinations"]["noop"].clone();
    for e in ["sse", "ticks", "download", "file"] {
        rcfg["spec"]["routes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"event": e, "http": {"method": "GET", "path": format!("/{e}")}}));
        rcfg["destinations"][e] = dest.clone();
    }
    rcfg["spec"]["routes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"event": "blob", "http": {"method": "POST", "path": "/blob"}}));
    rcfg["destinations"]["blob"] = dest.clone();
    rcfg["spec"]["routes"].as_array_mut().unwrap().push(
        json!({"event": "upload", "http": {"method": "POST", "path": "/upload"}, "timeout": "120s"}),
    );
    rcfg["destinations"]["upload"] = dest.clone();
    // The same events over gRPC, for `CallStream`.
    rcfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
    for e in ["sse", "download", "noop"] {
        rcfg["spec"]["routes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"event": e, "grpc": {"method": e}}));
    }
    // Above one frame (16 MiB) and above the byte budget (the default 256 MiB): a streamed body
    // holds one window of the budget, so a router starts with it.
    rcfg["spec"]["middleware"] = json!([{"bodyLimit": {"maxBytes": limit}}]);
    let rcfg = write_json(dir.path(), "router.json", &rcfg);
    let (router, rports) = start_router(dir.path(), &rcfg, &[], &[]).await;
    let client = Http::new();
    poll(
        Duration::from_secs(10),
        "router connected to manager",
        || async {
            let r = client
                .get(&format!("http://127.0.0.1:{}/noop", rports.http))
                .await
                .ok()?;
            (r.status == 200).then_some(())
        },
    )
    .await;
    StreamMesh {
        _dir: dir,
        manager,
        router,
        grpc_port: rports.grpc.unwrap(),
        http_port: rports.http,
        manager_port: ports.listen,
        seen,
    }
}

/// A raw HTTP/1.1 client on a fresh connection: the answer's head, its body read frame by frame.
async fn get(port: u16, path: &str, te_trailers: bool) -> Response<Incoming> {
    get_with(port, path, te_trailers, &[]).await
}

/// [`get`] with request headers.
async fn get_with(
    port: u16,
    path: &str,
    te_trailers: bool,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    if te_trailers {
        req.headers_mut()
            .insert("te", hyper::header::HeaderValue::from_static("trailers"));
    }
    for (name, value) in headers {
        req.headers_mut().insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    sender.send_request(req).await.unwrap()
}

/// Samples both sidecars' VmRSS until `done`; returns the peaks.
fn sample_rss(
    router: u32,
    manager: u32,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64)> {
    tokio::spawn(async move {
        let mut peak = (0u64, 0u64);
        while !done.load(Ordering::SeqCst) {
            peak.0 = peak.0.max(vm_rss_kib(router));
            peak.1 = peak.1.max(vm_rss_kib(manager));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        peak
    })
}

fn vm_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`, the peak since the process started).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Issue 14's bar: router and manager RSS each <= 32 MiB throughout a 1 GiB transfer. Checked
/// absolutely, sampled and by the kernel's high-water mark, where the sidecars are release builds;
/// the debug build CI runs holds ~35 MiB idle (unoptimized code and tables), so there the bound is
/// on what the transfer adds (windows of 256 KiB per stream, not the body).
fn assert_memory_bounded(what: &str, before: (u64, u64), peak: (u64, u64), pids: (u32, u32)) {
    let hwm = (status_kib(pids.0, "VmHWM:"), status_kib(pids.1, "VmHWM:"));
    eprintln!(
        "{what}: VmRSS router {} -> peak {} KiB (VmHWM {}), manager {} -> peak {} KiB (VmHWM {})",
        before.0, peak.0, hwm.0, before.1, peak.1, hwm.1
    );
    if cfg!(debug_assertions) {
        let grown = (
            peak.0.saturating_sub(before.0),
            peak.1.saturating_sub(before.1),
        );
        assert!(grown.0 <= 8 * 1024, "router grew by {} KiB", grown.0);
        assert!(grown.1 <= 8 * 1024, "manager grew by {} KiB", grown.1);
    } else {
        for (who, kib) in [
            ("router", peak.0.max(hwm.0)),
            ("manager", peak.1.max(hwm.1)),
        ] {
            assert!(kib <= 32 * 1024, "{who} held {kib} KiB (bar: 32 MiB)");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_of_10000_events_arrives_in_order_as_the_app_writes_it() {
    let mesh = start().await;
    let sent = Instant::now();
    let resp = get(mesh.http_port, "/sse", true).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let timing = resp
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(timing.contains("queue;dur="), "head timing: {timing}");
    let mut body = resp.into_body();
    let mut first_event = None;
    let mut text = Vec::new();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        match frame.into_data() {
            Ok(d) => {
                first_event.get_or_insert_with(|| sent.elapsed());
                text.extend_from_slice(&d);
            }
            Err(f) => trailers = f.into_trailers().ok(),
        }
    }
    let text = String::from_utf8(text).unwrap();
    let events: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(events.len(), EVENTS);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(*e, format!("data: {i}"), "event {i} in order");
    }
    let first = first_event.unwrap();
    eprintln!(
        "first SSE event after {:.3} ms (request sent to first body bytes); all {EVENTS} after {:.1} ms",
        first.as_secs_f64() * 1e3,
        sent.elapsed().as_secs_f64() * 1e3
    );
    // A sanity bound only: a stream held back until its end would take as long as all of it.
    assert!(
        first < Duration::from_secs(2),
        "first event after {first:?}"
    );
    // The client said `TE: trailers`: the app's time to the end of its body comes as a trailer.
    let trailers = trailers.expect("a Server-Timing trailer");
    let st = trailers.get("server-timing").unwrap().to_str().unwrap();
    assert!(st.contains("app;dur=") && st.contains("total;dur="), "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_stops_the_apps_stream() {
    let mesh = start().await;
    let resp = get(mesh.http_port, "/ticks", false).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = 0;
    while got < 3 {
        if body.frame().await.unwrap().unwrap().is_data() {
            got += 1;
        }
    }
    assert!(!mesh.seen.ticks_stopped.load(Ordering::SeqCst));
    // The connection goes with the body (the client task ends when both sides are dropped).
    drop(body);
    poll(
        Duration::from_secs(10),
        "the app's stream stopped",
        || async { mesh.seen.ticks_stopped.load(Ordering::SeqCst).then_some(()) },
    )
    .await;
    // And the connection still serves the next request.
    let r = Http::new()
        .get(&format!("http://127.0.0.1:{}/noop", mesh.http_port))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_download_streams_through_with_both_sidecars_memory_bounded() {
    let mesh = start().await;
    let (router_pid, manager_pid) = (mesh.router.child.id(), mesh.manager.child.id());
    let before = (vm_rss_kib(router_pid), vm_rss_kib(manager_pid));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(router_pid, manager_pid, done.clone());
    let started = Instant::now();
    let resp = get(mesh.http_port, "/download", false).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.unwrap().into_data() {
            assert!(d.iter().all(|b| *b == b'x'));
            n += d.len() as u64;
        }
    }
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let peak = sampler.await.unwrap();
    assert_eq!(n, DOWNLOAD);
    eprintln!(
        "1 GiB download in {:.1} s ({:.0} MiB/s)",
        took.as_secs_f64(),
        1024.0 / took.as_secs_f64(),
    );
    assert_memory_bounded("download", before, peak, (router_pid, manager_pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_a_schema_passes_any_body_with_its_media_type() {
    let mesh = start().await;
    let c = Http::new();
    let url = format!("http://127.0.0.1:{}/blob", mesh.http_port);
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    for (media, body) in [
        ("application/octet-stream", binary.clone()),
        ("text/plain; charset=utf-8", b"not json at all".to_vec()),
        (
            "multipart/form-data; boundary=xyz",
            b"--xyz\r\ncontent-disposition: form-data; name=a\r\n\r\n1\r\n--xyz--\r\n".to_vec(),
        ),
        ("image/png", vec![0x89, b'P', b'N', b'G', 0, 0xff]),
    ] {
        let r = c
            .post(&url, media, Bytes::from(body.clone()))
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{media}: {:?}", r.body);
        assert_eq!(&r.body[..], &body[..], "{media} passes byte for byte");
        assert_eq!(r.header("content-type"), Some(media));
    }
    // A JSON media type still promises JSON.
    let r = c.post(&url, "application/json", "{nope").await.unwrap();
    assert_eq!(r.status, 400);
    // And JSON is read whole: above one event (16 MiB) it is refused, though bodyLimit is 2 GiB.
    let r = c
        .post(&url, "application/json", vec![b' '; (16 << 20) + 1])
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{:?}", r.body);
    let detail = r.json()["detail"].as_str().unwrap_or("").to_owned();
    assert!(
        detail.starts_with("body is larger than 16777216 bytes, the most read whole"),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_upload_streams_to_the_app_with_both_sidecars_memory_bounded() {
    let mesh = start().await;
    let (router_pid, manager_pid) = (mesh.router.child.id(), mesh.manager.child.id());
    let before = (vm_rss_kib(router_pid), vm_rss_kib(manager_pid));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(router_pid, manager_pid, done.clone());
    let stream = TcpStream::connect(("127.0.0.1", mesh.http_port))
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let body = chunked(DOWNLOAD / CHUNK as u64);
    let req = Request::post("/upload")
        .header("host", "127.0.0.1")
        .header("content-type", "application/octet-stream")
        .body(body)
        .unwrap();
    let started = Instant::now();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status();
    let answer = resp.into_body().collect().await.unwrap().to_bytes();
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let peak = sampler.await.unwrap();
    assert_eq!(status, 200, "{answer:?}");
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v, json!({"bytes": DOWNLOAD, "ok": true}));
    eprintln!(
        "1 GiB upload in {:.1} s ({:.0} MiB/s)",
        took.as_secs_f64(),
        1024.0 / took.as_secs_f64(),
    );
    assert_memory_bounded("upload", before, peak, (router_pid, manager_pid));
}

type Raw = tokio_util::codec::Framed<TcpStream, FrameCodec>;

async fn next_frame(conn: &mut Raw) -> RawFrame {
    tokio::time::timeout(Duration::from_secs(10), conn.next())
        .await
        .expect("a frame within 10 s")
        .expect("connection open")
        .expect("valid frame")
}

fn raw_request(id: u64, event: &str, content_type: &str, payload: Bytes) -> RawFrame {
    RawFrame::Request(RawRequest {
        headers: Vec::new(),
        id,
        flags: 0,
        deadline_ms: 10_000,
        event: event.into(),
        ce_id: format!("old-{id}"),
        traceparent: String::new(),
        tracestate: String::new(),
        content_type: content_type.into(),
        payload,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_of_the_previous_version_gets_whole_answers_and_no_hello() {
    let mesh = start().await;
    let stream = TcpStream::connect(("127.0.0.1", mesh.manager_port))
        .await
        .unwrap();
    let mut conn = tokio_util::codec::Framed::new(stream, FrameCodec::default());
    // The previous version's HELLO: no STREAMS bit, no window, no tracestate bit.
    conn.send(RawFrame::Hello {
        reads_headers: false,
        takes_pushes: false,
        implicit_credit: true,
        releases_credit: false,
        streams: None,
        reads_tracestate: false,
    })
    .await
    .unwrap();
    assert!(
        matches!(next_frame(&mut conn).await, RawFrame::Credit { .. }),
        "its first frame is the grant, not a HELLO it would not know"
    );
    let blob: Bytes = (0..=255u8).cycle().take(70_000).collect::<Vec<u8>>().into();
    conn.send(raw_request(
        1,
        "blob",
        "application/octet-stream",
        blob.clone(),
    ))
    .await
    .unwrap();
    conn.send(raw_request(
        2,
        "sse",
        "application/json",
        Bytes::from_static(b"{}"),
    ))
    .await
    .unwrap();
    // An answer with header fields to pass (a 1 MiB file with its length and validators).
    conn.send(raw_request(
        3,
        "file",
        "application/json",
        Bytes::from_static(b"{}"),
    ))
    .await
    .unwrap();
    let mut answers = std::collections::HashMap::new();
    while answers.len() < 3 {
        match next_frame(&mut conn).await {
            RawFrame::Response(r) => {
                answers.insert(r.id, r);
            }
            RawFrame::Credit { .. } | RawFrame::Pong { .. } | RawFrame::Ping { .. } => {}
            other => panic!("a frame the previous version does not know: {other:?}"),
        }
    }
    let (b, e) = (&answers[&1], &answers[&2]);
    assert!(!b.more && !e.more, "whole answers");
    let f = &answers[&3];
    assert_eq!(f.payload.len(), FILE);
    assert!(f.headers.is_empty(), "no headers list it would not read");
    assert_eq!(b.payload, blob);
    assert_eq!(b.content_type, "application/octet-stream");
    let text = String::from_utf8_lossy(&e.payload);
    assert!(text.starts_with("data: 0\n\n") && text.ends_with("data: 9999\n\n"));
}

/// A manager of the previous version, in the test: takes the router's connection, grants credit,
/// never says STREAMS, and answers every request with its payload's length.
async fn old_manager() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut conn = tokio_util::codec::Framed::new(stream, FrameCodec::default());
                if conn.send(RawFrame::Credit { credits: 64 }).await.is_err() {
                    return;
                }
                while let Some(Ok(f)) = conn.next().await {
                    let reply = match f {
                        RawFrame::Request(r) => RawFrame::Response(RawResponse {
                            headers: Vec::new(),
                            id: r.id,
                            status: 200,
                            queue_us: 0,
                            app_us: 0,
                            content_type: "text/plain".into(),
                            payload: Bytes::from(r.payload.len().to_string()),
                            returns_credit: true,
                            from_mesh: false,
                            more: false,
                        }),
                        RawFrame::Ping { nonce } => RawFrame::Pong { nonce },
                        _ => continue,
                    };
                    if conn.send(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_of_the_previous_version_gets_whole_bodies_and_a_larger_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = old_manager().await;
    let mut rcfg = router_config(port, "10s");
    let dest = rcfg["destinations"]["noop"].clone();
    rcfg["spec"]["routes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"event": "upload", "http": {"method": "POST", "path": "/upload"}}));
    rcfg["destinations"]["upload"] = dest;
    rcfg["spec"]["middleware"] = json!([{"bodyLimit": {"maxBytes": 64u64 << 20}}]);
    let rcfg = write_json(dir.path(), "router.json", &rcfg);
    let (_router, rports) = start_router(dir.path(), &rcfg, &[], &[]).await;
    let client = Http::new();
    let url = format!("http://127.0.0.1:{}/upload", rports.http);
    poll(Duration::from_secs(10), "router connected", || async {
        let r = client
            .get(&format!("http://127.0.0.1:{}/noop", rports.http))
            .await
            .ok()?;
        (r.status == 200).then_some(())
    })
    .await;
    // Larger than the small-event size, so it would stream to a manager that takes streams.
    let r = client
        .post(&url, "application/octet-stream", vec![b'u'; 1 << 20])
        .await
        .unwrap();
    assert_eq!(
        (r.status, &r.body[..]),
        (200, &b"1048576"[..]),
        "sent whole"
    );
    let r = client
        .post(&url, "application/octet-stream", vec![b'u'; 20 << 20])
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{:?}", r.body);
    let detail = r.json()["detail"].as_str().unwrap_or("").to_owned();
    assert!(
        detail.contains("a version from before streamed bodies"),
        "{detail}"
    );
}

/// A body of `n` chunks of 64 KiB, without a declared length (chunked), so only counting finds
/// its size.
fn chunked(n: u64) -> impl hyper::body::Body<Data = Bytes, Error = Infallible> {
    let chunk = Bytes::from(vec![b'u'; CHUNK]);
    let mut left = n;
    http_body_util::StreamBody::new(futures::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        left -= 1;
        std::task::Poll::Ready(Some(Ok::<_, Infallible>(Frame::data(chunk.clone()))))
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_over_the_limit_is_refused_413_and_the_next_request_is_served() {
    let mesh = start_limited(1 << 20).await;
    let stream = TcpStream::connect(("127.0.0.1", mesh.http_port))
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::post("/upload")
        .header("host", "127.0.0.1")
        .header("content-type", "application/octet-stream")
        .body(chunked(32))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 413);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["detail"], "body is larger than 1048576 bytes");
    // Within the limit, the same route takes it.
    let r = Http::new()
        .post(
            &format!("http://127.0.0.1:{}/upload", mesh.http_port),
            "application/octet-stream",
            vec![b'u'; 1 << 20],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json(), json!({"bytes": 1 << 20, "ok": true}));
}

/// The answer's body, its data frames joined.
async fn body_of(resp: Response<Incoming>) -> Vec<u8> {
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.unwrap().into_data() {
            out.extend_from_slice(&d);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_requests_and_content_length_pass_through_both_sidecars() {
    let mesh = start().await;
    let header = |r: &Response<Incoming>, n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    // The whole file: streamed (1 MiB), yet with the app's length, not chunked; its validators.
    let r = get(mesh.http_port, "/file", true).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-length").as_deref(), Some("1048576"));
    assert_eq!(header(&r, "transfer-encoding"), None, "not chunked");
    assert_eq!(header(&r, "accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(header(&r, "etag").as_deref(), Some(FILE_ETAG));
    assert_eq!(
        header(&r, "trailer"),
        None,
        "no trailers after a declared length"
    );
    let whole = body_of(r).await;
    assert_eq!(whole.len(), FILE);
    assert!(whole.iter().enumerate().all(|(i, b)| *b == file_byte(i)));
    // A range large enough to stream: 206 with its range and length, byte for byte.
    let (a, b) = (100_000usize, 899_999usize);
    let r = get_with(
        mesh.http_port,
        "/file",
        false,
        &[("range", &format!("bytes={a}-{b}"))],
    )
    .await;
    assert_eq!(r.status(), 206);
    assert_eq!(
        header(&r, "content-range"),
        Some(format!("bytes {a}-{b}/{FILE}"))
    );
    assert_eq!(header(&r, "content-length"), Some((b - a + 1).to_string()));
    assert_eq!(header(&r, "transfer-encoding"), None);
    assert_eq!(body_of(r).await, whole[a..=b]);
    // A small range goes whole in one frame each way, with the same fields.
    let r = get_with(
        mesh.http_port,
        "/file",
        false,
        &[("range", "bytes=10-19"), ("if-range", FILE_ETAG)],
    )
    .await;
    assert_eq!(r.status(), 206);
    assert_eq!(
        header(&r, "content-range").as_deref(),
        Some("bytes 10-19/1048576")
    );
    assert_eq!(header(&r, "content-length").as_deref(), Some("10"));
    assert_eq!(header(&r, "accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(body_of(r).await, whole[10..20]);
    // An If-Range naming another version: the app answers the whole file, as HTTP says.
    let r = get_with(
        mesh.http_port,
        "/file",
        false,
        &[("range", "bytes=10-19"), ("if-range", "\"file-v0\"")],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-range"), None);
    assert_eq!(body_of(r).await.len(), FILE);
}

async fn gateway(port: u16) -> GatewayClient<tonic::transport::Channel> {
    let ch = poll(Duration::from_secs(10), "gRPC listener", || async {
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    GatewayClient::new(ch)
}

fn call(method: &str) -> CallRequest {
    CallRequest {
        method: method.into(),
        payload: Vec::new(),
        metadata: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_call_stream_relays_the_apps_streamed_answer_as_it_comes() {
    let mesh = start().await;
    let mut client = gateway(mesh.grpc_port).await;
    // 10,000 SSE events: the first message has the head, then the body in order.
    let sent = Instant::now();
    let mut stream = client.call_stream(call("sse")).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().expect("a first message");
    assert_eq!(
        (first.status, first.content_type.as_str()),
        (200, "text/event-stream")
    );
    let mut text = first.data;
    let (mut messages, mut first_data) = (1usize, None);
    while let Some(m) = stream.message().await.unwrap() {
        first_data.get_or_insert_with(|| sent.elapsed());
        assert_eq!((m.status, m.content_type.as_str()), (0, ""), "head once");
        text.extend_from_slice(&m.data);
        messages += 1;
    }
    let text = String::from_utf8(text).unwrap();
    let events: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(events.len(), EVENTS);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(*e, format!("data: {i}"), "event {i} in order");
    }
    eprintln!(
        "CallStream: {EVENTS} events in {messages} messages, first body after {:?}, all after {:?}",
        first_data.unwrap(),
        sent.elapsed()
    );
    assert!(messages > 2, "streamed in parts, not whole: {messages}");
    // A whole answer is one message.
    let mut stream = client.call_stream(call("noop")).await.unwrap().into_inner();
    let m = stream.message().await.unwrap().expect("one message");
    assert_eq!(m.status, 200);
    assert!(stream.message().await.unwrap().is_none());
    // Far larger than `Call` takes whole (16 MiB): 64 MiB of the 1 GiB download read as it comes,
    // then the client goes away mid-stream.
    let mut stream = client
        .call_stream(call("download"))
        .await
        .unwrap()
        .into_inner();
    let mut n = 0usize;
    while n < 64 << 20 {
        let m = stream
            .message()
            .await
            .unwrap()
            .expect("more of the download");
        assert!(m.data.iter().all(|b| *b == b'x'));
        n += m.data.len();
    }
    drop(stream);
    // The mesh still serves the next call.
    let r = client.call(call("noop")).await.unwrap().into_inner();
    assert_eq!(r.status, 200);
}
