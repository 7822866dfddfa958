//! Test harness: real sidecar processes on loopback, a CloudEvents echo app in the test process,
//! and a real HTTP client.

#![allow(dead_code, clippy::unwrap_used)]

pub mod control_plane;
pub mod hydra;
pub mod identity;
pub mod nats;
pub mod otlp;
pub mod pusher;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard-sidecar");

/// A loopback port held by the test but not listening: connecting to it is refused, and no other
/// process can take it while the test keeps this value (an endpoint nothing serves, for example).
pub struct ClosedPort {
    pub port: u16,
    _socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = socket.local_addr().unwrap().port();
        ClosedPort {
            port,
            _socket: socket,
        }
    }
}

/// Polls `f` every 20 ms until it returns `Some` or `limit` passes.
pub async fn poll<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------- the app

/// What the app saw.
#[derive(Default)]
pub struct AppState {
    pub fail_attempts: AtomicUsize,
    pub headers: Mutex<HashMap<String, String>>,
    pub served: AtomicUsize,
    /// Every event received: its headers and body.
    pub events: Mutex<Vec<Seen>>,
    /// `ordered` events: (key, seq) in the order their handling started.
    pub order: Mutex<Vec<(String, u64)>>,
    /// `ordered` events of the same key that overlapped (must stay 0 with an ordering key).
    pub overlaps: AtomicUsize,
    /// Most `ordered` events handled at once, whatever their key.
    pub max_parallel: AtomicUsize,
    running: Mutex<HashMap<String, usize>>,
    /// Events being handled right now, by `ce-id`.
    active: Mutex<HashMap<String, Seen>>,
    /// Most events of one `ce-type` handled at once.
    peak: Mutex<HashMap<String, usize>>,
}

/// One event as the app received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HashMap<String, String>,
    pub body: Bytes,
    /// When the app received it (the history checker orders deliveries and faults by it).
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

impl AppState {
    /// Events of type `ce_type` received so far.
    pub fn seen(&self, ce_type: &str) -> Vec<Seen> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.header("ce-type") == ce_type)
            .cloned()
            .collect()
    }

    /// Events of type `ce_type` being handled right now.
    pub fn active(&self, ce_type: &str) -> Vec<Seen> {
        self.active
            .lock()
            .unwrap()
            .values()
            .filter(|e| e.header("ce-type") == ce_type)
            .cloned()
            .collect()
    }

    /// Most events of type `ce_type` handled at once so far.
    pub fn peak(&self, ce_type: &str) -> usize {
        self.peak.lock().unwrap().get(ce_type).copied().unwrap_or(0)
    }

    /// Records `seen` as being handled until the returned guard drops (answered, or dropped when
    /// the manager cancels the delivery).
    fn enter(self: &Arc<Self>, seen: &Seen) -> Handling {
        let mut active = self.active.lock().unwrap();
        active.insert(seen.header("ce-id").to_owned(), seen.clone());
        let ce_type = seen.header("ce-type");
        let now = active
            .values()
            .filter(|e| e.header("ce-type") == ce_type)
            .count();
        let mut peak = self.peak.lock().unwrap();
        let p = peak.entry(ce_type.to_owned()).or_default();
        *p = (*p).max(now);
        Handling {
            state: self.clone(),
            ce_id: seen.header("ce-id").to_owned(),
        }
    }

    fn enter_ordered(&self, key: &str, seq: u64) {
        self.order.lock().unwrap().push((key.to_owned(), seq));
        let mut running = self.running.lock().unwrap();
        let n = running.entry(key.to_owned()).or_default();
        *n += 1;
        if *n > 1 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let total: usize = running.values().sum();
        self.max_parallel.fetch_max(total, Ordering::SeqCst);
    }

    fn leave_ordered(&self, key: &str) {
        if let Some(n) = self.running.lock().unwrap().get_mut(key) {
            *n -= 1;
        }
    }
}

