//! The benchmark runner's helper:
//! - `procs PID...` prints CPU seconds, RSS and command of processes as JSON;
//! - `sample --every 1s --for 60s PID...` prints their RSS each period as a JSON series;
//! - `summarize DIR` reads a results folder (`runs/`, `procs/`, `samples/`, `peers/lapinbeam.txt`,
//!   `missing.txt`, `meta*.json`, `profiles/*.txt`, `mesh/*.prom`, `streams.txt`, `reaction.json`) and
//!   writes `results.json`, `summary.md` and `plots/*.svg`.

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use switchyard_benches::procs::{self, Sample, Usage};
use switchyard_benches::report::Summary;
use switchyard_benches::results::Results;
use switchyard_benches::streams::StreamBars;
use switchyard_benches::{cost, lapin, mesh, plots, reaction, rounds, summary, targets};

#[derive(Parser)]
#[command(name = "switchyard-bench-report")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// CPU seconds, RSS and command of live processes, as a JSON array.
    Procs {
        /// Process ids; gone ones are skipped.
        pids: Vec<u32>,
    },
    /// RSS of live processes every period for a while, as a JSON array of samples.
    Sample {
        /// Period, e.g. `1s`.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        every: Duration,
        /// How long, e.g. `60s`.
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        length: Duration,
        /// Process ids; gone ones are skipped.
        pids: Vec<u32>,
    },
    /// Builds results.json, summary.md and plots/ from a results folder.
    Summarize {
        /// The results folder.
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Procs { pids } => {
            let usage: Vec<Usage> = pids.into_iter().filter_map(procs::read).collect();
            println!("{}", serde_json::to_string_pretty(&usage)?);
        }
        Cmd::Sample {
            every,
            length,
            pids,
        } => {
            let start = Instant::now();
            let mut out: Vec<Sample> = Vec::new();
            let mut next = start;
            while start.elapsed() <= length {
                let t_s = start.elapsed().as_secs_f64();
                out.extend(pids.iter().filter_map(|&p| procs::read(p)).map(|u| Sample {
                    t_s,
                    pid: u.pid,
                    cmd: u.cmd,
                    rss_mb: u.rss_mb,
                }));
                next += every;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            println!("{}", serde_json::to_string(&out)?);
        }
        Cmd::Summarize { dir } => summarize(&dir)?,
    }
    Ok(())
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

fn stem(p: &Path) -> String {
    p.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("?")
        .to_owned()
}

/// Reads every JSON file of `dir`; a file that does not parse (a step killed half-way) is named in
/// `missing` and skipped, so one broken step does not lose the rest of the run.
fn read_all<T: serde::de::DeserializeOwned>(
    dir: &Path,
    missing: &mut Vec<String>,
) -> anyhow::Result<Vec<(String, T)>> {
    let mut out = Vec::new();
    for p in json_files(dir)? {
        let text = std::fs::read_to_string(&p)?;
        match serde_json::from_str(&text) {
            Ok(v) => out.push((stem(&p), v)),
            Err(e) => missing.push(format!("{}: unreadable ({e})", p.display())),
        }
    }
    Ok(out)
}

fn load(dir: &Path) -> anyhow::Result<Results> {
    let mut r = Results::default();
    if let Ok(text) = std::fs::read_to_string(dir.join("missing.txt")) {
        r.missing = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect();
    }
    let mut missing = Vec::new();
    let measured: Vec<Summary> = read_all::<Summary>(&dir.join("runs"), &mut missing)?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    r.runs = rounds::fold(&measured);
    r.rounds = measured.into_iter().filter(|s| s.round.is_some()).collect();
    r.procs = read_all::<Vec<Usage>>(&dir.join("procs"), &mut missing)?
        .into_iter()
        .collect();
    r.samples = read_all::<Vec<Sample>>(&dir.join("samples"), &mut missing)?
        .into_iter()
        .collect();
    r.missing.extend(missing);
    let profiles = dir.join("profiles");
    if profiles.is_dir() {
        for e in std::fs::read_dir(&profiles)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "txt") {
                r.profiles.insert(stem(&p), std::fs::read_to_string(&p)?);
            }
        }
    }
    // The sidecars' /metrics around the mTLS runs, concatenated per system and moment.
    let readings = dir.join("mesh");
    if readings.is_dir() {
        for e in std::fs::read_dir(&readings)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "prom") {
                r.handshakes
                    .insert(stem(&p), mesh::parse(&std::fs::read_to_string(&p)?));
            }
        }
    }
    // The reaction section's document, as scale-reaction printed it.
    if let Ok(text) = std::fs::read_to_string(dir.join("reaction.json")) {
        match serde_json::from_str(&text) {
            Ok(v) => r.reaction = Some(v),
            Err(e) => r
                .missing
                .push(format!("reaction: reaction.json unreadable ({e})")),
        }
    }
    r.lapinbeam = std::fs::read_to_string(dir.join("peers").join("lapinbeam.txt"))
        .ok()
        .map(|t| lapin::parse(&t));
    // meta.json from the runner, plus any meta-*.json a step added (peer versions).
    let mut meta = serde_json::Map::new();
    for p in json_files(dir)? {
        let name = stem(&p);
        if (name == "meta" || name.starts_with("meta-"))
            && let Ok(serde_json::Value::Object(m)) =
                serde_json::from_str(&std::fs::read_to_string(&p)?)
        {
            meta.extend(m);
        }
    }
    r.meta = serde_json::Value::Object(meta);
    Ok(r)
}

fn summarize(dir: &Path) -> anyhow::Result<()> {
    let r = load(dir)?;
    let pair = cost::pair_cost(&r);
    let mut checks = targets::evaluate(&r, &pair);
    // The streams section leaves its measurements as the test printed them; no file, not measured.
    let streamed = std::fs::read_to_string(dir.join("streams.txt")).unwrap_or_default();
    checks.extend(targets::streaming(&StreamBars::parse(&streamed)));
    checks.extend(reaction::checks(r.reaction.as_ref()));
    let plots = match plots::draw_all(&dir.join("plots"), &r) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("plots: {e:#}");
            Vec::new()
        }
    };
    let results = serde_json::json!({
        "results": r,
        "pair_cost": pair,
        "targets": checks,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    let mut text = summary::render(&r, &checks, &pair);
    if !plots.is_empty() {
        text.push_str("\n## Plots\n\n");
        for p in &plots {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("?");
            text.push_str(&format!("![{name}](plots/{name})\n"));
        }
    }
    std::fs::write(dir.join("summary.md"), &text)?;
    print!("{text}");
    Ok(())
}
