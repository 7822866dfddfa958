//! A durable Manager's backlog per event type, from what JetStream says of its consumers (pure).
//!
//! The figure is KEDA's NATS JetStream lag: a consumer's `num_pending` (stored, not yet delivered)
//! plus `num_ack_pending` (delivered, not yet acknowledged), summed over the lanes of an event type.
//! Where KEDA falls back to the stream's last sequence when the consumer is missing, this counts the
//! messages stored on the consumer's subject: the stream is a work queue with one consumer per
//! subject, so what it holds there is exactly what that consumer would report once created (a
//! Manager that never ran has no consumers yet: its sidecars create them). No stream: nothing kept.

use std::collections::{BTreeMap, HashMap};
use switchyard_protocol::durable::ConsumerPlan;

/// What JetStream said of one planned consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The consumer exists.
    Consumer {
        /// Stored events it has not delivered yet.
        pending: u64,
        /// Events delivered and not yet acknowledged.
        ack_pending: u64,
    },
    /// The stream exists, the consumer does not (yet).
    NoConsumer,
    /// The Manager's stream does not exist: nothing was ever published to it.
    NoStream,
}

/// The backlog of each event type of `plans`, given the `readings` of each plan (same order) and,
/// for missing consumers, the `stored` messages per subject of the stream.
pub(crate) fn per_event(
    plans: &[ConsumerPlan],
    readings: &[Reading],
    stored: &HashMap<String, u64>,
) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for (plan, reading) in plans.iter().zip(readings) {
        let lag = match *reading {
            Reading::Consumer {
                pending,
                ack_pending,
            } => pending.saturating_add(ack_pending),
            Reading::NoConsumer => stored.get(&plan.filter_subject).copied().unwrap_or(0),
            Reading::NoStream => 0,
        };
        let sum = out.entry(plan.event.clone()).or_default();
        *sum = sum.saturating_add(lag);
    }
    out
}

/// Whether `readings` need the stream's per-subject counts (some consumer is missing).
pub(crate) fn needs_subjects(readings: &[Reading]) -> bool {
    readings.contains(&Reading::NoConsumer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use switchyard_protocol::durable::consumers;

    fn plans(ordered: bool) -> Vec<ConsumerPlan> {
        consumers(
            "shop",
            "orders",
            &["orders.created".to_owned(), "orders.paid".to_owned()],
            Duration::from_secs(5),
            3,
            ordered,
        )
    }

    #[test]
    fn pending_and_ack_pending_add_up_per_event_type() {
        let p = plans(false);
        let r = [
            Reading::Consumer {
                pending: 40,
                ack_pending: 2,
            },
            Reading::Consumer {
                pending: 0,
                ack_pending: 0,
            },
        ];
        let got = per_event(&p, &r, &HashMap::new());
        assert_eq!(got["orders.created"], 42);
        assert_eq!(got["orders.paid"], 0);
        assert!(!needs_subjects(&r));
    }

    #[test]
    fn lanes_of_an_ordered_type_are_summed() {
        let p = plans(true);
        let r: Vec<Reading> = p
            .iter()
            .map(|_| Reading::Consumer {
                pending: 1,
                ack_pending: 1,
            })
            .collect();
        let got = per_event(&p, &r, &HashMap::new());
        // 1 unordered lane + 16 partitions, 2 each.
        assert_eq!(got["orders.created"], 34);
        assert_eq!(got["orders.paid"], 34);
    }

    #[test]
    fn a_missing_consumer_counts_what_its_subject_holds() {
        let p = plans(false);
        let r = [Reading::NoConsumer, Reading::NoConsumer];
        assert!(needs_subjects(&r));
        let stored = HashMap::from([
            ("sy.shop.orders.orders.created.u".to_owned(), 25),
            ("sy.shop.orders.other.u".to_owned(), 7),
        ]);
        let got = per_event(&p, &r, &stored);
        assert_eq!(got["orders.created"], 25);
        assert_eq!(got["orders.paid"], 0, "nothing stored on its subject");
    }

    #[test]
    fn no_stream_is_no_backlog() {
        let p = plans(false);
        let got = per_event(&p, &[Reading::NoStream, Reading::NoStream], &HashMap::new());
        assert_eq!(got.values().sum::<u64>(), 0);
        assert_eq!(got.len(), 2, "every type is reported, at zero");
    }
}
