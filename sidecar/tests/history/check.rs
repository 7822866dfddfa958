//! The checks of a recorded history (pure), in the spirit of Jepsen's checkers: each reads the whole
//! history and returns what it checked, how many violated it and a few examples.
//!
//! An event is *acknowledged* when one of its publish attempts was answered 202; an attempt answered
//! otherwise (503, a dropped connection) is indeterminate, as Jepsen's `:info`: it may or may not be
//! stored, so it is neither owed nor forbidden.

use super::record::{Delivery, EventId, Fault, History, Target};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How many examples a check keeps.
const EXAMPLES: usize = 3;

/// One check's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub check: &'static str,
    pub checked: usize,
    pub violations: usize,
    pub examples: Vec<String>,
}

impl Outcome {
    fn new(check: &'static str) -> Outcome {
        Outcome {
            check,
            checked: 0,
            violations: 0,
            examples: Vec::new(),
        }
    }

    fn violated(&mut self, example: impl FnOnce() -> String) {
        self.violations += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example());
        }
    }
}

/// Every check's outcome, in the table's order.
pub fn check(h: &History, redelivery_window: Duration) -> Vec<Outcome> {
    vec![
        acknowledged_delivered(h),
        duplicates_explained(h, redelivery_window),
        per_key_order(h),
        only_published(h),
        every_event_of_a_key(h),
    ]
}

/// Events answered 202 at least once.
pub fn acknowledged(h: &History) -> BTreeSet<&EventId> {
    h.publishes
        .iter()
        .filter(|p| p.status == 202)
        .map(|p| &p.event)
        .collect()
}

/// (manager, event) pairs delivered at least once.
fn delivered(h: &History) -> BTreeSet<(&str, &EventId)> {
    h.deliveries
        .iter()
        .map(|d| (d.manager.as_str(), &d.event))
        .collect()
}

/// Every acknowledged event reached every Manager that takes its type (handler and durable
/// subscribers) at least once. Checked: (event, Manager) pairs owed.
fn acknowledged_delivered(h: &History) -> Outcome {
    let mut out = Outcome::new("every 202 delivered to each receiver");
    let got = delivered(h);
    for event in acknowledged(h) {
        for r in h
            .receivers
            .iter()
            .filter(|r| r.types.contains(&event.ce_type))
        {
            out.checked += 1;
            if !got.contains(&(r.manager.as_str(), event)) {
                out.violated(|| format!("lost: {event} at {}", r.manager));
            }
        }
    }
    out
}

/// A Manager's deliveries in arrival order.
fn at_manager<'h>(h: &'h History, manager: &str) -> Vec<&'h Delivery> {
    let mut ds: Vec<&Delivery> = h
        .deliveries
        .iter()
        .filter(|d| d.manager == manager)
        .collect();
    ds.sort_by_key(|d| d.at);
    ds
}

/// A repeated delivery: the one before it of the same event at the same Manager, and the fault
/// that explains it, if one does.
pub struct Duplicate<'h> {
    pub previous: &'h Delivery,
    pub delivery: &'h Delivery,
    pub fault: Option<&'h Fault>,
}

/// Every second (or later) delivery of an event to one Manager. It is explained only by a fault
/// that touched that Manager or NATS and that the event lived through: its previous delivery came
/// before the fault healed, and this one while the fault lasted or within `window` after (the
/// redelivery of what the fault left unacknowledged). The latest such fault is named.
pub fn duplicates(h: &History, window: Duration) -> Vec<Duplicate<'_>> {
    let mut out = Vec::new();
    for r in &h.receivers {
        let mut previous: BTreeMap<&EventId, &Delivery> = BTreeMap::new();
        for d in at_manager(h, &r.manager) {
            let Some(first) = previous.insert(&d.event, d) else {
                continue;
            };
            let fault = h
                .faults
                .iter()
                .filter(|f| {
                    let touches = match &f.target {
                        Target::Nats => true,
                        Target::Manager(m) => *m == d.manager,
                        Target::Graceful(_) => false,
                    };
                    touches && first.at <= f.end && f.start <= d.at && d.at <= f.end + window
                })
                .max_by_key(|f| f.start);
            out.push(Duplicate {
                previous: first,
                delivery: d,
                fault,
            });
        }
    }
    out
}

