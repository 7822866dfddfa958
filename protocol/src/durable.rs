//! Durable delivery on NATS JetStream: the names and settings every party derives the same way from a
//! Manager's spec, so the publishing sidecar, the consuming sidecar, `switchyard up` and the operator
//! agree without asking each other.
//!
//! - One stream per Manager: `SY_<namespace>_<manager>` over subjects `sy.<namespace>.<manager>.>`
//!   (namespaces and Manager names are DNS labels, which have no `_` or `.`, so names never collide).
//! - An event's subject is `sy.<namespace>.<manager>.<event type>.<lane>`: lane `u` for events
//!   without an ordering key, `p<k>` for the key's partition `k` of [`PARTITIONS`]. The lane is the
//!   last token, so a subject names one (event type, lane) pair.
//! - One durable pull consumer per (event type, lane), filtered on its subject. A partition's consumer
//!   has `max_ack_pending = 1`: one event of a key is out at a time over every pod, so a key is
//!   delivered in order (partitions are the parallelism of ordered types).
//! - `ack_wait` is the attempt timeout plus slack for the ack to travel, at most [`MAX_ACK_WAIT`]: the
//!   consuming sidecar sends progress acks while it holds an event, so AckWait only has to outlast a
//!   silent sidecar, and a killed pod's events come back within it.
//! - A Manager's durable subscriptions are kept in its own stream too: a publisher stores a copy of
//!   each event a subscription takes under `sy.<namespace>.<manager>.<subscription token>.<lane>`
//!   ([`subscription_token`]: never an event type's first token, so a subscription's consumer and a
//!   handled type's never take the same event), so each subscriber has its own copy, kept until
//!   it acknowledged it, whatever the other subscribers do.
//! - The server never gives up on an event (`max_deliver` unlimited): the sidecar counts the
//!   deliveries (`attempts` = `retries.attempts`) and dead-letters an event on its last failed attempt,
//!   or on the first delivery past it (the pod of the last attempt died), so no event is stranded.
//! - The stream's limits are the Manager's spec ([`StreamLimits`]: its duplicate window and byte
//!   limit), carried to its sidecars and to every publisher, so each party creates or updates it
//!   alike and none undoes another's update. A full stream refuses a publish (discard policy New),
//!   never drops a stored event.
//! - Publishes carry a `Nats-Msg-Id` derived from (event type, publisher, ce-id), so the stream's
//!   duplicate window drops a retried publish and no other type's or publisher's event.
//!
//! Pure: no I/O.

use serde::{Deserialize, Serialize};
use std::time::Duration;
pub use switchyard_crds::subscription::StartFrom;

/// Partitions of an event type with an ordering key: keys hash onto them; each is delivered in order.
pub const PARTITIONS: u32 = 16;
/// How long the stream remembers a `Nats-Msg-Id` to drop a duplicate publish. It covers the retry
/// horizon of a publish (the sidecar's own PubAck wait is 5 s; a client retrying a 503 with the same
/// ce-id or `Idempotency-Key` has 30 s), not NATS's default of 2 min: nats-server keeps every id of
/// the window in memory, and at 20,000 events/s two minutes are 2.4M ids (nats-server at 712 MB RSS
/// in the bench, 350 MB with 30 s; in one of two measured pairs the durable rate also fell round
/// after round with 2 min and not with 30 s: docs/performance-log.md, issue 13).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(30);
/// The shortest and longest window a Manager may set (`spec.durable.duplicateWindow`, checked by
/// the CRD). Zero would be NATS's 2 min default, so it is never sent.
pub const MIN_DUPLICATE_WINDOW: Duration = Duration::from_secs(1);
/// See [`MIN_DUPLICATE_WINDOW`].
pub const MAX_DUPLICATE_WINDOW: Duration = Duration::from_secs(3600);
/// Events a stream holds at most, whatever its byte limit; past it a publish is refused, never an
/// old event dropped.
pub const MAX_STREAM_MESSAGES: i64 = 1_000_000;
/// The least and the most bytes a Manager's stream may be limited to (`spec.durable.maxBytes`,
/// checked by the CRD): room for two events of the largest size, and 1 TiB.
pub const MIN_STREAM_BYTES: u64 = switchyard_crds::manager::MIN_STREAM_BYTES.unsigned_abs();
/// See [`MIN_STREAM_BYTES`].
pub const MAX_STREAM_BYTES: u64 = switchyard_crds::manager::MAX_STREAM_BYTES.unsigned_abs();
/// Added to the attempt timeout for AckWait: the ack travels after the app's answer.
pub const ACK_SLACK: Duration = Duration::from_secs(2);
/// The longest AckWait: a sidecar holding an event sends a progress ack every quarter of it, so a
/// longer attempt timeout needs no longer wait, and an event of a killed pod is redelivered within it.
pub const MAX_ACK_WAIT: Duration = Duration::from_secs(10);
/// `max_deliver` of every consumer: unlimited. The sidecar ends an event after `attempts` deliveries
/// (see [`ConsumerPlan::attempts`]); a server limit would strand an event whose last delivery was never
/// answered (the server stops delivering it, and nobody is left to dead-letter it).
pub const UNLIMITED_DELIVERIES: i64 = -1;
/// Deliveries outstanding at once over all pods of an unordered lane's consumer.
pub const MAX_ACK_PENDING: i64 = 10_000;
/// Room for a durable event's NATS headers (ids, source, digest, trace context, media type) beside
/// its payload: far more than they take, and small beside it.
pub const HEADERS_ALLOWANCE: usize = 64 * 1024;
/// The `max_payload` the NATS servers `switchyard up` and the chart start are given: the largest
/// event the mesh carries ([`crate::frame::MAX_PAYLOAD`], the Router's 16 MiB event limit) with its
/// headers. NATS's default (1 MiB) refused every larger durable publish; a server with less than
/// this answers such a publish 413, naming its limit.
pub const NATS_MAX_PAYLOAD: usize = crate::frame::MAX_PAYLOAD + HEADERS_ALLOWANCE;

