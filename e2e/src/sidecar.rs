//! A router sidecar as a local process, following the operator's control plane: built with cargo,
//! configured for a Router of the cluster, read through its admin `/routes`.

use crate::cmd::Cmd;
use crate::operator::{free_port, http_get};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Package and binary name of the sidecar.
pub const SIDECAR_PACKAGE: &str = "switchyard-sidecar";

static BINARY: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();

/// Builds the sidecar once per process and returns `<target dir>/debug/switchyard-sidecar`.
pub async fn sidecar_binary() -> Result<PathBuf> {
    let result = BINARY
        .get_or_init(|| async { build().await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .clone()
        .map_err(|e| anyhow!("cannot build the sidecar: {e}"))
}

async fn build() -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Cmd::new(cargo)
        .args(["build", "-p", SIDECAR_PACKAGE, "--bin", SIDECAR_PACKAGE])
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await?;
    let bin = crate::operator::target_dir()
        .join("debug")
        .join(SIDECAR_PACKAGE);
    if !bin.is_file() {
        bail!(
            "`cargo build` succeeded but {} does not exist",
            bin.display()
        );
    }
    Ok(bin)
}

/// A router sidecar process, killed when dropped.
#[derive(Debug)]
pub struct RouterSidecar {
    child: tokio::process::Child,
    /// Admin port on 127.0.0.1 (`/routes`, `/readyz`, `/metrics`).
    pub admin_port: u16,
    /// HTTP listener on 127.0.0.1, serving `GET /noop`.
    pub http_port: u16,
    /// File receiving its output.
    pub log: PathBuf,
    _dir: PathBuf,
}

impl RouterSidecar {
    /// Starts a router sidecar for Router `namespace/name` whose config has no destinations, so
    /// every route it shows comes from the control plane at `control_plane` (`http://host:port`).
    /// Waits until `/readyz` answers 200.
    pub async fn start(namespace: &str, name: &str, control_plane: &str) -> Result<RouterSidecar> {
        let bin = sidecar_binary().await?;
        let dir = crate::work_dir()
            .join("sidecars")
            .join(format!("{name}-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let http_port = free_port()?;
        let config = json!({
            "name": name,
            "namespace": namespace,
            "spec": {
                "listeners": {"http": {"port": http_port}},
                "routes": [{"event": "noop", "http": {"method": "GET", "path": "/noop"}}],
            },
            "destinations": {},
        });
        let config_file = dir.join("router.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config)?)?;
        let admin_port = free_port()?;
        let log = dir.join("router.log");
        let out = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(&bin)
            .args(["--log-format", "text", "router", "--config"])
            .arg(&config_file)
            .args(["--bind", "127.0.0.1", "--admin-addr"])
            .arg(format!("127.0.0.1:{admin_port}"))
            .args(["--control-plane", control_plane])
            .env("POD_NAME", format!("e2e-{name}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut sidecar = RouterSidecar {
            child,
            admin_port,
            http_port,
            log,
            _dir: dir,
        };
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = sidecar.child.try_wait()? {
                bail!(
                    "the sidecar exited with {status}:\n{}",
                    sidecar.log_tail(30)
                );
            }
            let last = match http_get(admin_port, "/readyz").await {
                Ok((200, _)) => break,
                Ok((code, body)) => format!("HTTP {code}: {body}"),
                Err(e) => format!("{e:#}"),
            };
            if start.elapsed() > crate::timeout() {
                bail!(
                    "the sidecar's /readyz never answered 200 (last: {last}); log:\n{}",
                    sidecar.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(sidecar)
    }

    /// `GET /routes` as JSON.
    pub async fn routes(&self) -> Result<Value> {
        match http_get(self.admin_port, "/routes").await? {
            (200, body) => serde_json::from_str(&body).context("/routes is not JSON"),
            (code, body) => bail!("/routes answered {code}: {body}"),
        }
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        crate::tail_file(&self.log, n)
    }
}
