//! Credit accounting on a frame connection, seen by a router that speaks raw frames to a real manager
//! sidecar: an answer carries its credit only when the router's HELLO asked for it, so routers from
//! before implicit credit keep getting a CREDIT frame per answer; and routers that sit idle on their
//! credit give it back when asked, so a router that connects later is not starved.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use std::time::Duration;
use switchyard_protocol::frame::{Frame, FrameCodec, Request};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

type Conn = Framed<TcpStream, FrameCodec>;

async fn next(conn: &mut Conn) -> Frame {
    tokio::time::timeout(Duration::from_secs(5), conn.next())
        .await
        .expect("a frame within 5 s")
        .expect("connection open")
        .expect("valid frame")
}

fn noop(id: u64) -> Frame {
    Frame::Request(Request {
        headers: Vec::new(),
        id,
        flags: 0,
        deadline_ms: 5_000,
        event: "noop".into(),
        ce_id: format!("credit-{id}"),
        traceparent: String::new(),
        tracestate: String::new(),
        content_type: "application/json".into(),
        payload: Bytes::from_static(b"{}"),
    })
}

/// What a manager says first on a connection it accepted, to a router that reads a tracestate
/// and speaks no streams: it reads a tracestate, and offers no stream window.
const MANAGER_HELLO: Frame = Frame::Hello {
    reads_headers: true,
    takes_pushes: false,
    implicit_credit: false,
    releases_credit: false,
    streams: None,
    reads_tracestate: true,
};

/// Connects as a router, says HELLO, and returns the connection with the manager's first grant.
async fn connect(mesh: &Mesh, implicit_credit: bool) -> (Conn, u32) {
    connect_with(mesh, implicit_credit, false).await
}

async fn connect_with(mesh: &Mesh, implicit_credit: bool, releases_credit: bool) -> (Conn, u32) {
    let stream = TcpStream::connect(("127.0.0.1", mesh.manager_port))
        .await
        .unwrap();
    let mut conn = Framed::new(stream, FrameCodec::default());
    conn.send(Frame::Hello {
        reads_headers: false,
        takes_pushes: false,
        implicit_credit,
        releases_credit,
        streams: None,
        reads_tracestate: true,
    })
    .await
    .unwrap();
    assert_eq!(
        next(&mut conn).await,
        MANAGER_HELLO,
        "the manager's HELLO comes before its grant"
    );
    let Frame::Credit { credits } = next(&mut conn).await else {
        panic!("the manager's grant follows its HELLO");
    };
    (conn, credits)
}

/// Sends one request and collects the frames up to the PONG of a PING sent after its answer: the
/// manager queues an answer's CREDIT frame right behind it, so any such frame shows up before the PONG.
async fn exchange(conn: &mut Conn, id: u64) -> Vec<Frame> {
    conn.send(noop(id)).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let f = next(conn).await;
        let answered = matches!(&f, Frame::Response(r) if r.id == id);
        seen.push(f);
        if answered {
            break;
        }
    }
    conn.send(Frame::Ping { nonce: id }).await.unwrap();
    loop {
        let f = next(conn).await;
        let pong = f == Frame::Pong { nonce: id };
        if !pong {
            seen.push(f);
        } else {
            return seen;
        }
    }
}

