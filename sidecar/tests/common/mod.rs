//! Test harness: real sidecar processes on loopback, a CloudEvents echo app in the test process,
//! and a real HTTP client.

#![allow(dead_code, clippy::unwrap_used)]

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

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
}

/// One event as the app received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HashMap<String, String>,
    pub body: Bytes,
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

/// A CloudEvents echo app: `noop` -> `{}`, `echo` and `audit` -> the body, `slow` sleeps 3 s,
/// `slowish` 200 ms, `fail` -> 500, `ordered` records `{key, seq}` and takes 30 ms. Every event is
/// recorded in `events`.
pub struct TestApp {
    pub port: u16,
    pub state: Arc<AppState>,
    stop: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
}

impl TestApp {
    pub async fn start() -> Arc<TestApp> {
        let app = Arc::new(TestApp {
            port: free_port(),
            state: Arc::default(),
            stop: Mutex::new(None),
        });
        app.listen().await;
        app
    }

    /// Starts (again) on the same port.
    pub async fn listen(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
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
    state.events.lock().unwrap().push(Seen {
        headers: headers.clone(),
        body: body.clone(),
    });
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
        "fail" => {
            state.fail_attempts.fetch_add(1, Ordering::SeqCst);
            (500, Bytes::from_static(b"{\"error\":\"boom\"}"))
        }
        _ => (200, Bytes::from_static(b"{}")),
    };
    let mut resp = Response::new(Full::new(out));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    Ok(resp)
}

// ---------------------------------------------------------------- processes

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(args: &[&str], log: PathBuf, env: &[(&str, &str)]) -> Proc {
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(args)
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
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        }
    }
}

