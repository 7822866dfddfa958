//! Streamed answers end to end (issue 14): an app's `text/event-stream` and chunked answers reach the
//! client through both sidecars as the app writes them, under per-stream windows, with bounded
//! memory in each sidecar; a client that goes away stops the app's stream. And a route without a
//! schema passes any body with its media type.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
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

struct StreamMesh {
    _dir: tempfile::TempDir,
    manager: Proc,
    router: Proc,
    http_port: u16,
    seen: Arc<Seen>,
}

async fn start() -> StreamMesh {
    let dir = tempfile::tempdir().unwrap();
    let (app_port, seen) = streaming_app().await;
    let events = ["noop", "sse", "ticks", "download", "blob"];
    let mut mcfg = manager_config(app_port, &Opts::default());
    mcfg["events"] = json!(events);
    let mcfg = write_json(dir.path(), "manager.json", &mcfg);
    let (manager, ports) = start_manager(dir.path(), &mcfg, &[]).await;
    let mut rcfg = router_config(ports.listen, "3s");
    let dest = rcfg["destinations"]["noop"].clone();
    for e in ["sse", "ticks", "download"] {
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
        http_port: rports.http,
        seen,
    }
}

/// A raw HTTP/1.1 client on a fresh connection: the answer's head, its body read frame by frame.
async fn get(port: u16, path: &str, te_trailers: bool) -> Response<Incoming> {
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
    sender.send_request(req).await.unwrap()
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
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
    let sampler = tokio::spawn({
        let done = done.clone();
        async move {
            let mut peak = (0u64, 0u64);
            while !done.load(Ordering::SeqCst) {
                peak.0 = peak.0.max(vm_rss_kib(router_pid));
                peak.1 = peak.1.max(vm_rss_kib(manager_pid));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        }
    });
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
        "1 GiB in {:.1} s ({:.0} MiB/s); VmRSS router {} -> peak {} KiB, manager {} -> peak {} KiB",
        took.as_secs_f64(),
        1024.0 / took.as_secs_f64(),
        before.0,
        peak.0,
        before.1,
        peak.1
    );
    // What the stream adds to each sidecar is bounded by its windows (256 KiB per stream), not the
    // body (1 GiB). Issue 14's bar is <= 32 MiB each absolute, for release builds; these are debug
    // builds, whose idle router already holds ~35 MiB (printed above), so the bound here is on
    // what the download adds.
    let grown = (
        peak.0.saturating_sub(before.0),
        peak.1.saturating_sub(before.1),
    );
    assert!(grown.0 <= 8 * 1024, "router grew by {} KiB", grown.0);
    assert!(grown.1 <= 8 * 1024, "manager grew by {} KiB", grown.1);
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
}
