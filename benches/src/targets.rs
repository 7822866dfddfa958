//! The targets of issue 5 that one run checks, as pure functions of the run's summaries.

use crate::report::Summary;
use serde::{Deserialize, Serialize};

/// One load run of one system: `bare`, `switchyard` or `edri`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// Which system was driven.
    pub system: String,
    /// What the load generator measured.
    pub summary: Summary,
}

/// One target line: the measured value, the bound, and whether it holds (`None`: not measured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What is checked, e.g. `/noop c=32 vs bare hyper`.
    pub name: String,
    /// The measured ratio or duration.
    pub value: Option<f64>,
    /// The bound, in words, e.g. `>= 0.35`.
    pub target: String,
    /// Pass, fail, or not measured.
    pub pass: Option<bool>,
}

/// The run of `system` at concurrency `c`, if any.
pub fn find<'a>(runs: &'a [Run], system: &str, c: usize) -> Option<&'a Summary> {
    runs.iter()
        .find(|r| r.system == system && r.summary.concurrency == c && r.summary.mode == "http")
        .map(|r| &r.summary)
}

/// Throughput of `a` over `b` at concurrency `c`.
pub fn rps_ratio(runs: &[Run], a: &str, b: &str, c: usize) -> Option<f64> {
    let (a, b) = (find(runs, a, c)?, find(runs, b, c)?);
    (b.rps > 0.0).then(|| a.rps / b.rps)
}

fn at_least(name: &str, value: Option<f64>, min: f64) -> Check {
    Check {
        name: name.to_owned(),
        value,
        target: format!(">= {min}"),
        pass: value.map(|v| v >= min),
    }
}

/// Checks the `/noop` targets: c=32 throughput against bare hyper and EDRI, added p50 at c=1.
pub fn evaluate(runs: &[Run]) -> Vec<Check> {
    let added_p50 = find(runs, "switchyard", 1)
        .zip(find(runs, "bare", 1))
        .map(|(s, b)| s.p50_us - b.p50_us);
    vec![
        at_least(
            "/noop c=32: Switchyard req/s / bare hyper req/s",
            rps_ratio(runs, "switchyard", "bare", 32),
            0.35,
        ),
        at_least(
            "/noop c=32: Switchyard req/s / EDRI req/s",
            rps_ratio(runs, "switchyard", "edri", 32),
            30.0,
        ),
        Check {
            name: "/noop c=1: added p50 over bare hyper (us)".to_owned(),
            value: added_p50,
            target: "<= 150".to_owned(),
            pass: added_p50.map(|v| v <= 150.0),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &str, c: usize, rps: f64, p50_us: f64) -> Run {
        Run {
            system: system.to_owned(),
            summary: Summary {
                mode: "http".to_owned(),
                target: String::new(),
                concurrency: c,
                rate: None,
                duration_s: 1.0,
                requests: 1,
                errors: 0,
                rps,
                p50_us,
                p90_us: p50_us,
                p99_us: p50_us,
                max_us: p50_us,
            },
        }
    }

    #[test]
    fn checks_pass_and_fail_on_the_bounds() {
        let runs = vec![
            run("bare", 32, 100_000.0, 100.0),
            run("switchyard", 32, 40_000.0, 300.0),
            run("edri", 32, 1_000.0, 20_000.0),
            run("bare", 1, 20_000.0, 40.0),
            run("switchyard", 1, 5_000.0, 240.0),
        ];
        let c = evaluate(&runs);
        assert_eq!(c[0].pass, Some(true));
        assert!((c[0].value.unwrap_or_default() - 0.4).abs() < 1e-9);
        assert_eq!(c[1].pass, Some(true));
        assert_eq!(c[2].pass, Some(false), "200 us added is over 150");
    }

    #[test]
    fn missing_runs_are_reported_as_not_measured() {
        let c = evaluate(&[run("bare", 32, 100_000.0, 100.0)]);
        assert!(c.iter().all(|c| c.pass.is_none() && c.value.is_none()));
    }
}