/// Where the JetStream servers are, as sidecars are told.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JetStreamConfig {
    /// NATS URL(s), comma-separated: `nats://host:4222,nats://other:4222`.
    pub url: String,
    /// Replicas of each stream (1 on a single server, 3 on a 3-node cluster).
    #[serde(default = "one")]
    pub replicas: u8,
}

fn one() -> u8 {
    1
}

/// How a publisher sends an event type that is delivered durably: the Manager's stream and, when
/// the type has an ordering key, where the key is in the payload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DurableRoute {
    /// JSON pointer of the ordering key in the payload, if the Manager orders by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
    /// The Manager's duplicate window in milliseconds, when it sets one; else [`DUPLICATE_WINDOW`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_window_ms: Option<u64>,
    /// The Manager's stream byte limit, when it sets one; else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

impl DurableRoute {
    /// As a control-plane route carries it.
    pub fn to_wire(&self) -> crate::control::v1::DurableRoute {
        crate::control::v1::DurableRoute {
            ordering_key: self.ordering_key.clone().unwrap_or_default(),
            duplicate_window_ms: self.duplicate_window_ms.unwrap_or_default(),
            max_bytes: self.max_bytes.unwrap_or_default(),
        }
    }

    /// From a control-plane route: an empty ordering key is none (a JSON pointer of a key is
    /// never empty), and so are a zero window and a zero byte limit (an operator that sends none).
    pub fn from_wire(wire: &crate::control::v1::DurableRoute) -> DurableRoute {
        DurableRoute {
            ordering_key: Some(wire.ordering_key.clone()).filter(|k| !k.is_empty()),
            duplicate_window_ms: Some(wire.duplicate_window_ms).filter(|ms| *ms > 0),
            max_bytes: Some(wire.max_bytes).filter(|b| *b > 0),
        }
    }

    /// The window the Manager's stream is created with.
    pub fn duplicate_window(&self) -> Duration {
        duplicate_window(self.duplicate_window_ms)
    }

    /// The limits the Manager's stream is created with.
    pub fn stream_limits(&self) -> StreamLimits {
        StreamLimits::of(self.duplicate_window_ms, self.max_bytes)
    }
}

/// What a Manager's spec sets of its stream: the same at every party that creates or updates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// How long it remembers a ce-id (`spec.durable.duplicateWindow`).
    pub duplicate_window: Duration,
    /// Bytes it holds at most (`spec.durable.maxBytes`); none: no byte limit.
    pub max_bytes: Option<u64>,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits::of(None, None)
    }
}

impl StreamLimits {
    /// The limits from a Manager's window in milliseconds and byte limit, as they travel (none:
    /// the default), each kept within the CRD's bounds whatever a peer sent.
    pub fn of(duplicate_window_ms: Option<u64>, max_bytes: Option<u64>) -> StreamLimits {
        StreamLimits {
            duplicate_window: duplicate_window(duplicate_window_ms),
            max_bytes: max_bytes.map(|b| b.clamp(MIN_STREAM_BYTES, MAX_STREAM_BYTES)),
        }
    }

    /// The byte limit as JetStream's stream config takes it: -1 for none.
    pub fn nats_max_bytes(&self) -> i64 {
        self.max_bytes
            .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX))
    }
}

