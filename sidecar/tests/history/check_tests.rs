//! The checker against hand-made histories: a clean one passes every check, and each broken one
//! fails exactly the check it breaks.

use super::check::{Outcome, check};
use super::record::*;
use std::time::Duration;

const WINDOW: Duration = Duration::from_secs(10);
const PUBLISHER: &str = "/switchyard/default/front";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn id(ce_type: &str, id: &str) -> EventId {
    EventId {
        ce_type: ce_type.into(),
        source: PUBLISHER.into(),
        id: id.into(),
    }
}

/// The same ce-id from another publisher.
fn from_kiosk(mut e: EventId) -> EventId {
    e.source = "/switchyard/default/kiosk".into();
    e
}

fn publish(ce_type: &str, ce_id: &str, key: &str, seq: u64, status: u16, at: u64) -> Publish {
    Publish {
        event: id(ce_type, ce_id),
        key: key.into(),
        seq,
        status,
        sent: ms(at),
    }
}

fn delivery(manager: &str, ce_type: &str, ce_id: &str, key: &str, seq: u64, at: u64) -> Delivery {
    Delivery {
        manager: manager.into(),
        pod: format!("{manager}-0"),
        event: id(ce_type, ce_id),
        key: key.into(),
        seq,
        at: ms(at),
    }
}

/// `orders` handles both types in order per key; `billing` subscribes to `ordered` only.
fn clean() -> History {
    let t = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
    History {
        publishes: vec![
            publish("ordered", "e1", "k", 0, 202, 0),
            publish("shipped", "e1", "k", 0, 202, 10),
            publish("ordered", "e2", "k", 1, 503, 20),
            publish("ordered", "e2", "k", 1, 202, 30),
            // Indeterminate: never owed, but allowed to arrive.
            publish("ordered", "e3", "k", 2, 503, 40),
        ],
        deliveries: vec![
            delivery("orders", "ordered", "e1", "k", 0, 50),
            delivery("orders", "shipped", "e1", "k", 0, 55),
            delivery("orders", "ordered", "e2", "k", 1, 60),
            delivery("orders", "ordered", "e3", "k", 2, 65),
            delivery("billing", "ordered", "e1", "k", 0, 50),
            delivery("billing", "ordered", "e2", "k", 1, 70),
        ],
        faults: vec![Fault {
            what: "kill -9 sidecar billing-0".into(),
            target: Target::Manager("billing".into()),
            start: ms(100),
            end: ms(200),
        }],
        receivers: vec![
            Receiver {
                manager: "orders".into(),
                types: t(&["ordered", "shipped"]),
                ordered: true,
            },
            Receiver {
                manager: "billing".into(),
                types: t(&["ordered"]),
                ordered: false,
            },
        ],
    }
}

/// The names of the checks that found violations.
fn failing(h: &History) -> Vec<&'static str> {
    check(h, WINDOW)
        .iter()
        .filter(|o: &&Outcome| o.violations > 0)
        .map(|o| o.check)
        .collect()
}

#[test]
fn a_clean_history_passes_every_check() {
    let outcomes = check(&clean(), WINDOW);
    assert!(outcomes.iter().all(|o| o.violations == 0), "{outcomes:?}");
    // Each check looked at something: a pass is not a check that saw nothing.
    assert!(
        outcomes
            .iter()
            .all(|o| o.checked > 0 || o.check.starts_with("duplicates"))
    );
}

#[test]
fn an_acknowledged_event_missing_at_a_subscriber_is_lost() {
    let mut h = clean();
    h.deliveries
        .retain(|d| !(d.manager == "billing" && d.event.id == "e2"));
    assert_eq!(failing(&h), ["every 202 delivered to each receiver"]);
    let o = &check(&h, WINDOW)[0];
    assert_eq!(o.violations, 1);
    assert!(o.examples[0].contains("e2 at billing"), "{:?}", o.examples);
}

