//! Every section of `benches/run` in its smoke mode (`SMOKE=1`: a dev build, 1 s load runs, tiny
//! sizes), one test per section, so a benchmark that breaks breaks `make test`. Each test runs
//! `benches/run` with `SECTIONS=<section>` into a folder of its own and on ports of its own, and
//! checks that it exited 0, wrote the section's figures (each load run with requests and no
//! errors) and recorded nothing as not measured (`missing.txt`). The figures measure nothing; the
//! test only proves the section still runs end to end.
//!
//! The binaries are built once per process (`cargo build`, a no-op after `cargo test --workspace`
//! built them); `benches/run` then runs with `BUILD=0`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches/ lives in the repository")
        .to_path_buf()
}

/// Builds the binaries `benches/run` starts, once per process.
fn built() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(repo())
            .args(["build", "-p", "switchyard", "-p", "switchyard-sidecar"])
            .args([
                "-p",
                "switchyard-example-app",
                "-p",
                "switchyard-benches",
                "--bins",
            ])
            .status()
            .map_err(|e| format!("running cargo: {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("cargo build failed: {status}"))
    });
    if let Err(e) = r {
        panic!("cannot build the benchmark's binaries: {e}");
    }
}

/// Runs `benches/run` with `SECTIONS=section` in smoke mode on ports from `port_base`, with `env`
/// on top; returns the run's results folder (kept in the temporary folder until the test ends).
fn smoke(section: &str, port_base: u16, env: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    built();
    let out = tempfile::tempdir().expect("a temporary folder");
    let mut cmd = Command::new(repo().join("benches/run"));
    cmd.env("SMOKE", "1")
        .env("BUILD", "0")
        .env("SECTIONS", section)
        .env("PORT_BASE", port_base.to_string())
        .env("RESULTS", out.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let done = cmd.output().expect("benches/run started");
    let log = String::from_utf8_lossy(&done.stderr);
    assert!(
        done.status.success(),
        "benches/run SECTIONS={section} SMOKE=1 failed ({}):\n{log}",
        done.status
    );
    let dir = std::fs::read_dir(out.path())
        .expect("the results folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no results folder was written:\n{log}"));
    let missing = std::fs::read_to_string(dir.join("missing.txt")).unwrap_or_default();
    assert!(
        missing.is_empty(),
        "SECTIONS={section}: not measured:\n{missing}\n--- benches/run ---\n{log}"
    );
    assert!(dir.join("summary.md").is_file(), "no summary.md:\n{log}");
    (out, dir)
}

/// The load runs of `section` in `dir`; asserts each (section, system, variant) of `want` is among
/// them with requests and no errors.
fn runs(dir: &Path, section: &str, want: &[(&str, &str)]) {
    let mut seen = Vec::new();
    for e in std::fs::read_dir(dir.join("runs"))
        .expect("runs/")
        .filter_map(Result::ok)
    {
        let text = std::fs::read_to_string(e.path()).expect("a run file");
        let run: serde_json::Value = serde_json::from_str(&text).expect("a run's JSON");
        if run["section"] != section {
            continue;
        }
        let (system, variant) = (
            run["system"].as_str().unwrap_or_default().to_owned(),
            run["variant"].as_str().unwrap_or_default().to_owned(),
        );
        assert!(
            run["requests"].as_u64().unwrap_or(0) > 0 && run["errors"].as_u64() == Some(0),
            "{section} {system} {variant}: {text}"
        );
        seen.push((system, variant));
    }
    for (system, variant) in want {
        assert!(
            seen.iter().any(|(s, v)| s == system && v == variant),
            "{section}: no run of {system} {variant} among {seen:?}"
        );
    }
}

fn non_empty(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!text.trim().is_empty(), "{} is empty", path.display());
    text
}

#[test]
fn generator() {
    // wrk is half of the section: installed by benches/run when missing, as in a full run.
    let (_t, dir) = smoke("generator", 21_000, &[("HTTP_GEN", "wrk")]);
    runs(
        &dir,
        "generator",
        &[("bare", "wrk"), ("bare", "switchyard-load")],
    );
}