/// A Manager's duplicate window from its milliseconds, if it set any: [`DUPLICATE_WINDOW`] when not,
/// and kept within [`MIN_DUPLICATE_WINDOW`]..=[`MAX_DUPLICATE_WINDOW`] whatever a peer sent.
pub fn duplicate_window(ms: Option<u64>) -> Duration {
    ms.map_or(DUPLICATE_WINDOW, |ms| {
        Duration::from_millis(ms).clamp(MIN_DUPLICATE_WINDOW, MAX_DUPLICATE_WINDOW)
    })
}

/// A lane of an event type: unordered, or one partition of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// Events without an ordering key (or without a value at the key).
    Unordered,
    /// The partition of a key.
    Partition(u32),
}

impl Lane {
    /// The lane of an event whose ordering key is `key` (none: unordered).
    pub fn of(key: Option<&str>) -> Lane {
        match key {
            None => Lane::Unordered,
            Some(k) => Lane::Partition(fnv1a(k.as_bytes()) % PARTITIONS),
        }
    }

    /// Every lane of an event type, with or without an ordering key.
    pub fn all(ordered: bool) -> Vec<Lane> {
        let mut lanes = vec![Lane::Unordered];
        if ordered {
            lanes.extend((0..PARTITIONS).map(Lane::Partition));
        }
        lanes
    }

    fn token(self) -> String {
        match self {
            Lane::Unordered => "u".to_owned(),
            Lane::Partition(k) => format!("p{k}"),
        }
    }
}

/// The ordering key of a JSON payload: the value at `pointer` (a string as is, other values as JSON
/// text). `None` (no ordering) when the payload is not JSON or has no such field, or it is null.
/// The one definition both delivery modes order by.
pub fn ordering_key(payload: &[u8], pointer: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    match value.pointer(pointer)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The stream of Manager `manager` in `namespace`.
pub fn stream_name(namespace: &str, manager: &str) -> String {
    format!("SY_{namespace}_{manager}")
}

/// The subjects of that stream.
pub fn stream_subjects(namespace: &str, manager: &str) -> String {
    format!("sy.{namespace}.{manager}.>")
}

/// The subject of an event of type `event` in `lane`.
pub fn subject(namespace: &str, manager: &str, event: &str, lane: Lane) -> String {
    format!("sy.{namespace}.{manager}.{event}.{}", lane.token())
}

/// The subject token of a Manager's subscription to `pattern` (a type, `prefix.*` or `*`): `_s-`,
/// the pattern with `.` as `_` and `*` as `x`, and a hash of the exact pattern. An event type
/// starts with a letter, so no type's subjects are a subscription's.
pub fn subscription_token(pattern: &str) -> String {
    format!(
        "_s-{}-{:08x}",
        pattern.replace('.', "_").replace('*', "x"),
        fnv1a(pattern.as_bytes())
    )
}

/// The subject of a copy of an event for the subscription to `pattern` of `manager`, in `lane`.
pub fn subscription_subject(namespace: &str, manager: &str, pattern: &str, lane: Lane) -> String {
    subject(namespace, manager, &subscription_token(pattern), lane)
}

/// The durable consumer of (`event`, `lane`): consumer names take no `.`, so the type's dots become
/// `_` and a hash of the exact name keeps `a.b` and `a_b` apart.
pub fn consumer_name(event: &str, lane: Lane) -> String {
    format!(
        "{}-{:08x}-{}",
        event.replace('.', "_"),
        fnv1a(event.as_bytes()),
        lane.token()
    )
}

/// The settings of one durable consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerPlan {
    /// Durable name.
    pub name: String,
    /// The one subject it takes.
    pub filter_subject: String,
    /// Event type.
    pub event: String,
    /// Its lane.
    pub lane: Lane,
    /// Time the server waits for an ack (or a progress ack) before redelivering.
    pub ack_wait: Duration,
    /// Deliveries the server makes at most: [`UNLIMITED_DELIVERIES`].
    pub max_deliver: i64,
    /// Attempts the sidecar makes (`retries.attempts`): the last failed one, or any delivery past it,
    /// is dead-lettered and terminated.
    pub attempts: u32,
    /// Deliveries outstanding at once over every pod.
    pub max_ack_pending: i64,
    /// For a subscription's consumer: where it begins when first made (its `event` is then the
    /// subscription's pattern, and each message names its own type); `None` for a handled type's.
    pub start: Option<StartFrom>,
}

