//! The push hub of one router process: WebSocket subscriptions by event type, and the fan-out of
//! PUSH frames from managers to the subscribers whose filter matches.
//!
//! Fan-out never waits: each subscriber has one bounded outbox (shared with its replies) and a push
//! that finds it full is dropped, counted in `switchyard_ws_pushes_dropped_total`, and announced to
//! the subscriber in the `dropped` member of its next delivered push. A slow reader thus loses its own
//! pushes and never slows the others.

pub(crate) mod filter;

use super::outgoing;
use crate::metrics::Metrics;
use crate::upstream::pushes::PushSink;
use filter::Filter;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use switchyard_protocol::frame::Push;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_tungstenite::tungstenite::Message;

/// Where a subscriber's messages go: its connection's one bounded outbox.
pub(crate) type Outbox = mpsc::Sender<Message>;

/// One subscription of one WebSocket connection.
pub(crate) struct Subscription {
    /// Connection-unique id, given to the client.
    pub id: u64,
    /// Process-unique id of the connection, so a connection removes only its own subscriptions.
    pub conn: u64,
    /// Event type subscribed to.
    pub event: String,
    filter: Filter,
    out: Outbox,
    /// Pushes dropped since the last one delivered.
    dropped: AtomicU64,
}

impl Subscription {
    /// A subscription delivering to `out`.
    pub(crate) fn new(
        conn: u64,
        id: u64,
        event: String,
        filter: Filter,
        out: Outbox,
    ) -> Subscription {
        Subscription {
            id,
            conn,
            event,
            filter,
            out,
            dropped: AtomicU64::new(0),
        }
    }
}

/// Subscriptions by event type.
pub(crate) struct Hub {
    by_event: RwLock<HashMap<String, Vec<Arc<Subscription>>>>,
    metrics: Arc<Metrics>,
}

/// What one push did, for tests and logs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Fanout {
    /// Subscribers it was queued for.
    pub delivered: usize,
    /// Matching subscribers whose outbox was full.
    pub dropped: usize,
}

impl Hub {
    /// An empty hub.
    pub(crate) fn new(metrics: Arc<Metrics>) -> Hub {
        Hub {
            by_event: RwLock::new(HashMap::new()),
            metrics,
        }
    }

    /// Adds a subscription.
    pub(crate) fn add(&self, sub: Arc<Subscription>) {
        let mut map = self.by_event.write().unwrap_or_else(|p| p.into_inner());
        map.entry(sub.event.clone()).or_default().push(sub);
        self.metrics.ws.subscriptions.inc();
    }

    /// Removes subscription `id` of connection `conn`; whether it existed.
    pub(crate) fn remove(&self, conn: u64, event: &str, id: u64) -> bool {
        let mut map = self.by_event.write().unwrap_or_else(|p| p.into_inner());
        let Some(list) = map.get_mut(event) else {
            return false;
        };
        let before = list.len();
        list.retain(|s| !(s.conn == conn && s.id == id));
        let removed = list.len() < before;
        if list.is_empty() {
            map.remove(event);
        }
        if removed {
            self.metrics.ws.subscriptions.dec();
        }
        removed
    }

    /// Queues `push` for every subscriber of its event type whose filter matches; never waits.
    pub(crate) fn publish(&self, push: &Push) -> Fanout {
        let map = self.by_event.read().unwrap_or_else(|p| p.into_inner());
        let Some(subs) = map.get(&push.event) else {
            return Fanout::default();
        };
        let data = outgoing::Data::of(&push.content_type, &push.payload);
        let member = data.member();
        let mut out = Fanout::default();
        for sub in subs {
            if !sub.filter.is_empty() && !data.json().is_some_and(|v| sub.filter.matches(v)) {
                continue;
            }
            let missed = sub.dropped.swap(0, Ordering::Relaxed);
            let text = outgoing::push(sub.id, &push.event, &member, missed);
            match sub.out.try_send(Message::text(text)) {
                Ok(()) => {
                    out.delivered += 1;
                    self.metrics.ws.pushes_delivered.inc();
                }
                Err(TrySendError::Full(_)) => {
                    sub.dropped.fetch_add(missed + 1, Ordering::Relaxed);
                    out.dropped += 1;
                    self.metrics.ws.pushes_dropped.inc();
                }
                // The connection is closing and removes its subscriptions shortly.
                Err(TrySendError::Closed(_)) => {}
            }
        }
        out
    }

