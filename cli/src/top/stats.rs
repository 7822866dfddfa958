//! Two scrapes of the sidecars' `/metrics` -> what `switchyard top` shows: per event type and role,
//! the request rate, the share answered without a server error, p50 and p99 of the latency (from
//! the duration histogram's buckets, interpolated as Prometheus' `histogram_quantile` does); per
//! sidecar, the requests in flight, queued and held. Pure.

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

/// Everything one refresh shows.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct View {
    /// Seconds between the two scrapes.
    pub interval_seconds: f64,
    /// Per event type and role, sorted.
    pub events: Vec<EventRow>,
    /// Per sidecar, in source order.
    pub sidecars: Vec<SidecarRow>,
}

const REQUESTS: &str = "switchyard_requests_total";
const BUCKET: &str = "switchyard_request_duration_seconds_bucket";

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
                for s in samples {
                    let Some(event) = s.label("event") else {
                        match s.name.as_str() {
                            "switchyard_in_flight" => row.in_flight = Some(s.value),
                            "switchyard_queued" => row.queued = Some(s.value),
                            "switchyard_held_requests" => row.held = Some(s.value),
                            _ => {}
                        }
                        continue;
                    };
                    let d = increase(prev.get(&key(s)).copied(), s.value);
                    let a = acc
                        .entry((event.to_owned(), scrape.role.clone()))
                        .or_default();
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
    View {
        interval_seconds: secs,
        events,
        sidecars,
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
}
