//! A real NATS JetStream server for the durable-delivery tests: `nats-server` is built from the Go
//! module proxy into the tool folder by `e2e/cluster/build-nats` on first use (cached afterwards),
//! run on loopback with its store in the work folder, and killed when dropped.

use crate::cmd::Cmd;
use crate::operator::{free_ports, http_get};
use crate::{eventually, timeout};
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// One JetStream server; killed (SIGKILL) when dropped or [`NatsServer::kill`]ed.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<tokio::process::Child>,
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// Monitoring port on 127.0.0.1.
    pub monitor: u16,
    /// Its log.
    pub log: PathBuf,
}

impl NatsServer {
    /// Builds (once) and starts a server named `name`, and waits until JetStream is ready.
    pub async fn start(name: &str) -> Result<NatsServer> {
        let script = crate::repo_root().join("e2e/cluster/build-nats");
        let built = Cmd::new(script.to_string_lossy().as_ref())
            .timeout(Duration::from_secs(30 * 60))
            .ok()
            .await?;
        let bin = PathBuf::from(built.stdout.trim());
        let dir = crate::work_dir()
            .join("nats")
            .join(format!("{name}-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let [port, monitor] = free_ports()?;
        let log = dir.join("nats-server.log");
        let out = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(&bin)
            .args(["--jetstream", "--addr", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .args(["--http_port", &monitor.to_string()])
            .arg("--store_dir")
            .arg(dir.join("store"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = NatsServer {
            child: Some(child),
            port,
            monitor,
            log,
        };
        let ready = eventually("nats-server ready with JetStream", timeout(), || async {
            let (code, body) = http_get(monitor, "/healthz?js-enabled-only=true").await?;
            ensure!(code == 200, "HTTP {code}: {body}");
            Ok(())
        })
        .await;
        if let Err(e) = ready {
            anyhow::bail!("{e:#}\n--- nats-server log ---\n{}", server.log_tail(20));
        }
        Ok(server)
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        crate::tail_file(&self.log, n)
    }

    /// Like kill -9, and waits for the exit.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().await?;
        }
        Ok(())
    }
}
