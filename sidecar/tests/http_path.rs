//! The HTTP path end to end: client -> router sidecar -> manager sidecar -> app, and the edge's
//! answers to bad input.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use std::time::{Duration, Instant};

fn assert_problem(r: &Reply, status: u16, detail_has: &str) {
    assert_eq!(r.status, status, "body: {:?}", r.body);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let v = r.json();
    assert_eq!(v["status"], status);
    assert_eq!(v["type"], "about:blank");
    let detail = v["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains(detail_has),
        "detail {detail:?} should contain {detail_has:?}"
    );
    assert!(
        r.header("server-timing")
            .is_some_and(|t| t.contains("total;dur=")),
        "errors carry Server-Timing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_has_seven_timing_entries_that_add_up() {
    let mesh = Mesh::start(Opts::default()).await;
    for _ in 0..5 {
        let r = mesh.client.get(&mesh.url("/noop")).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(&r.body[..], b"{}");
        let t = r.timing();
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "listener", "broker", "router", "net", "queue", "app", "total"
            ],
            "{:?}",
            r.header("server-timing")
        );
        let total = t[6].1;
        let sum: f64 = t[..6].iter().map(|(_, d)| d).sum();
        assert!(
            (sum - total).abs() <= 0.1 + 0.006,
            "stages {sum} vs total {total}"
        );
        assert!(t[5].1 > 0.0, "app time is measured");
    }
    let metrics = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.router_admin))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("switchyard_requests_total{role=\"router\",event=\"noop\",status=\"200\"}"),
        "{text}"
    );
    assert!(
        text.contains("switchyard_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("switchyard_shed_total"), "{text}");
    let healthz = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/healthz", mesh.manager_admin))
        .await
        .unwrap();
    assert_eq!(healthz.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_and_edge_checks() {
    let mesh = Mesh::start(Opts::default()).await;
    let url = mesh.url("/echo");
    let c = &mesh.client;

    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let req = hyper::Request::post(&url)
        .header("content-type", "application/json")
        .header("traceparent", tp)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"{\"value\":1}",
        )))
        .unwrap();
    let r = c.send(req).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"value": 1}));
    assert_eq!(r.header("content-type"), Some("application/json"));
    {
        let seen = mesh.app.state.headers.lock().unwrap();
        assert_eq!(seen.get("ce-type").map(String::as_str), Some("echo"));
        assert_eq!(
            seen.get("ce-source").map(String::as_str),
            Some("/switchyard/default/handlers")
        );
        assert_eq!(seen.get("ce-specversion").map(String::as_str), Some("1.0"));
        assert_eq!(seen.get("traceparent").map(String::as_str), Some(tp));
        assert_eq!(seen.get("ce-id").map(String::len), Some(32));
        assert_eq!(
            seen.get("content-type").map(String::as_str),
            Some("application/json")
        );
    }

    assert_problem(
        &c.post(&url, "application/json", "{\"value\": }")
            .await
            .unwrap(),
        400,
        "line 1 column 11",
    );
    assert_problem(
        &c.post(&url, "application/json", "{\"value\":\"x\"}")
            .await
            .unwrap(),
        400,
        "/value",
    );
    assert_problem(
        &c.post(&url, "application/json", "{}").await.unwrap(),
        400,
        "value",
    );
    assert_problem(&c.get(&mesh.url("/nope")).await.unwrap(), 404, "/nope");
    let r = c.get(&url).await.unwrap();
    assert_problem(&r, 405, "POST");
    assert_eq!(r.header("allow"), Some("POST"));
    // Refused while the client is still sending: the router reads on (and drops) what follows, so
    // the client reads its 413 rather than a reset connection. Every time, not only most times.
    let big = format!("{{\"value\":1,\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    for _ in 0..10 {
        assert_problem(
            &c.post(&url, "application/json", big.clone()).await.unwrap(),
            413,
            "larger than",
        );
    }
    // The same for refusals given on the head alone (no route, wrong type), whatever their body.
    let huge = "x".repeat(8 << 20);
    for _ in 0..3 {
        assert_problem(
            &c.post(&mesh.url("/nope"), "application/json", huge.clone())
                .await
                .unwrap(),
            404,
            "/nope",
        );
        assert_problem(
            &c.post(&url, "text/plain", huge.clone()).await.unwrap(),
            415,
            "text/plain",
        );
    }
    assert_problem(
        &c.post(&url, "text/plain", "{\"value\":1}").await.unwrap(),
        415,
        "text/plain",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_app_gets_504_at_the_deadline_and_failing_app_is_retried() {
    let mesh = Mesh::start(Opts::default()).await;
    let started = Instant::now();
    let r = mesh.client.get(&mesh.url("/slow")).await.unwrap();
    let took = started.elapsed();
    // The router's deadline ("within 1s") and the manager's copy of it ("within 1000 ms") fire
    // together; either may answer first.
    assert_problem(&r, 504, "within");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "took {took:?}"
    );

    let r = mesh.client.get(&mesh.url("/fail")).await.unwrap();
    assert_eq!(r.status, 500);
    assert_eq!(
        mesh.app
            .state
            .fail_attempts
            .load(std::sync::atomic::Ordering::SeqCst),
        3,
        "three attempts"
    );
    let m = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.manager_admin))
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&m.body).contains("switchyard_retries_total{event=\"fail\"} 2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_manager_gives_503_with_retry_after() {
    let mesh = Mesh::start(Opts {
        start_manager: false,
        ..Opts::default()
    })
    .await;
    let r = mesh.client.get(&mesh.url("/noop")).await.unwrap();
    assert_problem(&r, 503, "retry");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Counted by why (its manager is not reachable), as the chart's SwitchyardNoEndpoints alert
    // reads it.
    let m = mesh.router_metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"switchyard_dispatch_failures_total{role="router",event="noop",reason="no_endpoint"}"#
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_names_file_and_field_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = router_config(1, "3s");
    cfg["spec"]["listeners"]["http"]["port"] = serde_json::json!("eighty");
    let path = write_json(dir.path(), "router.json", &cfg);
    let out = std::process::Command::new(BIN)
        .args(["router", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("router.json") && err.contains("spec.listeners.http.port"),
        "{err}"
    );
}

/// The router's byte budget: a body that does not fit beside those already held is refused with
/// 503 and Retry-After before it is read; when the held one is answered its bytes are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_byte_budget_is_shed_unread_and_the_budget_frees_when_answered() {
    const BUDGET: usize = 1 << 20;
    let mesh = Mesh::start_with(Opts::default(), |cfg| {
        cfg["spec"]["broker"]["bodyBudgetBytes"] = BUDGET.into();
        // `slow` (3 s in the app) taking a body, so the first request holds its bytes a while.
        cfg["spec"]["routes"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "event": "slow", "http": {"method": "POST", "path": "/hold"}, "timeout": "10s"
            }));
    })
    .await;
    let body = || Bytes::from(format!("{{\"pad\":\"{}\"}}", "x".repeat(BUDGET * 3 / 5)));
    let (client, url) = (mesh.client.clone(), mesh.url("/hold"));
    let held = tokio::spawn(async move { client.post(&url, "application/json", body()).await });
    poll(
        Duration::from_secs(10),
        "the first body to reach the app",
        || async { (!mesh.app.state.active("slow").is_empty()).then_some(()) },
    )
    .await;

    // 0.6 MiB held, 0.6 MiB more does not fit in 1 MiB.
    let r = mesh
        .client
        .post(&mesh.url("/hold"), "application/json", body())
        .await
        .unwrap();
    assert_problem(&r, 503, "bodyBudgetBytes");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        mesh.app.state.seen("slow").len(),
        1,
        "the shed body never reached the app"
    );
    // A request without a body does not need the budget.
    assert_eq!(
        mesh.client.get(&mesh.url("/noop")).await.unwrap().status,
        200
    );

    let first = held.await.unwrap().unwrap();
    assert_eq!(first.status, 200, "body: {:?}", first.body);
    let r = mesh
        .client
        .post(&mesh.url("/hold"), "application/json", body())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "the budget is free again: {:?}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_budget_smaller_than_one_body_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = router_config(1, "5s");
    cfg["spec"]["broker"]["bodyBudgetBytes"] = 1000.into();
    let file = write_json(dir.path(), "router.json", &cfg);
    let mut p = spawn_router(dir.path(), &file, &[], &[]);
    let code = p.wait_exit(Duration::from_secs(10)).await;
    assert!(
        code.is_some_and(|c| c != 0),
        "the router started with a budget below one body (exit {code:?})"
    );
    let log = p.log_text();
    assert!(
        log.contains("spec.broker.bodyBudgetBytes") && log.contains("1048576"),
        "{log}"
    );
}
