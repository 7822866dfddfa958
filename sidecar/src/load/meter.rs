//! Per-event-type load counters. The set of event types is fixed at start-up, so the request path
//! finds its counters in an immutable map: a hash and a few relaxed atomics, no lock, no allocation.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the latency buckets in microseconds: 100 us × 2.5^i, the same spacing as the
/// `switchyard_request_duration_seconds` histogram; the last bucket takes the rest.
pub(crate) const BOUNDS_US: [u64; 15] = [
    100, 250, 625, 1_563, 3_906, 9_766, 24_414, 61_035, 152_588, 381_470, 953_674, 2_384_186,
    5_960_464, 14_901_161, 37_252_903,
];
/// Buckets: one per bound plus one for everything slower.
pub(crate) const BUCKETS: usize = BOUNDS_US.len() + 1;

/// Counters of one event type.
#[derive(Default)]
pub(crate) struct EventMeter {
    arrivals: AtomicU64,
    completions: AtomicU64,
    in_flight: AtomicU64,
    queued: AtomicU64,
    shed: AtomicU64,
    latency: [AtomicU64; BUCKETS],
}

/// A copy of one event type's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    /// Events that arrived, since start.
    pub arrivals: u64,
    /// Events answered (any status), since start.
    pub completions: u64,
    /// Events arrived and not answered yet (the waiting ones included).
    pub in_flight: u64,
    /// Of those, events waiting: held for an endpoint or for credit (router), for a worker (manager).
    pub queued: u64,
    /// Events refused with 503 because a bound was reached, since start.
    pub shed: u64,
    /// Answered events per latency bucket, since start.
    pub latency: [u64; BUCKETS],
}

/// The bucket of a latency.
pub(crate) fn bucket_of(seconds: f64) -> usize {
    let us = seconds * 1e6;
    BOUNDS_US
        .iter()
        .position(|b| us <= *b as f64)
        .unwrap_or(BUCKETS - 1)
}

/// Counters of every event type this sidecar handles.
pub(crate) struct LoadMeters {
    by_event: HashMap<Arc<str>, Arc<EventMeter>>,
}

/// Held while an event is underway; leaving (answered, refused or cancelled) ends its in-flight count.
pub(crate) struct Underway(Option<Arc<EventMeter>>);

impl Drop for Underway {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Held while an event waits (see [`Counts::queued`]).
pub(crate) struct Waiting(Option<Arc<EventMeter>>);

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl LoadMeters {
    /// Counters for `events` (duplicates are merged).
    pub(crate) fn new(events: impl IntoIterator<Item = Arc<str>>) -> LoadMeters {
        LoadMeters {
            by_event: events
                .into_iter()
                .map(|e| (e, Arc::new(EventMeter::default())))
                .collect(),
        }
    }

    /// Counts an arrival; the guard keeps it in flight. Unknown types are not counted.
    pub(crate) fn arrive(&self, event: &str) -> Underway {
        let meter = self.by_event.get(event).cloned();
        if let Some(m) = &meter {
            m.arrivals.fetch_add(1, Ordering::Relaxed);
            m.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Underway(meter)
    }

    /// Counts an event as waiting until the guard drops. Unknown types are not counted.
    pub(crate) fn wait(&self, event: &str) -> Waiting {
        let meter = self.by_event.get(event).cloned();
        if let Some(m) = &meter {
            m.queued.fetch_add(1, Ordering::Relaxed);
        }
        Waiting(meter)
    }

    /// Counts an answer with its status and latency.
    pub(crate) fn finish(&self, event: &str, status: u16, seconds: f64) {
        if let Some(m) = self.by_event.get(event) {
            m.completions.fetch_add(1, Ordering::Relaxed);
            m.latency[bucket_of(seconds)].fetch_add(1, Ordering::Relaxed);
            if status == 503 {
                m.shed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts an event shed before it was answered through [`LoadMeters::finish`].
    pub(crate) fn shed(&self, event: &str) {
        if let Some(m) = self.by_event.get(event) {
            m.shed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters of every event type, sorted by event type.
    pub(crate) fn snapshot(&self) -> Vec<(Arc<str>, Counts)> {
        let mut out: Vec<_> = self
            .by_event
            .iter()
            .map(|(e, m)| {
                let mut latency = [0u64; BUCKETS];
                for (slot, b) in latency.iter_mut().zip(&m.latency) {
                    *slot = b.load(Ordering::Relaxed);
                }
                let counts = Counts {
                    arrivals: m.arrivals.load(Ordering::Relaxed),
                    completions: m.completions.load(Ordering::Relaxed),
                    in_flight: m.in_flight.load(Ordering::Relaxed),
                    queued: m.queued.load(Ordering::Relaxed),
                    shed: m.shed.load(Ordering::Relaxed),
                    latency,
                };
                (e.clone(), counts)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_arrivals_answers_and_in_flight() {
        let m = LoadMeters::new([Arc::from("orders.create")]);
        let a = m.arrive("orders.create");
        let b = m.arrive("orders.create");
        let _ignored = m.arrive("unknown");
        m.finish("orders.create", 200, 0.002);
        drop(a);
        m.finish("orders.create", 503, 0.0001);
        m.shed("orders.create");
        let snap = m.snapshot();
        let c = &snap[0].1;
        assert_eq!(
            (c.arrivals, c.completions, c.in_flight, c.shed),
            (2, 2, 1, 2)
        );
        assert_eq!(c.latency[bucket_of(0.002)], 1);
        drop(b);
        assert_eq!(m.snapshot()[0].1.in_flight, 0);
    }

    #[test]
    fn counts_waiting_events_until_the_guard_drops() {
        let m = LoadMeters::new([Arc::from("a")]);
        let _underway = m.arrive("a");
        let w = m.wait("a");
        let _ignored = m.wait("unknown");
        assert_eq!(m.snapshot()[0].1.queued, 1);
        drop(w);
        let c = &m.snapshot()[0].1;
        assert_eq!((c.in_flight, c.queued), (1, 0));
    }

    #[test]
    fn buckets_follow_the_bounds() {
        assert_eq!(bucket_of(0.0), 0);
        assert_eq!(bucket_of(0.0001), 0);
        assert_eq!(bucket_of(0.0002), 1);
        assert_eq!(bucket_of(1e6), BUCKETS - 1);
    }
}
