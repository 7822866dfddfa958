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

/// The hash of the tick's maps: their keys are short strings looked up 10,000 times a tick, where
/// SipHash was most of the aggregation. Seeded per process; the keys are namespaces and event types
/// the control plane already checked against the reporting pod's owner.
pub type Hash = foldhash::fast::RandomState;

#[derive(Clone, Copy, Default)]
struct Sums {
    router: Sample,
    manager: Sample,
}

impl Sums {
    /// The larger role's figures: both roles see the same events.
    fn merged(&self) -> Sample {
        Sample {
            rate: self.router.rate.max(self.manager.rate),
            in_flight: self.router.in_flight.max(self.manager.in_flight),
            p99_ms: self.router.p99_ms.max(self.manager.p99_ms),
        }
    }
}

/// One sample per (namespace, event type) of one tick: the sums of each role, merged when read
/// (so aggregating fills one map, and a key no Manager asks for is never merged).
#[derive(Default)]
pub struct Samples<'a> {
    sums: HashMap<Key<'a>, Sums, Hash>,
}

impl Samples<'_> {
    /// The sample of `event` in namespace `ns`, if a pod reported it.
    pub fn get(&self, ns: &str, event: &str) -> Option<Sample> {
        self.sums.get(&(ns, event)).map(Sums::merged)
    }

    /// How many (namespace, event type) were reported (the tick only looks keys up).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sums.len()
    }

    /// Whether no pod reported anything.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.sums.is_empty()
    }
}

fn add(into: &mut Sample, rate: f64, in_flight: f64, p99_ms: f64) {
    into.rate += rate;
    into.in_flight += in_flight;
    into.p99_ms = into.p99_ms.max(p99_ms);
}

/// One sample per (namespace, event type) from the reports of pods still reporting.
pub fn aggregate<'a>(reports: impl IntoIterator<Item = &'a LoadReport>) -> Samples<'a> {
    let reports = reports.into_iter();
    // Most reports carry one event type, and several pods report each: a quarter of the reports
    // is room for the keys of most meshes without a rehash mid-tick.
    let mut sums: HashMap<Key<'a>, Sums, Hash> =
        HashMap::with_capacity_and_hasher(reports.size_hint().0 / 4, Hash::default());
    for r in reports {
        let manager = r.role == "manager";
        for e in &r.events {
            // A NaN or negative figure from a confused sidecar must not poison the sum.
            let rate = finite(e.arrivals_per_second);
            let in_flight = f64::from(e.in_flight) + f64::from(e.queued);
            let p99 = finite(e.latency_p99_ms);
            let s = sums
                .entry((r.namespace.as_str(), e.event_type.as_str()))
                .or_default();
            let side = if manager {
                &mut s.manager
            } else {
                &mut s.router
            };
            add(side, rate, in_flight, p99);
        }
    }
    Samples { sums }
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
        assert_eq!(got.len(), 2);
        let o = got.get("shop", "orders.create").expect("reported");
        assert_eq!((o.rate, o.in_flight, o.p99_ms), (100.0, 12.0, 90.0));
        assert_eq!(got.get("shop", "users.get").map(|s| s.rate), Some(7.0));
        assert_eq!(got.get("shop", "nope"), None);
        assert_eq!(got.get("other", "users.get"), None);
        assert!(aggregate(&[]).is_empty());
    }

    #[test]
    fn bad_figures_count_as_zero() {
        let rs = [report("r1", "router", "a", f64::NAN, 0)];
        assert_eq!(aggregate(&rs).get("shop", "a").map(|s| s.rate), Some(0.0));
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
