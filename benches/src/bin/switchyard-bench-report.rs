//! The benchmark runner's helper: `procs` prints CPU seconds and peak RSS of processes as JSON;
//! `summarize DIR` gathers `DIR/runs/*.json` and `DIR/procs/*.json` into `DIR/results.json` and
//! `DIR/summary.md` with ratios and the pass/fail target lines.

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use switchyard_benches::procs::{self, Usage};
use switchyard_benches::report::Summary;
use switchyard_benches::summary;
use switchyard_benches::targets::{self, Run};

#[derive(Parser)]
#[command(name = "switchyard-bench-report")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// CPU seconds and peak RSS of live processes, as a JSON array.
    Procs {
        /// Process ids; gone ones are skipped.
        pids: Vec<u32>,
    },
    /// Builds results.json and summary.md from a results folder.
    Summarize {
        /// The results folder (holds runs/ and procs/).
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Procs { pids } => {
            let usage: Vec<Usage> = pids.into_iter().filter_map(procs::read).collect();
            println!("{}", serde_json::to_string_pretty(&usage)?);
        }
        Cmd::Summarize { dir } => summarize(&dir)?,
    }
    Ok(())
}

/// `<system>_c<N>.json` or `<system>_<mode>_c<N>.json`: the system is the part before the first `_`.
fn system_of(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    Some(stem.split('_').next()?.to_owned())
}

fn json_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if dir.is_dir() {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn summarize(dir: &Path) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for p in json_files(&dir.join("runs"))? {
        let text = std::fs::read_to_string(&p)?;
        let summary: Summary =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        let system = system_of(&p).unwrap_or_default();
        runs.push(Run { system, summary });
    }
    let mut procs_by: BTreeMap<String, Vec<Usage>> = BTreeMap::new();
    for p in json_files(&dir.join("procs"))? {
        let text = std::fs::read_to_string(&p)?;
        let usage: Vec<Usage> =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        let name = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_owned();
        procs_by.insert(name, usage);
    }
    let checks = targets::evaluate(&runs);
    let meta: serde_json::Value = std::fs::read_to_string(dir.join("meta.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let results = serde_json::json!({
        "meta": meta,
        "runs": runs,
        "ratios_vs_bare": ratios(&runs),
        "procs": procs_by,
        "targets": checks,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    let text = summary::render(&runs, &checks, &procs_by);
    std::fs::write(dir.join("summary.md"), &text)?;
    print!("{text}");
    Ok(())
}

/// req/s of every system over bare hyper's, per concurrency.
fn ratios(runs: &[Run]) -> BTreeMap<String, BTreeMap<usize, f64>> {
    let mut out: BTreeMap<String, BTreeMap<usize, f64>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.system != "bare") {
        let c = r.summary.concurrency;
        if let Some(v) = targets::rps_ratio(runs, &r.system, "bare", c) {
            out.entry(r.system.clone()).or_default().insert(c, v);
        }
    }
    out
}
