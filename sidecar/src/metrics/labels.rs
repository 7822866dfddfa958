//! Label sets of the sidecar's metrics (shared by the process metrics and the WebSocket ones).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use std::sync::Arc;

/// An event-type label that shares the route table's string instead of allocating per request.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct EventLabel(pub Arc<str>);

impl EncodeLabelValue for EventLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

/// Which sidecar role a process runs: the `role` label of the series both roles record, and the
/// `switchyard.role` resource attribute of its spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A Router's sidecar.
    Router,
    /// A Manager's sidecar.
    Manager,
}

impl Role {
    /// The role's name: `router` or `manager`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Router => "router",
            Role::Manager => "manager",
        }
    }
}

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// Event type (`unmatched` for requests that matched no route).
    pub event: EventLabel,
    /// HTTP status answered.
    pub status: u16,
}

/// Labels keyed by event type only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EventLabels {
    /// Event type.
    pub event: EventLabel,
}

/// Labels of the dispatch failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    /// Event type.
    pub event: EventLabel,
    /// Why no app answer came, as `answer::Failure::name` words it (`shed`, `no_manager`,
    /// `no_endpoint`, `timeout`, ...).
    pub reason: &'static str,
}

/// Labels of the build info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    /// The sidecar's version (its crate version).
    pub version: &'static str,
}

/// Labels of the middleware rejection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RejectLabels {
    /// Middleware that refused (`cors`, `jwt`, `apiKey`, `rateLimit`).
    pub middleware: &'static str,
    /// Why, e.g. `expired`, `missing`, `exhausted`.
    pub reason: &'static str,
}

/// Labels of the admin port's refusal counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AdminRefusedLabels {
    /// The path asked for (`/drain`, `/routes`).
    pub path: &'static str,
    /// `not_loopback` (403) or `method` (405).
    pub reason: &'static str,
}

/// Labels of the local API counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LocalApiLabels {
    /// `publish`, `request` or `push`.
    pub op: &'static str,
    /// HTTP status answered (for gRPC, the HTTP status of the same case).
    pub status: u16,
}

/// Labels of the observer-copy counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ObserverLabels {
    /// The subscription's route key, `<event>@<manager>`.
    pub subscription: EventLabel,
    /// `request` or `response`.
    pub copy: &'static str,
    /// `sent` (the subscriber admitted it), `shed` (too many copies underway: not sent) or
    /// `failed` (no endpoint, refused, or no acknowledgement in time).
    pub outcome: &'static str,
}

/// Labels of the subscription info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SubscriptionLabels {
    /// The subscription's route key, `<event>@<manager>` (as the observer-copy counter names it).
    pub subscription: EventLabel,
    /// Its event as written (a pattern stays a pattern): the `event` label its deliveries are
    /// counted under in this pod.
    pub event: EventLabel,
}
