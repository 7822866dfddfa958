//! Real NATS JetStream servers for the durable-delivery tests: `nats-server` is built from the Go
//! module proxy into `.tools/bin` by `e2e/cluster/build-nats` on first use (cached afterwards).

use super::{Http, Relay, poll};
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
    /// Whether it has not been killed.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

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

/// The port after `prefix` in a nats-server log line, once the log has it.
async fn logged_port(log: &Path, prefix: &str) -> u16 {
    poll(Duration::from_secs(30), prefix, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let port = text.lines().find_map(|l| {
            let rest = l.split(prefix).nth(1)?;
            rest.trim().rsplit(':').next()?.parse::<u16>().ok()
        });
        std::future::ready(port)
    })
    .await
}

/// `n` JetStream servers on loopback, clustered when `n > 1`, each ready (JetStream enabled).
/// Every listener takes a port the kernel picks (-1), read from the server's log. Cluster routes
/// must be configured before any server runs, so each server's route port is fronted by a relay
/// the test holds: the route list and each server's advertised route address name the relays.
pub async fn cluster(dir: &Path, n: usize) -> (Vec<NatsServer>, Vec<Relay>) {
    cluster_with(dir, n, "", "").await
}

/// [`cluster`] with `top` added to each server's configuration and `js` inside its `jetstream`
/// block (`max_payload: ...`, `sync_interval: always`).
pub async fn cluster_with(
    dir: &Path,
    n: usize,
    top: &str,
    js: &str,
) -> (Vec<NatsServer>, Vec<Relay>) {
    let mut relays = Vec::new();
    for _ in 0..if n > 1 { n } else { 0 } {
        relays.push(Relay::start().await);
    }
    let routes = relays
        .iter()
        .map(|r| format!("\"nats://127.0.0.1:{}\"", r.port))
        .collect::<Vec<_>>()
        .join(", ");
    let mut servers = Vec::new();
    for i in 0..n {
        let relay = relays.get(i);
        let store = dir.join(format!("js{i}"));
        std::fs::create_dir_all(&store).unwrap();
        let mut conf = format!(
            "listen: \"127.0.0.1:-1\"\nhttp: \"127.0.0.1:-1\"\nserver_name: n{i}\n\
             {top}\njetstream {{ store_dir: {:?}\n{js}\n }}\n",
            store.to_str().unwrap()
        );
        if let Some(relay) = relay {
            conf.push_str(&format!(
                "cluster {{ name: switchyard-test, listen: \"127.0.0.1:-1\", \
                 advertise: \"127.0.0.1:{}\", routes: [{routes}] }}\n",
                relay.port
            ));
        }
        let conf_file = dir.join(format!("nats{i}.conf"));
        std::fs::write(&conf_file, conf).unwrap();
        let log_file = dir.join(format!("nats{i}.log"));
        let log = std::fs::File::create(&log_file).unwrap();
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&conf_file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut server = NatsServer {
            port: 0,
            monitor: 0,
            child: Some(child),
        };
        server.port = logged_port(&log_file, "Listening for client connections on").await;
        server.monitor = logged_port(&log_file, "Starting http monitor on").await;
        if let Some(relay) = relay {
            relay.to(logged_port(&log_file, "Listening for route connections on").await);
        }
        servers.push(server);
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
    (servers, relays)
}

/// The client URL list of `servers`.
pub fn urls(servers: &[NatsServer]) -> String {
    servers
        .iter()
        .map(|s| format!("nats://127.0.0.1:{}", s.port))
        .collect::<Vec<_>>()
        .join(",")
}
