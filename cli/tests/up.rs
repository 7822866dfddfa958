//! `switchyard up` as a user runs it: the real binary, real child processes, real sockets.
//!
//! The end-to-end test needs `switchyard-sidecar` and `switchyard-example-app` built next to `switchyard` (as
//! `cargo test --workspace` or `cargo build --workspace` leaves them); it builds nothing itself and fails,
//! naming them, when they are missing: a skipped end-to-end test would hide a broken build.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite;

const SWITCHYARD: &str = env!("CARGO_BIN_EXE_switchyard");

/// The end-to-end runs take app ports from 8000 upward: one at a time, so they never race for one.
static END_TO_END: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn target_dir() -> PathBuf {
    Path::new(SWITCHYARD)
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

/// The quickstart with its Router's listeners on port 0, so tests don't fight over 8080 with each other or a
/// user: the router binds free ports, and `switchyard up` prints them once it is ready ([`Up::router_ports`]).
fn quickstart_on_any_ports(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_file("examples/quickstart.yaml")).expect("quickstart");
    assert!(
        text.contains("port: 8080") && text.contains("port: 50051"),
        "the quickstart changed shape"
    );
    let text = text
        .replace("port: 8080", "port: 0")
        .replace("port: 50051", "port: 0");
    let path = dir.join("quickstart.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

/// One `switchyard.v1.Gateway/Call` of the quickstart's gRPC route `noop`, with a real tonic client.
fn grpc_call_noop(port: u16) -> (i32, Vec<u8>) {
    use switchyard_protocol::gateway::v1::CallRequest;
    use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to the gRPC listener");
        let reply = GatewayClient::new(channel)
            .call(CallRequest {
                method: "noop".into(),
                payload: b"{}".to_vec(),
                metadata: Default::default(),
            })
            .await
            .expect("Call noop")
            .into_inner();
        (reply.status, reply.payload)
    })
}

/// `examples/relay.yaml` with its Router on port 0.
fn relay_on_any_port(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_file("examples/relay.yaml")).expect("relay example");
    assert!(
        text.contains("port: 8080"),
        "the relay example changed shape"
    );
    let path = dir.join("relay.yaml");
    std::fs::write(&path, text.replace("port: 8080", "port: 0")).expect("write");
    path
}

/// Runs `switchyard` to completion (these runs fail before starting anything).
fn run(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut cmd = Command::new(SWITCHYARD);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run switchyard");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[test]
fn bad_file_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = quickstart_on_any_ports(dir.path());
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(
        &path,
        text.replace("name: edge\n  events:", "name: nowhere\n  events:"),
    )
    .expect("write");
    let (status, out) = run(&["up", "-f", &path.display().to_string()], &[]);
    assert!(!status.success(), "{out}");
    assert!(out.contains("spec.routerRef.name"), "{out}");
    assert!(out.contains("nothing started"), "{out}");
}

#[test]
fn wrong_shape_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = quickstart_on_any_ports(dir.path());
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace("maxInFlight: 64", "maxInFlight: lots")).expect("write");
    let (status, out) = run(&["up", "-f", &path.display().to_string()], &[]);
    assert!(!status.success(), "{out}");
    assert!(out.contains("maxInFlight"), "{out}");
}

/// The typo a new user makes in the quickstart (issue 42): refused, naming the field and the one meant,
/// by `check` and by `up` before anything starts.
#[test]
fn a_misspelled_field_is_refused_with_the_field_meant_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = quickstart_on_any_ports(dir.path());
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(
        text.contains("maxInFlight: 64"),
        "the quickstart changed shape"
    );
    std::fs::write(&path, text.replace("maxInFlight: 64", "maxInflight: 64")).expect("write");
    let path = path.display().to_string();
    let meant = "document 2 (Manager handlers), line 58: spec.workers.maxInflight: unknown field, did you mean maxInFlight?";
    let (status, out) = run(&["check", "-f", &path], &[]);
    assert!(!status.success(), "{out}");
    assert!(out.contains(meant), "{out}");
    // A sidecar that does not exist: `up` must refuse the file before it looks for one.
    let (status, out) = run(
        &[
            "up",
            "-f",
            &path,
            "--sidecar",
            "/nonexistent/switchyard-sidecar",
        ],
        &[],
    );
    assert!(!status.success(), "{out}");
    assert!(out.contains(meant), "{out}");
    assert!(out.contains("nothing started"), "{out}");
    assert!(
        !out.contains("configs in") && !out.contains("sidecar"),
        "{out}"
    );
}