#[test]
fn noop() {
    let (_t, dir) = smoke("noop", 21_500, &[]);
    runs(
        &dir,
        "noop",
        &[
            ("bare", ""),
            ("plaintext", ""),
            ("unix", ""),
            ("switchyard", ""),
        ],
    );
    non_empty(&dir.join("mesh/noop_switchyard_before.prom"));
    non_empty(&dir.join("mesh/noop_switchyard_after.prom"));
}

#[test]
fn dapr() {
    // Builds daprd into .tools/ on first use (tens of minutes cold; cached after).
    let (_t, dir) = smoke("dapr", 22_000, &[]);
    runs(&dir, "noop", &[("app", ""), ("dapr", "")]);
}

#[test]
fn protocols() {
    let (_t, dir) = smoke("protocols", 22_500, &[]);
    let mut want = Vec::new();
    for system in ["raw", "switchyard"] {
        for variant in ["http", "ws", "grpc", "grpc-stream"] {
            want.push((system, variant));
        }
    }
    runs(&dir, "protocols", &want);
}

#[test]
fn payload() {
    let (_t, dir) = smoke("payload", 23_000, &[]);
    let mut want = Vec::new();
    for system in ["bare", "switchyard"] {
        for variant in ["1KB", "100KB", "1MB"] {
            want.push((system, variant));
        }
    }
    runs(&dir, "payload", &want);
}

#[test]
fn scaling() {
    let (_t, dir) = smoke("scaling", 23_500, &[]);
    runs(&dir, "scaling", &[("switchyard", "2")]);
}

#[test]
fn middleware() {
    let (_t, dir) = smoke("middleware", 24_000, &[]);
    runs(&dir, "middleware", &[("switchyard", "1")]);
}

#[test]
fn pair() {
    let (_t, dir) = smoke("pair", 24_500, &[]);
    runs(&dir, "pair", &[("switchyard", "cpu")]);
    runs(&dir, "noop", &[("bare", ""), ("switchyard", "")]);
    for f in ["procs/pair_before.json", "procs/pair_after.json"] {
        non_empty(&dir.join(f));
    }
    non_empty(&dir.join("samples/pair_c128.json"));
}

#[test]
fn frames() {
    let (_t, dir) = smoke("frames", 25_000, &[]);
    runs(
        &dir,
        "frames",
        &[("switchyard", "fire"), ("switchyard", "rtt")],
    );
}

#[test]
fn plateau() {
    let (_t, dir) = smoke("plateau", 25_500, &[]);
    runs(
        &dir,
        "plateau",
        &[("switchyard", "sustained"), ("switchyard", "churn")],
    );
    non_empty(&dir.join("samples/plateau_sustained.json"));
    non_empty(&dir.join("samples/plateau_churn.json"));
}

#[test]
fn core() {
    let (_t, dir) = smoke("core", 26_000, &[]);
    runs(&dir, "core", &[("switchyard", "8")]);
}

#[test]
fn durable() {
    // nats-server is built into .tools/bin on first use (e2e/cluster/build-nats), as the e2e tests do.
    let (_t, dir) = smoke("durable", 26_500, &[]);
    runs(
        &dir,
        "durable",
        &[
            ("switchyard", "memory"),
            ("switchyard", "durable"),
            ("jetstream", "bare"),
            ("jetstream", "consumed"),
        ],
    );
}

#[test]
fn profile() {
    let (_t, dir) = smoke("profile", 27_000, &[]);
    runs(&dir, "profile", &[("switchyard", "noop")]);
    non_empty(&dir.join("profiles/noop_c32.txt"));
}

#[test]
fn streams() {
    let (_t, dir) = smoke("streams", 27_500, &[]);
    let text = non_empty(&dir.join("streams.txt"));
    assert!(text.contains("first SSE event"), "{text}");
}
