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

/// `cmd` without the variables cargo sets for a test process (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`,
/// ...): build scripts such as ring's watch them (`rerun-if-env-changed`), so a cargo started with
/// them (the build below, `benches/run`'s `streams`) would rebuild ring and everything above it,
/// and the next outer `cargo test` again (as e2e's `Cmd::cargo` does).
fn without_cargo_env(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        let name = key.to_string_lossy();
        let set_by_cargo = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                &*name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            );
        if set_by_cargo {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// Builds the binaries `benches/run` starts, once per process.
fn built() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = without_cargo_env(&mut Command::new(cargo))
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
    smoke_missing(section, port_base, env, "")
}

/// `smoke`, where the run's `missing.txt` must be exactly `missing` (empty: no such file).
fn smoke_missing(
    section: &str,
    port_base: u16,
    env: &[(&str, &str)],
    missing: &str,
) -> (tempfile::TempDir, PathBuf) {
    built();
    let out = tempfile::tempdir().expect("a temporary folder");
    let mut cmd = Command::new(repo().join("benches/run"));
    without_cargo_env(&mut cmd)
        .env("SMOKE", "1")
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
    let not_measured = std::fs::read_to_string(dir.join("missing.txt")).unwrap_or_default();
    assert!(
        not_measured == missing,
        "SECTIONS={section}: not measured:\n{not_measured}\n(expected: {missing:?})\n--- benches/run ---\n{log}"
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
            ("haproxy", ""),
            ("plaintext", ""),
            ("unix", ""),
            ("switchyard", ""),
        ],
    );
    non_empty(&dir.join("mesh/noop_switchyard_before.prom"));
    non_empty(&dir.join("mesh/noop_switchyard_after.prom"));
}

/// The `dapr` section WITHOUT daprd: `make test` does not build or start Dapr. daprd comes from the
/// Go module proxy and builds for tens of minutes cold on 2 cores (`benches/peers/dapr/build.sh`),
/// too long for `make test`'s budget, so this runs the section with `DAPR=0` and checks what the
/// section does around Dapr: its bare hyper and Switchyard runs at the concurrencies it picks (1
/// and 32), Dapr reported as not measured (and nothing else), and the peer's two scripts parse.
/// Not run here: daprd's build, `peers/dapr/run.sh` (the two daprd sidecars and the example app
/// behind them) and the `app`/`dapr` load runs. By hand, once daprd is built:
/// `SECTIONS=dapr SMOKE=1 benches/run` must leave no `missing.txt`.
#[test]
fn dapr_without_daprd() {
    for script in ["build.sh", "run.sh"] {
        let path = repo().join("benches/peers/dapr").join(script);
        let parsed = Command::new("bash")
            .arg("-n")
            .arg(&path)
            .output()
            .expect("bash started");
        assert!(
            parsed.status.success(),
            "{} does not parse: {}",
            path.display(),
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
    let (_t, dir) = smoke_missing("dapr", 22_000, &[("DAPR", "0")], "noop dapr: DAPR=0\n");
    runs(&dir, "noop", &[("bare", ""), ("switchyard", "")]);
    for c in [1_u64, 32] {
        assert!(
            std::fs::read_dir(dir.join("runs"))
                .expect("runs/")
                .filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .any(|r| r["section"] == "noop"
                    && r["system"] == "switchyard"
                    && r["concurrency"].as_u64() == Some(c)),
            "no Switchyard run at c={c}: the dapr section's concurrencies changed"
        );
    }
    let summary = non_empty(&dir.join("summary.md"));
    assert!(
        summary.contains("noop dapr: DAPR=0"),
        "summary.md does not say Dapr was not measured:\n{summary}"
    );
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
    for system in ["bare", "haproxy", "switchyard"] {
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
            ("switchyard", "durable-plaintext"),
            ("jetstream", "bare"),
            ("jetstream", "consumed"),
        ],
    );
}

#[test]
fn fanout() {
    // Two switchyard ups of benches/switchyard-fanout.yaml (direct, and durable with a nats-server),
    // then the stopped-observer pair; EDRI is off in smoke mode, as in `noop`.
    let (_t, dir) = smoke("fanout", 28_000, &[]);
    let want = [
        ("switchyard", "direct-1"),
        ("switchyard", "direct-4"),
        ("switchyard", "durable-1"),
        ("switchyard", "durable-4"),
        ("switchyard", "observers-none"),
        ("switchyard", "observer-stopped"),
    ];
    runs(&dir, "fanout", &want);
    // Deliveries counted at the subscribers: every accepted publish landed at each subscriber it
    // matched (4 for `fan`'s, 1 for `solo`'s), none lost.
    for e in std::fs::read_dir(dir.join("runs"))
        .expect("runs/")
        .filter_map(Result::ok)
    {
        let text = std::fs::read_to_string(e.path()).expect("a run file");
        let run: serde_json::Value = serde_json::from_str(&text).expect("a run's JSON");
        let variant = run["variant"].as_str().unwrap_or_default();
        let Some(n) = variant
            .strip_prefix("direct-")
            .or(variant.strip_prefix("durable-"))
        else {
            continue;
        };
        let x = &run["extra"];
        let n: u64 = n.parse().expect("a count of subscribers");
        assert_eq!(x["subscribers"].as_u64(), Some(n), "{text}");
        assert!(
            x["deliveries_per_s"].as_f64().unwrap_or(0.0) > 0.0,
            "{text}"
        );
        assert!(x["accepted"].as_u64().unwrap_or(0) > 0, "{text}");
        assert_eq!(x["lost"].as_u64(), Some(0), "{text}");
    }
    let summary = non_empty(&dir.join("summary.md"));
    assert!(
        summary.contains("Fan-out: deliveries counted at the subscribers"),
        "{summary}"
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
