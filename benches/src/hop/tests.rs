//! The streamed frame hop over real loopback sockets: every scenario answers completely and right with
//! bodies larger than the window (so WINDOW updates carry them), a body nobody reads does not hold up
//! the requests beside it, and a cancelled stream gives its credit back.

use super::body::{self, Chunks};
use super::frames::client::{self as fc, Call};
use super::{NOOP_ANSWER, Scenario, Settings, frames};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

async fn connect(s: Settings) -> Arc<fc::Conn> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(frames::server::serve(listener, s));
    fc::connect(&addr, s).await.expect("connects")
}

fn small_windows() -> Settings {
    Settings {
        window: 32 * 1024,
        max_frame: 16 * 1024,
        credits: 4,
        chunk: 20_000,
    }
}

fn call(scenario: Scenario, n: usize, chunk: usize) -> Call<Chunks> {
    let (event, inline, stream) = match scenario {
        Scenario::Noop => ("noop", Bytes::from_static(b"{}"), None),
        Scenario::Upload => (
            "upload",
            Bytes::new(),
            Some(Chunks::new(body::chunks(n, chunk), None)),
        ),
        Scenario::Download => ("download", Bytes::from(n.to_string()), None),
    };
    Call {
        event: event.into(),
        ce_id: "a".into(),
        traceparent: String::new(),
        content_type: "application/json".into(),
        deadline_ms: 1000,
        inline,
        stream,
    }
}

/// The whole answer: its bytes and whether trailers ended it.
async fn answer(conn: &Arc<fc::Conn>, c: Call<Chunks>) -> (Vec<u8>, bool) {
    let reply = conn.call(c).await.expect("answered");
    assert_eq!(reply.head.status, 200);
    let mut got = reply.head.payload.to_vec();
    let mut trailers = false;
    if let Some(mut b) = reply.body {
        while let Some(chunk) = b.chunk().await {
            got.extend_from_slice(&chunk.expect("data"));
        }
        trailers = !b.trailers().is_empty();
    }
    (got, trailers)
}

#[tokio::test]
async fn every_scenario_completes_with_bodies_beyond_the_window() {
    let s = small_windows();
    let conn = connect(s).await;
    let n = 300_000;
    // More callers than credits, so some wait for a credit to come back.
    let tasks: Vec<_> = (0..6)
        .flat_map(|_| [Scenario::Noop, Scenario::Upload, Scenario::Download])
        .map(|scenario| {
            let conn = conn.clone();
            tokio::spawn(async move {
                let (got, trailers) = answer(&conn, call(scenario, n, s.chunk)).await;
                match scenario {
                    Scenario::Noop => assert_eq!(got, NOOP_ANSWER),
                    Scenario::Upload => assert_eq!(got, br#"{"bytes":300000}"#),
                    Scenario::Download => {
                        assert_eq!(got.len(), n);
                        assert!(trailers, "Server-Timing trailer");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a caller");
    }
}

#[tokio::test]
async fn a_body_nobody_reads_does_not_hold_up_the_requests_beside_it() {
    let conn = connect(small_windows()).await;
    // 10 MiB the router never reads: the manager stops at the stream's window.
    let stuck = conn
        .call(call(Scenario::Download, 10 << 20, 20_000))
        .await
        .expect("head");
    for _ in 0..20 {
        let (got, _) = tokio::time::timeout(
            Duration::from_secs(5),
            answer(&conn, call(Scenario::Noop, 0, 1)),
        )
        .await
        .expect("answered beside the stuck stream");
        assert_eq!(got, NOOP_ANSWER);
    }
    drop(stuck);
}

#[tokio::test]
async fn a_dropped_stream_resets_and_its_credit_comes_back() {
    let s = Settings {
        credits: 1,
        ..small_windows()
    };
    let conn = connect(s).await;
    let reply = conn
        .call(call(Scenario::Download, 10 << 20, s.chunk))
        .await
        .expect("head");
    let mut body = reply.body.expect("streams");
    body.chunk().await.expect("a chunk").expect("data");
    // The manager is stuck on the window until the router reads or resets: drop it mid-body.
    drop(body);
    let (got, trailers) = tokio::time::timeout(
        Duration::from_secs(5),
        answer(&conn, call(Scenario::Download, 10, s.chunk)),
    )
    .await
    .expect("the credit came back");
    assert_eq!(got.len(), 10);
    assert!(trailers, "Server-Timing trailer");
}