/// An event in `AppState::active` while this lives.
struct Handling {
    state: Arc<AppState>,
    ce_id: String,
}

impl Drop for Handling {
    fn drop(&mut self) {
        self.state.active.lock().unwrap().remove(&self.ce_id);
    }
}

/// A CloudEvents echo app: `noop` -> `{}`, `echo` and `audit` -> the body, `slow` sleeps 3 s,
/// `slowish` 200 ms, `nap.*` the payload's `ms`, `fail` -> 500, `ordered` records `{key, seq}` and takes 30 ms, `longtype`
/// answers with a 326-byte Content-Type. Every event is recorded in `events`, and tracked in
/// `active` while it is handled.
pub struct TestApp {
    pub port: u16,
    pub state: Arc<AppState>,
    stop: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
}

impl TestApp {
    /// An app on a port the kernel picks.
    pub async fn start() -> Arc<TestApp> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let app = Arc::new(TestApp {
            port: listener.local_addr().unwrap().port(),
            state: Arc::default(),
            stop: Mutex::new(None),
        });
        app.serve(listener);
        app
    }

    /// Starts again on its port after `kill`: an app that comes back at the address its manager
    /// knows. The port was this app's until `kill` released it a moment ago.
    pub async fn listen(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serve(listener);
    }

    fn serve(&self, listener: TcpListener) {
        let token = CancellationToken::new();
        let state = self.state.clone();
        let t = token.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                let t = t.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| app_handle(state.clone(), req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = t.cancelled() => {}
                    }
                });
            }
        });
        *self.stop.lock().unwrap() = Some((token, task));
    }

    /// Like kill -9: the listener and every open connection vanish at once.
    pub fn kill(&self) {
        if let Some((token, task)) = self.stop.lock().unwrap().take() {
            task.abort();
            token.cancel();
        }
    }
}

async fn app_handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let ce_type = headers.get("ce-type").cloned().unwrap_or_default();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    state.served.fetch_add(1, Ordering::SeqCst);
    let seen = Seen {
        headers: headers.clone(),
        body: body.clone(),
        at: Instant::now(),
    };
    state.events.lock().unwrap().push(seen.clone());
    let handling = state.enter(&seen);
    let (status, out) = match ce_type.as_str() {
        "echo" => {
            *state.headers.lock().unwrap() = headers;
            (200, body)
        }
        "audit" => (200, body),
        "ordered" => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let key = v["key"].as_str().unwrap_or("").to_owned();
            let seq = v["seq"].as_u64().unwrap_or(0);
            state.enter_ordered(&key, seq);
            tokio::time::sleep(Duration::from_millis(30)).await;
            state.leave_ordered(&key);
            (200, Bytes::from_static(b"{}"))
        }
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            (200, Bytes::from_static(b"{}"))
        }
        "slowish" => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            (200, Bytes::from_static(b"{}"))
        }
        // `nap.*` types sleep the payload's `ms` (a slow app, at the pace a test chooses).
        t if t.starts_with("nap.") => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            tokio::time::sleep(Duration::from_millis(v["ms"].as_u64().unwrap_or(0))).await;
            (200, Bytes::from_static(b"{}"))
        }
        "fail" => {
            state.fail_attempts.fetch_add(1, Ordering::SeqCst);
            (500, Bytes::from_static(b"{\"error\":\"boom\"}"))
        }
        _ => (200, Bytes::from_static(b"{}")),
    };
    drop(handling);
    let mut resp = Response::new(Full::new(out));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    // `longtype` answers with a Content-Type longer than a frame's 255-byte field.
    let content_type = if ce_type == "longtype" {
        format!("application/json; padding={}", "x".repeat(300))
    } else {
        "application/json".to_owned()
    };
    resp.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    Ok(resp)
}