/// The consumers of `events` of Manager `manager`: attempt timeout, attempts, and whether the
/// Manager orders by a key.
pub fn consumers(
    namespace: &str,
    manager: &str,
    events: &[String],
    attempt_timeout: Duration,
    attempts: u32,
    ordered: bool,
) -> Vec<ConsumerPlan> {
    let mut out = Vec::new();
    for event in events {
        for lane in Lane::all(ordered) {
            out.push(ConsumerPlan {
                name: consumer_name(event, lane),
                filter_subject: subject(namespace, manager, event, lane),
                event: event.clone(),
                lane,
                ack_wait: (attempt_timeout + ACK_SLACK).min(MAX_ACK_WAIT),
                max_deliver: UNLIMITED_DELIVERIES,
                attempts: attempts.max(1),
                max_ack_pending: match lane {
                    Lane::Unordered => MAX_ACK_PENDING,
                    Lane::Partition(_) => 1,
                },
                start: None,
            });
        }
    }
    out
}

/// The consumers of `manager`'s durable subscriptions (each pattern with where it starts), with
/// the same workers as [`consumers`]: one per (subscription, lane), over the subjects publishers
/// store its copies under.
pub fn subscription_consumers(
    namespace: &str,
    manager: &str,
    subscriptions: &[(String, StartFrom)],
    attempt_timeout: Duration,
    attempts: u32,
    ordered: bool,
) -> Vec<ConsumerPlan> {
    let tokens: Vec<String> = subscriptions
        .iter()
        .map(|(p, _)| subscription_token(p))
        .collect();
    let mut out = consumers(
        namespace,
        manager,
        &tokens,
        attempt_timeout,
        attempts,
        ordered,
    );
    for plan in &mut out {
        if let Some(i) = tokens.iter().position(|t| *t == plan.event) {
            let (pattern, start) = &subscriptions[i];
            plan.event.clone_from(pattern);
            plan.start = Some(*start);
        }
    }
    out
}

