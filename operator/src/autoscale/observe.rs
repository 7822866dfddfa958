//! Sums the sidecars' latest load reports into one sample per (namespace, event type) (pure).
//!
//! Router and Manager sidecars both report the same events (the router as arrivals at the edge, the
//! manager as deliveries to the app), so the two roles are summed apart and the larger figure wins
//! rather than counting each event twice. Manager reports are summed per owning Manager: since
//! subscriptions, several Managers' pods report the same type (its handler, and a subscriber whose
//! subscription names it), and each is scaled on its own pods' load.

use super::window::Sample;
use std::collections::HashMap;
use switchyard_protocol::control::v1::LoadReport;

/// Namespace and event type, borrowed from the reports (a tick over 10,000 reports builds no key).
pub(crate) type Key<'a> = (&'a str, &'a str);
/// Namespace, owning Manager and event type (or subscription pattern), borrowed from the reports.
pub(crate) type OwnedKey<'a> = (&'a str, &'a str, &'a str);

/// The hash of the tick's maps: their keys are short strings looked up 10,000 times a tick, where
/// SipHash was most of the aggregation. Seeded per process; the keys are namespaces and event types
/// the control plane already checked against the reporting pod's owner.
pub(crate) type Hash = foldhash::fast::RandomState;

/// The larger of two roles' figures: both roles see the same events.
fn merged(router: &Sample, manager: &Sample) -> Sample {
    Sample {
        rate: router.rate.max(manager.rate),
        in_flight: router.in_flight.max(manager.in_flight),
        p99_ms: router.p99_ms.max(manager.p99_ms),
        shed: router.shed.max(manager.shed),
    }
}

/// The samples of one tick: the routers' sums per (namespace, event type) and the managers' per
/// (namespace, Manager, event type or subscription), merged when read (so aggregating fills two
/// maps, and a key no Manager asks for is never merged).
#[derive(Default)]
pub struct Samples<'a> {
    router: HashMap<Key<'a>, Sample, Hash>,
    manager: HashMap<OwnedKey<'a>, Sample, Hash>,
}

impl Samples<'_> {
    /// The sample of `event`, a type Manager `manager` of namespace `ns` handles: its routers'
    /// arrivals or its own pods' deliveries, the larger; None if no pod reported it.
    pub fn get(&self, ns: &str, manager: &str, event: &str) -> Option<Sample> {
        let r = self.router.get(&(ns, event));
        let m = self.manager.get(&(ns, manager, event));
        match (r, m) {
            (None, None) => None,
            (r, m) => Some(merged(
                &r.copied().unwrap_or_default(),
                &m.copied().unwrap_or_default(),
            )),
        }
    }

    /// The sample of subscription `event` (a type or a pattern, as the subscription names it) of
    /// Manager `manager` of namespace `ns`: its own pods' reports alone (a Router's arrivals of the
    /// type are its handler's load, not a subscriber's).
    pub fn subscription(&self, ns: &str, manager: &str, event: &str) -> Option<Sample> {
        self.manager.get(&(ns, manager, event)).copied()
    }

    /// How many keys were reported (the tick only looks keys up).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.router.len() + self.manager.len()
    }

    /// Whether no pod reported anything.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.router.is_empty() && self.manager.is_empty()
    }
}

fn add(into: &mut Sample, from: &Sample) {
    into.rate += from.rate;
    into.in_flight += from.in_flight;
    into.p99_ms = into.p99_ms.max(from.p99_ms);
    into.shed += from.shed;
}

/// Events shed per second: a report counts them over its window.
fn per_second(count: u64, window_ms: u32) -> f64 {
    if window_ms == 0 {
        return 0.0;
    }
    count as f64 * 1000.0 / f64::from(window_ms)
}

/// One sample per (namespace, event type) from the reports of pods still reporting.
pub fn aggregate<'a>(reports: impl IntoIterator<Item = &'a LoadReport>) -> Samples<'a> {
    let reports = reports.into_iter();
    // Most reports carry one event type, and several pods report each: a quarter of the reports
    // is room for the keys of most meshes without a rehash mid-tick (most reports are managers').
    let mut samples = Samples {
        router: HashMap::with_hasher(Hash::default()),
        manager: HashMap::with_capacity_and_hasher(reports.size_hint().0 / 4, Hash::default()),
    };
    for r in reports {
        let manager = r.role == "manager";
        for e in &r.events {
            // A NaN or negative figure from a confused sidecar must not poison the sum.
            let sample = Sample {
                rate: finite(e.arrivals_per_second),
                in_flight: f64::from(e.in_flight) + f64::from(e.queued),
                p99_ms: finite(e.latency_p99_ms),
                shed: per_second(e.shed, r.window_ms),
            };
            let (ns, event) = (r.namespace.as_str(), e.event_type.as_str());
            let side = if manager {
                samples
                    .manager
                    .entry((ns, r.owner.as_str(), event))
                    .or_default()
            } else {
                samples.router.entry((ns, event)).or_default()
            };
            add(side, &sample);
        }
    }
    samples
}

