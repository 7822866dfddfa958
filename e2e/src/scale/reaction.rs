//! The scale-reaction benchmark's arithmetic (pure): the leader's `scaled` log line read back, one
//! step's times turned into its stages, the control plane's refusals between two readings, and
//! the summary of the steps.

use super::stats::quantile;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// What the leader's `scaled` line says of one scale-up.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaled {
    /// When it was logged (the write had gone through).
    pub at: SystemTime,
    /// Ticks waited after the first decision that wanted more pods, ms.
    pub reaction_ms: u64,
    /// The scale write (scale subresource patch), ms.
    pub write_ms: u64,
    /// From its tick's start to the write's end, ms.
    pub since_tick_ms: u64,
}

/// The `field=value` of a text log line (values end at a space; `Some(12)` is 12).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=");
    let at = line.find(&key)? + key.len();
    let v = line[at..].split(' ').next()?;
    Some(
        v.strip_prefix("Some(")
            .map_or(v, |v| v.trim_end_matches(')')),
    )
}

/// The first `scaled` line of Manager `ns/manager` in an operator's text log, if any.
pub fn scaled_line(log: &str, ns: &str, manager: &str) -> Option<Scaled> {
    log.lines().find_map(|line| {
        if !line.contains(" scaled ")
            || field(line, "manager") != Some(manager)
            || field(line, "namespace") != Some(ns)
        {
            return None;
        }
        let stamp = line.split_whitespace().next()?;
        let at: SystemTime = chrono::DateTime::parse_from_rfc3339(stamp).ok()?.into();
        Some(Scaled {
            at,
            reaction_ms: field(line, "reaction_ms")?.parse().ok()?,
            write_ms: field(line, "write_ms")?.parse().ok()?,
            since_tick_ms: field(line, "since_tick_ms")?.parse().ok()?,
        })
    })
}

/// The moments of one step, on the host's wall clock (the operator logs on the same clock).
#[derive(Clone, Debug)]
pub struct StepTimes {
    /// The first report carrying the step left the stand-in router.
    pub sent: SystemTime,
    /// The leader counted it (its `control_plane_load_reports` moved), if seen.
    pub ingested: Option<SystemTime>,
    /// The leader's `scaled` line.
    pub scaled: Option<Scaled>,
    /// A watch saw the Manager's `spec.replicas` go up.
    pub replicas: Option<SystemTime>,
    /// A watch saw its Deployment's `spec.replicas` go up.
    pub deployment: Option<SystemTime>,
    /// A watch saw the first new pod Ready.
    pub pod_ready: Option<SystemTime>,
}

/// Where one step's time went, ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stages {
    /// Report sent -> counted by the leader (through the standby's forward).
    pub ingest_ms: Option<f64>,
    /// Counted -> the start of the first tick that wanted more pods.
    pub tick_ms: Option<f64>,
    /// That tick -> the write began: ticks waited for the decision, and the decision itself.
    pub decision_ms: Option<f64>,
    /// The scale subresource patch.
    pub write_ms: Option<f64>,
    /// Written -> the benchmark's watch saw `spec.replicas` go up.
    pub seen_ms: Option<f64>,
    /// `spec.replicas` -> the Deployment's (the operator's Manager controller).
    pub deployment_ms: Option<f64>,
    /// The Deployment's -> the first new pod Ready (Deployment controller, scheduler, kubelet).
    pub pod_ready_ms: Option<f64>,
}

/// `b - a` in ms; None when either is missing (a negative span is clamped to 0: the two clocks
/// read are the same, but a log line carries microseconds only).
fn span(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<f64> {
    let (a, b) = (a?, b?);
    Some(match b.duration_since(a) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(_) => 0.0,
    })
}

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

impl StepTimes {
    /// First report -> `spec.replicas` up, ms.
    pub fn to_replicas_ms(&self) -> Option<f64> {
        span(Some(self.sent), self.replicas)
    }

    /// First report -> the first new pod Ready, ms.
    pub fn to_pod_ready_ms(&self) -> Option<f64> {
        span(Some(self.sent), self.pod_ready)
    }

    /// The stages (those the readings allow).
    pub fn stages(&self) -> Stages {
        let s = self.scaled.as_ref();
        let write_started = s.and_then(|s| s.at.checked_sub(ms(s.write_ms)));
        let tick_started = s.and_then(|s| s.at.checked_sub(ms(s.since_tick_ms)));
        let first_want = s.and_then(|s| tick_started?.checked_sub(ms(s.reaction_ms)));
        Stages {
            ingest_ms: span(Some(self.sent), self.ingested),
            tick_ms: span(self.ingested, first_want),
            decision_ms: span(first_want, write_started),
            write_ms: s.map(|s| s.write_ms as f64),
            seen_ms: span(s.map(|s| s.at), self.replicas),
            deployment_ms: span(self.replicas, self.deployment),
            pod_ready_ms: span(self.deployment, self.pod_ready),
        }
    }
}