    /// Subscriptions held, across connections.
    #[cfg(test)]
    fn len(&self) -> usize {
        let map = self.by_event.read().unwrap_or_else(|p| p.into_inner());
        map.values().map(Vec::len).sum()
    }
}

/// The frame connections' PUSH frames end here, in the router role.
impl PushSink for Hub {
    fn deliver(&self, push: &Push) {
        let fanout = self.publish(push);
        tracing::trace!(event = %push.event, delivered = fanout.delivered, dropped = fanout.dropped, "push");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::{Value, json};

    fn push(event: &str, payload: &'static str) -> Push {
        Push {
            event: event.into(),
            traceparent: String::new(),
            tracestate: String::new(),
            content_type: "application/json".into(),
            payload: Bytes::from_static(payload.as_bytes()),
        }
    }

    fn text(m: Message) -> Value {
        serde_json::from_str(m.to_text().expect("text")).expect("json")
    }

    #[test]
    fn fans_out_to_matching_subscribers_only() {
        let m = Metrics::new(crate::metrics::Role::Router);
        let hub = Hub::new(m.clone());
        let (tx1, mut rx1) = mpsc::channel(4);
        let (tx2, mut rx2) = mpsc::channel(4);
        let f = Filter::parse(Some(&json!([{"field": "price", "op": "gt", "value": 5}])))
            .expect("filter");
        hub.add(Arc::new(Subscription::new(1, 1, "tick".into(), f, tx1)));
        hub.add(Arc::new(Subscription::new(
            2,
            1,
            "tick".into(),
            Filter::default(),
            tx2,
        )));
        assert_eq!(
            hub.publish(&push("tick", "{\"price\":3}")),
            Fanout {
                delivered: 1,
                dropped: 0
            }
        );
        assert_eq!(hub.publish(&push("tick", "{\"price\":9}")).delivered, 2);
        assert_eq!(hub.publish(&push("other", "{}")), Fanout::default());
        assert_eq!(
            text(rx1.try_recv().expect("one")),
            json!({"type": "push", "subscription": 1, "event": "tick", "data": {"price": 9}})
        );
        assert!(rx1.try_recv().is_err());
        assert_eq!(text(rx2.try_recv().expect("a"))["data"]["price"], 3);
        assert_eq!(text(rx2.try_recv().expect("b"))["data"]["price"], 9);
        assert_eq!(m.ws.pushes_delivered.get(), 3);
        assert!(hub.remove(1, "tick", 1));
        assert!(!hub.remove(1, "tick", 1));
        assert_eq!(hub.len(), 1);
        assert_eq!(m.ws.subscriptions.get(), 1);
    }

    #[test]
    fn a_full_outbox_drops_counts_and_tells_the_subscriber_next_time() {
        let m = Metrics::new(crate::metrics::Role::Router);
        let hub = Hub::new(m.clone());
        let (tx, mut rx) = mpsc::channel(1);
        hub.add(Arc::new(Subscription::new(
            1,
            7,
            "tick".into(),
            Filter::default(),
            tx,
        )));
        assert_eq!(hub.publish(&push("tick", "1")).delivered, 1);
        assert_eq!(hub.publish(&push("tick", "2")).dropped, 1);
        assert_eq!(hub.publish(&push("tick", "3")).dropped, 1);
        assert_eq!(m.ws.pushes_dropped.get(), 2);
        assert_eq!(text(rx.try_recv().expect("first"))["data"], 1);
        assert_eq!(hub.publish(&push("tick", "4")).delivered, 1);
        let v = text(rx.try_recv().expect("fourth"));
        assert_eq!(v["data"], 4);
        assert_eq!(v["dropped"], 2);
        assert_eq!(hub.publish(&push("tick", "5")).delivered, 1);
        assert_eq!(text(rx.try_recv().expect("fifth")).get("dropped"), None);
    }

    #[test]
    fn closed_outboxes_are_skipped() {
        let hub = Hub::new(Metrics::new(crate::metrics::Role::Router));
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        hub.add(Arc::new(Subscription::new(
            1,
            1,
            "tick".into(),
            Filter::default(),
            tx,
        )));
        assert_eq!(hub.publish(&push("tick", "{}")), Fanout::default());
    }
}
