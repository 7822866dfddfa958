//! Two scrapes of the sidecars' `/metrics` -> what `switchyard top` shows: per event type and role,
//! the request rate, the share answered without a server error, p50 and p99 of the latency (from
//! the duration histogram's buckets, interpolated as Prometheus' `histogram_quantile` does); per
//! subscription, the deliveries its subscriber's pods made (they name their subscriptions in
//! `switchyard_subscription_info`) and the request and answer copies sent, shed and failed for it
//! (`switchyard_observer_copies_total`, counted where the copies leave); per sidecar, the
//! requests in flight, queued and held. Pure.

use super::prom::Sample;
use std::collections::BTreeMap;

/// One sidecar's scrape.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// `router` or `manager` (or `sidecar` when not known).
    pub role: String,
    /// Router or Manager (replica, pod) name.
    pub name: String,
    /// Where it was read.
    pub address: String,
    /// The samples, or why there are none.
    pub samples: Result<Vec<Sample>, String>,
}

/// One line of the event table.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EventRow {
    /// Event type (`unmatched` for requests no route matched).
    pub event: String,
    /// Where the requests were counted: `router` (clients' requests) or `manager` (deliveries).
    pub role: String,
    /// Requests answered per second over the interval.
    pub rate: f64,
    /// Share answered with a status below 500, `None` without requests.
    pub success: Option<f64>,
    /// Median latency in milliseconds, `None` without requests.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency in milliseconds.
    pub p99_ms: Option<f64>,
}

/// One line of the sidecar table.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SidecarRow {
    /// `router` or `manager`.
    pub role: String,
    /// Name.
    pub name: String,
    /// Admin address or pod proxy path.
    pub address: String,
    /// `switchyard_in_flight`.
    pub in_flight: Option<f64>,
    /// `switchyard_queued`.
    pub queued: Option<f64>,
    /// `switchyard_held_requests`.
    pub held: Option<f64>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// One line of the subscription table.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SubscriptionRow {
    /// Its route key, `<event>@<manager>`.
    pub subscription: String,
    /// Events delivered to the subscriber's app per second (publishes and copies).
    pub rate: f64,
    /// Share of those its app answered without a server error, `None` without deliveries.
    pub success: Option<f64>,
    /// 99th percentile of the deliveries' latency in milliseconds.
    pub p99_ms: Option<f64>,
    /// Request and answer copies per second sent to it and admitted.
    pub copies_sent: f64,
    /// Copies per second shed before sending (too many underway at the sender).
    pub copies_shed: f64,
    /// Copies per second that failed (no endpoint, refused, no acknowledgement in time).
    pub copies_failed: f64,
}

/// Everything one refresh shows.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct View {
    /// Seconds between the two scrapes.
    pub interval_seconds: f64,
    /// Per event type and role, sorted.
    pub events: Vec<EventRow>,
    /// Per subscription, sorted.
    pub subscriptions: Vec<SubscriptionRow>,
    /// Per sidecar, in source order.
    pub sidecars: Vec<SidecarRow>,
}

const REQUESTS: &str = "switchyard_requests_total";
const BUCKET: &str = "switchyard_request_duration_seconds_bucket";
const SUBSCRIPTION_INFO: &str = "switchyard_subscription_info";
const COPIES: &str = "switchyard_observer_copies_total";

/// One subscription's sums over the interval.
#[derive(Default)]
struct SubAcc {
    delivered: Acc,
    /// `sent`, `shed`, `failed`.
    copies: [f64; 3],
}

#[derive(Default)]
struct Acc {
    total: f64,
    ok: f64,
    /// `le` -> count in the interval.
    buckets: BTreeMap<OrdF64, f64>,
}

/// A bucket bound as a map key (bounds are never NaN; `+Inf` sorts last).
#[derive(Clone, Copy, Debug, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Counter increase from `before` to `after`; a smaller value means the process restarted.
fn increase(before: Option<f64>, after: f64) -> f64 {
    match before {
        Some(b) if after >= b => after - b,
        _ => after,
    }
}

fn key(s: &Sample) -> String {
    let mut k = s.name.clone();
    for (n, v) in &s.labels {
        k.push_str(&format!("|{n}={v}"));
    }
    k
}