#[test]
fn a_duplicate_explained_only_by_a_fault_of_that_manager_within_the_window() {
    // Redelivered at billing during its sidecar's restart: explained.
    let mut h = clean();
    h.deliveries
        .push(delivery("billing", "ordered", "e1", "k", 0, 150));
    assert!(failing(&h).is_empty(), "{:?}", check(&h, WINDOW));
    // Long after the window: not explained.
    let mut late = clean();
    late.deliveries
        .push(delivery("billing", "ordered", "e1", "k", 0, 200 + 10_001));
    assert_eq!(failing(&late), ["duplicates explained by a fault"]);
    // At orders, which the fault did not touch: not explained.
    let mut other = clean();
    other
        .deliveries
        .push(delivery("orders", "shipped", "e1", "k", 0, 150));
    assert_eq!(failing(&other), ["duplicates explained by a fault"]);
    // A NATS fault touches every Manager.
    other.faults.push(Fault {
        what: "SIGSTOP n1".into(),
        target: Target::Nats,
        start: ms(120),
        end: ms(140),
    });
    assert!(failing(&other).is_empty());
    // A graceful rollout explains none: a drain finishes and acks what it started.
    let mut rolled = clean();
    rolled.faults[0].target = Target::Graceful("billing".into());
    rolled
        .deliveries
        .push(delivery("billing", "ordered", "e1", "k", 0, 150));
    assert_eq!(failing(&rolled), ["duplicates explained by a fault"]);
    // An event first delivered after the fault healed did not live through it: not explained.
    let mut after = clean();
    after.deliveries[4].at = ms(250);
    after
        .deliveries
        .push(delivery("billing", "ordered", "e1", "k", 0, 260));
    assert_eq!(failing(&after), ["duplicates explained by a fault"]);
}

#[test]
fn an_earlier_event_of_a_key_after_a_later_one_is_out_of_order() {
    let mut h = clean();
    // e1 (seq 0) again after e2 (seq 1) at orders, during a NATS fault so it is an explained
    // duplicate but still a reordering.
    h.faults.push(Fault {
        what: "kill -9 n0".into(),
        target: Target::Nats,
        start: ms(60),
        end: ms(90),
    });
    h.deliveries
        .push(delivery("orders", "ordered", "e1", "k", 0, 80));
    assert_eq!(failing(&h), ["per-key order at ordered Managers"]);
    // The same at billing, which has no ordering key, is only a duplicate.
    let mut b = clean();
    b.deliveries
        .push(delivery("billing", "ordered", "e1", "k", 0, 150));
    assert!(failing(&b).is_empty());
}

#[test]
fn a_delivery_of_an_event_nobody_published_is_reported() {
    let mut h = clean();
    h.deliveries
        .push(delivery("orders", "ordered", "e9", "k", 9, 90));
    assert_eq!(failing(&h), ["no delivery of an unpublished event"]);
    // Same id, other payload: not what was published either.
    let mut p = clean();
    p.deliveries[3].seq = 7;
    assert!(failing(&p).contains(&"no delivery of an unpublished event"));
    // Delivered before anyone published it.
    let mut early = clean();
    early.publishes[0].sent = ms(51);
    assert_eq!(failing(&early), ["no delivery of an unpublished event"]);
}

#[test]
fn a_type_dropped_for_the_other_types_key_is_reported() {
    let mut h = clean();
    h.deliveries
        .retain(|d| !(d.manager == "orders" && d.event.ce_type == "shipped"));
    assert_eq!(
        failing(&h),
        [
            "every 202 delivered to each receiver",
            "one key, two types or publishers: each delivered"
        ]
    );
}

#[test]
fn another_publishers_event_dropped_for_the_same_key_is_reported() {
    let mut h = clean();
    let mut p = publish("ordered", "e1", "k", 0, 202, 12);
    p.event = from_kiosk(p.event);
    h.publishes.push(p);
    let mut d = delivery("billing", "ordered", "e1", "k", 0, 57);
    d.event = from_kiosk(d.event);
    h.deliveries.push(d.clone());
    // Delivered at billing, not at orders: kiosk's event was taken for front's.
    let outcomes = check(&h, WINDOW);
    assert_eq!(
        failing(&h),
        [
            "every 202 delivered to each receiver",
            "one key, two types or publishers: each delivered"
        ]
    );
    assert!(outcomes[4].examples[0].contains("kiosk"), "{outcomes:?}");
    d.manager = "orders".into();
    h.deliveries.push(d);
    assert!(failing(&h).is_empty(), "{:?}", check(&h, WINDOW));
}
