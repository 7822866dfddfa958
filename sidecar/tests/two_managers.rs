//! Two manager endpoints behind one router: load spreads over both, and draining one moves the
//! traffic to the other without a failed request.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
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
    let (http_port, router_admin) = (free_port(), free_port());
    let ports = [(free_port(), free_port()), (free_port(), free_port())];
    let mcfg = write_json(
        dir.path(),
        "manager.json",
        &manager_config(app.port, &Opts::default()),
    );
    let mut managers: Vec<Proc> = ports
        .iter()
        .enumerate()
        .map(|(i, (port, admin))| {
            let sub = dir.path().join(format!("m{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            spawn_manager(&sub, &mcfg, *port, *admin)
        })
        .collect();
    let mut rcfg = router_config(http_port, ports[0].0, "3s");
    rcfg["staticEndpoints"]["handlers"] = serde_json::json!(
        ports
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
    );
    let rcfg = write_json(dir.path(), "router.json", &rcfg);
    let _router = Proc::spawn(
        &[
            "--log-format",
            "text",
            "router",
            "--config",
            rcfg.to_str().unwrap(),
            "--bind",
            "127.0.0.1",
            "--admin-addr",
            &format!("127.0.0.1:{router_admin}"),
        ],
        dir.path().join("router.log"),
        &[],
    );
    let client = Http::new();
    for (_, admin) in &ports {
        wait_ready(&client, *admin).await;
    }
    let url = format!("http://127.0.0.1:{http_port}/slowish");
    let metrics = |admin: u16| {
        let client = client.clone();
        async move {
            let m = client
                .get(&format!("http://127.0.0.1:{admin}/metrics"))
                .await
                .unwrap();
            served(&String::from_utf8_lossy(&m.body))
        }
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
        (metrics(ports[0].1).await > 0 && metrics(ports[1].1).await > 0).then_some(())
    })
    .await;

    // Drain the first manager while requests run; the second takes over.
    let batch: Vec<_> = (0..16)
        .map(|i| {
            let (c, u) = (client.clone(), url.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 * i)).await;
                c.get(&u).await.map(|r| r.status)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    managers[0].sigterm();
    for t in batch {
        assert_eq!(t.await.unwrap(), Ok(200));
    }
    assert_eq!(
        managers[0].wait_exit(Duration::from_secs(10)).await,
        Some(0)
    );
    for _ in 0..5 {
        assert_eq!(client.get(&url).await.unwrap().status, 200);
    }
}
