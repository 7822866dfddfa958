//! Holding requests for an event type with no ready endpoint (pure parts): how long to hold, and
//! the count of held requests per event type that activation reports and repeats on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When a hold that starts at `now` ends: after the activation timeout, or at the request's
/// deadline if that comes first.
pub fn hold_until(now: Instant, activation_timeout: Duration, deadline: Instant) -> Instant {
    (now + activation_timeout).min(deadline)
}

/// Held requests per event type.
#[derive(Default)]
pub struct HeldCounts {
    by_event: Mutex<HashMap<Arc<str>, Arc<AtomicU32>>>,
}

/// One held request; dropping it (delivered, timed out or the client went away) ends the hold.
pub struct Held {
    count: Arc<AtomicU32>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HeldCounts {
    /// Counts one held request of `event`. The flag is true for the first of a series (the count
    /// went from 0 to 1): the caller then starts signalling the control plane.
    pub fn hold(&self, event: &Arc<str>) -> (Held, Arc<AtomicU32>, bool) {
        let count = self
            .by_event
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(event.clone())
            .or_default()
            .clone();
        let first = count.fetch_add(1, Ordering::AcqRel) == 0;
        (
            Held {
                count: count.clone(),
            },
            count,
            first,
        )
    }

    #[cfg(test)]
    /// Requests of `event` held now.
    fn get(&self, event: &str) -> u32 {
        self.by_event
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(event)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_of_timeout_and_deadline_ends_a_hold() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(hold_until(now, 20 * s, now + 30 * s), now + 20 * s);
        assert_eq!(hold_until(now, 20 * s, now + 3 * s), now + 3 * s);
        assert_eq!(hold_until(now, Duration::ZERO, now + 3 * s), now);
    }

    #[test]
    fn the_first_of_a_series_starts_signalling_and_drops_end_holds() {
        let h = HeldCounts::default();
        let e: Arc<str> = Arc::from("orders.create");
        let (a, _, first) = h.hold(&e);
        assert!(first);
        let (b, count, first) = h.hold(&e);
        assert!(!first);
        assert_eq!(count.load(Ordering::Acquire), 2);
        assert_eq!(h.get("orders.create"), 2);
        assert_eq!(h.get("other"), 0);
        drop(a);
        drop(b);
        assert_eq!(h.get("orders.create"), 0);
        let (_c, _, first) = h.hold(&e);
        assert!(first, "a new series after every hold ended");
    }
}
