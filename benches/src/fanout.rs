//! Issue 36's fan-out figures, as pure functions of a run's results: deliveries per second counted where
//! they landed (the `fanout` section's runs carry them in `extra`: `deliveries_per_s`, `delivered`,
//! `accepted`, `lost`), fan-out efficiency (4 subscribers against 1, same run), Switchyard against EDRI's
//! router, and the handler path's p99 with a stopped observer against the same path without observers.

use crate::report::Summary;
use crate::results::{Results, ratio};

/// The section's name in `benches/run` and in every run file it writes.
pub const SECTION: &str = "fanout";

/// Deliveries per second that landed at a run's subscribers (not the publisher's rate).
pub fn deliveries_per_s(run: &Summary) -> Option<f64> {
    run.extra.get("deliveries_per_s").copied()
}

/// Aggregate deliveries/s to 4 subscribers over deliveries/s to 1, for `mode` (`direct` or `durable`),
/// when one generator drove both.
pub fn efficiency(r: &Results, mode: &str) -> Option<f64> {
    let four = r.find(SECTION, "switchyard", Some(&format!("{mode}-4")), None)?;
    let one = r.find(SECTION, "switchyard", Some(&format!("{mode}-1")), None)?;
    same_generator(four, one)?;
    ratio(deliveries_per_s(four)?, deliveries_per_s(one)?)
}

/// Switchyard's aggregate deliveries/s to 4 direct subscribers over EDRI's to 4 components.
pub fn vs_edri(r: &Results) -> Option<f64> {
    let sy = r.find(SECTION, "switchyard", Some("direct-4"), None)?;
    let edri = r.find(SECTION, "edri", Some("4"), None)?;
    same_generator(sy, edri)?;
    ratio(deliveries_per_s(sy)?, deliveries_per_s(edri)?)
}

/// The handler path's p99 with a stopped observer over its p99 without observers.
pub fn stopped_observer_p99(r: &Results) -> Option<f64> {
    let stopped = r.find(SECTION, "switchyard", Some("observer-stopped"), None)?;
    let none = r.find(SECTION, "switchyard", Some("observers-none"), None)?;
    same_generator(stopped, none)?;
    // A run that failed requests has no p99 worth comparing.
    (stopped.requests > 0 && none.requests > 0).then_some(())?;
    ratio(stopped.p99_us, none.p99_us)
}

fn same_generator(a: &Summary, b: &Summary) -> Option<()> {
    (a.generator == b.generator).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::run;

    fn delivering(variant: &str, system: &str, per_s: f64) -> Summary {
        let mut s = run(SECTION, system, Some(variant), 32, per_s);
        s.extra.insert("deliveries_per_s".into(), per_s);
        s
    }

    #[test]
    fn efficiency_compares_deliveries_that_landed_not_publishes() {
        let mut four = delivering("direct-4", "switchyard", 36_000.0);
        four.rps = 9_000.0; // publishes/s: a quarter of the deliveries
        let r = Results {
            runs: vec![
                delivering("direct-1", "switchyard", 40_000.0),
                four,
                delivering("durable-1", "switchyard", 10_000.0),
                delivering("durable-4", "switchyard", 5_000.0),
                delivering("4", "edri", 1_000.0),
            ],
            ..Results::default()
        };
        assert_eq!(efficiency(&r, "direct"), Some(0.9));
        assert_eq!(efficiency(&r, "durable"), Some(0.5));
        assert_eq!(vs_edri(&r), Some(36.0));
    }

    #[test]
    fn no_ratio_without_both_runs_their_deliveries_or_one_generator() {
        let mut one = delivering("direct-1", "switchyard", 40_000.0);
        one.generator = Some("wrk 4.1.0 -t1".into());
        let mut bare_four = run(SECTION, "switchyard", Some("direct-4"), 32, 9_000.0);
        let r = Results {
            runs: vec![one.clone(), bare_four.clone()],
            ..Results::default()
        };
        assert_eq!(efficiency(&r, "direct"), None, "no deliveries counted");
        bare_four.extra.insert("deliveries_per_s".into(), 36_000.0);
        let r = Results {
            runs: vec![one, bare_four],
            ..Results::default()
        };
        assert_eq!(efficiency(&r, "direct"), None, "two generators");
        assert_eq!(efficiency(&r, "durable"), None, "not measured");
    }

    #[test]
    fn stopped_observer_is_its_p99_over_the_path_without_observers() {
        let mut none = run(SECTION, "switchyard", Some("observers-none"), 32, 20_000.0);
        none.p99_us = 2_000.0;
        let mut stopped = run(
            SECTION,
            "switchyard",
            Some("observer-stopped"),
            32,
            19_000.0,
        );
        stopped.p99_us = 2_300.0;
        let r = Results {
            runs: vec![none, stopped],
            ..Results::default()
        };
        assert_eq!(stopped_observer_p99(&r), Some(1.15));
    }
}