/// The API server refuses listener port 0; a local run takes it (any free port), `check` does not.
#[test]
fn listener_port_zero_is_local_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = quickstart_on_any_ports(dir.path()).display().to_string();
    let (status, out) = run(&["check", "-f", &path], &[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("spec.listeners.http.port: 0 must be at least 1"),
        "{out}"
    );
    let (status, out) = run(
        &[
            "check",
            "-f",
            &repo_file("examples/quickstart.yaml").display().to_string(),
        ],
        &[],
    );
    assert!(status.success(), "{out}");
}

#[test]
fn missing_sidecar_flag_is_explained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = quickstart_on_any_ports(dir.path());
    let (status, out) = run(
        &[
            "up",
            "-f",
            &path.display().to_string(),
            "--sidecar",
            "/nonexistent/switchyard-sidecar",
        ],
        &[],
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("--sidecar /nonexistent/switchyard-sidecar"),
        "{out}"
    );
    assert!(out.contains("cargo build -p switchyard-sidecar"), "{out}");
}

#[test]
fn sidecar_not_found_anywhere_is_explained() {
    // A copy of switchyard alone in a directory, with an empty PATH: nothing to find next to it or on PATH.
    let dir = tempfile::tempdir().expect("tempdir");
    let lonely = dir.path().join("switchyard");
    std::fs::copy(SWITCHYARD, &lonely).expect("copy switchyard");
    let manifest = quickstart_on_any_ports(dir.path());
    let out = Command::new(&lonely)
        .args(["up", "-f", &manifest.display().to_string()])
        .env("PATH", "")
        .env_remove("SWITCHYARD_SIDECAR")
        .output()
        .expect("run switchyard copy");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("switchyard-sidecar not found"), "{text}");
    assert!(text.contains("SWITCHYARD_SIDECAR"), "{text}");
}

