//! Turns two snapshots of the counters into one load report (pure).

use super::meter::{BOUNDS_US, BUCKETS, Counts};
use std::sync::Arc;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

/// Who reports: fixed for the life of the process.
#[derive(Clone, Debug)]
pub(crate) struct Reporter {
    /// Pod name.
    pub pod: String,
    /// Namespace.
    pub namespace: String,
    /// `router` or `manager`.
    pub role: &'static str,
    /// Router or Manager the pod belongs to.
    pub owner: String,
}

impl Reporter {
    /// The pod `pod` of `role`, in the Router or Manager `owner` of `namespace`.
    pub(crate) fn new(role: &'static str, pod: &str, namespace: &str, owner: &str) -> Reporter {
        Reporter {
            pod: pod.to_owned(),
            namespace: namespace.to_owned(),
            role,
            owner: owner.to_owned(),
        }
    }
}

/// The `q` quantile (0..1) in milliseconds of the latencies counted in `buckets`, interpolated
/// linearly inside the bucket like Prometheus' `histogram_quantile`; 0 when nothing was counted.
pub(crate) fn quantile_ms(buckets: &[u64; BUCKETS], q: f64) -> f64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0u64;
    for (i, n) in buckets.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        if (seen + n) as f64 >= rank {
            let lower = if i == 0 { 0 } else { BOUNDS_US[i - 1] } as f64;
            // The open last bucket reports its lower bound: nothing better is known.
            let Some(upper) = BOUNDS_US.get(i).map(|u| *u as f64) else {
                return lower / 1000.0;
            };
            let within = ((rank - seen as f64) / *n as f64).clamp(0.0, 1.0);
            return (lower + (upper - lower) * within) / 1000.0;
        }
        seen += n;
    }
    BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1000.0
}

/// The load of one event type between two snapshots `window_ms` apart.
pub(crate) fn event_load(event: &str, before: &Counts, now: &Counts, window_ms: u32) -> EventLoad {
    let secs = f64::from(window_ms.max(1)) / 1000.0;
    let mut latency = [0u64; BUCKETS];
    for (i, slot) in latency.iter_mut().enumerate() {
        *slot = now.latency[i].saturating_sub(before.latency[i]);
    }
    EventLoad {
        event_type: event.to_owned(),
        arrivals_per_second: now.arrivals.saturating_sub(before.arrivals) as f64 / secs,
        // Apart, so the operator's sum of the two counts each event once.
        in_flight: u32::try_from(now.in_flight.saturating_sub(now.queued)).unwrap_or(u32::MAX),
        queued: u32::try_from(now.queued).unwrap_or(u32::MAX),
        latency_p50_ms: quantile_ms(&latency, 0.5),
        latency_p99_ms: quantile_ms(&latency, 0.99),
        shed: now.shed.saturating_sub(before.shed),
    }
}

/// One report from the previous and current snapshots (both sorted by event type).
pub(crate) fn build(
    who: &Reporter,
    before: &[(Arc<str>, Counts)],
    now: &[(Arc<str>, Counts)],
    timestamp_ms: u64,
    window_ms: u32,
) -> LoadReport {
    let zero = Counts::default();
    let events = now
        .iter()
        .map(|(event, counts)| {
            let prev = before
                .binary_search_by(|(e, _)| e.cmp(event))
                .map_or(&zero, |i| &before[i].1);
            event_load(event, prev, counts, window_ms)
        })
        .collect();
    LoadReport {
        pod: who.pod.clone(),
        namespace: who.namespace.clone(),
        role: who.role.to_owned(),
        owner: who.owner.clone(),
        timestamp_ms,
        window_ms,
        events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(arrivals: u64, in_flight: u64, shed: u64, fast: u64, slow: u64) -> Counts {
        let mut latency = [0; BUCKETS];
        latency[2] = fast;
        latency[8] = slow;
        Counts {
            arrivals,
            completions: fast + slow,
            in_flight,
            queued: 0,
            shed,
            latency,
        }
    }

    #[test]
    fn rates_and_shed_are_differences_over_the_window() {
        let l = event_load("a", &counts(10, 0, 1, 0, 0), &counts(30, 4, 3, 0, 0), 2000);
        assert_eq!(l.arrivals_per_second, 10.0);
        assert_eq!(l.in_flight, 4);
        assert_eq!(l.shed, 2);
        assert_eq!(l.latency_p99_ms, 0.0);
    }

    #[test]
    fn waiting_events_are_queued_not_in_flight() {
        let mut now = counts(10, 5, 0, 0, 0);
        now.queued = 2;
        let l = event_load("a", &Counts::default(), &now, 1000);
        assert_eq!((l.in_flight, l.queued), (3, 2));
    }

    #[test]
    fn quantiles_land_in_the_right_bucket() {
        let l = event_load("a", &Counts::default(), &counts(100, 0, 0, 98, 2), 1000);
        // 98 of 100 in bucket 2 (0.25..0.625 ms), the slowest 2 in bucket 8 (61..152 ms).
        assert!(
            l.latency_p50_ms > 0.25 && l.latency_p50_ms <= 0.625,
            "{l:?}"
        );
        assert!(
            l.latency_p99_ms > 61.0 && l.latency_p99_ms <= 152.6,
            "{l:?}"
        );
    }

    #[test]
    fn the_open_bucket_reports_its_lower_bound() {
        let mut b = [0; BUCKETS];
        b[BUCKETS - 1] = 5;
        assert_eq!(quantile_ms(&b, 0.99), 37_252.903);
    }

    #[test]
    fn new_event_types_start_from_zero() {
        let who = Reporter {
            pod: "p".into(),
            namespace: "ns".into(),
            role: "router",
            owner: "shop".into(),
        };
        let now = vec![(Arc::from("a"), counts(5, 1, 0, 0, 0))];
        let r = build(&who, &[], &now, 7, 1000);
        assert_eq!(r.events.len(), 1);
        assert_eq!(r.events[0].arrivals_per_second, 5.0);
        assert_eq!((r.role.as_str(), r.timestamp_ms), ("router", 7));
    }
}
