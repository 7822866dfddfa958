//! Interleaved rounds: the runner measures A, B, C, A, B, C, ... so that a burst of other work on a shared
//! machine hits every system alike, labels each run with its round, and the report folds the rounds of one
//! run (same section, system, variant, concurrency, mode and generator) into a single run whose figures are
//! the medians of the rounds' figures, each taken on its own. Pure.

use crate::report::Summary;

/// The median of `xs` (the mean of the middle two for an even count); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

fn same_run(a: &Summary, b: &Summary) -> bool {
    a.section == b.section
        && a.system == b.system
        && a.variant == b.variant
        && a.concurrency == b.concurrency
        && a.mode == b.mode
        && a.generator == b.generator
}

/// One run per group of rounds (runs without a round pass through unchanged), in first-seen order. A folded
/// run has req/s and p50/p90/p99 as medians, the highest max, errors, requests and measured seconds summed,
/// no round, each figure of `extra` the median of the rounds that have it, and `extra["rounds"]` = how many
/// rounds it folds.
pub fn fold(runs: &[Summary]) -> Vec<Summary> {
    let mut out: Vec<Summary> = Vec::new();
    let mut groups: Vec<Vec<&Summary>> = Vec::new();
    for r in runs {
        if r.round.is_none() {
            out.push(r.clone());
            groups.push(Vec::new());
            continue;
        }
        match out
            .iter()
            .zip(groups.iter_mut())
            .find(|(o, g)| !g.is_empty() && same_run(o, r))
        {
            Some((_, g)) => g.push(r),
            None => {
                out.push(r.clone());
                groups.push(vec![r]);
            }
        }
    }
    for (o, g) in out.iter_mut().zip(&groups) {
        if g.is_empty() {
            continue;
        }
        let pick = |f: fn(&Summary) -> f64| median(&g.iter().map(|s| f(s)).collect::<Vec<_>>());
        o.rps = pick(|s| s.rps).unwrap_or(0.0);
        o.p50_us = pick(|s| s.p50_us).unwrap_or(0.0);
        o.p90_us = pick(|s| s.p90_us).unwrap_or(0.0);
        o.p99_us = pick(|s| s.p99_us).unwrap_or(0.0);
        o.max_us = g.iter().map(|s| s.max_us).fold(0.0, f64::max);
        o.errors = g.iter().map(|s| s.errors).sum();
        o.requests = g.iter().map(|s| s.requests).sum();
        o.duration_s = g.iter().map(|s| s.duration_s).sum();
        o.round = None;
        // A figure of a mode's own (a fan-out run's deliveries/s) is folded the same way: the median of
        // the rounds that carry it.
        let keys: Vec<String> = o.extra.keys().cloned().collect();
        for k in keys {
            let xs: Vec<f64> = g.iter().filter_map(|s| s.extra.get(&k).copied()).collect();
            if let Some(m) = median(&xs) {
                o.extra.insert(k, m);
            }
        }
        o.extra.insert("rounds".to_owned(), g.len() as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::run;

    fn round(mut s: Summary, r: u32, p50: f64) -> Summary {
        s.round = Some(r);
        s.p50_us = p50;
        s
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn folds_each_runs_rounds_into_medians_in_first_seen_order() {
        let runs = vec![
            round(run("noop", "bare", None, 32, 100.0), 1, 10.0),
            round(run("noop", "switchyard", None, 32, 30.0), 1, 50.0),
            round(run("noop", "bare", None, 32, 90.0), 2, 12.0),
            round(run("noop", "switchyard", None, 32, 40.0), 2, 40.0),
            round(run("noop", "bare", None, 32, 120.0), 3, 11.0),
            round(run("noop", "switchyard", None, 32, 20.0), 3, 45.0),
            run("core", "switchyard", Some("64"), 64, 1e6),
        ];
        let f = fold(&runs);
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].system.as_deref(), Some("bare"));
        assert_eq!((f[0].rps, f[0].p50_us), (100.0, 11.0));
        assert_eq!((f[1].rps, f[1].p50_us), (30.0, 45.0));
        assert_eq!(f[1].requests, 90, "summed over rounds");
        assert_eq!(f[1].extra.get("rounds"), Some(&3.0));
        assert_eq!(f[1].round, None);
        assert_eq!(f[2], runs[6], "a run without rounds passes through");
    }

    #[test]
    fn a_modes_own_figures_are_folded_into_medians_too() {
        let per_s = |r: u32, d: f64| {
            let mut s = round(
                run("fanout", "switchyard", Some("direct-4"), 32, 10.0),
                r,
                1.0,
            );
            s.extra.insert("deliveries_per_s".into(), d);
            s
        };
        let f = fold(&[per_s(1, 400.0), per_s(2, 100.0), per_s(3, 300.0)]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].extra.get("deliveries_per_s"), Some(&300.0));
        assert_eq!(f[0].extra.get("rounds"), Some(&3.0));
    }

    #[test]
    fn different_generators_are_not_folded_together() {
        let mut a = round(run("generator", "bare", Some("c32"), 32, 100.0), 1, 10.0);
        a.generator = Some("wrk 4.1.0 -t1".into());
        let mut b = round(run("generator", "bare", Some("c32"), 32, 70.0), 1, 10.0);
        b.generator = Some("switchyard-load -t1".into());
        assert_eq!(fold(&[a, b]).len(), 2);
    }
}