fn credits(frames: &[Frame]) -> u32 {
    frames.iter().map(Frame::credits_returned).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_carries_its_credit_when_the_router_asked() {
    let mesh = Mesh::start(Opts::default()).await;
    let (mut conn, granted) = connect(&mesh, true).await;
    assert!(granted > 0);
    for id in 1..=3 {
        let frames = exchange(&mut conn, id).await;
        assert_eq!(frames.len(), 1, "only the answer: {frames:?}");
        let Frame::Response(r) = &frames[0] else {
            panic!("{frames:?}")
        };
        assert_eq!(r.status, 200);
        assert!(r.returns_credit);
        assert_eq!(credits(&frames), 1, "each request's credit comes back once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_without_implicit_credit_gets_credit_frames() {
    let mesh = Mesh::start(Opts::default()).await;
    let (mut conn, _) = connect(&mesh, false).await;
    for id in 1..=3 {
        let frames = exchange(&mut conn, id).await;
        let Some(Frame::Response(r)) = frames.first() else {
            panic!("{frames:?}")
        };
        assert_eq!(r.status, 200);
        assert!(!r.returns_credit, "an old router would not count it");
        assert_eq!(frames.get(1), Some(&Frame::Credit { credits: 1 }));
        assert_eq!(credits(&frames), 1, "each request's credit comes back once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_routers_give_credit_back_so_a_late_router_is_served() {
    let mesh = Mesh::start(Opts::default()).await;
    // Three routers take their shares and never send: without RECLAIM the fourth got none, ever.
    let mut idle = Vec::new();
    let mut total = 0;
    for n in 0..3u64 {
        let (mut conn, granted) = connect_with(&mesh, true, true).await;
        total += granted;
        // The PONG shows the HELLO (read before the PING) was taken in; grants and asks for credit
        // back may come before it.
        conn.send(Frame::Ping { nonce: n }).await.unwrap();
        let mut early = 0;
        loop {
            match next(&mut conn).await {
                Frame::Pong { nonce } if nonce == n => break,
                Frame::Credit { credits } => total += credits,
                Frame::Reclaim { credits } => {
                    early += credits;
                    conn.send(Frame::Release { credits }).await.unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        idle.push(tokio::spawn(async move {
            let mut released = early;
            // Answers every RECLAIM with all it asked (none of it is spent) until the test ends.
            while let Some(Ok(f)) = conn.next().await {
                if let Frame::Reclaim { credits } = f {
                    released += credits;
                    conn.send(Frame::Release { credits }).await.unwrap();
                }
            }
            released
        }));
    }
    let (mut late, granted) = connect_with(&mesh, true, true).await;
    assert!(granted > 0, "the late router gets credit");
    // More of its share may arrive as grants while the idle routers' releases come in.
    let frames = exchange(&mut late, 1).await;
    let granted = granted
        + frames
            .iter()
            .filter_map(|f| match f {
                Frame::Credit { credits } => Some(*credits),
                _ => None,
            })
            .sum::<u32>();
    let Some(Frame::Response(r)) = frames.iter().find(|f| matches!(f, Frame::Response(_))) else {
        panic!("{frames:?}")
    };
    assert_eq!(r.status, 200, "{r:?}");
    // Its share was moved from the idle routers, which then hold less than what they were granted.
    drop(late);
    drop(mesh);
    let mut released = 0;
    for t in idle {
        released += t.await.unwrap();
    }
    assert!(
        released >= granted,
        "released {released}, granted late {granted}, first three {total}"
    );
}

/// The manager answers a router's HELLO with one HELLO of its own, before its grant, saying both
/// of this version's offers: it reads a tracestate, and its stream window when the router speaks
/// streams. A router whose HELLO had neither (the previous version) gets none: its first frame is
/// the grant, as that version expects. Either way no HELLO comes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_hello_says_tracestate_and_streams_and_only_to_a_newer_router() {
    let mesh = Mesh::start(Opts::default()).await;
    for (streams, reads_tracestate) in [
        (Some(65_536), true),
        (Some(65_536), false),
        (None, true),
        (None, false),
    ] {
        let case = format!("router streams {streams:?}, reads tracestate {reads_tracestate}");
        let stream = TcpStream::connect(("127.0.0.1", mesh.manager_port))
            .await
            .unwrap();
        let mut conn = Framed::new(stream, FrameCodec::default());
        conn.send(Frame::Hello {
            reads_headers: false,
            takes_pushes: false,
            implicit_credit: true,
            releases_credit: false,
            streams,
            reads_tracestate,
        })
        .await
        .unwrap();
        let mut first = next(&mut conn).await;
        if streams.is_some() || reads_tracestate {
            let Frame::Hello {
                takes_pushes: false,
                implicit_credit: false,
                releases_credit: false,
                streams: window,
                reads_tracestate: true,
                reads_headers: true,
            } = first
            else {
                panic!("{case}: the manager's HELLO first, got {first:?}");
            };
            assert_eq!(
                window.is_some_and(|w| w > 0),
                streams.is_some(),
                "{case}: a window only to a router that speaks streams: {window:?}"
            );
            first = next(&mut conn).await;
        }
        assert!(
            matches!(first, Frame::Credit { credits } if credits > 0),
            "{case}: the grant, got {first:?}"
        );
        let frames = exchange(&mut conn, 1).await;
        assert!(
            !frames.iter().any(|f| matches!(f, Frame::Hello { .. })),
            "{case}: one HELLO at most: {frames:?}"
        );
        let Some(Frame::Response(r)) = frames.first() else {
            panic!("{case}: {frames:?}")
        };
        assert_eq!(r.status, 200, "{case}");
    }
}
