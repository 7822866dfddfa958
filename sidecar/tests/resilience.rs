//! Behaviour under stress: stalled clients, a dying app, a draining manager, flow control.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::json;
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

/// One request of a load loop as its client saw it.
struct Sent {
    /// Status, or 0 for a transport error.
    status: u16,
    took: Duration,
    retry_after: bool,
    /// The trace id it carried in `traceparent`, which the manager passes on to the app.
    trace: String,
}

/// Runs `n` request loops against `url` until `stop`, each request with its own trace id.
fn load(url: String, n: usize, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Vec<Sent>>> {
    (0..n)
        .map(|i| {
            let (url, stop) = (url.clone(), stop.clone());
            tokio::spawn(async move {
                let c = Http::new();
                let mut out = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let trace = format!("{:016x}{:016x}", i + 1, out.len() + 1);
                    let req = hyper::Request::get(&url)
                        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .unwrap();
                    let t = Instant::now();
                    let (status, retry_after) = match c.send(req).await {
                        Ok(r) => (r.status, r.header("retry-after").is_some()),
                        Err(_) => (0, false),
                    };
                    out.push(Sent {
                        status,
                        took: t.elapsed(),
                        retry_after,
                        trace,
                    });
                }
                out
            })
        })
        .collect()
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Vec<Sent>>>) -> Vec<Sent> {
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

/// The trace id of the `traceparent` an event reached the app with.
fn trace_of(e: &Seen) -> String {
    e.header("traceparent")
        .split('-')
        .nth(1)
        .unwrap_or("")
        .to_owned()
}

/// Every `ce_type` event the app handled was answered 200 to the client that sent it, exactly
/// once, and every 200 answer came from the app: none lost, none made up, none delivered twice.
/// Returns the number of such requests.
fn assert_none_lost(app: &AppState, ce_type: &str, all: &[Sent]) -> usize {
    let mut reached: Vec<String> = app.seen(ce_type).iter().map(trace_of).collect();
    reached.sort();
    let n = reached.len();
    reached.dedup();
    assert_eq!(reached.len(), n, "an event reached the app twice");
    let mut ok: Vec<String> = all
        .iter()
        .filter(|s| s.status == 200)
        .map(|s| s.trace.clone())
        .collect();
    ok.sort();
    assert_eq!(
        ok, reached,
        "the requests answered 200 are those the app handled"
    );
    n
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
    // Not a wait for anything: the outage lasts 300 ms, during which the load loops keep running
    // into it, before the app comes back.
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
    for s in &all {
        assert!(
            matches!(s.status, 200 | 502 | 503 | 504),
            "status {}",
            s.status
        );
        assert!(
            s.took < deadline,
            "a request took {:?}, beyond the deadline",
            s.took
        );
    }
    assert!(
        all.iter().any(|s| s.status == 502 || s.status == 504),
        "some requests saw the app die"
    );
    assert!(killed.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_manager_loses_no_accepted_request() {
    let mut mesh = Mesh::start(Opts::default()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(mesh.url("/slowish"), 8, stop.clone());
    // The drain starts while the app is handling requests (each takes 200 ms).
    let before = poll(Duration::from_secs(5), "load running", || async {
        let active = mesh.app.state.active("slowish");
        (mesh.app.state.served.load(Ordering::SeqCst) > 16 && !active.is_empty()).then_some(active)
    })
    .await;
    let manager = mesh.manager.as_mut().unwrap();
    manager.sigterm();
    let after = mesh.app.state.active("slowish");
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
    for s in &all {
        // Every request either succeeded or was refused before it was sent (503 + Retry-After).
        assert!(
            s.status == 200 || (s.status == 503 && s.retry_after),
            "status {}",
            s.status
        );
    }
    let answered = assert_none_lost(&mesh.app.state, "slowish", &all);
    // The requests at the app when the signal went out: each answered 200.
    let mut at_drain: Vec<String> = before.iter().chain(&after).map(trace_of).collect();
    at_drain.sort();
    at_drain.dedup();
    for trace in &at_drain {
        let sent = all
            .iter()
            .find(|s| &s.trace == trace)
            .expect("sent by a load loop");
        assert_eq!(sent.status, 200, "in flight at the drain: {trace}");
    }
    let refused = all.iter().filter(|s| s.status == 503).count();
    eprintln!(
        "manager drain: {} requests, {answered} answered 200 ({} in flight at the signal), {refused} refused",
        all.len(),
        at_drain.len()
    );
    assert!(!at_drain.is_empty());
    assert!(
        refused >= 1,
        "the loops kept sending after the manager was gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_flow_control_neither_loses_nor_hangs() {
    // The manager grants 4 credits (its queue capacity) and runs 4 deliveries at once.
    const CREDITS: usize = 4;
    let mesh = Mesh::start_with(
        Opts {
            queue_capacity: CREDITS as i32,
            max_in_flight: CREDITS as i32,
            // Far above the ~2.6 s the 50 requests need at 4 at a time, so a loaded machine gives
            // no 504 here.
            response_timeout: "10s",
            ..Opts::default()
        },
        |cfg| {
            let routes = cfg["spec"]["routes"].as_array_mut().unwrap();
            // `slow` (3 s at the app) within its deadline: holds a credit for 3 s.
            routes.push(json!({"event": "slow", "http": {"method": "GET", "path": "/hold"}, "timeout": "10s"}));
            // A deadline shorter than any hold: no credit comes back in time.
            routes.push(json!({"event": "noop", "http": {"method": "GET", "path": "/quick"}, "timeout": "300ms"}));
        },
    )
    .await;

    // 50 requests at once against 4 credits: the router holds the rest until a credit comes back.
    let started = Instant::now();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let c = mesh.client.clone();
            let url = mesh.url("/slowish");
            tokio::spawn(async move {
                let t = Instant::now();
                let r = c.get(&url).await.unwrap();
                (r.status, t.elapsed())
            })
        })
        .collect();
    // Requests wait for credit at the router while the manager's 4 run.
    let waiting = poll(
        Duration::from_secs(10),
        "requests waiting for credit at the router",
        || async {
            let q = metric(&mesh.router_metrics().await, "switchyard_queued");
            (q >= CREDITS as f64).then_some(q)
        },
    )
    .await;
    for t in tasks {
        let (status, took) = tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("no hang")
            .unwrap();
        // Nothing lost: the deadline is long enough for every request, so every one is answered.
        assert_eq!(status, 200);
        // Below the response timeout: nothing waited for it, so nothing hung on a lost credit.
        assert!(took < Duration::from_secs(9), "took {took:?}");
    }
    eprintln!(
        "flow control: 50/50 in {:?}, {waiting} waiting for credit at one point",
        started.elapsed()
    );
    // The credits were the bound: the app ran exactly 4 at once, never more.
    assert_eq!(mesh.app.state.peak("slowish"), CREDITS);
    assert_eq!(mesh.app.state.seen("slowish").len(), 50);
    let m = mesh.manager_metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"switchyard_requests_total{role="manager",event="slowish",status="200"}"#
        ),
        50.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "switchyard_shed_total"),
        0.0,
        "the manager never saw more than its credits:\n{m}"
    );
    let r = mesh.router_metrics().await;
    assert_eq!(
        metric(
            &r,
            r#"switchyard_requests_total{role="router",event="slowish",status="200"}"#
        ),
        50.0,
        "{r}"
    );
    assert_eq!(metric(&r, "switchyard_queued"), 0.0, "{r}");

    // All 4 credits held by slow requests: one with a shorter deadline gets none in time, and is
    // refused at the router without being sent (503, Retry-After: 1); the manager sheds nothing.
    let holds: Vec<_> = (0..CREDITS)
        .map(|_| {
            let c = mesh.client.clone();
            let url = mesh.url("/hold");
            tokio::spawn(async move { c.get(&url).await.unwrap().status })
        })
        .collect();
    poll(Duration::from_secs(10), "every credit held", || async {
        (mesh.app.state.active("slow").len() == CREDITS).then_some(())
    })
    .await;
    let noop_before = mesh.app.state.seen("noop").len();
    let refused = r#"switchyard_requests_total{role="router",event="noop",status="503"}"#;
    let refused_before = metric(&mesh.router_metrics().await, refused);
    for _ in 0..3 {
        let r = mesh.client.get(&mesh.url("/quick")).await.unwrap();
        assert_eq!(r.status, 503, "{:?}", r.body);
        assert_eq!(r.header("retry-after"), Some("1"));
        let detail = r.json()["detail"].as_str().unwrap_or("").to_owned();
        assert!(
            detail.contains("saturated") && detail.contains("not sent"),
            "{detail}"
        );
    }
    assert_eq!(
        mesh.app.state.active("slow").len(),
        CREDITS,
        "the credits were held throughout"
    );
    for h in holds {
        assert_eq!(h.await.unwrap(), 200, "the holders are answered");
    }
    assert_eq!(
        mesh.app.state.seen("noop").len(),
        noop_before,
        "the refused requests never reached the app"
    );
    let m = mesh.manager_metrics().await;
    assert_eq!(metric(&m, "switchyard_shed_total"), 0.0, "{m}");
    assert_eq!(
        metric(
            &m,
            r#"switchyard_requests_total{role="manager",event="slow",status="200"}"#
        ),
        CREDITS as f64,
        "{m}"
    );
    let r = mesh.router_metrics().await;
    assert_eq!(metric(&r, refused), refused_before + 3.0, "{r}");
    assert_eq!(
        metric(&r, "switchyard_shed_total"),
        0.0,
        "a wait for credit is not the broker's shed:\n{r}"
    );
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
            .contains("switchyard_requests_total{role=\"manager\",event=\"slow\",status=\"499\"} 1")
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
    for s in &all {
        assert!(s.status == 200 || s.status == 0, "status {}", s.status);
    }
    assert!(all.iter().filter(|s| s.status == 200).count() >= 8);
    // And the ones the app handled all got their answer.
    assert_none_lost(&mesh.app.state, "slowish", &all);
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
