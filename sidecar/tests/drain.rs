//! The manager's drain hooks: `GET /drain` on loopback (`switchyard-sidecar drain`, the sidecar's
//! preStop hook), other methods refused, and a drain no SIGTERM follows ending the process (exit 3)
//! so the kubelet restarts it instead of leaving it unready for good; `GET /drained` (the app's
//! preStop hook) answering once that drain is over, and starting none itself.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// A manager whose wait for SIGTERM after a hook-started drain is `wait`.
async fn manager(
    dir: &std::path::Path,
    wait: &str,
) -> (Proc, ManagerPorts, std::sync::Arc<TestApp>) {
    let app = TestApp::start().await;
    let cfg = write_json(
        dir,
        "manager.json",
        &manager_config(app.port, &Opts::default()),
    );
    let (p, ports) = start_manager(dir, &cfg, &[("SWITCHYARD_SIGNAL_WAIT", wait)]).await;
    (p, ports, app)
}

/// Runs the preStop hook's command against the manager's admin port; its exit status.
fn hook(admin: u16) -> std::process::Output {
    Command::new(BIN)
        .args(["drain", "--admin-addr", &format!("127.0.0.1:{admin}")])
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_no_sigterm_follows_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, ports, _app) = manager(dir.path(), "1s").await;
    let client = Http::new();
    let url = format!("http://127.0.0.1:{}/drain", ports.admin);

    // Only GET drains: a POST is refused and the manager stays ready.
    let r = client.post(&url, "text/plain", "").await.unwrap();
    assert_eq!(r.status, 405, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("allow"), Some("GET"));
    let r = client
        .get(&format!("http://127.0.0.1:{}/readyz", ports.admin))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "a refused drain changed nothing");

    let out = hook(ports.admin);
    assert!(
        out.status.success(),
        "hook: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // No SIGTERM: after its 1 s wait the manager gives up and exits 3 for a restart.
    let code = p.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(code, Some(3), "{}", p.log_text());
    assert!(
        p.log_text().contains("no SIGTERM followed"),
        "{}",
        p.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_the_sigterm_follows_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that only the SIGTERM can end the wait within the test's limit.
    let (mut p, ports, _app) = manager(dir.path(), "10m").await;
    let out = hook(ports.admin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.log_line("drained; waiting for SIGTERM").await;
    p.sigterm();
    let code = p.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{}", p.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_fails_loudly_when_nothing_drains() {
    let closed = ClosedPort::new();
    let out = hook(closed.port);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GET /drain on 127.0.0.1:"), "{err}");
}

/// The value of the admin port's open-connection gauge.
async fn admin_connections(admin: u16) -> u64 {
    // A client of its own, so that no connection it pooled earlier is counted.
    let text = metrics_text(&Http::new(), admin).await;
    text.lines()
        .find_map(|l| l.strip_prefix(r#"switchyard_connections{listener="admin"} "#))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no admin connection gauge in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_answers_once_the_drain_the_hook_started_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, ports, _app) = manager(dir.path(), "10m").await;
    let url = format!("http://127.0.0.1:{}/drained", ports.admin);

    // The app's hook arrives first, as the kubelet's httpGet usually does: it waits for the
    // drain the sidecar's own hook is about to start.
    let early = tokio::spawn({
        let url = url.clone();
        async move { Http::new().get(&url).await.unwrap() }
    });
    poll(Duration::from_secs(10), "/drained's connection", || async {
        // Its connection and this scrape's.
        (admin_connections(ports.admin).await >= 2).then_some(())
    })
    .await;
    assert!(!early.is_finished(), "/drained answered before any drain");

    let out = hook(ports.admin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = tokio::time::timeout(Duration::from_secs(10), early)
        .await
        .expect("/drained answered once the drain was over")
        .unwrap();
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).as_ref()),
        (200, "drained\n")
    );
    // Asked after the drain, it answers at once.
    let r = Http::new().get(&url).await.unwrap();
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).as_ref()),
        (200, "drained\n")
    );
    p.sigterm();
    assert_eq!(
        p.wait_exit(Duration::from_secs(20)).await,
        Some(0),
        "{}",
        p.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_drained_starts_no_drain() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, ports, _app) = manager(dir.path(), "10m").await;
    let client = Http::new();
    // Anyone may ask (the kubelet's httpGet comes from the node): it only waits, and with no drain
    // starting within its window (5 s) there is nothing to wait for.
    let r = client
        .get(&format!("http://127.0.0.1:{}/drained", ports.admin))
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200, "{body}");
    assert!(body.contains("no drain started"), "{body}");
    let r = client
        .get(&format!("http://127.0.0.1:{}/readyz", ports.admin))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "/drained started a drain");
}