/// Median, p90 and max of some ms figures (nearest rank), or None without any.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Median.
    pub median_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// The spread of `v` (None when empty).
pub fn spread(v: &[f64]) -> Option<Spread> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    (!s.is_empty()).then(|| Spread {
        median_ms: round(quantile(&s, 0.5)),
        p90_ms: round(quantile(&s, 0.9)),
        max_ms: round(s[s.len() - 1]),
    })
}

/// `switchyard_operator_control_plane_refused_total` by reason, from one `/metrics` text.
pub type Refused = BTreeMap<String, f64>;

/// The refusals counted between `before` and `after`, as "reason ×n" (empty: none).
pub fn refused_since(before: &Refused, after: &Refused) -> Vec<String> {
    after
        .iter()
        .filter_map(|(reason, n)| {
            let d = n - before.get(reason).copied().unwrap_or(0.0);
            (d > 0.0).then(|| format!("{reason} ×{d}"))
        })
        .collect()
}

/// What a refusal reason means for the stand-in router's reports, for the failure line.
pub fn explain(reason: &str) -> &'static str {
    match reason {
        "unknown_event" => {
            "load entries for event types the reporting Router does not route were dropped"
        }
        "load_book_full" => "the leader's load book is full; reports of new pods are dropped",
        _ => "see the operators' logs (control-plane call refused)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "2026-12-06T00:10:01.250000Z  INFO scale{otel.name=\"scale manager\" k8s.namespace.name=ns1}: switchyard_operator::autoscale: scaled manager=bench0 namespace=ns1 from=1 to=4 reaction_ms=Some(0) write_ms=30 since_tick_ms=32 reason=panic: step0 in flight 40.0 > 4×10";

    #[test]
    fn reads_the_scaled_line_of_one_manager() {
        let log = format!("noise\n{}\n{LINE}\n", LINE.replace("bench0", "bench1"));
        let s = scaled_line(&log, "ns1", "bench0").expect("a scaled line");
        assert_eq!((s.reaction_ms, s.write_ms, s.since_tick_ms), (0, 30, 32));
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T00:10:01.25Z").expect("time");
        assert_eq!(s.at, SystemTime::from(at));
        assert!(scaled_line(&log, "ns2", "bench0").is_none());
        assert!(scaled_line(&log, "ns1", "bench").is_none());
        let none = LINE.replace("reaction_ms=Some(0)", "reaction_ms=None");
        assert!(scaled_line(&none, "ns1", "bench0").is_none());
    }

    #[test]
    fn a_steps_time_is_split_into_stages() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        let times = StepTimes {
            sent: t0,
            ingested: at(3),
            scaled: Some(Scaled {
                at: t0 + Duration::from_millis(1_540),
                reaction_ms: 1_000,
                write_ms: 30,
                since_tick_ms: 40,
            }),
            replicas: at(1_560),
            deployment: at(1_600),
            pod_ready: at(2_600),
        };
        let s = times.stages();
        // The deciding tick began at 1500, the first wanting one at 500: 497 ms waiting for it.
        assert_eq!(s.ingest_ms, Some(3.0));
        assert_eq!(s.tick_ms, Some(497.0));
        assert_eq!(s.decision_ms, Some(1_010.0));
        assert_eq!(s.write_ms, Some(30.0));
        assert_eq!(s.seen_ms, Some(20.0));
        assert_eq!(s.deployment_ms, Some(40.0));
        assert_eq!(s.pod_ready_ms, Some(1_000.0));
        assert_eq!(times.to_replicas_ms(), Some(1_560.0));
        assert_eq!(times.to_pod_ready_ms(), Some(2_600.0));
        let missing = StepTimes {
            scaled: None,
            pod_ready: None,
            ..times
        };
        assert_eq!(missing.stages().tick_ms, None);
        assert_eq!(missing.to_pod_ready_ms(), None);
    }

    #[test]
    fn spreads_and_refusals() {
        let s = spread(&[300.0, 100.0, 200.0, f64::NAN]).expect("some");
        assert_eq!((s.median_ms, s.p90_ms, s.max_ms), (200.0, 300.0, 300.0));
        assert!(spread(&[]).is_none());
        let before = Refused::from([("unknown_event".to_owned(), 2.0)]);
        let after = Refused::from([
            ("unknown_event".to_owned(), 7.0),
            ("oversized".to_owned(), 0.0),
        ]);
        assert_eq!(refused_since(&before, &after), ["unknown_event ×5"]);
        assert!(refused_since(&after, &after).is_empty());
    }
}
