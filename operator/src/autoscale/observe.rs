//! Sums the sidecars' latest load reports into one sample per (namespace, event type) (pure).
//!
//! Router and Manager sidecars both report the same events (the router as arrivals at the edge, the
//! manager as deliveries to the app), so the two roles are summed apart and the larger figure wins
//! rather than counting each event twice.

use super::window::Sample;
use std::collections::HashMap;
use switchyard_protocol::control::v1::LoadReport;

/// Namespace and event type, borrowed from the reports (a tick over 10,000 reports builds no key).
pub type Key<'a> = (&'a str, &'a str);

#[derive(Default)]
struct Sums {
    router: Sample,
    manager: Sample,
}

fn add(into: &mut Sample, rate: f64, in_flight: f64, p99_ms: f64) {
    into.rate += rate;
    into.in_flight += in_flight;
    into.p99_ms = into.p99_ms.max(p99_ms);
}

/// One sample per (namespace, event type) from the reports of pods still reporting.
pub fn aggregate<'a>(
    reports: impl IntoIterator<Item = &'a LoadReport>,
) -> HashMap<Key<'a>, Sample> {
    let mut sums: HashMap<Key<'a>, Sums> = HashMap::new();
    for r in reports {
        for e in &r.events {
            // A NaN or negative figure from a confused sidecar must not poison the sum.
            let rate = finite(e.arrivals_per_second);
            let in_flight = f64::from(e.in_flight) + f64::from(e.queued);
            let p99 = finite(e.latency_p99_ms);
            let s = sums
                .entry((r.namespace.as_str(), e.event_type.as_str()))
                .or_default();
            let side = if r.role == "manager" {
                &mut s.manager
            } else {
                &mut s.router
            };
            add(side, rate, in_flight, p99);
        }
    }
    sums.into_iter()
        .map(|(k, s)| {
            let merged = Sample {
                rate: s.router.rate.max(s.manager.rate),
                in_flight: s.router.in_flight.max(s.manager.in_flight),
                p99_ms: s.router.p99_ms.max(s.manager.p99_ms),
            };
            (k, merged)
        })
        .collect()
}

/// The sample of one Manager's event type: what its pods reported, with the backlog read from
/// JetStream (if the type is durable and was read) as its in-flight figure when that is larger.
/// Larger, not added: the deliveries under way are both acknowledgements pending in the backlog
/// and in flight in the manager sidecars' reports, as router and manager reports overlap. A backlog
/// alone (no pod reporting, e.g. at zero replicas) is a sample too.
pub fn with_backlog(reported: Option<Sample>, backlog: Option<u64>) -> Option<Sample> {
    if reported.is_none() && backlog.is_none() {
        return None;
    }
    let mut s = reported.unwrap_or_default();
    if let Some(b) = backlog {
        s.in_flight = s.in_flight.max(b as f64);
    }
    Some(s)
}

fn finite(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 { v } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::control::v1::EventLoad;

    fn report(pod: &str, role: &str, event: &str, rate: f64, in_flight: u32) -> LoadReport {
        LoadReport {
            pod: pod.into(),
            namespace: "shop".into(),
            role: role.into(),
            events: vec![EventLoad {
                event_type: event.into(),
                arrivals_per_second: rate,
                in_flight,
                latency_p99_ms: rate,
                ..EventLoad::default()
            }],
            ..LoadReport::default()
        }
    }

    #[test]
    fn sums_pods_of_a_role_and_takes_the_larger_role() {
        let rs = [
            report("r1", "router", "orders.create", 40.0, 3),
            report("r2", "router", "orders.create", 60.0, 5),
            report("m1", "manager", "orders.create", 90.0, 12),
            report("r1", "router", "users.get", 7.0, 0),
        ];
        let got = aggregate(&rs);
        let o = got[&("shop", "orders.create")];
        assert_eq!((o.rate, o.in_flight, o.p99_ms), (100.0, 12.0, 90.0));
        assert_eq!(got[&("shop", "users.get")].rate, 7.0);
    }

    #[test]
    fn bad_figures_count_as_zero() {
        let rs = [report("r1", "router", "a", f64::NAN, 0)];
        assert_eq!(aggregate(&rs)[&("shop", "a")].rate, 0.0);
    }

    #[test]
    fn a_backlog_is_in_flight_when_larger_and_a_sample_alone() {
        let reported = Sample {
            rate: 5.0,
            in_flight: 8.0,
            p99_ms: 3.0,
        };
        let s = with_backlog(Some(reported), Some(30)).expect("sample");
        assert_eq!((s.rate, s.in_flight, s.p99_ms), (5.0, 30.0, 3.0));
        let s = with_backlog(Some(reported), Some(2)).expect("sample");
        assert_eq!(
            s.in_flight, 8.0,
            "the deliveries under way are not counted twice"
        );
        let s = with_backlog(None, Some(12)).expect("a backlog with no pod reporting");
        assert_eq!((s.rate, s.in_flight), (0.0, 12.0));
        assert_eq!(with_backlog(Some(reported), None), Some(reported));
        assert_eq!(with_backlog(None, None), None);
    }
}
