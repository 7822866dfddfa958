//! What a run records, as plain data (pure): every publish attempt and its answer, every delivery an
//! app saw, every fault injected, and who should receive which types. Times are offsets from the
//! run's start, all read from one clock in the test process (the apps run in it too).

use std::time::Duration;

/// An event's identity as CloudEvents defines it, plus its type: the same key under two types is
/// two events.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    pub ce_type: String,
    pub source: String,
    pub id: String,
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.ce_type, self.source, self.id)
    }
}

/// One publish attempt: a retry of the same event is another attempt with the same id and payload.
#[derive(Clone, Debug)]
pub struct Publish {
    pub event: EventId,
    /// The ordering key (the payload's `key`) and the event's place in that key's sequence.
    pub key: String,
    pub seq: u64,
    /// The HTTP answer; 0 when none came (the connection failed).
    pub status: u16,
    /// When the attempt was sent: no delivery of the event can come before its first attempt.
    pub sent: Duration,
}

/// One delivery an app saw (recorded on arrival, before it answered).
#[derive(Clone, Debug)]
pub struct Delivery {
    pub manager: String,
    pub pod: String,
    pub event: EventId,
    pub key: String,
    pub seq: u64,
    pub at: Duration,
}

/// What a fault touched: one Manager (its sidecar or its app), or the NATS cluster (which every
/// durable Manager depends on); a graceful rollout touches what it touches but promises no
/// redelivery, so it explains no duplicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Manager(String),
    Nats,
    Graceful(String),
}

#[derive(Clone, Debug)]
pub struct Fault {
    /// What was done, e.g. `kill -9 sidecar orders-0`.
    pub what: String,
    pub target: Target,
    pub start: Duration,
    /// When it was healed: the process restarted, the node resumed or reconnected, and every
    /// NATS node healthy again.
    pub end: Duration,
}

/// A Manager that should receive every acknowledged event of `types` (its handled types and its
/// durable subscriptions), in order per key when `ordered`.
#[derive(Clone, Debug)]
pub struct Receiver {
    pub manager: String,
    pub types: Vec<String>,
    pub ordered: bool,
}

#[derive(Clone, Debug, Default)]
pub struct History {
    pub publishes: Vec<Publish>,
    pub deliveries: Vec<Delivery>,
    pub faults: Vec<Fault>,
    pub receivers: Vec<Receiver>,
}
