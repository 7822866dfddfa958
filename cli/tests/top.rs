//! `switchyard top` against a real `switchyard up` of the quickstart under load: the `--once` JSON,
//! and the live screen under tmux (send-keys, capture-pane), refreshed in place and quit with `q`.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::up::{Up, example_on_ports};
use support::{SWITCHYARD, free_port, http, wait_for};

/// One `switchyard up` at a time: app ports from 8000 upward.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `GET /noop` in a loop until dropped (at most 20 000 requests, so it always ends).
struct Load(Arc<AtomicBool>, Option<std::thread::JoinHandle<u32>>);

impl Load {
    fn start(port: u16) -> Load {
        Load::of(move || {
            let _ = http::get(port, "/noop");
        })
    }

    /// `POST /echo {"value": 1}` in a loop: a request with observers of it and its answer.
    fn echo(port: u16) -> Load {
        Load::of(move || {
            let _ = http::post_json(port, "/echo", r#"{"value": 1}"#);
        })
    }

    fn of(send: impl Fn() + Send + 'static) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let mut sent = 0;
            while !s.load(Ordering::Relaxed) && sent < 20_000 {
                send();
                sent += 1;
            }
            sent
        });
        Load(stop, Some(t))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

fn quickstart(dir: &Path) -> (std::path::PathBuf, u16) {
    let port = free_port();
    let path = example_on_ports(dir, "quickstart.yaml", port, free_port(), |t| t);
    (path, port)
}

#[test]
fn once_prints_the_traffic_per_event_type_as_json() {
    support::require_binaries().unwrap();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (manifest, port) = quickstart(dir.path());
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60)).unwrap();
    let load = Load::start(port);
    let out = Command::new(SWITCHYARD)
        .args(["top", "-f", &manifest.display().to_string(), "--once"])
        .output()
        .unwrap();
    drop(load);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for role in ["router", "manager"] {
        let row = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == "noop" && e["role"] == role)
            .unwrap_or_else(|| panic!("no noop row for the {role}: {text}"));
        assert!(row["rate"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["success"], 1.0, "{row}");
        assert!(row["p50_ms"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["p99_ms"].as_f64().unwrap() >= row["p50_ms"].as_f64().unwrap(),
            "{row}"
        );
    }
    let sidecars = v["sidecars"].as_array().unwrap();
    assert_eq!(sidecars.len(), 2, "{text}");
    for s in sidecars {
        assert!(s["error"].is_null(), "{s}");
        assert!(s["in_flight"].is_number() && s["queued"].is_number(), "{s}");
    }
    up.stop().unwrap();

    // Nothing running for that file any more: the error says so.
    let out = Command::new(SWITCHYARD)
        .args(["top", "-f", &manifest.display().to_string(), "--once"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no running `switchyard up -f"), "{err}");
}

/// examples/subscriptions.yaml: `audit` observes `echo` (its publishes, and copies of its requests
/// and answers, which the router's sidecar sends). Under `POST /echo` load, the subscription's row
/// counts the copies sent to it and its app's deliveries; nothing is shed at this pace.
#[test]
fn once_shows_each_subscriptions_deliveries_and_copies() {
    support::require_binaries().unwrap();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let manifest = example_on_ports(dir.path(), "subscriptions.yaml", port, free_port(), |t| t);
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60)).unwrap();
    let load = Load::echo(port);
    let out = Command::new(SWITCHYARD)
        .args(["top", "-f", &manifest.display().to_string(), "--once"])
        .output()
        .unwrap();
    drop(load);
    up.stop().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let subs = v["subscriptions"].as_array().unwrap();
    assert_eq!(subs.len(), 1, "{text}");
    let row = &subs[0];
    assert_eq!(row["subscription"], "echo@audit", "{row}");
    assert!(
        row["rate"].as_f64().unwrap() > 0.0,
        "no deliveries to audit: {row}"
    );
    assert_eq!(row["success"], 1.0, "{row}");
    assert!(
        row["copies_sent"].as_f64().unwrap() > 0.0,
        "no copies: {row}"
    );
    assert_eq!(row["copies_shed"], 0.0, "{row}");
    // audit's deliveries are its subscription's, not a handled type's row of their own.
    let events = v["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "echo" && e["role"] == "router"),
        "{text}"
    );
}

/// A tmux server of this test's own (`-L`), so it never touches a user's sessions.
struct Tmux {
    bin: std::path::PathBuf,
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin)
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[test]
fn live_view_refreshes_in_place_under_tmux_and_quits_on_q() {
    support::require_binaries().unwrap();
    let bin = support::apm::tool("TMUX").unwrap();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (manifest, port) = quickstart(dir.path());
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60)).unwrap();
    let load = Load::start(port);
    let tmux = Tmux {
        bin,
        socket: format!("switchyard-top-test-{}", std::process::id()),
    };
    let command = format!(
        "{SWITCHYARD} top -f {} --interval 200ms",
        manifest.display()
    );
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "30",
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");

    // The noop row of the router with a rate, after a few refreshes of 200 ms.
    let rate = |screen: &str| -> Option<f64> {
        let line = screen
            .lines()
            .find(|l| l.contains("noop") && l.contains("router"))?;
        // `│noop   router   12.5   100.00% ...│`: the third column.
        line.trim_matches('│')
            .split_whitespace()
            .nth(2)?
            .parse()
            .ok()
    };
    let first = wait_for("a noop row with traffic", Duration::from_secs(20), || {
        let s = tmux.screen();
        match rate(&s) {
            Some(r) if r > 0.0 => Ok(s),
            _ => Err(s),
        }
    })
    .unwrap();
    assert!(first.contains("100.00%"), "{first}");
    assert!(
        first.contains("IN FLIGHT") && first.contains("edge") && first.contains("handlers"),
        "{first}"
    );
    // Later frames replace the first one: still one title and one header, the numbers change.
    let later = wait_for(
        "the screen redrawn with new numbers",
        Duration::from_secs(20),
        || {
            let s = tmux.screen();
            (s != first).then_some(s.clone()).ok_or(s)
        },
    )
    .unwrap();
    assert_eq!(later.matches("switchyard top:").count(), 1, "{later}");
    assert_eq!(later.matches("EVENT").count(), 1, "{later}");
    drop(load);

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    wait_for("top to quit on q", Duration::from_secs(10), || {
        if tmux.alive() {
            Err(tmux.screen())
        } else {
            Ok(())
        }
    })
    .unwrap();
    up.stop().unwrap();
}
