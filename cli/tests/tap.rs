//! `switchyard tap` against a real `switchyard up` of the quickstart: real requests carrying an
//! `Authorization` header through the router, seen by the tap of the router's and the manager's
//! sidecars with their type, id, status, latency, Server-Timing and trace id; `--payload N` shows N
//! bytes at most; `--type` and `--status` filter in the sidecar; no credential is ever shown.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::up::{Up, example_on_ports};
use support::{SWITCHYARD, free_port, http};

/// What the requests carry that no tap may show.
const CREDENTIAL: &str = "Bearer s3cr3t-credential-a1b2";
const CUSTOM_SECRET: &str = "custom-s3cr3t-c3d4";
/// The trace the requests travel in.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
/// The echo body (15 bytes).
const ECHO: &str = r#"{"value":12345}"#;
const WAIT: Duration = Duration::from_secs(30);

/// A running `switchyard tap`: its stdout and stderr lines collected; killed and reaped on drop.
struct Tap {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Tap {
    fn start(args: &[&str]) -> Tap {
        let mut child = Command::new(SWITCHYARD)
            .arg("tap")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchyard tap");
        let lines = support::output_lines(&mut child);
        Tap {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line from now on for which `pred` holds, within [`WAIT`]; the error shows every
    /// line so far.
    fn wait_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Ok(line);
                    }
                }
                Err(e) => {
                    return Err(format!(
                        "{what}: not within {WAIT:?} ({e}); the tap printed:\n{}",
                        self.seen.join("\n")
                    ));
                }
            }
        }
    }

    /// A line already read for which `pred` holds, or the next one, within [`WAIT`]: for lines
    /// of another sidecar, whose order with this one's is not fixed.
    fn seen_or_wait(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String, String> {
        match self.seen.iter().find(|l| pred(l)) {
            Some(l) => Ok(l.clone()),
            None => self.wait_line(what, pred),
        }
    }

    /// The next line, within [`WAIT`].
    fn next_line(&mut self) -> Result<String, String> {
        self.wait_line("the next line", |_| true)
    }

    /// Every line printed so far, including those not read yet.
    fn output(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST /echo` with a credential, a header the tapper hides and a known trace; the answer's status.
fn echo(port: u16, body: &str) -> Result<u16, String> {
    let traceparent = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let a = http::request(
        port,
        "POST",
        "/echo",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", CREDENTIAL),
            ("X-Custom", CUSTOM_SECRET),
            ("traceparent", &traceparent),
        ],
        body,
    )?;
    Ok(a.status)
}

/// `GET /noop` with a credential.
fn noop(port: u16) -> Result<u16, String> {
    Ok(http::request(port, "GET", "/noop", &[("Authorization", CREDENTIAL)], "")?.status)
}

/// The value of `key=` in a text line (up to the next space).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// No line shows the credential, nor `hidden` (a value the tap was told to hide).
fn assert_no_secret(tap: &mut Tap, hidden: &[&str]) {
    let out = tap.output();
    for secret in [CREDENTIAL, "s3cr3t-credential"].iter().chain(hidden) {
        assert!(!out.contains(secret), "{secret} shown:\n{out}");
    }
}

/// The text lines of the router's and the manager's taps: every field, the same event on both.
fn text_shows_the_fields_and_no_credential(manifest: &Path, port: u16) -> Result<(), String> {
    let file = manifest.display().to_string();
    let mut tap = Tap::start(&[
        "-f",
        &file,
        "--payload",
        "5",
        "--headers",
        "--hide-header",
        "X-Custom",
    ]);
    tap.seen_or_wait("the router's tap open", |l| {
        l.starts_with("[router edge] tapping the router")
    })?;
    tap.seen_or_wait("the manager's tap open", |l| {
        l.starts_with("[manager handlers") && l.contains("tapping the manager")
    })?;
    let status = echo(port, ECHO)?;
    assert_eq!(status, 200, "POST /echo");

    let routed = tap.wait_line("the router's echo", |l| {
        l.starts_with("[router edge] 200 type=echo ")
    })?;
    assert!(routed.contains(" POST /echo "), "{routed}");
    let id = field(&routed, "id").ok_or_else(|| format!("no id: {routed}"))?;
    assert!(!id.is_empty(), "{routed}");
    assert_eq!(field(&routed, "trace"), Some(TRACE_ID), "{routed}");
    let latency = field(&routed, "latency")
        .and_then(|l| l.strip_suffix("ms"))
        .and_then(|l| l.parse::<f64>().ok())
        .ok_or_else(|| format!("no latency: {routed}"))?;
    assert!(latency > 0.0, "{routed}");
    assert!(
        routed.contains(" server-timing=\"") && routed.contains("total;dur="),
        "{routed}"
    );
    // The event's own lines follow it: its headers, then its payload.
    let headers = tap.next_line()?;
    assert!(headers.starts_with("    headers: "), "{headers}");
    for hidden in ["authorization: (hidden)", "x-custom: (hidden)"] {
        assert!(headers.contains(hidden), "{hidden} not in {headers}");
    }
    assert!(
        headers.contains("content-type: application/json"),
        "{headers}"
    );
    let payload = tap.next_line()?;
    assert_eq!(payload, "    payload: {\"val ... (15 bytes in all)");

    let delivered = tap.seen_or_wait("the manager's echo", |l| {
        l.starts_with("[manager handlers") && l.contains(" type=echo ")
    })?;
    assert!(delivered.contains("] 200 type=echo "), "{delivered}");
    assert_eq!(
        field(&delivered, "id"),
        Some(id),
        "the same event: {delivered}"
    );
    assert_eq!(field(&delivered, "trace"), Some(TRACE_ID), "{delivered}");
    assert!(
        field(&delivered, "source").is_some_and(|s| !s.is_empty()),
        "{delivered}"
    );
    assert!(field(&delivered, "latency").is_some(), "{delivered}");

    assert_eq!(noop(port)?, 200, "GET /noop");
    tap.wait_line("the router's noop", |l| {
        l.starts_with("[router edge] 200 type=noop ") && l.contains(" GET /noop ")
    })?;
    assert_no_secret(&mut tap, &[CUSTOM_SECRET]);
    Ok(())
}

/// `--type echo -o json` on the router: a noop sent before an echo never reaches the tap (a tap's
/// lines come in the order the events finished), the payload is cut at 4 bytes, the credential is
/// hidden in the headers.
fn a_type_filter_filters_in_json(manifest: &Path, port: u16) -> Result<(), String> {
    let file = manifest.display().to_string();
    let mut tap = Tap::start(&[
        "-f",
        &file,
        "--router",
        "edge",
        "--type",
        "echo",
        "--payload",
        "4",
        "-o",
        "json",
    ]);
    tap.wait_line("the tap open", |l| l.contains("\"kind\":\"tapping\""))?;
    assert_eq!(noop(port)?, 200);
    assert_eq!(echo(port, ECHO)?, 200);
    let line = tap.wait_line("the echo", |l| l.contains("\"kind\":\"event\""))?;
    let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
    assert_eq!(
        v["type"], "echo",
        "the noop came through the filter: {line}"
    );
    assert_eq!(v["sidecar"], "router edge", "{line}");
    assert_eq!(v["status"], 200, "{line}");
    assert_eq!(v["trace_id"], TRACE_ID, "{line}");
    assert!(v["ce_id"].as_str().is_some_and(|s| !s.is_empty()), "{line}");
    assert!(v["latency_ms"].as_f64().is_some_and(|l| l > 0.0), "{line}");
    assert!(v["server_timing"].as_str().is_some(), "{line}");
    assert_eq!(v["payload"], "{\"va", "{line}");
    assert_eq!(v["payload_bytes"], 15, "{line}");
    assert_eq!(v["payload_cut"], true, "{line}");
    assert_eq!(v["headers"]["authorization"], "(hidden)", "{line}");
    // Hidden only by the tap that asks: this one did not.
    assert_eq!(v["headers"]["x-custom"], CUSTOM_SECRET, "{line}");
    assert_no_secret(&mut tap, &[]);
    Ok(())
}

/// `--status 4xx`: an echo the schema refuses shows, a good one sent first does not.
fn a_status_filter_filters(manifest: &Path, port: u16) -> Result<(), String> {
    let file = manifest.display().to_string();
    let mut tap = Tap::start(&["-f", &file, "--router", "edge", "--status", "4xx"]);
    tap.wait_line("the tap open", |l| l.contains("tapping the router"))?;
    assert_eq!(echo(port, ECHO)?, 200);
    let refused = echo(port, r#"{"value":"twelve"}"#)?;
    assert!((400..500).contains(&refused), "{refused}");
    let line = tap.wait_line("an event", |l| l.starts_with("[router edge] "))?;
    assert!(
        line.starts_with(&format!("[router edge] {refused} type=echo ")),
        "the 200 came through the filter: {line}"
    );
    assert_no_secret(&mut tap, &[]);
    Ok(())
}

/// One check against the running quickstart (its manifest and HTTP port).
type Check = fn(&Path, u16) -> Result<(), String>;

#[test]
fn tap_shows_live_events_filtered_without_credentials() {
    support::require_binaries().expect("binaries");
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let manifest = example_on_ports(dir.path(), "quickstart.yaml", port, free_port(), |t| t);
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60)).expect("ready");

    let checks: [(&str, Check); 3] = [
        ("text", text_shows_the_fields_and_no_credential),
        ("type filter", a_type_filter_filters_in_json),
        ("status filter", a_status_filter_filters),
    ];
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(name, check)| check(&manifest, port).err().map(|e| format!("{name}: {e}")))
        .collect();
    let stopped = up.stop();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    stopped.expect("switchyard up stops");

    // Nothing running for that file any more: the error says so.
    let out = Command::new(SWITCHYARD)
        .args(["tap", "-f", &manifest.display().to_string()])
        .output()
        .expect("run switchyard tap");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no running `switchyard up -f"), "{err}");
}