/// The view of `now` against the scrape `secs` earlier (`before`, matched by address).
pub fn view(before: &[Scrape], now: &[Scrape], secs: f64) -> View {
    let mut acc: BTreeMap<(String, String), Acc> = BTreeMap::new();
    let mut subs: BTreeMap<String, SubAcc> = BTreeMap::new();
    let mut sidecars = Vec::new();
    for scrape in now {
        let prev: BTreeMap<String, f64> = before
            .iter()
            .find(|b| b.address == scrape.address)
            .and_then(|b| b.samples.as_ref().ok())
            .map(|ss| ss.iter().map(|s| (key(s), s.value)).collect())
            .unwrap_or_default();
        let mut row = SidecarRow {
            role: scrape.role.clone(),
            name: scrape.name.clone(),
            address: scrape.address.clone(),
            in_flight: None,
            queued: None,
            held: None,
            error: None,
        };
        match &scrape.samples {
            Err(e) => row.error = Some(e.clone()),
            Ok(samples) => {
                // This pod's subscriptions: the event label its deliveries are counted under.
                let mine: BTreeMap<&str, &str> = samples
                    .iter()
                    .filter(|s| s.name == SUBSCRIPTION_INFO)
                    .filter_map(|s| Some((s.label("event")?, s.label("subscription")?)))
                    .collect();
                for s in samples {
                    let d = || increase(prev.get(&key(s)).copied(), s.value);
                    if s.name == COPIES {
                        let (Some(sub), Some(outcome)) =
                            (s.label("subscription"), s.label("outcome"))
                        else {
                            continue;
                        };
                        let at = match outcome {
                            "sent" => 0,
                            "shed" => 1,
                            _ => 2,
                        };
                        subs.entry(sub.to_owned()).or_default().copies[at] += d();
                        continue;
                    }
                    let Some(event) = s.label("event").filter(|_| s.name != SUBSCRIPTION_INFO)
                    else {
                        match s.name.as_str() {
                            "switchyard_in_flight" => row.in_flight = Some(s.value),
                            "switchyard_queued" => row.queued = Some(s.value),
                            "switchyard_held_requests" => row.held = Some(s.value),
                            _ => {}
                        }
                        continue;
                    };
                    let d = d();
                    let a = acc
                        .entry((event.to_owned(), scrape.role.clone()))
                        .or_default();
                    add(a, s, d);
                    if let Some(sub) = mine.get(event) {
                        add(
                            &mut subs.entry((*sub).to_owned()).or_default().delivered,
                            s,
                            d,
                        );
                    }
                }
            }
        }
        sidecars.push(row);
    }
    let events = acc
        .into_iter()
        .map(|((event, role), a)| {
            let buckets: Vec<(f64, f64)> = a.buckets.iter().map(|(le, c)| (le.0, *c)).collect();
            let q = |p| quantile(p, &buckets).map(|s| s * 1000.0);
            EventRow {
                event,
                role,
                rate: if secs > 0.0 { a.total / secs } else { 0.0 },
                success: (a.total > 0.0).then(|| a.ok / a.total),
                p50_ms: q(0.5),
                p99_ms: q(0.99),
            }
        })
        .collect();
    let per_s = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
    let subscriptions = subs
        .into_iter()
        .map(|(subscription, a)| {
            let buckets: Vec<(f64, f64)> = a
                .delivered
                .buckets
                .iter()
                .map(|(le, c)| (le.0, *c))
                .collect();
            let total = a.delivered.total;
            SubscriptionRow {
                subscription,
                rate: per_s(total),
                success: (total > 0.0).then(|| a.delivered.ok / total),
                p99_ms: quantile(0.99, &buckets).map(|s| s * 1000.0),
                copies_sent: per_s(a.copies[0]),
                copies_shed: per_s(a.copies[1]),
                copies_failed: per_s(a.copies[2]),
            }
        })
        .collect();
    View {
        interval_seconds: secs,
        events,
        subscriptions,
        sidecars,
    }
}

/// Adds `d`, the interval's increase of request-counter or duration-bucket sample `s`, to `a`.
fn add(a: &mut Acc, s: &Sample, d: f64) {
    if s.name == REQUESTS {
        a.total += d;
        if s.label("status").and_then(|st| st.parse::<u16>().ok()) < Some(500) {
            a.ok += d;
        }
    } else if s.name == BUCKET
        && let Some(le) = s.label("le").and_then(le_value)
    {
        *a.buckets.entry(OrdF64(le)).or_default() += d;
    }
}

fn le_value(le: &str) -> Option<f64> {
    match le {
        "+Inf" => Some(f64::INFINITY),
        v => v.parse().ok(),
    }
}

