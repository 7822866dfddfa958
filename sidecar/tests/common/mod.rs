//! Test harness: real sidecar processes on loopback, a CloudEvents echo app in the test process,
//! and a real HTTP client.

#![allow(dead_code, clippy::unwrap_used)]

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
}

/// A CloudEvents echo app: `noop` -> `{}`, `echo` -> the body, `slow` sleeps 3 s, `slowish` 200 ms,
/// `fail` -> 500.
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
    let (status, out) = match ce_type.as_str() {
        "echo" => {
            *state.headers.lock().unwrap() = headers;
            (200, body)
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
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            queue_capacity: 64,
            max_in_flight: 16,
            response_timeout: "3s",
            start_manager: true,
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
    json!({
        "name": "handlers",
        "namespace": "default",
        "router": "edge",
        "events": ["noop", "echo", "slow", "slowish", "fail"],
        "app": {"port": app_port, "protocol": "http", "path": "/events"},
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
        let mcfg = write_json(dir.path(), "manager.json", &manager_config(app.port, &opts));
        let mut rcfg = router_config(http_port, manager_port, opts.response_timeout);
        patch(&mut rcfg);
        let rcfg = write_json(dir.path(), "router.json", &rcfg);
        let manager = opts
            .start_manager
            .then(|| spawn_manager(dir.path(), &mcfg, manager_port, manager_admin));
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
        wait_ready(&client, router_admin).await;
        if opts.start_manager {
            wait_ready(&client, manager_admin).await;
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
        ],
        dir.join("manager.log"),
        &[],
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
    poll(Duration::from_secs(10), "readyz", || async {
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