// ---------------------------------------------------------------- processes

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Starts the sidecar with `args`, logging JSON lines (the ready lines carry the bound
    /// addresses) to `log`.
    pub fn spawn(args: &[&str], log: PathBuf, env: &[(&str, &str)]) -> Proc {
        Proc::spawn_via(Command::new(BIN), args, log, env)
    }

    /// Starts the sidecar like [`Proc::spawn`] inside the cgroup whose `cgroup.procs` file is
    /// `procs`: a shell moves itself there, then becomes the sidecar, so the sidecar's first read
    /// of its cgroup already sees that one.
    pub fn spawn_in_cgroup(
        procs: &Path,
        args: &[&str],
        log: PathBuf,
        env: &[(&str, &str)],
    ) -> Proc {
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            "procs=$1; shift; echo $$ > \"$procs\" && exec \"$@\"",
            "sh",
        ])
        .arg(procs)
        .arg(BIN);
        Proc::spawn_via(sh, args, log, env)
    }

    fn spawn_via(mut cmd: Command, args: &[&str], log: PathBuf, env: &[(&str, &str)]) -> Proc {
        let file = std::fs::File::create(&log).unwrap();
        cmd.args(["--log-format", "json"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(file)
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc {
            child: cmd.spawn().unwrap(),
            log,
        }
    }

    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for exit, up to `limit`; returns the exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if start.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log's JSON lines so far.
    pub fn log_lines(&self) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits for the log line whose message is `message` and returns its fields; fails with the
    /// log if the process exits first.
    pub async fn log_line(&mut self, message: &str) -> Value {
        let Proc { child, log } = self;
        poll(Duration::from_secs(30), message, || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "exited with {status} before logging {message:?}:\n{}",
                    std::fs::read_to_string(&*log).unwrap_or_default()
                );
            }
            let text = std::fs::read_to_string(&*log).unwrap_or_default();
            let found = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["fields"]["message"] == message)
                .map(|v| v["fields"].clone());
            std::future::ready(found)
        })
        .await
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port of the address a ready line reports in `field`; `None` when it says "off".
pub fn reported_port(fields: &Value, field: &str) -> Option<u16> {
    let shown = fields[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {fields}"));
    (shown != "off").then(|| {
        shown
            .parse::<std::net::SocketAddr>()
            .unwrap_or_else(|e| panic!("{field} {shown:?}: {e}"))
            .port()
    })
}

/// What a router sidecar bound, from its `router ready` line.
#[derive(Clone, Copy, Debug)]
pub struct RouterPorts {
    pub http: u16,
    pub grpc: Option<u16>,
    pub admin: u16,
}

/// What a manager sidecar bound, from its `manager ready` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManagerPorts {
    pub listen: u16,
    pub admin: u16,
    pub local_api: u16,
}

/// A manager sidecar with `cfg`, every listener on a port the kernel picks, logging to
/// `dir/manager.log`; returns once it is ready, with the ports it bound.
pub async fn start_manager(dir: &Path, cfg: &Path, env: &[(&str, &str)]) -> (Proc, ManagerPorts) {
    let mut p = spawn_manager(dir, cfg, env);
    let ports = manager_ready(&mut p).await;
    (p, ports)
}

/// Starts a manager sidecar like [`start_manager`] without waiting for it.
pub fn spawn_manager(dir: &Path, cfg: &Path, env: &[(&str, &str)]) -> Proc {
    spawn_manager_at(
        dir,
        cfg,
        ManagerPorts {
            listen: 0,
            admin: 0,
            local_api: 0,
        },
        env,
    )
}

/// A manager sidecar on the given ports: a restart where the first life was (its peers' tables
/// name them). The ports were this test's sidecar's until it was killed a moment ago.
pub fn spawn_manager_at(dir: &Path, cfg: &Path, ports: ManagerPorts, env: &[(&str, &str)]) -> Proc {
    Proc::spawn(
        &[
            "manager",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", ports.listen),
            "--admin-addr",
            &format!("127.0.0.1:{}", ports.admin),
            "--local-api-addr",
            &format!("127.0.0.1:{}", ports.local_api),
        ],
        dir.join("manager.log"),
        env,
    )
}

