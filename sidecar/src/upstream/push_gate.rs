//! The Router's check on pushes: a Manager's pods may push to WebSocket clients only the types that
//! Manager handles or lists in `spec.push`, as the routing table says. Each pool's connections hand
//! their PUSH frames to its gate, which passes them on to the process's sink (the WebSocket hub) or
//! refuses and counts them; the local API's check in the pushing sidecar stays the first one, and
//! this one holds when that sidecar was bypassed.

use super::pushes::{PushSink, Pushes};
use crate::metrics::ws::ManagerLabels;
use crate::metrics::{EventLabel, Metrics};
use arc_swap::ArcSwap;
use std::collections::BTreeSet;
use std::sync::Arc;
use switchyard_protocol::frame::Push;

/// The types one Manager may push, and where its allowed pushes go.
pub(crate) struct PushGate {
    manager: Arc<str>,
    allowed: ArcSwap<BTreeSet<String>>,
    sink: Arc<dyn PushSink>,
    metrics: Arc<Metrics>,
}

impl PushGate {
    /// The gate of Manager `manager` in front of `pushes` (none: the process takes no pushes, and
    /// there is nothing to guard); it allows nothing until [`PushGate::allow`].
    pub(crate) fn guard(
        manager: &str,
        pushes: Pushes,
        metrics: Arc<Metrics>,
    ) -> Option<Arc<PushGate>> {
        Some(Arc::new(PushGate {
            manager: Arc::from(manager),
            allowed: ArcSwap::default(),
            sink: pushes?,
            metrics,
        }))
    }

    /// Replaces the allowed types with `types` (from the current routing table).
    pub(crate) fn allow(&self, types: BTreeSet<String>) {
        self.allowed.store(Arc::new(types));
    }

    /// The gate as its pool's connections take it.
    pub(crate) fn as_pushes(self: &Arc<Self>) -> Pushes {
        Some(self.clone() as Arc<dyn PushSink>)
    }
}

impl PushSink for PushGate {
    fn deliver(&self, push: &Push) {
        if self.allowed.load().contains(&push.event) {
            self.sink.deliver(push);
            return;
        }
        self.metrics
            .ws
            .pushes_refused
            .get_or_create(&ManagerLabels {
                manager: EventLabel(self.manager.clone()),
            })
            .inc();
        tracing::debug!(manager = %self.manager, event = %push.event, "push refused: the Manager neither handles the type nor lists it in spec.push");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Kept(Mutex<Vec<String>>);

    impl PushSink for Kept {
        fn deliver(&self, push: &Push) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(push.event.clone());
        }
    }

    fn push(event: &str) -> Push {
        Push {
            event: event.into(),
            traceparent: String::new(),
            tracestate: String::new(),
            content_type: "application/json".into(),
            payload: bytes::Bytes::new(),
        }
    }

    #[test]
    fn only_the_allowed_types_pass_and_the_rest_are_counted() {
        let kept = Arc::new(Kept::default());
        let metrics = Metrics::new(crate::metrics::Role::Router);
        let gate = PushGate::guard("orders", Some(kept.clone()), metrics.clone()).expect("a gate");
        gate.deliver(&push("orders.shipped"));
        gate.allow(["orders.shipped".to_owned()].into());
        gate.deliver(&push("orders.shipped"));
        gate.deliver(&push("billing.paid"));
        assert_eq!(
            *kept.0.lock().unwrap_or_else(|p| p.into_inner()),
            ["orders.shipped"]
        );
        let refused = metrics
            .ws
            .pushes_refused
            .get_or_create(&ManagerLabels {
                manager: EventLabel(Arc::from("orders")),
            })
            .get();
        assert_eq!(refused, 2, "before the table and of another's type");
        assert!(PushGate::guard("orders", None, metrics).is_none());
    }
}