/// The sample of one Manager's event type: what its pods reported, with the backlog read from
/// JetStream (if the type is durable and was read) as its in-flight figure when that is larger.
/// Larger, not added: the deliveries under way are both acknowledgements pending in the backlog
/// and in flight in the manager sidecars' reports, as router and manager reports overlap. A backlog
/// alone (no pod reporting, e.g. at zero replicas) is a sample too.
pub(crate) fn with_backlog(reported: Option<Sample>, backlog: Option<u64>) -> Option<Sample> {
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
        owned(pod, role, "orders", event, rate, in_flight)
    }

    fn owned(
        pod: &str,
        role: &str,
        owner: &str,
        event: &str,
        rate: f64,
        in_flight: u32,
    ) -> LoadReport {
        LoadReport {
            pod: pod.into(),
            namespace: "shop".into(),
            role: role.into(),
            owner: owner.into(),
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
        assert_eq!(got.len(), 3);
        let o = got
            .get("shop", "orders", "orders.create")
            .expect("reported");
        assert_eq!((o.rate, o.in_flight, o.p99_ms), (100.0, 12.0, 90.0));
        let u = got.get("shop", "orders", "users.get").map(|s| s.rate);
        assert_eq!(
            u,
            Some(7.0),
            "a router's arrivals count for the type's Manager"
        );
        assert_eq!(got.get("shop", "orders", "nope"), None);
        assert_eq!(got.get("other", "orders", "users.get"), None);
        assert!(aggregate(&[]).is_empty());
    }

    #[test]
    fn each_manager_counts_its_own_pods_and_a_subscription_only_them() {
        // The handler of orders.created and a subscriber of it (by name) and of orders.* report
        // the same type: neither is scaled on the other's pods.
        let rs = [
            owned("o1", "manager", "orders", "orders.created", 50.0, 4),
            owned("b1", "manager", "billing", "orders.created", 20.0, 30),
            owned("b2", "manager", "billing", "orders.created", 10.0, 10),
            owned("a1", "manager", "audit", "orders.*", 70.0, 2),
            owned("r1", "router", "edge", "orders.created", 60.0, 1),
        ];
        let got = aggregate(&rs);
        let o = got
            .get("shop", "orders", "orders.created")
            .expect("handler");
        assert_eq!((o.rate, o.in_flight), (60.0, 4.0));
        let b = got
            .subscription("shop", "billing", "orders.created")
            .expect("subscriber");
        assert_eq!(
            (b.rate, b.in_flight),
            (30.0, 40.0),
            "its own two pods, not the router's arrivals nor the handler's pods"
        );
        let a = got
            .subscription("shop", "audit", "orders.*")
            .expect("pattern");
        assert_eq!((a.rate, a.in_flight), (70.0, 2.0));
        assert_eq!(got.subscription("shop", "audit", "orders.created"), None);
        assert_eq!(got.subscription("shop", "shipping", "orders.*"), None);
    }

    #[test]
    fn sheds_are_per_second_of_each_reports_window_and_summed_over_pods() {
        let shed = |pod: &str, count: u64, window_ms: u32| {
            let mut r = owned(pod, "manager", "audit", "orders.*", 1.0, 0);
            r.window_ms = window_ms;
            r.events[0].shed = count;
            r
        };
        let rs = [shed("a1", 10, 500), shed("a2", 3, 1_000), shed("a3", 7, 0)];
        let got = aggregate(&rs);
        let a = got
            .subscription("shop", "audit", "orders.*")
            .expect("pattern");
        assert_eq!(
            a.shed, 23.0,
            "20/s and 3/s; a report without a window counts none"
        );
    }

    #[test]
    fn bad_figures_count_as_zero() {
        let rs = [report("r1", "router", "a", f64::NAN, 0)];
        let got = aggregate(&rs);
        assert_eq!(got.get("shop", "orders", "a").map(|s| s.rate), Some(0.0));
    }

    #[test]
    fn a_backlog_is_in_flight_when_larger_and_a_sample_alone() {
        let reported = Sample {
            rate: 5.0,
            in_flight: 8.0,
            p99_ms: 3.0,
            shed: 0.0,
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
