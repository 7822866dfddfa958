//! Everything one benchmark run recorded, as the report reads it back from the results folder, and the
//! look-ups the targets, the summary and the plots share. Pure: loading lives in the report binary.

use crate::lapin::Lapinbeam;
use crate::mesh::Handshakes;
use crate::procs::{Sample, Usage};
use crate::report::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One run's results.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    /// Every load run, labelled with section, system and variant; the rounds of an interleaved run folded
    /// into one run of medians ([`crate::rounds::fold`]).
    pub runs: Vec<Summary>,
    /// The runs of interleaved rounds as measured, one per round, before folding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Summary>,
    /// Process snapshots by name (`noop_switchyard_idle`, `pair_before`, ...).
    pub procs: BTreeMap<String, Vec<Usage>>,
    /// RSS series by name (`plateau_sustained`, `pair_c128`, ...).
    pub samples: BTreeMap<String, Vec<Sample>>,
    /// lapinbeam's figures from its runner, when it ran.
    pub lapinbeam: Option<Lapinbeam>,
    /// Mesh TLS handshake counters of a system's sidecars by snapshot name (`noop_switchyard_before`,
    /// `noop_switchyard_after`, `noop_plaintext_after`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub handshakes: BTreeMap<String, Handshakes>,
    /// Flat CPU profiles by name (`perf report` text: share, process, symbol per line).
    pub profiles: BTreeMap<String, String>,
    /// The autoscaler's reaction (`reaction.json` of the `reaction` section), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaction: Option<crate::reaction::Reaction>,
    /// `section system: why` for every peer or step that did not run.
    pub missing: Vec<String>,
    /// Machine, commit, knobs and peer versions.
    pub meta: serde_json::Value,
}

fn is(label: &Option<String>, want: &str) -> bool {
    label.as_deref() == Some(want)
}

impl Results {
    /// The run of `system` in `section` with `variant` (any variant when `None`) at concurrency `c` (any when
    /// `None`).
    pub fn find(
        &self,
        section: &str,
        system: &str,
        variant: Option<&str>,
        c: Option<usize>,
    ) -> Option<&Summary> {
        self.runs.iter().find(|r| {
            is(&r.section, section)
                && is(&r.system, system)
                && variant.is_none_or(|v| is(&r.variant, v))
                && c.is_none_or(|c| r.concurrency == c)
        })
    }

    /// Runs of a section, in recorded order.
    pub fn section<'a>(&'a self, section: &'a str) -> impl Iterator<Item = &'a Summary> + 'a {
        self.runs.iter().filter(move |r| is(&r.section, section))
    }

    /// Systems of a section in first-seen order.
    pub fn systems(&self, section: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.section(section) {
            if let Some(s) = &r.system
                && !out.contains(s)
            {
                out.push(s.clone());
            }
        }
        out
    }

    /// Variants of a section in first-seen order.
    pub fn variants(&self, section: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.section(section) {
            if let Some(v) = &r.variant
                && !out.contains(v)
            {
                out.push(v.clone());
            }
        }
        out
    }

    /// Concurrencies of a section, ascending.
    pub fn concurrencies(&self, section: &str) -> Vec<usize> {
        let mut cs: Vec<usize> = self.section(section).map(|r| r.concurrency).collect();
        cs.sort_unstable();
        cs.dedup();
        cs
    }
}

/// `a / b` when `b` is positive.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// req/s of `a` over `b`, only when the same generator drove both (a ratio across generators would measure
/// the generators).
pub fn rps_vs(a: &Summary, b: &Summary) -> Option<f64> {
    if a.generator != b.generator {
        return None;
    }
    ratio(a.rps, b.rps)
}

/// A labelled summary, for tests.
#[cfg(test)]
pub fn run(section: &str, system: &str, variant: Option<&str>, c: usize, rps: f64) -> Summary {
    Summary {
        section: Some(section.to_owned()),
        system: Some(system.to_owned()),
        variant: variant.map(str::to_owned),
        mode: "http".to_owned(),
        concurrency: c,
        duration_s: 1.0,
        requests: rps as u64,
        rps,
        p50_us: 100.0,
        p90_us: 150.0,
        p99_us: 200.0,
        max_us: 300.0,
        ..Summary::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_labels_and_lists_in_order() {
        let r = Results {
            runs: vec![
                run("noop", "bare", None, 1, 10.0),
                run("noop", "switchyard", None, 1, 5.0),
                run("noop", "bare", None, 32, 100.0),
                run("payload", "bare", Some("1KB"), 8, 50.0),
            ],
            ..Results::default()
        };
        assert_eq!(
            r.find("noop", "bare", None, Some(32)).map(|s| s.rps),
            Some(100.0)
        );
        assert_eq!(
            r.find("payload", "bare", Some("1KB"), None).map(|s| s.rps),
            Some(50.0)
        );
        assert!(r.find("payload", "bare", Some("1MB"), None).is_none());
        assert_eq!(r.systems("noop"), ["bare", "switchyard"]);
        assert_eq!(r.concurrencies("noop"), [1, 32]);
        assert_eq!(r.variants("payload"), ["1KB"]);
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn ratios_need_one_generator_on_both_sides() {
        let mut a = run("noop", "switchyard", None, 32, 50.0);
        let mut b = run("noop", "bare", None, 32, 100.0);
        assert_eq!(rps_vs(&a, &b), Some(0.5), "old runs name no generator");
        a.generator = Some("wrk 4.1.0 -t1".into());
        assert_eq!(rps_vs(&a, &b), None);
        b.generator = Some("wrk 4.1.0 -t1".into());
        assert_eq!(rps_vs(&a, &b), Some(0.5));
    }
}
