//! Helpers shared by the `switchyard` command's end-to-end tests: `switchyard up` as a child process,
//! plain HTTP on loopback, free ports, and the APM tools (`apm.rs`).

#![allow(dead_code)]

pub mod apm;
pub mod browser;
pub mod http;
pub mod page;
pub mod prometheus;
pub mod up;
pub mod zipkin;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `switchyard` binary under test.
pub const SWITCHYARD: &str = env!("CARGO_BIN_EXE_switchyard");

/// A file of the repository.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Where cargo put `switchyard` (and, after `cargo test --workspace`, the sidecar and example app).
pub fn target_dir() -> PathBuf {
    Path::new(SWITCHYARD)
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `check` every 100 ms until it gives a value or `limit` passes; the error names `what` and
/// the last reason `check` gave.
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(v) => return Ok(v),
            Err(why) if Instant::now() >= deadline => {
                return Err(format!("{what}: not after {limit:?}: {why}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Fails naming the binaries `switchyard up` needs when they are not built next to it.
pub fn require_binaries() -> Result<(), String> {
    let missing: Vec<_> = ["switchyard-sidecar", "switchyard-example-app"]
        .into_iter()
        .filter(|b| !target_dir().join(b).is_file())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{missing:?} not built in {}; run `cargo build --workspace` first",
            target_dir().display()
        ))
    }
}

/// The stdout and stderr lines of `child` (spawned with both piped), read by a thread each. Only the
/// reader threads hold senders, so the channel closes when the child's pipes do.
pub fn output_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    let pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    for pipe in pipes.into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    lines
}
