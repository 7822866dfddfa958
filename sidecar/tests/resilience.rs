//! Behaviour under stress: stalled clients, a dying app, a draining manager, flow control.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_does_not_slow_others() {
    let mesh = Mesh::start(Opts::default()).await;
    // Pipelined echo requests with large bodies whose answers are never read: the router's socket
    // buffers fill and its writes to this client stall.
    let body = format!("{{\"value\":1,\"pad\":\"{}\"}}", "x".repeat(256 * 1024));
    let request = format!(
        "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", mesh.http_port))
        .await
        .unwrap();
    let writer = tokio::spawn(async move {
        for _ in 0..64 {
            if stalled.write_all(request.as_bytes()).await.is_err() {
                break;
            }
        }
        // Keep the connection open (and unread) until the test ends.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stalled);
    });
    // Wait until the stalled client has had answers produced for it (the app served some echoes).
    poll(
        Duration::from_secs(10),
        "stalled client's requests reached the app",
        || async { (mesh.app.state.served.load(Ordering::SeqCst) > 10).then_some(()) },
    )
    .await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = Http::new();
        let url = mesh.url("/noop");
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let r = c.get(&url).await.unwrap();
                assert_eq!(r.status, 200);
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("others finish within 5 s")
            .unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    writer.abort();
}