/// Kills `switchyard up` if the test fails midway. `switchyard up` itself then takes its children down
/// (kill_on_drop on SIGKILL is not possible, so the test sends SIGTERM first).
struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Up {
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return Some(line);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// The HTTP and gRPC ports on the `✓ router edge (pid N) http://127.0.0.1:PORT ... grpc 127.0.0.1:PORT (admin
    /// :PORT)` line, which `switchyard up` prints with the ports the router bound.
    fn router_ports(&self) -> (u16, Option<u16>) {
        let line = self
            .seen
            .iter()
            .find(|l| l.starts_with("✓ router edge"))
            .unwrap_or_else(|| panic!("no router line:\n{}", self.seen.join("\n")));
        let port_after = |marker: &str| {
            let rest = line.split(marker).nth(1)?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u16>().ok()
        };
        let http =
            port_after("http://127.0.0.1:").unwrap_or_else(|| panic!("no HTTP port in {line:?}"));
        assert_ne!(http, 0, "{line}");
        let grpc = port_after("grpc 127.0.0.1:");
        assert_ne!(grpc, Some(0), "{line}");
        (http, grpc)
    }

    fn term(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.term();
            if self.wait_exit(Duration::from_secs(30)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// Fails naming the binaries `switchyard up` needs when they are not built next to it.
fn require_binaries() {
    let missing: Vec<_> = ["switchyard-sidecar", "switchyard-example-app"]
        .into_iter()
        .filter(|b| !target_dir().join(b).is_file())
        .collect();
    if !missing.is_empty() {
        panic!(
            "{missing:?} not built in {}; run `cargo build --workspace` first",
            target_dir().display()
        );
    }
}

/// Starts `switchyard up -f manifest` with its output lines collected.
fn start_up(manifest: &Path) -> Up {
    start_up_with(manifest, &[])
}

/// [`start_up`] with `env` set for `switchyard up`.
fn start_up_with(manifest: &Path, env: &[(&str, &Path)]) -> Up {
    let mut child = Command::new(SWITCHYARD)
        .args(["up", "-f", &manifest.display().to_string()])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchyard up");
    let (tx, lines) = mpsc::channel();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    // Only the reader threads hold senders now, so the channel closes when switchyard up's pipes do.
    drop(tx);
    Up {
        child,
        lines,
        seen: Vec::new(),
    }
}

fn post_json(port: u16, path: &str, body: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn get(port: u16, path: &str) -> std::io::Result<String> {
    get_with(port, path, "")
}

/// A GET with extra header lines (each ending in `\r\n`).
fn get_with(port: u16, path: &str, headers: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Connection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn quickstart_answers_noop_through_both_sidecars() {
    require_binaries();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = quickstart_on_any_ports(dir.path());
    let mut up = start_up(&manifest);

    let ready = up.wait_for("ready: try curl", Duration::from_secs(60));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, grpc) = up.router_ports();
    let grpc = grpc.expect("the quickstart serves gRPC");
    assert_eq!(
        ready.as_deref(),
        Some(format!("ready: try curl -i http://127.0.0.1:{http}/noop").as_str()),
        "the try command names the bound port"
    );
    assert!(
        up.seen.iter().any(|l| l.starts_with("✓ app handlers")),
        "{:?}",
        up.seen
    );
    assert!(
        up.seen
            .iter()
            .any(|l| l.starts_with("✓ manager sidecar handlers")),
        "{:?}",
        up.seen
    );
    assert!(
        up.seen.iter().any(|l| l.starts_with("✓ router edge")),
        "{:?}",
        up.seen
    );

    let answer = get(http, "/noop").expect("GET /noop");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#"{"ok":true}"#), "{answer}");

    // The quickstart's WebSocket endpoint on the same port: one command, one reply with its id.
    let stream = TcpStream::connect(("127.0.0.1", http)).expect("connect for WebSocket");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let (mut ws, _) = tungstenite::client::client(format!("ws://127.0.0.1:{http}/ws"), stream)
        .expect("WebSocket handshake on /ws");
    ws.send(tungstenite::Message::text(r#"{"command":"noop","id":1}"#))
        .expect("send noop");
    let reply = loop {
        match ws.read().expect("WebSocket reply") {
            tungstenite::Message::Text(t) => break t.to_string(),
            _ => continue,
        }
    };
    assert!(
        reply.contains(r#""id":1"#)
            && reply.contains(r#""status":200"#)
            && reply.contains(r#""data":{"ok":true}"#),
        "{reply}"
    );
    let _ = ws.close(None);

    // And the gRPC gateway: `Call` for event `noop`.
    let (status, payload) = grpc_call_noop(grpc);
    assert_eq!(status, 200);
    assert_eq!(payload, br#"{"ok":true}"#);

    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        up.seen.join("\n")
    );
    // Everything it started is gone: the router's port is free again.
    assert!(TcpStream::connect(("127.0.0.1", http)).is_err());
}

/// The middleware example with its Router on port 0.
fn middleware_on_any_port(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_file("examples/middleware.yaml")).expect("example");
    assert!(
        text.contains("port: 8080"),
        "the middleware example changed shape"
    );
    let path = dir.join("middleware.yaml");
    std::fs::write(&path, text.replace("port: 8080", "port: 0")).expect("write manifest");
    path
}

#[test]
fn a_referenced_secret_missing_from_the_file_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = middleware_on_any_port(dir.path());
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(
        &path,
        text.replace("name: edge-api-keys\ntype", "name: other\ntype"),
    )
    .expect("write");
    let (status, out) = run(&["up", "-f", &path.display().to_string()], &[]);
    assert!(!status.success(), "{out}");
    assert!(out.contains("Secret \"edge-api-keys\""), "{out}");
}

#[test]
fn middleware_example_takes_its_api_keys_from_the_secret_document() {
    require_binaries();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = middleware_on_any_port(dir.path());
    let mut up = start_up(&manifest);
    let ready = up.wait_for("ready: try curl", Duration::from_secs(60));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, _) = up.router_ports();

    // The Secret is written where only this user can read it.
    let state = up
        .seen
        .iter()
        .find_map(|l| l.strip_prefix("configs in "))
        .map(PathBuf::from)
        .expect("state dir printed");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: PathBuf| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(state.join("secrets/edge-api-keys")), 0o700);
        assert_eq!(mode(state.join("secrets/edge-api-keys/keys")), 0o600);
    }

    let answer = get(http, "/noop").expect("GET /noop");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("x-api-key"), "{answer}");
    let answer = get_with(http, "/noop", "x-api-key: demo-key-2\r\n").expect("GET /noop");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        up.seen.join("\n")
    );
}

#[test]
fn relay_example_requests_echo_through_the_local_api() {
    require_binaries();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = relay_on_any_port(dir.path());
    let mut up = start_up(&manifest);
    let ready = up.wait_for("ready: try curl", Duration::from_secs(60));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, _) = up.router_ports();
    // `front`'s app answers `relay` with what `back`'s app echoes, through front's local API. The
    // outbound connection to `back` may still be opening: retry a 503 for a while.
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let a = post_json(http, "/relay", r#"{"value":7}"#).expect("POST /relay");
        if !a.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{answer}\n{}",
        up.seen.join("\n")
    );
    assert!(answer.ends_with(r#"{"value":7}"#), "{answer}");
    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// The admin port printed on a `✓ <label> (pid N) on ... (admin :PORT)` line.
fn admin_port(line: &str) -> Option<u16> {
    let rest = line.split("(admin :").nth(1)?;
    rest.trim_end_matches(')').parse().ok()
}

/// Requests a manager sidecar has answered, summed from its `switchyard_requests_total` series.
fn answered(admin: u16) -> u64 {
    let text = get(admin, "/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("switchyard_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn replicas_start_two_managers_that_both_serve() {
    require_binaries();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = quickstart_on_any_ports(dir.path());
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    // The Manager's spec: two replicas, which the operator's Deployment would also run.
    let text = text.replace(
        "  events: [noop, echo]\n",
        "  events: [noop, echo]\n  replicas: 2\n",
    );
    assert!(text.contains("replicas: 2"), "the quickstart changed shape");
    std::fs::write(&manifest, text).expect("write manifest");
    let mut up = start_up(&manifest);
    let ready = up.wait_for("ready: try curl", Duration::from_secs(90));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, _) = up.router_ports();
    let admins: Vec<u16> = [
        "✓ manager sidecar handlers (",
        "✓ manager sidecar handlers[2] (",
    ]
    .iter()
    .map(|label| {
        up.seen
            .iter()
            .find(|l| l.starts_with(label))
            .and_then(|l| admin_port(l))
            .unwrap_or_else(|| panic!("no {label} line:\n{}", up.seen.join("\n")))
    })
    .collect();
    assert!(up.seen.iter().any(|l| l.starts_with("✓ app handlers[2]")));

    // The router picks between the two with random ties, so a few requests reach both; the bound is a count, not
    // a time.
    let mut sent = 0;
    while sent < 400 && admins.iter().any(|&a| answered(a) == 0) {
        let answer = get(http, "/noop").expect("GET /noop");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        sent += 1;
    }
    let counts: Vec<u64> = admins.iter().map(|&a| answered(a)).collect();
    assert!(
        counts.iter().all(|&n| n > 0),
        "answered per replica: {counts:?} after {sent} requests"
    );

    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        up.seen.join("\n")
    );
}

/// Events of type `event` a manager sidecar has answered, from its `switchyard_requests_total`.
fn answered_of(admin: u16, event: &str) -> u64 {
    let text = get(admin, "/metrics").unwrap_or_default();
    let prefix = format!("switchyard_requests_total{{role=\"manager\",event=\"{event}\"");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The admin port of Manager `m`'s sidecar, from `switchyard up`'s line for it.
fn manager_admin(up: &Up, m: &str) -> u16 {
    let label = format!("✓ manager sidecar {m} (");
    up.seen
        .iter()
        .find(|l| l.starts_with(&label))
        .and_then(|l| admin_port(l))
        .unwrap_or_else(|| panic!("no {label} line:\n{}", up.seen.join("\n")))
}

/// `POST /publish` of an `echo` through the Router at `http` (front's app publishes it), retried
/// while it is refused with 503 (outbound connections or a stream still being made), until 202.
fn publish_accepted(up: &Up, http: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let a = post_json(http, "/publish", r#"{"event":"echo","data":{"value":1}}"#)
            .expect("POST /publish");
        if !a.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "{answer}\n{}",
        up.seen.join("\n")
    );
}

/// `POST /echo` through the Router at `http` is answered by `back`, and the observer whose admin
/// port is `audit` gets a copy of the request and one of the answer.
fn echo_is_observed(http: u16, audit: u16) {
    let before = answered_of(audit, "echo");
    let answer = post_json(http, "/echo", r#"{"value":2}"#).expect("POST /echo");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"value":2}"#), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered_of(audit, "echo") < before + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        answered_of(audit, "echo"),
        before + 2,
        "request and answer copies"
    );
}

/// The nats-server `e2e/cluster/build-nats` builds into `.tools/bin` (cached after the first run).
fn nats_server() -> PathBuf {
    let script = repo_file("e2e/cluster/build-nats");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn a_durable_subscription_is_kept_behind_the_mesh_identity_and_delivered() {
    require_binaries();
    let nats = nats_server();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(repo_file("examples/subscriptions.yaml")).expect("example");
    let observe = "      observe: [published, requests, responses]\n";
    assert!(text.contains(observe), "the example changed shape");
    // `audit` keeps what it observes in its own stream: the local nats-server serves TLS from the
    // run's CA and maps each sidecar's certificate to a user whose permissions its table gives.
    let text = text
        .replace("port: 8080", "port: 0")
        .replace(observe, &format!("{observe}      delivery: durable\n"));
    let manifest = dir.path().join("subscriptions.yaml");
    std::fs::write(&manifest, text).expect("write");
    let mut up = start_up_with(&manifest, &[("SWITCHYARD_NATS_SERVER", &nats)]);
    let ready = up.wait_for("ready: try curl", Duration::from_secs(90));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, _) = up.router_ports();
    let audit = manager_admin(&up, "audit");
    // 202 once `back` admitted it and `audit`'s copy is stored (the stream is made on first use).
    publish_accepted(&up, http);
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered_of(audit, "echo") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        answered_of(audit, "echo") >= 1,
        "audit never got its stored copy:\n{}",
        up.seen.join("\n")
    );
    // A request's copy and its answer's reach `audit` directly (best-effort copies, sent beside
    // the client's answer by the Router's sidecar, which is no JetStream client).
    echo_is_observed(http, audit);
    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn subscriptions_example_fans_a_publish_out_and_copies_requests() {
    require_binaries();
    let _one_at_a_time = END_TO_END.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(repo_file("examples/subscriptions.yaml")).expect("example");
    assert!(text.contains("port: 8080"), "the example changed shape");
    let manifest = dir.path().join("subscriptions.yaml");
    std::fs::write(&manifest, text.replace("port: 8080", "port: 0")).expect("write");
    let mut up = start_up(&manifest);
    let ready = up.wait_for("ready: try curl", Duration::from_secs(90));
    assert!(ready.is_some(), "never ready:\n{}", up.seen.join("\n"));
    let (http, _) = up.router_ports();
    let (back, audit) = (manager_admin(&up, "back"), manager_admin(&up, "audit"));
    // `front`'s app publishes `echo`: 202 once `back` (its handler) and `audit` (a subscriber) both
    // admitted it. The outbound connections may still be opening: retry a 503 for a while.
    publish_accepted(&up, http);
    let deadline = Instant::now() + Duration::from_secs(20);
    while (answered_of(back, "echo") == 0 || answered_of(audit, "echo") == 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(answered_of(back, "echo") >= 1, "back never got the publish");
    assert!(
        answered_of(audit, "echo") >= 1,
        "audit never got the publish"
    );
    // A request: `back` answers; `audit` gets a copy of the request and one of the answer.
    echo_is_observed(http, audit);
    up.term();
    let status = up.wait_exit(Duration::from_secs(40));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
