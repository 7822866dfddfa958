//! Two manager endpoints behind one router: load spreads over both, and draining one moves the
//! traffic to the other without a failed request.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn served(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("switchyard_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_spreads_and_a_drained_endpoint_hands_over() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::start().await;
    let mcfg = write_json(
        dir.path(),
        "manager.json",
        &manager_config(app.port, &Opts::default()),
    );
    let mut managers = Vec::new();
    let mut ports = Vec::new();
    for i in 0..2 {
        let sub = dir.path().join(format!("m{i}"));
        std::fs::create_dir_all(&sub).unwrap();
        let (p, m) = start_manager(&sub, &mcfg, &[]).await;
        managers.push(p);
        ports.push(m);
    }
    let mut rcfg = router_config(ports[0].listen, "3s");
    rcfg["staticEndpoints"]["handlers"] = serde_json::json!(
        ports
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.listen))
            .collect::<Vec<_>>()
    );
    let rcfg = write_json(dir.path(), "router.json", &rcfg);
    let (_router, r) = start_router(dir.path(), &rcfg, &[], &[]).await;
    let client = Http::new();
    let url = format!("http://127.0.0.1:{}/slowish", r.http);
    let metrics = |admin: u16| {
        let client = client.clone();
        async move { served(&metrics_text(&client, admin).await) }
    };
    // Both endpoints connected: concurrent requests reach both.
    poll(Duration::from_secs(10), "both managers serve", || async {
        let batch: Vec<_> = (0..8)
            .map(|_| {
                let (c, u) = (client.clone(), url.clone());
                tokio::spawn(async move { c.get(&u).await })
            })
            .collect();
        for t in batch {
            let _ = t.await;
        }
        (metrics(ports[0].admin).await > 0 && metrics(ports[1].admin).await > 0).then_some(())
    })
    .await;

    // Drain the first manager while requests run; the second takes over. Four request loops run
    // before, during and after the drain.
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let (c, u, stop) = (client.clone(), url.clone(), stop.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    statuses.push(c.get(&u).await.map(|r| r.status));
                }
                statuses
            })
        })
        .collect();
    // The drain starts with deliveries running on the first manager.
    poll(
        Duration::from_secs(10),
        "requests in flight at the first manager",
        || async {
            let text = metrics_text(&client, ports[0].admin).await;
            (metric(&text, "switchyard_in_flight") >= 1.0).then_some(())
        },
    )
    .await;
    managers[0].sigterm();
    assert_eq!(
        managers[0].wait_exit(Duration::from_secs(10)).await,
        Some(0)
    );
    // The loops keep going after the exit until the second manager has served more of them.
    let second_at_exit = metrics(ports[1].admin).await;
    poll(
        Duration::from_secs(10),
        "the second manager serving after the drain",
        || async { (metrics(ports[1].admin).await >= second_at_exit + 8).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut answered = 0;
    for t in loops {
        for status in t.await.unwrap() {
            assert_eq!(status, Ok(200));
            answered += 1;
        }
    }
    assert!(answered >= 8, "{answered} requests during the handover");
    for _ in 0..5 {
        assert_eq!(client.get(&url).await.unwrap().status, 200);
    }
}
