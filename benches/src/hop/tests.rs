//! Both prototype hops over real loopback sockets: every scenario answers completely and right with
//! bodies larger than the window (so WINDOW updates carry them), and a cancelled stream gives its
//! credit back (with one credit, the next request goes through).

use super::body::Chunks;
use super::frames::client::{self as fc, Call};
use super::{Proto, Scenario, Settings, drive, frames, h2};
use bytes::Bytes;
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::net::TcpListener;

async fn server(proto: Proto, s: Settings) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    match proto {
        Proto::Frames => tokio::spawn(frames::server::serve(
            listener,
            s,
            frames::server::Backend::Local,
        )),
        Proto::H2 => tokio::spawn(h2::serve(listener, s)),
    };
    addr
}

fn small_windows() -> Settings {
    Settings {
        window: 32 * 1024,
        max_frame: 16 * 1024,
        credits: 4,
        chunk: 20_000,
    }
}

#[tokio::test]
async fn every_scenario_completes_on_both_hops_with_bodies_beyond_the_window() {
    for proto in [Proto::Frames, Proto::H2] {
        let s = small_windows();
        let addr = server(proto, s).await;
        for scenario in [Scenario::Noop, Scenario::Upload, Scenario::Download] {
            let plan = drive::Plan {
                proto,
                addr: addr.clone(),
                scenario,
                bytes: 300_000,
                concurrency: 6,
                warmup: Duration::ZERO,
                duration: Duration::from_millis(300),
                settings: s,
            };
            let summary = drive::run(plan).await.expect("runs");
            assert!(summary.requests > 0, "{proto:?} {scenario:?}: {summary:?}");
            assert_eq!(summary.errors, 0, "{proto:?} {scenario:?}: {summary:?}");
        }
    }
}

fn download(n: usize) -> Call<Chunks> {
    Call {
        event: "download".into(),
        ce_id: "a".into(),
        traceparent: String::new(),
        content_type: "application/json".into(),
        deadline_ms: 1000,
        inline: Bytes::from(n.to_string()),
        stream: None,
    }
}

#[tokio::test]
async fn a_dropped_frames_stream_resets_and_its_credit_comes_back() {
    let s = Settings {
        credits: 1,
        ..small_windows()
    };
    let addr = server(Proto::Frames, s).await;
    let conn = fc::connect(&addr, s).await.expect("connects");
    let reply = conn.call(download(10 << 20)).await.expect("head");
    let mut body = reply.body.expect("streams");
    body.chunk().await.expect("a chunk").expect("data");
    // The manager is stuck on the window until the router reads or resets: drop it mid-body.
    drop(body);
    let next = tokio::time::timeout(Duration::from_secs(5), conn.call(download(10)))
        .await
        .expect("the credit came back");
    let reply = next.expect("answered");
    let mut body = reply.body.expect("streams");
    let mut n = 0;
    while let Some(c) = body.chunk().await {
        n += c.expect("data").len();
    }
    assert_eq!(n, 10);
    assert!(!body.trailers().is_empty(), "Server-Timing trailer");
}

#[tokio::test]
async fn a_dropped_h2_stream_resets_and_its_stream_slot_comes_back() {
    let s = Settings {
        credits: 1,
        ..small_windows()
    };
    let addr = server(Proto::H2, s).await;
    let mut sender = h2::connect(&addr, s).await.expect("connects");
    let uri: hyper::Uri = "http://manager/download".parse().expect("uri");
    let req = |n: usize| {
        h2::request(
            &uri,
            "a",
            "",
            1000,
            Chunks::full(Bytes::from(n.to_string())),
        )
        .expect("req")
    };
    let resp = sender.send_request(req(10 << 20)).await.expect("head");
    let mut body = resp.into_body();
    body.frame().await.expect("a frame").expect("data");
    drop(body);
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req(10)))
        .await
        .expect("the stream slot came back")
        .expect("answered");
    let collected = resp.into_body().collect().await.expect("body");
    assert!(collected.trailers().is_some(), "Server-Timing trailer");
    assert_eq!(collected.to_bytes().len(), 10);
}

/// A stand-in app in CloudEvents binary mode: `noop` answers `{"ok":true}`, `echo` streams the body back.
async fn stub_app() -> String {
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let echo = req.headers().get("ce-type").is_some_and(|v| v == "echo");
                    let body = if echo {
                        super::relay::Body::new(req.into_body().map_err(Into::into))
                    } else {
                        super::relay::Body::new(
                            http_body_util::Full::new(Bytes::from_static(super::NOOP_ANSWER))
                                .map_err(|never| match never {}),
                        )
                    };
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn the_full_path_relays_stream_bodies_both_ways_on_both_hops() {
    let app = std::sync::Arc::new(super::relay::App::new(&stub_app().await).expect("app"));
    for proto in [Proto::Frames, Proto::H2] {
        let s = small_windows();
        let manager = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let maddr = manager.local_addr().expect("addr").to_string();
        match proto {
            Proto::Frames => tokio::spawn(frames::server::serve(
                manager,
                s,
                frames::server::Backend::App(app.clone()),
            )),
            Proto::H2 => tokio::spawn(super::relay::serve_h2(manager, s, app.clone())),
        };
        let router = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let raddr = router.local_addr().expect("addr").to_string();
        tokio::spawn(async move { super::relay::router(router, proto, &maddr, s).await });
        let stream = tokio::net::TcpStream::connect(&raddr)
            .await
            .expect("connect");
        let (mut client, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("handshake");
        tokio::spawn(conn);
        let get = hyper::Request::get("/noop")
            .body(Chunks::full(Bytes::new()))
            .expect("request");
        let resp = client.send_request(get).await.expect("noop");
        assert_eq!(resp.status(), 200, "{proto:?}");
        assert!(resp.headers().contains_key("server-timing"));
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], super::NOOP_ANSWER, "{proto:?}");
        let sent = super::body::chunks(300_000, 7_000);
        let post = hyper::Request::post("/echo")
            .header("content-type", "application/octet-stream")
            .body(Chunks::new(sent, None))
            .expect("request");
        let resp = client.send_request(post).await.expect("echo");
        assert_eq!(resp.status(), 200, "{proto:?}");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(body.len(), 300_000, "{proto:?}");
    }
}