/// [`duplicates`] without a fault to explain them. Checked: repeated deliveries.
fn duplicates_explained(h: &History, window: Duration) -> Outcome {
    let mut out = Outcome::new("duplicates explained by a fault");
    for dup in duplicates(h, window) {
        out.checked += 1;
        if dup.fault.is_none() {
            let (first, d) = (dup.previous, dup.delivery);
            out.violated(|| {
                format!(
                    "{} at {} ({}) at {:?}, again ({}) at {:?}",
                    d.event, d.manager, first.pod, first.at, d.pod, d.at
                )
            });
        }
    }
    out
}

/// At a Manager with an ordering key, each (type, publisher, key) is delivered in publish order: a
/// delivery never has a lower place in its key's sequence than one delivered before it (a
/// redelivery of the same place is a duplicate, not a reordering). The publisher publishes a key's
/// next event only after the previous one's final answer. Checked: deliveries at ordered Managers.
fn per_key_order(h: &History) -> Outcome {
    let mut out = Outcome::new("per-key order at ordered Managers");
    for r in h.receivers.iter().filter(|r| r.ordered) {
        let mut highest: BTreeMap<(&str, &str, &str), &Delivery> = BTreeMap::new();
        for d in at_manager(h, &r.manager) {
            out.checked += 1;
            let k = (
                d.event.ce_type.as_str(),
                d.event.source.as_str(),
                d.key.as_str(),
            );
            match highest.get(&k) {
                Some(before) if d.seq < before.seq => out.violated(|| {
                    format!(
                        "{} key {} seq {} after seq {} at {} ({:?} after {:?})",
                        d.manager, d.key, d.seq, before.seq, d.event.ce_type, d.at, before.at
                    )
                }),
                Some(before) if d.seq == before.seq => {}
                _ => {
                    highest.insert(k, d);
                }
            }
        }
    }
    out
}

/// Every delivery is of an event some attempt published, with the payload published (its key and
/// place), and not before its first attempt was sent. Checked: deliveries.
fn only_published(h: &History) -> Outcome {
    let mut out = Outcome::new("no delivery of an unpublished event");
    let mut first: BTreeMap<(&EventId, &str, u64), Duration> = BTreeMap::new();
    for p in &h.publishes {
        let sent = first
            .entry((&p.event, p.key.as_str(), p.seq))
            .or_insert(p.sent);
        *sent = (*sent).min(p.sent);
    }
    for d in &h.deliveries {
        out.checked += 1;
        match first.get(&(&d.event, d.key.as_str(), d.seq)) {
            None => out.violated(|| {
                format!(
                    "never published: {} key {} seq {} at {}",
                    d.event, d.key, d.seq, d.manager
                )
            }),
            Some(sent) if d.at < *sent => out.violated(|| {
                format!(
                    "{} at {} at {:?}, before its publish at {sent:?}",
                    d.event, d.manager, d.at
                )
            }),
            Some(_) => {}
        }
    }
    out
}

/// A key (ce-id) used for two types, or by two publishers, is several events: each Manager taking
/// more than one of them got each, none deduplicated away for another. Checked: (key, Manager)
/// pairs.
fn every_event_of_a_key(h: &History) -> Outcome {
    let mut out = Outcome::new("one key, two types or publishers: each delivered");
    let mut types: BTreeMap<&str, BTreeSet<&EventId>> = BTreeMap::new();
    for e in acknowledged(h) {
        types.entry(e.id.as_str()).or_default().insert(e);
    }
    let got = delivered(h);
    for (id, events) in types.iter().filter(|(_, es)| es.len() > 1) {
        for r in &h.receivers {
            let owed: Vec<&&EventId> = events
                .iter()
                .filter(|e| r.types.contains(&e.ce_type))
                .collect();
            if owed.len() < 2 {
                continue;
            }
            out.checked += 1;
            let missing: Vec<String> = owed
                .iter()
                .filter(|e| !got.contains(&(r.manager.as_str(), **e)))
                .map(|e| format!("{} from {}", e.ce_type, e.source))
                .collect();
            if !missing.is_empty() {
                out.violated(|| format!("{id} at {}: {missing:?} missing", r.manager));
            }
        }
    }
    out
}

/// The outcomes as a Markdown table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut t = String::from("| check | checked | violations | examples |\n|---|---|---|---|\n");
    for o in outcomes {
        let ex = if o.examples.is_empty() {
            "-".to_owned()
        } else {
            o.examples.join("; ")
        };
        t.push_str(&format!(
            "| {} | {} | {} | {ex} |\n",
            o.check, o.checked, o.violations
        ));
    }
    t
}