/// Waits for a manager's ready line.
pub async fn manager_ready(p: &mut Proc) -> ManagerPorts {
    let f = p.log_line("manager ready").await;
    ManagerPorts {
        listen: reported_port(&f, "listen").unwrap(),
        admin: reported_port(&f, "admin").unwrap(),
        local_api: reported_port(&f, "local_api").unwrap(),
    }
}

/// A router sidecar on 127.0.0.1 with `cfg` (its listener ports 0 unless a test says otherwise),
/// extra `args` after the role and `env` (e.g. `SWITCHYARD_CONTROL_PLANE`), logging to
/// `dir/router.log`; returns once it is ready, with the ports it bound.
pub async fn start_router(
    dir: &Path,
    cfg: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Proc, RouterPorts) {
    let mut p = spawn_router(dir, cfg, args, env);
    let f = p.log_line("router ready").await;
    let ports = RouterPorts {
        http: reported_port(&f, "http").unwrap(),
        grpc: reported_port(&f, "grpc"),
        admin: reported_port(&f, "admin").unwrap(),
    };
    (p, ports)
}

/// Starts a router sidecar like [`start_router`] without waiting for it (for runs that must fail).
pub fn spawn_router(dir: &Path, cfg: &Path, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut all = vec![
        "router",
        "--config",
        cfg.to_str().unwrap(),
        "--bind",
        "127.0.0.1",
        "--admin-addr",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    Proc::spawn(&all, dir.join("router.log"), env)
}

pub async fn wait_ready(client: &Http, admin: u16) {
    poll(Duration::from_secs(30), "readyz", || async {
        let r = client
            .get(&format!("http://127.0.0.1:{admin}/readyz"))
            .await
            .ok()?;
        (r.status == 200).then_some(())
    })
    .await;
}

// ---------------------------------------------------------------- configs

/// Knobs of a test mesh.
pub struct Opts {
    pub queue_capacity: i32,
    pub max_in_flight: i32,
    pub response_timeout: &'static str,
    pub start_manager: bool,
    /// Deliver over the gRPC Handler service to an app the test runs on this port, instead of HTTP to
    /// the test app.
    pub grpc_app_port: Option<u16>,
    /// The `tracing` block given to the router (`spec.tracing`) and the manager (`tracing`).
    pub tracing: Option<Value>,
    /// Extra environment of both sidecars (set last, so it wins).
    pub env: Vec<(&'static str, &'static str)>,
    /// Extra arguments of the router process (e.g. `--secrets-dir`).
    pub router_args: Vec<String>,
    /// Wait until plain `GET /noop` answers 200; off when middleware or TLS would refuse it.
    pub wait_connected: bool,
    /// Extra environment of the router sidecar only (after `env`), e.g. its mesh identity.
    pub router_env: Vec<(String, String)>,
    /// Extra environment of the manager sidecar only (after `env`).
    pub manager_env: Vec<(String, String)>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            queue_capacity: 64,
            max_in_flight: 16,
            response_timeout: "3s",
            start_manager: true,
            grpc_app_port: None,
            tracing: None,
            env: Vec::new(),
            router_args: Vec::new(),
            wait_connected: true,
            router_env: Vec::new(),
            manager_env: Vec::new(),
        }
    }
}