/// Runs `n` request loops against `url` until `stop`; returns (status or 0 for transport error, latency).
fn load(
    url: String,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<(u16, Duration, bool)>>> {
    (0..n)
        .map(|_| {
            let (url, stop) = (url.clone(), stop.clone());
            tokio::spawn(async move {
                let c = Http::new();
                let mut out = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let (status, retry_after) = match c.get(&url).await {
                        Ok(r) => (r.status, r.header("retry-after").is_some()),
                        Err(_) => (0, false),
                    };
                    out.push((status, t.elapsed(), retry_after));
                }
                out
            })
        })
        .collect()
}

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Vec<(u16, Duration, bool)>>>,
) -> Vec<(u16, Duration, bool)> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            tokio::time::timeout(Duration::from_secs(15), t)
                .await
                .expect("load loop ends")
                .unwrap(),
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_app_fails_fast_and_service_recovers() {
    let mesh = Mesh::start(Opts::default()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(mesh.url("/slowish"), 8, stop.clone());
    poll(Duration::from_secs(5), "load running", || async {
        (mesh.app.state.served.load(Ordering::SeqCst) > 16).then_some(())
    })
    .await;
    mesh.app.kill();
    let killed = Instant::now();
    // Failures arrive while the app is down.
    poll(Duration::from_secs(5), "requests failing", || async {
        let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
        (r.status >= 500).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    mesh.app.listen().await;
    poll(Duration::from_secs(10), "recovery", || async {
        let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
        (r.status == 200).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let all = collect(tasks).await;
    let deadline = Duration::from_secs(3) + Duration::from_millis(500);
    for (status, took, _) in &all {
        assert!(matches!(status, 200 | 502 | 503 | 504), "status {status}");
        assert!(
            *took < deadline,
            "a request took {took:?}, beyond the deadline"
        );
    }
    assert!(
        all.iter().any(|(s, _, _)| *s == 502 || *s == 504),
        "some requests saw the app die"
    );
    assert!(killed.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_manager_loses_no_accepted_request() {
    let mut mesh = Mesh::start(Opts::default()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(mesh.url("/slowish"), 8, stop.clone());
    poll(Duration::from_secs(5), "load running", || async {
        (mesh.app.state.served.load(Ordering::SeqCst) > 16).then_some(())
    })
    .await;
    let manager = mesh.manager.as_mut().unwrap();
    manager.sigterm();
    let code = manager.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0), "manager log:\n{}", manager.log_text());
    // Keep loading briefly after the manager is gone: those requests are refused cleanly.
    poll(Duration::from_secs(5), "503 after drain", || async {
        let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
        (r.status == 503).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let all = collect(tasks).await;
    let ok = all.iter().filter(|(s, _, _)| *s == 200).count();
    assert!(ok >= 8, "{ok} succeeded");
    for (status, _, retry_after) in &all {
        // Every request either succeeded or was refused before it was sent (503 + Retry-After).
        assert!(
            *status == 200 || (*status == 503 && *retry_after),
            "status {status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_flow_control_neither_loses_nor_hangs() {
    let mesh = Mesh::start(Opts {
        queue_capacity: 4,
        max_in_flight: 4,
        // Far above the ~0.4 s the admitted requests need, so a loaded machine gives no 504 here.
        response_timeout: "10s",
        ..Opts::default()
    })
    .await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let c = mesh.client.clone();
            let url = mesh.url("/slowish");
            tokio::spawn(async move {
                let t = Instant::now();
                let r = c.get(&url).await.unwrap();
                (
                    r.status,
                    r.header("retry-after").map(str::to_owned),
                    t.elapsed(),
                )
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        let (status, retry_after, took) = tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("no hang")
            .unwrap();
        assert!(
            status == 200 || (status == 503 && retry_after.as_deref() == Some("1")),
            "status {status}"
        );
        // Below the response timeout: nothing waited for it, so nothing hung on a lost credit.
        assert!(took < Duration::from_secs(9), "took {took:?}");
        ok += usize::from(status == 200);
    }
    assert!(ok >= 4, "{ok} succeeded");
    let m = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.manager_admin))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        text.contains("switchyard_shed_total 0"),
        "the manager never saw more than its credits:\n{text}"
    );
    eprintln!("flow control: {ok}/50 succeeded in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_the_delivery() {
    let mesh = Mesh::start(Opts::default()).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", mesh.http_port))
        .await
        .unwrap();
    conn.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    poll(Duration::from_secs(5), "slow event in flight", || async {
        let m = mesh
            .client
            .get(&format!("http://127.0.0.1:{}/metrics", mesh.manager_admin))
            .await
            .ok()?;
        String::from_utf8_lossy(&m.body)
            .contains("switchyard_in_flight 1")
            .then_some(())
    })
    .await;
    let dropped = Instant::now();
    drop(conn);
    // The route's deadline is 1 s and the app sleeps 3 s: a cancel well before 1 s comes from the disconnect.
    poll(Duration::from_secs(5), "cancelled delivery", || async {
        let m = mesh
            .client
            .get(&format!("http://127.0.0.1:{}/metrics", mesh.manager_admin))
            .await
            .ok()?;
        String::from_utf8_lossy(&m.body)
            .contains("switchyard_requests_total{event=\"slow\",status=\"499\"} 1")
            .then_some(())
    })
    .await;
    assert!(
        dropped.elapsed() < Duration::from_millis(800),
        "cancel took {:?}",
        dropped.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_router_finishes_in_flight_requests() {
    let mut mesh = Mesh::start(Opts::default()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(mesh.url("/slowish"), 8, stop.clone());
    poll(Duration::from_secs(5), "load running", || async {
        (mesh.app.state.served.load(Ordering::SeqCst) > 16).then_some(())
    })
    .await;
    mesh.router.sigterm();
    let code = mesh.router.wait_exit(Duration::from_secs(10)).await;
    stop.store(true, Ordering::SeqCst);
    assert_eq!(code, Some(0), "router log:\n{}", mesh.router.log_text());
    let all = collect(tasks).await;
    // In-flight requests finish with 200; after the listener closed, new connections are refused (0).
    for (status, _, _) in &all {
        assert!(*status == 200 || *status == 0, "status {status}");
    }
    assert!(all.iter().filter(|(s, _, _)| *s == 200).count() >= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_goes_false_as_soon_as_the_drain_starts() {
    let mut mesh = Mesh::start(Opts::default()).await;
    let served_before = mesh.app.state.served.load(Ordering::SeqCst);
    // `/slow` keeps one request in flight for the route's 1 s timeout, so the drain lasts that long.
    let client = mesh.client.clone();
    let url = mesh.url("/slow");
    let slow = tokio::spawn(async move { client.get(&url).await });
    poll(
        Duration::from_secs(5),
        "slow request at the app",
        || async { (mesh.app.state.served.load(Ordering::SeqCst) > served_before).then_some(()) },
    )
    .await;
    let ready = format!("http://127.0.0.1:{}/readyz", mesh.router_admin);
    assert_eq!(mesh.client.get(&ready).await.unwrap().status, 200);
    mesh.router.sigterm();
    // Load balancers must stop sending before the process goes: readiness is 503 while it drains.
    poll(
        Duration::from_secs(1),
        "readyz 503 during the drain",
        || async {
            let r = mesh.client.get(&ready).await.ok()?;
            (r.status == 503).then_some(())
        },
    )
    .await;
    let answer = slow.await.unwrap().unwrap();
    assert_eq!(answer.status, 504, "the in-flight request is answered");
    let code = mesh.router.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0), "router log:\n{}", mesh.router.log_text());
}
