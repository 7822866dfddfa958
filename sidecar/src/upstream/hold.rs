//! Holding requests for an event type with no ready endpoint (pure parts): how long to hold, and
//! the count of held requests per event type (and subscribing Manager) that activation reports and
//! repeats on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When a hold that starts at `now` ends: after the activation timeout, or at the request's
/// deadline if that comes first.
pub(super) fn hold_until(now: Instant, activation_timeout: Duration, deadline: Instant) -> Instant {
    (now + activation_timeout).min(deadline)
}

/// What requests are held for: an event type's handler (`manager` `None`) or one subscribing
/// Manager of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Waiting {
    /// The event type.
    pub event: Arc<str>,
    /// The subscribing Manager waited for; `None`: the type's handler.
    pub manager: Option<Arc<str>>,
}

impl Waiting {
    /// Requests for `event`'s handler.
    pub(crate) fn handler(event: &Arc<str>) -> Waiting {
        Waiting {
            event: event.clone(),
            manager: None,
        }
    }
}

/// Held requests per event type and Manager waited for.
#[derive(Default)]
pub(super) struct HeldCounts {
    by_target: Mutex<HashMap<Waiting, Arc<AtomicU32>>>,
}

/// One held request; dropping it (delivered, timed out or the client went away) ends the hold.
pub(crate) struct Held {
    count: Arc<AtomicU32>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HeldCounts {
    /// Counts one held request for `what`. The flag is true for the first of a series (the count
    /// went from 0 to 1): the caller then starts signalling the control plane.
    pub(super) fn hold(&self, what: &Waiting) -> (Held, Arc<AtomicU32>, bool) {
        let count = self
            .by_target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what.clone())
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
    /// Requests held now for `what`.
    fn get(&self, what: &Waiting) -> u32 {
        self.by_target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(what)
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
        let e = Waiting::handler(&Arc::from("orders.create"));
        let sub = Waiting {
            manager: Some(Arc::from("audit")),
            ..e.clone()
        };
        let (a, _, first) = h.hold(&e);
        assert!(first);
        let (b, count, first) = h.hold(&e);
        assert!(!first);
        assert_eq!(count.load(Ordering::Acquire), 2);
        assert_eq!(h.get(&e), 2);
        assert_eq!(h.get(&Waiting::handler(&Arc::from("other"))), 0);
        let (s, _, first) = h.hold(&sub);
        assert!(first, "a subscriber's holds are a series of their own");
        assert_eq!(h.get(&sub), 1);
        drop(a);
        drop(b);
        drop(s);
        assert_eq!(h.get(&e), 0);
        let (_c, _, first) = h.hold(&e);
        assert!(first, "a new series after every hold ended");
    }
}