/// The `p` quantile of cumulative buckets (`le`, count) sorted by `le`, interpolated linearly
/// inside the bucket; `None` without observations. Past the last finite bound, that bound.
pub fn quantile(p: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = p * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = count - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (le - lower) * frac);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::prom::parse;

    fn scrape(addr: &str, role: &str, text: &str) -> Scrape {
        Scrape {
            role: role.into(),
            name: "edge".into(),
            address: addr.into(),
            samples: parse(text),
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let b = [
            (0.001, 0.0),
            (0.002, 50.0),
            (0.004, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(quantile(0.5, &b), Some(0.002));
        assert_eq!(quantile(0.75, &b), Some(0.003));
        assert_eq!(quantile(0.25, &b), Some(0.0015));
        assert_eq!(quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
        // Everything above the last finite bound: that bound.
        assert_eq!(
            quantile(0.99, &[(0.1, 0.0), (f64::INFINITY, 5.0)]),
            Some(0.1)
        );
    }

    #[test]
    fn rates_success_and_latency_from_two_scrapes() {
        let before = "switchyard_requests_total{event=\"noop\",status=\"200\"} 10\n\
            switchyard_requests_total{event=\"noop\",status=\"503\"} 0\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"0.001\"} 5\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"0.01\"} 10\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"+Inf\"} 10\n\
            switchyard_in_flight 0\n";
        let now = "switchyard_requests_total{event=\"noop\",status=\"200\"} 28\n\
            switchyard_requests_total{event=\"noop\",status=\"503\"} 2\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"0.001\"} 5\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"0.01\"} 30\n\
            switchyard_request_duration_seconds_bucket{event=\"noop\",le=\"+Inf\"} 30\n\
            switchyard_in_flight 4\nswitchyard_queued 1\n";
        let v = view(
            &[scrape("a", "router", before)],
            &[
                scrape("a", "router", now),
                Scrape {
                    samples: Err("connection refused".into()),
                    ..scrape("b", "manager", "")
                },
            ],
            2.0,
        );
        assert_eq!(v.events.len(), 1);
        let e = &v.events[0];
        assert_eq!((e.event.as_str(), e.role.as_str()), ("noop", "router"));
        assert_eq!(e.rate, 10.0);
        assert_eq!(e.success, Some(0.9));
        // All 20 new requests in (1 ms, 10 ms]: the median halfway.
        assert!((e.p50_ms.expect("p50") - 5.5).abs() < 1e-9, "{e:?}");
        assert_eq!(v.sidecars[0].in_flight, Some(4.0));
        assert_eq!(v.sidecars[0].queued, Some(1.0));
        assert_eq!(v.sidecars[1].error.as_deref(), Some("connection refused"));
        // A restarted process (counters went down) counts from zero.
        let v = view(
            &[scrape("a", "router", now)],
            &[scrape("a", "router", before)],
            1.0,
        );
        assert_eq!(v.events[0].rate, 10.0);
    }

    #[test]
    fn subscriptions_count_their_subscribers_deliveries_and_their_copies() {
        let sub =
            "switchyard_subscription_info{subscription=\"orders.*@audit\",event=\"orders.*\"} 1\n";
        let before = format!(
            "{sub}switchyard_requests_total{{event=\"orders.*\",status=\"202\"}} 4\n\
             switchyard_requests_total{{event=\"audit.entry\",status=\"200\"}} 1\n"
        );
        let now = format!(
            "{sub}switchyard_requests_total{{event=\"orders.*\",status=\"202\"}} 14\n\
             switchyard_requests_total{{event=\"orders.*\",status=\"503\"}} 10\n\
             switchyard_request_duration_seconds_bucket{{event=\"orders.*\",le=\"0.01\"}} 20\n\
             switchyard_request_duration_seconds_bucket{{event=\"orders.*\",le=\"+Inf\"}} 20\n\
             switchyard_requests_total{{event=\"audit.entry\",status=\"200\"}} 9\n"
        );
        let router_before = "switchyard_observer_copies_total{subscription=\"orders.*@audit\",copy=\"request\",outcome=\"sent\"} 2\n";
        let router_now = "switchyard_observer_copies_total{subscription=\"orders.*@audit\",copy=\"request\",outcome=\"sent\"} 8\n\
            switchyard_observer_copies_total{subscription=\"orders.*@audit\",copy=\"response\",outcome=\"shed\"} 4\n\
            switchyard_observer_copies_total{subscription=\"orders.get@billing\",copy=\"response\",outcome=\"failed\"} 2\n";
        let v = view(
            &[
                scrape("m", "manager", &before),
                scrape("r", "router", router_before),
            ],
            &[
                scrape("m", "manager", &now),
                scrape("r", "router", router_now),
            ],
            2.0,
        );
        let rows: Vec<(&str, f64, Option<f64>, [f64; 3])> = v
            .subscriptions
            .iter()
            .map(|s| {
                let copies = [s.copies_sent, s.copies_shed, s.copies_failed];
                (s.subscription.as_str(), s.rate, s.success, copies)
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("orders.*@audit", 10.0, Some(0.5), [3.0, 2.0, 0.0]),
                ("orders.get@billing", 0.0, None, [0.0, 0.0, 1.0]),
            ]
        );
        assert!(v.subscriptions[0].p99_ms.is_some());
        // The handled type is not a subscription; the info gauge makes no event row.
        let events: Vec<&str> = v.events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(events, ["audit.entry", "orders.*"]);
    }
}