/// A router config whose Manager `handlers` is at `manager_port`; its HTTP listener takes any free
/// port (0), reported in the ready line.
pub fn router_config(manager_port: u16, response_timeout: &str) -> Value {
    let dest = json!({"manager": "handlers", "service": "handlers", "port": manager_port, "podSelector": {}});
    json!({
        "name": "edge",
        "namespace": "default",
        "spec": {
            "listeners": {"http": {"port": 0}},
            "routes": [
                {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
                {"event": "echo", "http": {"method": "POST", "path": "/echo"},
                 "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}},
                {"event": "slow", "http": {"method": "GET", "path": "/slow"}, "timeout": "1s"},
                {"event": "slowish", "http": {"method": "GET", "path": "/slowish"}},
                {"event": "fail", "http": {"method": "GET", "path": "/fail"}},
                {"event": "noop", "websocket": {"command": "noop"}},
            ],
            "broker": {"queueCapacity": 1024, "responseTimeout": response_timeout},
        },
        "destinations": {"noop": dest, "echo": dest, "slow": dest, "slowish": dest, "fail": dest},
        "staticEndpoints": {"handlers": [format!("127.0.0.1:{manager_port}")]},
    })
}

pub fn manager_config(app_port: u16, opts: &Opts) -> Value {
    let (app_port, protocol) = match opts.grpc_app_port {
        Some(p) => (p, "grpc"),
        None => (app_port, "http"),
    };
    json!({
        "name": "handlers",
        "namespace": "default",
        "router": "edge",
        "events": ["noop", "echo", "slow", "slowish", "fail"],
        "app": {"port": app_port, "protocol": protocol, "path": "/events"},
        "workers": {
            "maxInFlight": opts.max_in_flight,
            "queueCapacity": opts.queue_capacity,
            "timeout": "5s",
            "retries": {"attempts": 3, "backoff": "10ms", "maxBackoff": "50ms"},
        },
        "split": "shared",
    })
}

pub fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p
}

// ---------------------------------------------------------------- the mesh

/// `env` followed by `extra` (which then wins).
fn with_env<'a>(
    env: &[(&'a str, &'a str)],
    extra: &'a [(String, String)],
) -> Vec<(&'a str, &'a str)> {
    env.iter()
        .copied()
        .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect()
}

pub struct Mesh {
    pub dir: tempfile::TempDir,
    pub app: Arc<TestApp>,
    pub manager: Option<Proc>,
    pub router: Proc,
    pub http_port: u16,
    /// The router's gRPC listener, when the config has one.
    pub grpc_port: Option<u16>,
    pub router_admin: u16,
    pub manager_admin: u16,
    pub manager_port: u16,
    pub client: Http,
    /// Where the router looks for a manager that was not started: held, never listening.
    _absent_manager: Option<ClosedPort>,
}

impl Mesh {
    pub async fn start(opts: Opts) -> Mesh {
        Mesh::start_with(opts, |_| {}).await
    }

