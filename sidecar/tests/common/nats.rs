//! Real NATS JetStream servers for the durable-delivery tests: `nats-server` is built from the Go
//! module proxy into `.tools/bin` by `e2e/cluster/build-nats` on first use (cached afterwards).

use super::{Http, free_port, poll};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The nats-server binary, built once per test process (the script caches it across runs).
pub fn nats_server() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/cluster/build-nats");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(out.status.success(), "{} failed", script.display());
        let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        PathBuf::from(path)
    })
    .clone()
}

/// One server of a test cluster; killed (SIGKILL) when dropped.
pub struct NatsServer {
    pub port: u16,
    pub monitor: u16,
    child: Option<Child>,
}

impl NatsServer {
    /// Like kill -9.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` JetStream servers on loopback, clustered when `n > 1`, each ready (JetStream enabled).
pub async fn cluster(dir: &Path, n: usize) -> Vec<NatsServer> {
    let routes: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let route_list = routes
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut servers = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        let (port, monitor) = (free_port(), free_port());
        let store = dir.join(format!("js{i}"));
        std::fs::create_dir_all(&store).unwrap();
        let mut cmd = Command::new(nats_server());
        cmd.args([
            "--jetstream",
            "--addr",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--http_port",
            &monitor.to_string(),
            "--store_dir",
            store.to_str().unwrap(),
            "--server_name",
            &format!("n{i}"),
        ]);
        if n > 1 {
            cmd.args([
                "--cluster_name",
                "switchyard-test",
                "--cluster",
                &format!("nats://127.0.0.1:{route}"),
                "--routes",
                &route_list,
            ]);
        }
        let log = std::fs::File::create(dir.join(format!("nats{i}.log"))).unwrap();
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        servers.push(NatsServer {
            port,
            monitor,
            child: Some(child),
        });
    }
    let client = Http::new();
    for s in &servers {
        let url = format!(
            "http://127.0.0.1:{}/healthz?js-enabled-only=true",
            s.monitor
        );
        poll(Duration::from_secs(30), "nats-server ready", || async {
            let r = client.get(&url).await.ok()?;
            (r.status == 200).then_some(())
        })
        .await;
    }
    servers
}

/// The client URL list of `servers`.
pub fn urls(servers: &[NatsServer]) -> String {
    servers
        .iter()
        .map(|s| format!("nats://127.0.0.1:{}", s.port))
        .collect::<Vec<_>>()
        .join(",")
}