pub fn router_config(http_port: u16, manager_port: u16, response_timeout: &str) -> Value {
    let dest = json!({"manager": "handlers", "service": "handlers", "port": manager_port, "podSelector": {}});
    json!({
        "name": "edge",
        "namespace": "default",
        "spec": {
            "listeners": {"http": {"port": http_port}},
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

pub struct Mesh {
    pub dir: tempfile::TempDir,
    pub app: Arc<TestApp>,
    pub manager: Option<Proc>,
    pub router: Proc,
    pub http_port: u16,
    pub router_admin: u16,
    pub manager_admin: u16,
    pub manager_port: u16,
    pub client: Http,
}

impl Mesh {
    pub async fn start(opts: Opts) -> Mesh {
        Mesh::start_with(opts, |_| {}).await
    }

    /// Like `start`, with the router config changed by `patch` before it is written.
    pub async fn start_with(opts: Opts, patch: impl FnOnce(&mut Value)) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let app = TestApp::start().await;
        let (http_port, manager_port, router_admin, manager_admin) =
            (free_port(), free_port(), free_port(), free_port());
        let mut mcfg = manager_config(app.port, &opts);
        let mut rcfg = router_config(http_port, manager_port, opts.response_timeout);
        // Traced meshes export every 100 ms rather than every 5 s, so tests see spans soon.
        let mut env: Vec<(&str, &str)> = Vec::new();
        if let Some(t) = &opts.tracing {
            mcfg["tracing"] = t.clone();
            rcfg["spec"]["tracing"] = t.clone();
            env.push(("OTEL_BSP_SCHEDULE_DELAY", "100"));
        }
        env.extend(opts.env.iter().copied());
        let mcfg = write_json(dir.path(), "manager.json", &mcfg);
        patch(&mut rcfg);
        let rcfg = write_json(dir.path(), "router.json", &rcfg);
        let manager = opts
            .start_manager
            .then(|| spawn_manager_env(dir.path(), &mcfg, manager_port, manager_admin, &env));
        let admin_arg = format!("127.0.0.1:{router_admin}");
        let mut args = vec![
            "--log-format",
            "text",
            "router",
            "--config",
            rcfg.to_str().unwrap(),
            "--bind",
            "127.0.0.1",
            "--admin-addr",
            &admin_arg,
        ];
        args.extend(opts.router_args.iter().map(String::as_str));
        let router = Proc::spawn(&args, dir.path().join("router.log"), &env);
        let client = Http::new();
        wait_ready(&client, router_admin).await;
        if opts.start_manager {
            wait_ready(&client, manager_admin).await;
        }
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
            router_admin,
            manager_admin,
            manager_port,
            client,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }
}

pub fn spawn_manager(dir: &Path, cfg: &Path, port: u16, admin: u16) -> Proc {
    spawn_manager_full(dir, cfg, port, admin, free_port(), &[])
}

/// `spawn_manager` with extra environment variables.
pub fn spawn_manager_env(
    dir: &Path,
    cfg: &Path,
    port: u16,
    admin: u16,
    env: &[(&str, &str)],
) -> Proc {
    spawn_manager_full(dir, cfg, port, admin, free_port(), env)
}

/// A manager sidecar whose local API listens on 127.0.0.1:`local_api`.
pub fn spawn_manager_with_local_api(
    dir: &Path,
    cfg: &Path,
    port: u16,
    admin: u16,
    local_api: u16,
) -> Proc {
    spawn_manager_full(dir, cfg, port, admin, local_api, &[])
}

fn spawn_manager_full(
    dir: &Path,
    cfg: &Path,
    port: u16,
    admin: u16,
    local_api: u16,
    env: &[(&str, &str)],
) -> Proc {
    Proc::spawn(
        &[
            "--log-format",
            "text",
            "manager",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-addr",
            &format!("127.0.0.1:{admin}"),
            "--local-api-addr",
            &format!("127.0.0.1:{local_api}"),
        ],
        dir.join("manager.log"),
        env,
    )
}

/// A router sidecar on 127.0.0.1 with `cfg`, its admin on `admin`, extra `args` after the role and
/// `env` (e.g. `SWITCHYARD_CONTROL_PLANE`).
pub fn spawn_router(
    dir: &Path,
    cfg: &Path,
    admin: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> Proc {
    let admin_addr = format!("127.0.0.1:{admin}");
    let mut all = vec![
        "--log-format",
        "text",
        "router",
        "--config",
        cfg.to_str().unwrap(),
        "--bind",
        "127.0.0.1",
        "--admin-addr",
        &admin_addr,
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
}

impl LocalMesh {
    pub async fn start() -> LocalMesh {
        let dir = tempfile::tempdir().unwrap();
        let (app, other_app) = (TestApp::start().await, TestApp::start().await);
        let (http_port, router_admin) = (free_port(), free_port());
        let (h_port, h_admin, local_api) = (free_port(), free_port(), free_port());
        let (g_port, g_admin) = (free_port(), free_port());
        let dest = |m: &str, port: u16| json!({"manager": m, "service": m, "port": port, "podSelector": {}});
        let h = dest("handlers", h_port);
        let g = dest("graveyard", g_port);
        let ghost = dest("ghost", free_port());
        let table = json!({
            "noop": h, "echo": h, "slow": h, "slowish": h, "fail": h, "ordered": h,
            "dead": g, "audit": g, "haunt": ghost,
        });
        let endpoints = json!({
            "handlers": [format!("127.0.0.1:{h_port}")],
            "graveyard": [format!("127.0.0.1:{g_port}")],
            "ghost": [format!("127.0.0.1:{}", free_port())],
        });
        let mut hcfg = manager_config(app.port, &Opts::default());
        hcfg["events"] = json!(["noop", "echo", "slow", "slowish", "fail", "ordered"]);
        hcfg["workers"]["deadLetter"] = json!("dead");
        hcfg["workers"]["orderingKey"] = json!("/key");
        hcfg["destinations"] = table;
        hcfg["staticEndpoints"] = endpoints;
        let mut gcfg = manager_config(other_app.port, &Opts::default());
        gcfg["name"] = json!("graveyard");
        gcfg["events"] = json!(["dead", "audit"]);
        let hcfg = write_json(dir.path(), "handlers.json", &hcfg);
        let gcfg = write_json(dir.path(), "graveyard.json", &gcfg);
        for sub in ["h", "g"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let graveyard = spawn_manager(&dir.path().join("g"), &gcfg, g_port, g_admin);
        let handlers =
            spawn_manager_with_local_api(&dir.path().join("h"), &hcfg, h_port, h_admin, local_api);
        let rcfg = write_json(
            dir.path(),
            "router.json",
            &router_config(http_port, h_port, "3s"),
        );
        let router = Proc::spawn(
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
        for admin in [router_admin, h_admin, g_admin] {
            wait_ready(&client, admin).await;
        }
        let mesh = LocalMesh {
            dir,
            app,
            other_app,
            handlers,
            graveyard,
            router,
            http_port,
            local_api,
            handlers_admin: h_admin,
            client,
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
