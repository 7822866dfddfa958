//! Sidecars as local processes: a router sidecar following the operator's control plane (built with
//! cargo, configured for a Router of the cluster, read through its admin `/routes`), and a manager
//! sidecar with the example app behind it, listening where a kwok pod's IP points (see `loopback`).

use crate::cmd::Cmd;
use crate::operator::http_get;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Package and binary name of the sidecar.
pub const SIDECAR_PACKAGE: &str = "switchyard-sidecar";

/// Package and binary name of the example app.
pub const APP_PACKAGE: &str = "switchyard-example-app";

static BINARY: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();
static APP_BINARY: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();

/// Builds the sidecar once per process and returns `<target dir>/debug/switchyard-sidecar`.
pub async fn sidecar_binary() -> Result<PathBuf> {
    let result = BINARY
        .get_or_init(|| async { build(SIDECAR_PACKAGE).await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .clone()
        .map_err(|e| anyhow!("cannot build the sidecar: {e}"))
}

/// Builds the `switchyard` command once per process and returns its binary.
pub async fn cli_binary() -> Result<PathBuf> {
    static CLI: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();
    let result = CLI
        .get_or_init(|| async { build("switchyard").await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .clone()
        .map_err(|e| anyhow!("cannot build the switchyard command: {e}"))
}

/// Builds the example app once per process and returns its binary.
pub async fn app_binary() -> Result<PathBuf> {
    let result = APP_BINARY
        .get_or_init(|| async { build(APP_PACKAGE).await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .clone()
        .map_err(|e| anyhow!("cannot build the example app: {e}"))
}

async fn build(package: &str) -> Result<PathBuf> {
    Cmd::cargo()
        .args(["build", "-p", package, "--bin", package])
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await?;
    let bin = crate::target_dir().join("debug").join(package);
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
        // Port 0 for both: the sidecar writes what it bound to its --ready-file before it is ready.
        let config = json!({
            "name": name,
            "namespace": namespace,
            "spec": {
                "listeners": {"http": {"port": 0}},
                "routes": [{"event": "noop", "http": {"method": "GET", "path": "/noop"}}],
            },
            "destinations": {},
        });
        let config_file = dir.join("router.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config)?)?;
        let ready_file = dir.join("ready.json");
        let log = dir.join("router.log");
        let out = std::fs::File::create(&log)?;
        let mut child = tokio::process::Command::new(&bin)
            .args(["--log-format", "text", "router", "--config"])
            .arg(&config_file)
            .args(["--bind", "127.0.0.1", "--admin-addr", "127.0.0.1:0"])
            .args(["--control-plane", control_plane])
            .arg("--ready-file")
            .arg(&ready_file)
            .env("POD_NAME", format!("e2e-{name}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let bound = match ready_json(&ready_file, &mut child).await {
            Ok(b) => b,
            Err(e) => bail!("{e:#}; log:\n{}", crate::tail_file(&log, 30)),
        };
        let port_of = |key: &str| {
            bound[key]
                .as_str()
                .and_then(port_in)
                .with_context(|| format!("{key} in the ready file: {bound}"))
        };
        let mut sidecar = RouterSidecar {
            admin_port: port_of("admin")?,
            http_port: port_of("http")?,
            child,
            log,
            _dir: dir,
        };
        // The file is written just before readiness: /readyz answers 200 at once, or soon.
        let admin_port = sidecar.admin_port;
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

/// A manager sidecar process and the example app it delivers to, both killed when dropped.
#[derive(Debug)]
pub struct ManagerSidecar {
    sidecar: tokio::process::Child,
    app: tokio::process::Child,
    /// Admin port on 127.0.0.1.
    pub admin_port: u16,
    /// Local API port on 127.0.0.1 (the app's `POST /v1/publish/{event}`).
    pub local_api_port: u16,
    /// File receiving the sidecar's output.
    pub log: PathBuf,
    _dir: PathBuf,
}

impl ManagerSidecar {
    /// Starts the example app on a free loopback port and a manager sidecar for Manager
    /// `namespace/name` of Router `router`, handling `events`, its frame listener on `listen`.
    /// Waits until the sidecar's `/readyz` answers 200.
    pub async fn start(
        namespace: &str,
        name: &str,
        router: &str,
        events: &[&str],
        listen: std::net::SocketAddr,
    ) -> Result<ManagerSidecar> {
        let config = json!({
            "name": name,
            "namespace": namespace,
            "router": router,
            "events": events,
            "app": {"port": 0, "protocol": "http", "path": "/events"},
            "workers": {
                "maxInFlight": 16,
                "queueCapacity": 64,
                "timeout": "5s",
                "retries": {"attempts": 3, "backoff": "10ms", "maxBackoff": "50ms"},
            },
            "split": "shared",
        });
        Self::launch(config, listen, None).await
    }

    /// Starts the example app and a manager sidecar with `config` (the app's port is replaced by
    /// the local app's), with no control plane, its frame listener on `listen`. Waits until
    /// `/readyz` answers 200.
    pub async fn start_config(
        config: Value,
        listen: std::net::SocketAddr,
    ) -> Result<ManagerSidecar> {
        Self::launch(config, listen, None).await
    }

    /// Starts the example app and a manager sidecar with `config` as the operator rendered it
    /// (its ConfigMap's `config.json`; the app's port is replaced by the local app's), following
    /// the control plane at `control_plane` as a pod's sidecar does, its frame listener on a free
    /// loopback port. Waits until `/readyz` answers 200.
    pub async fn start_rendered(config: Value, control_plane: &str) -> Result<ManagerSidecar> {
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        Self::launch(config, listen, Some(control_plane)).await
    }

    async fn launch(
        mut config: Value,
        listen: std::net::SocketAddr,
        control_plane: Option<&str>,
    ) -> Result<ManagerSidecar> {
        let name = config["name"]
            .as_str()
            .context("the manager config has no name")?
            .to_owned();
        let (bin, app_bin) = (sidecar_binary().await?, app_binary().await?);
        let dir = crate::work_dir()
            .join("sidecars")
            .join(format!("{name}-manager-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // The app on port 0: it names the port it bound on its first line.
        let app_log_path = dir.join("app.log");
        let app_log = std::fs::File::create(&app_log_path)?;
        let mut app = tokio::process::Command::new(&app_bin)
            .args(["--port", "0"])
            .stdin(Stdio::null())
            .stdout(app_log.try_clone()?)
            .stderr(app_log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", app_bin.display()))?;
        let app_port = wait_until("the example app's listening line", &mut app, || {
            let text = std::fs::read_to_string(&app_log_path).ok()?;
            text.lines()
                .find_map(|l| l.split("listening on ").nth(1))
                .and_then(port_in)
        })
        .await?;
        config["app"]["port"] = json!(app_port);
        let config_file = dir.join("manager.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config)?)?;
        let log = dir.join("manager.log");
        let out = std::fs::File::create(&log)?;
        // Admin and local API on port 0: its `manager ready` log line names what it bound, and is
        // written once it serves.
        let mut command = tokio::process::Command::new(&bin);
        command
            .args(["--log-format", "json", "manager", "--config"])
            .arg(&config_file)
            .arg("--listen")
            .arg(listen.to_string())
            .args([
                "--admin-addr",
                "127.0.0.1:0",
                "--local-api-addr",
                "127.0.0.1:0",
            ])
            .env("POD_NAME", format!("e2e-{name}-local"));
        match control_plane {
            Some(url) => command.env(CONTROL_PLANE_ENV, url),
            None => command.env_remove(CONTROL_PLANE_ENV),
        };
        let mut sidecar = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let ready = wait_until("the manager's ready line", &mut sidecar, || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .map(|l| l["fields"].clone())
                .find(|f| f["message"] == "manager ready")
        })
        .await;
        let ready = match ready {
            Ok(r) => r,
            Err(e) => bail!("{e:#}; log:\n{}", crate::tail_file(&log, 30)),
        };
        let admin_port = ready["admin"]
            .as_str()
            .and_then(port_in)
            .with_context(|| format!("admin in the ready line: {ready}"))?;
        let local_api_port = ready["local_api"]
            .as_str()
            .and_then(port_in)
            .with_context(|| format!("local_api in the ready line: {ready}"))?;
        let mut m = ManagerSidecar {
            sidecar,
            app,
            admin_port,
            local_api_port,
            log,
            _dir: dir,
        };
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = m.sidecar.try_wait()? {
                bail!(
                    "the manager sidecar exited with {status}:\n{}",
                    m.log_tail(30)
                );
            }
            if let Some(status) = m.app.try_wait()? {
                bail!("the example app exited with {status}");
            }
            if let Ok((200, _)) = http_get(admin_port, "/readyz").await {
                break;
            }
            if start.elapsed() > crate::timeout() {
                bail!(
                    "the manager sidecar's /readyz never answered 200; log:\n{}",
                    m.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(m)
    }

    /// `GET /routes` as JSON: the outbound table its app's events use.
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

/// The port of `host:port` (its last `:`-separated part), if it is one.
fn port_in(addr: &str) -> Option<u16> {
    addr.trim()
        .rsplit(':')
        .next()?
        .parse()
        .ok()
        .filter(|p| *p != 0)
}

/// The JSON a sidecar wrote to its `--ready-file`, once complete (it is written whole, but may be
/// read half-written): fails if `child` exits first or the e2e timeout passes.
async fn ready_json(path: &Path, child: &mut tokio::process::Child) -> Result<Value> {
    wait_until("the sidecar's ready file", child, || {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    })
    .await
}

/// Polls `check` every 50 ms until it gives a value: fails, naming `what`, if `child` exits first or
/// the e2e timeout passes.
async fn wait_until<T>(
    what: &str,
    child: &mut tokio::process::Child,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if let Some(status) = child.try_wait()? {
            bail!("waiting for {what}: the process exited with {status}");
        }
        if start.elapsed() > crate::timeout() {
            bail!("{what} did not appear within {:?}", crate::timeout());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The variable naming the control plane, removed from the manager's environment: this one only
/// answers frames.
pub use switchyard_protocol::env::CONTROL_PLANE as CONTROL_PLANE_ENV;
