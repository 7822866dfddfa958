//! The cluster benchmarks (`src/bin/`) in their smoke mode, so one that breaks breaks `make test`:
//! each runs as a user would start it, with tiny sizes, and must exit 0 and print its figures with
//! no failure. The figures measure nothing here (a debug operator on a shared machine); the full
//! runs and their numbers are in docs/performance.md.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::time::Duration;
use switchyard_e2e::Cmd;

/// Runs a benchmark binary with `args`; its stdout parsed as the JSON document it prints, and its
/// stderr.
async fn run(bin: &str, args: &[&str]) -> Result<(Value, String)> {
    let out = Cmd::new(bin)
        .args(args)
        .timeout(Duration::from_secs(600))
        .output()
        .await?;
    ensure!(
        out.success(),
        "`{}` exited with {:?}\n{}",
        out.command,
        out.code,
        out.combined()
    );
    let json = serde_json::from_str(&out.stdout)
        .with_context(|| format!("{} printed no JSON document:\n{}", out.command, out.stderr))?;
    Ok((json, out.stderr))
}

/// `benches/run`'s `reaction` section in smoke mode: `scale-reaction --smoke` (one step) through the
/// runner, which writes its JSON to `reaction.json` and its table into `summary.md`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_reaction_smoke() -> Result<()> {
    // Up before the runner's session starts, so that session leaves it running for the other tests.
    switchyard_e2e::cluster().await?;
    Cmd::cargo()
        .args([
            "build",
            "-p",
            "switchyard-operator",
            "-p",
            "switchyard-benches",
            "--bins",
        ])
        .timeout(Duration::from_secs(3600))
        .ok()
        .await?;
    let results = scratch_dir()?;
    let ran = Cmd::new(switchyard_e2e::repo_root().join("benches/run"))
        .env("SMOKE", "1")
        .env("BUILD", "0")
        .env("SECTIONS", "reaction")
        .env("RESULTS", results.to_string_lossy().as_ref())
        .timeout(Duration::from_secs(600))
        .output()
        .await;
    let read = |name: &str| -> String {
        std::fs::read_dir(&results)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .find_map(|e| std::fs::read_to_string(e.path().join(name)).ok())
            .unwrap_or_default()
    };
    let (reaction, summary, missing) = (
        read("reaction.json"),
        read("summary.md"),
        read("missing.txt"),
    );
    let log = read("logs/reaction.log");
    let _ = std::fs::remove_dir_all(&results);
    let ran = ran?;
    ensure!(
        ran.success(),
        "benches/run SECTIONS=reaction SMOKE=1 exited with {:?}\n{}\n--- scale-reaction ---\n{log}",
        ran.code,
        ran.combined()
    );
    ensure!(missing.is_empty(), "not measured: {missing}\n{log}");
    let out: Value = serde_json::from_str(&reaction)
        .with_context(|| format!("reaction.json: {reaction:?}\n{log}"))?;
    ensure!(
        out["failures"].as_array().is_some_and(Vec::is_empty),
        "failures: {}\n{log}",
        out["failures"]
    );
    for figure in ["medianMs", "p90Ms"] {
        ensure!(
            out[figure].as_f64().is_some_and(|v| v > 0.0),
            "{figure}: {out}"
        );
    }
    ensure!(
        out["toPodReady"]["medianMs"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "no pod Ready time: {out}"
    );
    let stages = &out["steps"][0]["stages"];
    for stage in [
        "ingestMs",
        "tickMs",
        "decisionMs",
        "writeMs",
        "seenMs",
        "podReadyMs",
    ] {
        ensure!(stages[stage].is_number(), "stage {stage} missing: {out}");
    }
    ensure!(
        summary.contains("## Scale reaction")
            && summary.contains("| Switchyard | `spec.replicas` up |"),
        "summary.md has no reaction table:\n{summary}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_control_plane_smoke() -> Result<()> {
    let dir = scratch_dir()?;
    let out_dir = dir.to_string_lossy().into_owned();
    let args = [
        "--managers",
        "2",
        "--pods-per-manager",
        "1",
        // More streams than the control plane admits from one address (64): each must connect
        // from an address of its own, as sidecars in pods do, or most of them never get a table.
        "--routers",
        "80",
        "--router-objects",
        "1",
        "--rate",
        "2",
        "--duration",
        "2",
        "--rollout-timeout",
        "120",
        "--out",
        &out_dir,
        "--label",
        "smoke",
    ];
    let result = run(env!("CARGO_BIN_EXE_scale-control-plane"), &args).await;
    let _ = std::fs::remove_dir_all(&dir);
    let (out, stderr) = result?;
    ensure!(
        !stderr.contains("load reports stopped"),
        "the reports failed:\n{stderr}"
    );
    let p = &out["propagation_ms"];
    ensure!(
        p["flip_all_streams"]["count"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "no change measured: {out}"
    );
    ensure!(
        p["unfinished"] == 0 && p["failed_requests"] == 0,
        "unfinished or failed: {p}"
    );
    ensure!(
        out["load_reports_per_s"].as_f64().is_some_and(|v| v > 0.0),
        "no load reports counted: {out}"
    );
    // m1 subscribes to m0's type (a quarter of the Managers subscribe): every stream holds its
    // subscriber route.
    ensure!(
        out["subscribing_managers"] == 1
            && out["subscriber_routes_per_stream"].as_f64() == Some(1.0),
        "the subscriber's route is not in the tables: {out}"
    );
    Ok(())
}

/// A fresh folder for a run's files, under the e2e scratch folder.
fn scratch_dir() -> Result<std::path::PathBuf> {
    let dir =
        switchyard_e2e::work_dir().join(format!("bench-smoke-{}", switchyard_e2e::unique_suffix()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
