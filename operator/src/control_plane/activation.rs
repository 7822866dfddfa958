//! Activations: router sidecars holding requests for an event type with no ready endpoint ask for a
//! pod through `Activate`. The request is kept here, keyed by namespace, event type and the Manager
//! waited for (a subscriber's, or none for the type's handler), and the autoscaler is woken at once
//! instead of at its next tick.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Most (namespace, event type) pairs remembered; further activations are refused rather than grow.
pub(crate) const MAX_KEYS: usize = 10_000;

/// One pending activation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// Namespace of the Router and its Managers.
    pub namespace: String,
    /// Event type whose requests are held.
    pub event_type: String,
    /// The subscribing Manager whose pods are waited for; `None`: the type's handler.
    pub manager: Option<String>,
    /// Requests held by the sidecar that asked last.
    pub held: u32,
}

/// What an activation is remembered by: (namespace, event type, subscribing Manager).
type Key = (String, String, Option<String>);

/// Latest activation per (namespace, event type), and the autoscaler's wake-up.
#[derive(Default)]
pub struct Activations {
    latest: Mutex<HashMap<Key, (Instant, u32)>>,
    wake: Notify,
}

impl Activations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, u32)>> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an activation at `at` and wakes the autoscaler. False when the book is full.
    pub fn record_at(&self, a: Activation, at: Instant) -> bool {
        {
            let mut map = self.lock();
            let key = (a.namespace, a.event_type, a.manager);
            if map.len() >= MAX_KEYS && !map.contains_key(&key) {
                return false;
            }
            map.insert(key, (at, a.held));
        }
        // A stored permit covers an activation that lands while the autoscaler is busy.
        self.wake.notify_one();
        true
    }

    /// Resolves at the next activation (or at once if one came since the last call).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Activations recorded within `max_age` before `now`; older ones are forgotten.
    pub fn fresh(&self, now: Instant, max_age: Duration) -> Vec<Activation> {
        let mut map = self.lock();
        map.retain(|_, (at, _)| now.saturating_duration_since(*at) <= max_age);
        let mut out: Vec<Activation> = map
            .iter()
            .map(|((ns, ev, manager), (_, held))| Activation {
                namespace: ns.clone(),
                event_type: ev.clone(),
                manager: manager.clone(),
                held: *held,
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.namespace, &a.event_type, &a.manager).cmp(&(
                &b.namespace,
                &b.event_type,
                &b.manager,
            ))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(ev: &str, held: u32) -> Activation {
        Activation {
            namespace: "shop".into(),
            event_type: ev.into(),
            manager: None,
            held,
        }
    }

    #[tokio::test]
    async fn records_wake_and_age_out() {
        let book = Activations::default();
        let t0 = Instant::now();
        assert!(book.record_at(a("orders.create", 1), t0));
        assert!(book.record_at(a("orders.create", 3), t0 + Duration::from_secs(1)));
        assert!(book.record_at(a("orders.get", 2), t0 + Duration::from_secs(5)));
        // The permit stored by the records above resolves this at once.
        book.woken().await;
        let fresh = book.fresh(t0 + Duration::from_secs(6), Duration::from_secs(3));
        assert_eq!(fresh, vec![a("orders.get", 2)]);
        let all = book.fresh(t0 + Duration::from_secs(6), Duration::from_secs(30));
        assert_eq!(all.len(), 1, "the stale one was forgotten");
    }

    #[test]
    fn a_subscribers_activation_does_not_replace_the_handlers() {
        let book = Activations::default();
        let t0 = Instant::now();
        let sub = Activation {
            manager: Some("audit".into()),
            ..a("orders.create", 4)
        };
        assert!(book.record_at(a("orders.create", 1), t0));
        assert!(book.record_at(sub.clone(), t0));
        let fresh = book.fresh(t0, Duration::from_secs(3));
        assert_eq!(fresh, vec![a("orders.create", 1), sub]);
    }
}