/// FNV-1a, 32 bits: stable across processes and versions (the partition of a key must never move).
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_subjects_are_stable_and_distinct() {
        assert_eq!(stream_name("default", "handlers"), "SY_default_handlers");
        assert_eq!(
            stream_subjects("default", "handlers"),
            "sy.default.handlers.>"
        );
        assert_eq!(
            subject("default", "handlers", "orders.created", Lane::Unordered),
            "sy.default.handlers.orders.created.u"
        );
        assert_eq!(subject("ns", "m", "a", Lane::Partition(3)), "sy.ns.m.a.p3");
        assert_ne!(
            consumer_name("a.b", Lane::Unordered),
            consumer_name("a_b", Lane::Unordered)
        );
        let name = consumer_name("orders.created", Lane::Partition(15));
        assert!(
            name.starts_with("orders_created-") && name.ends_with("-p15"),
            "{name}"
        );
        assert!(!name.contains('.'));
    }

    #[test]
    fn a_subscriptions_subjects_and_consumers_are_never_a_types() {
        let token = subscription_token("orders.*");
        assert!(token.starts_with("_s-orders_x-"), "{token}");
        assert!(!token.contains(['.', '*', '>']), "{token}");
        assert_ne!(subscription_token("a.b"), subscription_token("a_b"));
        assert_eq!(
            subscription_subject("shop", "billing", "orders.*", Lane::Unordered),
            format!("sy.shop.billing.{token}.u")
        );
        let plans = subscription_consumers(
            "shop",
            "billing",
            &[
                ("orders.*".to_owned(), StartFrom::New),
                ("audit.entry".to_owned(), StartFrom::Stored),
            ],
            Duration::from_secs(5),
            3,
            true,
        );
        assert_eq!(plans.len(), 2 * (1 + PARTITIONS as usize));
        let first = &plans[0];
        assert_eq!(first.event, "orders.*", "the pattern, not the token");
        assert_eq!(first.start, Some(StartFrom::New));
        assert_eq!(first.filter_subject, format!("sy.shop.billing.{token}.u"));
        assert!(first.name.starts_with("_s-orders_x-"), "{}", first.name);
        assert!(plans.iter().all(|p| !p.name.contains('.')));
        assert_eq!(plans[1 + PARTITIONS as usize].event, "audit.entry");
        assert_eq!(
            plans[1 + PARTITIONS as usize].start,
            Some(StartFrom::Stored)
        );
        // A handled type's consumer has no start: it takes everything.
        let handled = consumers(
            "shop",
            "billing",
            &["orders".to_owned()],
            Duration::from_secs(5),
            3,
            false,
        );
        assert_eq!(handled[0].start, None);
    }

    #[test]
    fn a_key_always_lands_in_the_same_partition() {
        // Pinned: moving a key to another partition would break its order across versions.
        assert_eq!(Lane::of(Some("customer-1")), Lane::of(Some("customer-1")));
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(Lane::of(None), Lane::Unordered);
        let spread: std::collections::BTreeSet<_> =
            (0..200).map(|i| Lane::of(Some(&format!("k{i}")))).collect();
        assert_eq!(
            spread.len(),
            PARTITIONS as usize,
            "keys spread over every partition"
        );
    }

    #[test]
    fn a_route_survives_the_wire() {
        for key in [None, Some("/customerId".to_owned())] {
            for window in [None, Some(5_000)] {
                for max_bytes in [None, Some(MIN_STREAM_BYTES)] {
                    let route = DurableRoute {
                        ordering_key: key.clone(),
                        duplicate_window_ms: window,
                        max_bytes,
                    };
                    assert_eq!(DurableRoute::from_wire(&route.to_wire()), route);
                }
            }
        }
    }

    #[test]
    fn the_crds_default_window_is_this_one() {
        // The CRD cannot name this constant (this crate depends on it), so the two are pinned here.
        let crd = switchyard_crds::manager::Durable::default().duplicate_window;
        assert_eq!(Duration::from(crd), DUPLICATE_WINDOW);
    }

    #[test]
    fn a_window_is_the_managers_or_the_default_and_always_within_bounds() {
        assert_eq!(DurableRoute::default().duplicate_window(), DUPLICATE_WINDOW);
        assert_eq!(duplicate_window(Some(5_000)), Duration::from_secs(5));
        // Out of the CRD's bounds (an older or a foreign peer): clamped, never 0 (NATS's 2 min).
        assert_eq!(duplicate_window(Some(1)), MIN_DUPLICATE_WINDOW);
        assert_eq!(duplicate_window(Some(u64::MAX)), MAX_DUPLICATE_WINDOW);
    }

    #[test]
    fn a_byte_limit_is_the_managers_or_none_and_always_within_bounds() {
        let none = DurableRoute::default().stream_limits();
        assert_eq!(none, StreamLimits::default());
        assert_eq!(none.max_bytes, None);
        assert_eq!(none.nats_max_bytes(), -1, "JetStream's no limit");
        assert_eq!(none.duplicate_window, DUPLICATE_WINDOW);
        let set = DurableRoute {
            max_bytes: Some(1 << 30),
            ..DurableRoute::default()
        }
        .stream_limits();
        assert_eq!(set.max_bytes, Some(1 << 30));
        assert_eq!(set.nats_max_bytes(), 1 << 30);
        // Out of the CRD's bounds (an older or a foreign peer): clamped, so a stream always takes
        // the largest event, and never a limit JetStream reads as none.
        assert_eq!(
            StreamLimits::of(None, Some(1)).max_bytes,
            Some(MIN_STREAM_BYTES)
        );
        assert_eq!(
            StreamLimits::of(None, Some(u64::MAX)).nats_max_bytes(),
            i64::try_from(MAX_STREAM_BYTES).unwrap_or_default()
        );
        // An empty stream at the least limit takes an event of the largest size the server takes,
        // with its subject and the store's record overhead (tens of bytes), so a refusal for a full
        // stream always ends once the backlog is delivered.
        assert!(MIN_STREAM_BYTES > u64::try_from(NATS_MAX_PAYLOAD + 1024).unwrap_or(u64::MAX));
    }

    #[test]
    fn consumers_follow_the_workers() {
        let plan = consumers(
            "ns",
            "m",
            &["a".to_owned()],
            Duration::from_secs(5),
            4,
            false,
        );
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].ack_wait, Duration::from_secs(7));
        assert_eq!(plan[0].attempts, 4);
        assert_eq!(plan[0].max_deliver, UNLIMITED_DELIVERIES);
        assert_eq!(plan[0].filter_subject, "sy.ns.m.a.u");
        let ordered = consumers(
            "ns",
            "m",
            &["a".to_owned()],
            Duration::from_secs(5),
            1,
            true,
        );
        assert_eq!(ordered.len(), 1 + PARTITIONS as usize);
        // A long attempt timeout does not lengthen AckWait: progress acks cover the attempt.
        assert_eq!(ordered[0].ack_wait, Duration::from_secs(7));
        let long = consumers(
            "ns",
            "m",
            &["a".to_owned()],
            Duration::from_secs(300),
            1,
            false,
        );
        assert_eq!(long[0].ack_wait, MAX_ACK_WAIT);
        assert!(ordered[1..].iter().all(|c| c.max_ack_pending == 1));
    }
}
