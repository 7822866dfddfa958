//! The human summary of a run: a markdown table of `/noop` per system and concurrency with ratios to
//! bare hyper, then the target lines. Pure.

use crate::procs::Usage;
use crate::targets::{Check, Run, find};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Systems in table order; others follow alphabetically.
const ORDER: [&str; 3] = ["bare", "switchyard", "edri"];

fn systems(runs: &[Run]) -> Vec<String> {
    let mut names: Vec<String> = ORDER.iter().map(|s| (*s).to_owned()).collect();
    let mut others: Vec<String> = runs
        .iter()
        .map(|r| r.system.clone())
        .filter(|s| !ORDER.contains(&s.as_str()))
        .collect();
    others.sort();
    others.dedup();
    names.extend(others);
    names.retain(|s| runs.iter().any(|r| &r.system == s));
    names
}

/// Renders the summary.
pub fn render(runs: &[Run], checks: &[Check], procs: &BTreeMap<String, Vec<Usage>>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| system | c | req/s | vs bare | p50 us | p90 us | p99 us | max us | errors |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut cs: Vec<usize> = runs.iter().map(|r| r.summary.concurrency).collect();
    cs.sort_unstable();
    cs.dedup();
    for sys in systems(runs) {
        for &c in &cs {
            let Some(s) = find(runs, &sys, c) else {
                continue;
            };
            let ratio = find(runs, "bare", c)
                .filter(|b| b.rps > 0.0)
                .map(|b| format!("{:.1} %", 100.0 * s.rps / b.rps))
                .unwrap_or_else(|| "-".to_owned());
            let _ = writeln!(
                out,
                "| {sys} | {c} | {:.0} | {ratio} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                s.rps, s.p50_us, s.p90_us, s.p99_us, s.max_us, s.errors
            );
        }
    }
    if !procs.is_empty() {
        let _ = writeln!(out, "\n| system | process | CPU s | peak RSS MiB |");
        let _ = writeln!(out, "|---|---|---:|---:|");
        for (sys, list) in procs {
            for u in list {
                let _ = writeln!(
                    out,
                    "| {sys} | {} | {:.1} | {:.1} |",
                    u.name, u.cpu_s, u.peak_rss_mb
                );
            }
        }
    }
    let _ = writeln!(out, "\nTargets:");
    for c in checks {
        let verdict = match c.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "NOT MEASURED",
        };
        let value = c
            .value
            .map(|v| format!("{v:.3}"))
            .unwrap_or_else(|| "-".to_owned());
        let _ = writeln!(
            out,
            "- {verdict}: {} = {value} (target {})",
            c.name, c.target
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Summary;

    #[test]
    fn table_has_a_row_per_run_with_its_ratio_and_the_verdicts() {
        let s = |c, rps| Summary {
            mode: "http".to_owned(),
            target: String::new(),
            concurrency: c,
            rate: None,
            duration_s: 1.0,
            requests: 1,
            errors: 0,
            rps,
            p50_us: 1.0,
            p90_us: 1.0,
            p99_us: 1.0,
            max_us: 1.0,
        };
        let runs = vec![
            Run {
                system: "switchyard".into(),
                summary: s(32, 25_000.0),
            },
            Run {
                system: "bare".into(),
                summary: s(32, 100_000.0),
            },
        ];
        let checks = crate::targets::evaluate(&runs);
        let text = render(&runs, &checks, &BTreeMap::new());
        let bare = text.find("| bare | 32").expect("bare row");
        let sy = text.find("| switchyard | 32").expect("switchyard row");
        assert!(bare < sy, "bare hyper comes first");
        assert!(text.contains("25.0 %"));
        assert!(text.contains("FAIL: /noop c=32: Switchyard req/s / bare hyper"));
        assert!(text.contains("NOT MEASURED: /noop c=32: Switchyard req/s / EDRI"));
    }
}
