//! The `reaction` section's figures (the e2e crate's `scale-reaction` benchmark, `reaction.json`):
//! the autoscaler's reaction to a load step, with the windows Knative and KEDA publish for theirs
//! beside it, and its targets. Pure.

use crate::check::Check;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Median, p90 and max, ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Median.
    pub median_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// What `scale-reaction` printed (the fields the report uses).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reaction {
    /// First report of a step -> `spec.replicas` up, per step.
    #[serde(default)]
    pub steps_ms: Vec<f64>,
    /// Spread of those.
    #[serde(default)]
    pub to_replicas: Option<Spread>,
    /// First report of a step -> the first new pod Ready.
    #[serde(default)]
    pub to_pod_ready: Option<Spread>,
    /// Median of each stage, ms, by name (`ingestMs`, `tickMs`, ...).
    #[serde(default)]
    pub stage_medians_ms: BTreeMap<String, Option<f64>>,
    /// Steps that failed, with why.
    #[serde(default)]
    pub failures: Vec<String>,
    /// Whether it was a smoke run (figures meaningless).
    #[serde(default)]
    pub smoke: bool,
}

/// Published reaction windows of the peers, for the table: (system, what decides, window).
pub const PEERS: [(&str, &str, &str); 2] = [
    (
        "Knative (KPA)",
        "concurrency averaged over a 6 s panic window, decided every 2 s",
        "6 s panic window, 2 s tick",
    ),
    (
        "KEDA",
        "polls each scaler (pollingInterval), then the HPA scales",
        "15-30 s polling",
    ),
];

/// The targets of issue 43: median <= 1.5 s and p90 <= 2 s to `spec.replicas`, no failed step.
pub fn checks(r: Option<&Reaction>) -> Vec<Check> {
    let spread = r.and_then(|r| r.to_replicas.as_ref());
    let failed = r.map(|r| r.failures.len() as f64);
    vec![
        Check {
            name: "Scale reaction: first report of a step -> spec.replicas, median (ms)".into(),
            value: spread.map(|s| s.median_ms),
            target: "<= 1500".into(),
            pass: spread.map(|s| s.median_ms <= 1500.0),
        },
        Check {
            name: "Scale reaction: first report of a step -> spec.replicas, p90 (ms)".into(),
            value: spread.map(|s| s.p90_ms),
            target: "<= 2000".into(),
            pass: spread.map(|s| s.p90_ms <= 2000.0),
        },
        Check {
            name: "Scale reaction: failed steps".into(),
            value: failed,
            target: "= 0".into(),
            pass: failed.map(|n| n == 0.0),
        },
    ]
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.0}"))
        .unwrap_or_else(|| "-".to_owned())
}

/// The section's table (nothing when it did not run).
pub fn table(out: &mut String, r: Option<&Reaction>) {
    let Some(r) = r else { return };
    let _ = writeln!(
        out,
        "\n## Scale reaction (autoscaler, e2e cluster, two operator replicas)\n"
    );
    if r.smoke {
        let _ = writeln!(out, "A smoke run: these figures measure nothing.\n");
    }
    let _ = writeln!(
        out,
        "| system | from a step's first load report to | median ms | p90 ms | max ms | window |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---|");
    let row = |out: &mut String, what: &str, s: Option<&Spread>| {
        let _ = writeln!(
            out,
            "| Switchyard | {what} | {} | {} | {} | reports each 1 s, decisions each 1 s |",
            ms(s.map(|s| s.median_ms)),
            ms(s.map(|s| s.p90_ms)),
            ms(s.map(|s| s.max_ms)),
        );
    };
    row(out, "`spec.replicas` up", r.to_replicas.as_ref());
    row(out, "first new pod Ready", r.to_pod_ready.as_ref());
    for (system, what, window) in PEERS {
        let _ = writeln!(out, "| {system} | {what} (published) | | | | {window} |");
    }
    if !r.stage_medians_ms.is_empty() {
        let stages: Vec<String> = r
            .stage_medians_ms
            .iter()
            .map(|(k, v)| format!("{} {}", k.trim_end_matches("Ms"), ms(*v)))
            .collect();
        let _ = writeln!(
            out,
            "\nMedian by stage (ms): {}. Steps: {}.",
            stages.join(", "),
            r.steps_ms.len()
        );
    }
    for f in &r.failures {
        let _ = writeln!(out, "\n- failed: {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRINTED: &str = r#"{"benchmark": "scale-reaction", "stepsMs": [400.5, 900.0],
        "toReplicas": {"medianMs": 400.5, "p90Ms": 900.0, "maxMs": 900.0},
        "toPodReady": {"medianMs": 1400.0, "p90Ms": 1900.0, "maxMs": 1900.0},
        "stageMediansMs": {"tickMs": 350.0, "writeMs": null}, "failures": [], "smoke": false}"#;

    #[test]
    fn reads_the_benchmark_and_renders_it_beside_the_peers() {
        let r: Reaction = serde_json::from_str(PRINTED).expect("reaction.json");
        let mut out = String::new();
        table(&mut out, Some(&r));
        assert!(
            out.contains("| Switchyard | `spec.replicas` up | 400 | 900 | 900 |"),
            "{out}"
        );
        assert!(
            out.contains("| Switchyard | first new pod Ready | 1400 | 1900 | 1900 |"),
            "{out}"
        );
        assert!(out.contains("6 s panic window, 2 s tick"), "{out}");
        assert!(out.contains("15-30 s polling"), "{out}");
        assert!(out.contains("tick 350, write -"), "{out}");
        let checks = checks(Some(&r));
        assert!(checks.iter().all(|c| c.pass == Some(true)), "{checks:?}");
    }

    #[test]
    fn a_failed_or_missing_run() {
        let mut r: Reaction = serde_json::from_str(PRINTED).expect("reaction.json");
        r.failures.push("step 0: refused".into());
        r.to_replicas = None;
        let c = checks(Some(&r));
        assert_eq!(c[0].pass, None);
        assert_eq!(c[2].pass, Some(false));
        let mut out = String::new();
        table(&mut out, Some(&r));
        assert!(out.contains("- failed: step 0: refused"), "{out}");
        assert!(checks(None).iter().all(|c| c.pass.is_none()));
        let mut none = String::new();
        table(&mut none, None);
        assert!(none.is_empty());
    }
}