    /// Like `start`, with the router config changed by `patch` before it is written.
    pub async fn start_with(opts: Opts, patch: impl FnOnce(&mut Value)) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let app = TestApp::start().await;
        let mut mcfg = manager_config(app.port, &opts);
        // Traced meshes export every 100 ms rather than every 5 s, so tests see spans soon.
        let mut env: Vec<(&str, &str)> = Vec::new();
        if let Some(t) = &opts.tracing {
            mcfg["tracing"] = t.clone();
            env.push(("OTEL_BSP_SCHEDULE_DELAY", "100"));
        }
        env.extend(opts.env.iter().copied());
        let manager_env = with_env(&env, &opts.manager_env);
        let router_env = with_env(&env, &opts.router_env);
        let mcfg = write_json(dir.path(), "manager.json", &mcfg);
        // The manager first: the router's config names the port it bound.
        let (manager, manager_ports, absent) = if opts.start_manager {
            let (p, ports) = start_manager(dir.path(), &mcfg, &manager_env).await;
            (Some(p), Some(ports), None)
        } else {
            (None, None, Some(ClosedPort::new()))
        };
        let manager_port = manager_ports
            .map(|m| m.listen)
            .or(absent.as_ref().map(|a| a.port))
            .unwrap();
        let mut rcfg = router_config(manager_port, opts.response_timeout);
        if let Some(t) = &opts.tracing {
            rcfg["spec"]["tracing"] = t.clone();
        }
        patch(&mut rcfg);
        let rcfg = write_json(dir.path(), "router.json", &rcfg);
        let args: Vec<&str> = opts.router_args.iter().map(String::as_str).collect();
        let (router, router_ports) = start_router(dir.path(), &rcfg, &args, &router_env).await;
        let http_port = router_ports.http;
        let client = Http::new();
        if opts.start_manager && opts.wait_connected {
            // Ready means bound; wait until the router's connection to the manager carries requests.
            poll(
                Duration::from_secs(10),
                "router connected to manager",
                || async {
                    let r = client
                        .get(&format!("http://127.0.0.1:{http_port}/noop"))
                        .await
                        .ok()?;
                    (r.status == 200).then_some(())
                },
            )
            .await;
        }
        Mesh {
            dir,
            app,
            manager,
            router,
            http_port,
            grpc_port: router_ports.grpc,
            router_admin: router_ports.admin,
            manager_admin: manager_ports.map_or(0, |m| m.admin),
            manager_port,
            client,
            _absent_manager: absent,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// The gRPC listener's port; the test's config must have `listeners.grpc`.
    pub fn grpc(&self) -> u16 {
        self.grpc_port.expect("the router has a gRPC listener")
    }

    /// The manager's `/metrics` text.
    pub async fn manager_metrics(&self) -> String {
        metrics_text(&self.client, self.manager_admin).await
    }

    /// The router's `/metrics` text.
    pub async fn router_metrics(&self) -> String {
        metrics_text(&self.client, self.router_admin).await
    }
}

/// `/metrics` of the admin server on `admin`.
pub async fn metrics_text(client: &Http, admin: u16) -> String {
    let r = client
        .get(&format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .unwrap();
    String::from_utf8_lossy(&r.body).into_owned()
}

/// A loopback TCP relay on a port the test holds, to a target set later: a config can name an
/// endpoint before the process behind it has bound port 0 (a manager whose table lists itself).
pub struct Relay {
    pub port: u16,
    target: tokio::sync::watch::Sender<Option<u16>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start() -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (target, rx) = tokio::sync::watch::channel(None::<u16>);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    // Connections that arrive before the target is known wait for it.
                    let Ok(to) = rx.wait_for(Option::is_some).await.map(|t| t.unwrap()) else {
                        return;
                    };
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Relay { port, target, task }
    }

    /// Where connections go from now on.
    pub fn to(&self, port: u16) {
        self.target.send_replace(Some(port));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------- client

pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Server-Timing as (name, ms) pairs.
    pub fn timing(&self) -> Vec<(String, f64)> {
        self.header("server-timing")
            .unwrap_or("")
            .split(", ")
            .filter_map(|e| {
                let (name, dur) = e.split_once(";dur=")?;
                Some((name.to_owned(), dur.parse().ok()?))
            })
            .collect()
    }
}

#[derive(Clone)]
pub struct Http(Client<HttpConnector, Full<Bytes>>);

impl Http {
    pub fn new() -> Http {
        Http(
            Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(64)
                .build_http(),
        )
    }

    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<Reply, String> {
        let resp = self.0.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    pub async fn get(&self, url: &str) -> Result<Reply, String> {
        self.send(Request::get(url).body(Full::new(Bytes::new())).unwrap())
            .await
    }

    pub async fn post(
        &self,
        url: &str,
        content_type: &str,
        body: impl Into<Bytes>,
    ) -> Result<Reply, String> {
        let req = Request::post(url)
            .header("content-type", content_type)
            .body(Full::new(body.into()))
            .unwrap();
        self.send(req).await
    }
}

// ---------------------------------------------------------------- two Managers and the local API

/// A router, Manager `handlers` (the usual events plus `ordered`; ordering key `/key`; dead letters to
/// `dead`) and Manager `graveyard` (`dead`, `audit`) with its own app. `handlers` knows the whole
/// table, so the test plays its app through its local API; `ghost` names a Manager that never runs.
pub struct LocalMesh {
    pub dir: tempfile::TempDir,
    pub app: Arc<TestApp>,
    pub other_app: Arc<TestApp>,
    pub handlers: Proc,
    pub graveyard: Proc,
    pub router: Proc,
    pub http_port: u16,
    pub local_api: u16,
    pub handlers_admin: u16,
    pub client: Http,
    _own: Relay,
    _ghost: ClosedPort,
}

impl LocalMesh {
    pub async fn start() -> LocalMesh {
        let dir = tempfile::tempdir().unwrap();
        let (app, other_app) = (TestApp::start().await, TestApp::start().await);
        for sub in ["h", "g"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let mut gcfg = manager_config(other_app.port, &Opts::default());
        gcfg["name"] = json!("graveyard");
        gcfg["events"] = json!(["dead", "audit"]);
        let gcfg = write_json(dir.path(), "graveyard.json", &gcfg);
        let (graveyard, g) = start_manager(&dir.path().join("g"), &gcfg, &[]).await;
        // `handlers`' table names `handlers` itself, whose port is known only once it is up: the
        // table names a relay the test holds, pointed at the port `handlers` reports.
        let own = Relay::start().await;
        let ghost = ClosedPort::new();
        let dest = |m: &str, port: u16| json!({"manager": m, "service": m, "port": port, "podSelector": {}});
        let h = dest("handlers", own.port);
        let gd = dest("graveyard", g.listen);
        let gh = dest("ghost", ghost.port);
        let table = json!({
            "noop": h, "echo": h, "slow": h, "slowish": h, "fail": h, "ordered": h,
            "dead": gd, "audit": gd, "haunt": gh,
        });
        let endpoints = json!({
            "handlers": [format!("127.0.0.1:{}", own.port)],
            "graveyard": [format!("127.0.0.1:{}", g.listen)],
            "ghost": [format!("127.0.0.1:{}", ghost.port)],
        });
        let mut hcfg = manager_config(app.port, &Opts::default());
        hcfg["events"] = json!(["noop", "echo", "slow", "slowish", "fail", "ordered"]);
        // Pushed by the local API tests: not a type it handles, so listed (`spec.push`).
        hcfg["push"] = json!(["tick"]);
        hcfg["workers"]["deadLetter"] = json!("dead");
        hcfg["workers"]["orderingKey"] = json!("/key");
        hcfg["destinations"] = table;
        hcfg["staticEndpoints"] = endpoints;
        let hcfg = write_json(dir.path(), "handlers.json", &hcfg);
        let (handlers, h) = start_manager(&dir.path().join("h"), &hcfg, &[]).await;
        own.to(h.listen);
        let rcfg = write_json(dir.path(), "router.json", &router_config(h.listen, "3s"));
        let (router, r) = start_router(dir.path(), &rcfg, &[], &[]).await;
        let client = Http::new();
        let mesh = LocalMesh {
            dir,
            app,
            other_app,
            handlers,
            graveyard,
            router,
            http_port: r.http,
            local_api: h.local_api,
            handlers_admin: h.admin,
            client,
            _own: own,
            _ghost: ghost,
        };
        // Ready means bound: wait until every frame connection carries requests.
        poll(Duration::from_secs(15), "mesh connected", || async {
            let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
            let own = mesh
                .client
                .post(&mesh.local("/v1/request/noop"), "application/json", "{}")
                .await
                .ok()?;
            let other = mesh
                .client
                .post(
                    &mesh.local("/v1/request/audit"),
                    "application/json",
                    r#"{"warmup":true}"#,
                )
                .await
                .ok()?;
            (r.status == 200 && own.status == 200 && other.status == 200).then_some(())
        })
        .await;
        mesh
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// A URL of `handlers`' local API.
    pub fn local(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.local_api)
    }

    pub async fn handlers_metrics(&self) -> String {
        let r = self
            .client
            .get(&format!("http://127.0.0.1:{}/metrics", self.handlers_admin))
            .await
            .unwrap();
        String::from_utf8_lossy(&r.body).into_owned()
    }
}

/// The value of the sample `name` (with labels, as printed) in a metrics text; 0 when absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}
