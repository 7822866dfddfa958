//! Status types of both resources.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: the resource serves traffic.
pub const READY: &str = "Ready";
/// Condition type: children are being created or rolled out.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the spec cannot be realised, or a child failed.
pub const DEGRADED: &str = "Degraded";
/// Condition type of a Manager with durable types: whether what its 202s acknowledge is kept on a
/// quorum of JetStream servers reached over TLS, or on fewer, or in the clear (the reason says).
pub const DURABILITY: &str = "Durability";
/// Condition type of a durable Manager with scaling: its backlog is read from JetStream.
pub const BACKLOG_READ: &str = "BacklogRead";
/// Condition type of every Router and Manager with mesh TLS: whether the trust anchor and the
/// issuer their sidecars' certificates rest on are valid, expire within 30 days, or have expired.
pub const MESH_TRUST: &str = "MeshTrust";

/// The status conditions of a Router or a Manager (none before its first status), for code written
/// once for both: the operator's condition writers and `switchyard check`.
pub trait HasConditions {
    /// Its conditions.
    fn conditions(&self) -> &[Condition];
}

impl HasConditions for crate::Router {
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }
}

impl HasConditions for crate::Manager {
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }
}

/// Observed state of a Router.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Progressing and Degraded, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Router pods.
    #[serde(default)]
    pub replicas: i32,
    /// Ready router pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the router pods, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Number of routes served.
    #[serde(default)]
    pub routes: i32,
    /// The fan-out: per event type (or pattern) that Managers subscribe to, its handler and its
    /// subscribers, sorted by event. Types nobody subscribes to are left out (their handler is in
    /// each Manager's status).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub subscribers: Vec<TypeSubscribers>,
}

/// One event type's handler and subscribers, in a Router's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypeSubscribers {
    /// The event type, or the pattern (`orders.*`, `*`) the subscriptions name.
    pub event: String,
    /// The Manager that handles the type (answers its requests), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// The Managers that subscribe to it, each as `<manager> (<what it observes>)`, sorted.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub subscribers: Vec<String>,
}

/// Observed state of a Manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagerStatus {
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Progressing and Degraded, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Pods across the Manager's Deployments.
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods across the Manager's Deployments.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Replicas the autoscaler asked for, when scaling is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Label selector of the Manager's pods, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The handled event types, comma-separated (for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<String>,
    /// Per-event-type figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["event"]))]
    pub events: Vec<EventTypeStatus>,
    /// Per-subscription figures (`spec.subscriptions`), by the autoscaler when scaling is
    /// enabled: what this Manager's own pods received under each subscription, so a subscriber
    /// that falls behind or sheds shows here rather than in its handler's figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["event"])
    )]
    pub subscriptions: Vec<SubscriptionStatus>,
}

/// Observed figures of one subscription, from the subscribing Manager's pods' load reports (a
/// subscription to a type the Manager also handles shares that type's figures: its pods count
/// the two as one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    /// The subscription's `event`: a type or a pattern, as the spec names it.
    pub event: String,
    /// Events received per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Events in flight or waiting for a worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<f64>,
    /// 99th percentile latency in milliseconds (queue and app).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Events refused per second because a bound was reached (the subscriber's own sheds; copies
    /// of requests and answers shed before they reach it are counted by the sending sidecars'
    /// `switchyard_observer_copies_total{outcome="shed"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shed_rate: Option<f64>,
    /// Durable subscriptions: events kept for this subscriber in JetStream and not yet
    /// acknowledged, as the operator last read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<i64>,
}

/// Observed figures of one event type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTypeStatus {
    /// Event type.
    pub event: String,
    /// Deployment that serves it. Written by the controller; the autoscaler's figures for the same
    /// entry come by a second field manager, so for a moment an entry may have only those.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub deployment: String,
    /// Pods of that Deployment.
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods of that Deployment.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Replicas the autoscaler asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Arrivals per second, from the sidecars' load reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Events in flight, from the sidecars' load reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<f64>,
    /// 99th percentile latency in milliseconds, from the sidecars' load reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Events refused per second because a bound was reached, from the sidecars' load reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shed_rate: Option<f64>,
    /// Events waiting in JetStream (durable delivery): pending plus delivered and not yet
    /// acknowledged, as the operator last read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<i64>,
}
