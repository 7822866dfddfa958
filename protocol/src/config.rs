//! Rendered sidecar configuration: the operator writes it into a ConfigMap, the sidecar reads it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use switchyard_crds::EventType;
use switchyard_crds::manager::{AllowFrom, App, Split, Workers};
use switchyard_crds::router::{RouterSpec, Tracing};
use switchyard_crds::subscription::Subscription;

use crate::durable::{DurableRoute, JetStreamConfig};

/// File name of the rendered config inside the ConfigMap and the mounted volume.
pub const FILE_NAME: &str = "config.json";
/// Where the sidecar finds its config in a pod.
pub const MOUNT_DIR: &str = "/etc/switchyard";
/// Where the router sidecar reads referenced Secrets, as `<dir>/<secret name>/<key>`. A sibling of
/// [`MOUNT_DIR`], not inside it: a volume cannot be mounted inside a read-only ConfigMap volume.
pub const SECRETS_DIR: &str = "/etc/switchyard-secrets";
/// Where a manager pod's sidecar and app share the app's Unix socket (`app.transport: unix`): an
/// `emptyDir`, so only the pod's own containers can reach the socket.
pub const APP_SOCKET_DIR: &str = "/var/run/switchyard";
/// The app's Unix socket in a pod, inside [`APP_SOCKET_DIR`].
pub const APP_SOCKET_PATH: &str = "/var/run/switchyard/app.sock";

/// Configuration of a sidecar in router role.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterConfig {
    /// Name of the Router.
    pub name: String,
    /// Namespace of the Router.
    pub namespace: String,
    /// The Router spec as applied.
    pub spec: RouterSpec,
    /// Where each event type goes.
    pub destinations: BTreeMap<EventType, Destination>,
    /// The Managers that observe event types beside their handlers, keyed by [`subscriber_key`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subscribers: BTreeMap<String, Subscriber>,
    /// Manager name -> `host:port` of its manager sidecars' frame listeners: the static endpoint table of
    /// local mode. A Manager missing here is found through its Service's DNS name instead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub static_endpoints: BTreeMap<String, Vec<String>>,
}

/// The Manager that handles an event type, and how to reach its pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Name of the Manager.
    pub manager: String,
    /// Service whose endpoints are the Manager's pods.
    pub service: String,
    /// Inbound frame port on those pods.
    pub port: u16,
    /// Pod labels that select the pods serving this event type (a subset of the Service's pods with
    /// `split: perEventType`).
    pub pod_selector: BTreeMap<String, String>,
    /// Set when the type is delivered durably: publishes go to the Manager's JetStream stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable: Option<DurableRoute>,
    /// Event types the Manager's pods may push to the Router's WebSocket clients beside the ones
    /// it handles (its `spec.push`); a push of any other type from its pods is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub push: Vec<EventType>,
}

/// A Manager that observes an event type (or pattern) through one of its subscriptions, and how
/// to reach its pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Subscriber {
    /// The subscription as the Manager wrote it.
    pub subscription: Subscription,
    /// Its Manager's pods (all of them: a subscription is served by whichever pod p2c picks).
    pub destination: Destination,
}

/// The key of a subscriber's route in a routing table: `<event>@<manager>`. No event type or
/// pattern holds an `@`, so it never collides with a handler's route (keyed by event type), and a
/// Manager has one subscription per `event` (the CRD keys the list by it).
pub fn subscriber_key(event: &str, manager: &str) -> String {
    format!("{event}@{manager}")
}

/// Configuration of a sidecar in manager role.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagerConfig {
    /// Name of the Manager.
    pub name: String,
    /// Namespace of the Manager.
    pub namespace: String,
    /// Router whose events it handles.
    pub router: String,
    /// Event types handled by the Manager as a whole; a pod handles the subset in its
    /// `SWITCHYARD_EVENT_TYPES` environment variable.
    pub events: Vec<EventType>,
    /// How events reach the app.
    pub app: App,
    /// Delivery settings.
    pub workers: Workers,
    /// How event types map to Deployments.
    pub split: Split,
    /// Where each event type the app publishes or requests goes (the Router's whole table). Empty in a
    /// cluster, where the operator's control-plane stream supplies it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub destinations: BTreeMap<EventType, Destination>,
    /// As [`RouterConfig::subscribers`]: who observes what, for the app's publishes and requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subscribers: BTreeMap<String, Subscriber>,
    /// This Manager's own subscriptions (`spec.subscriptions`): its pods admit the events they cover.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<Subscription>,
    /// Event types its app may push besides those in `events` (`spec.push`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub push: Vec<EventType>,
    /// As [`RouterConfig::static_endpoints`]: local mode's endpoint table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub static_endpoints: BTreeMap<String, Vec<String>>,
    /// The Router's tracing settings, so manager hops join the same traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Tracing>,
    /// Who may open frame connections to this Manager's sidecars (`spec.allowFrom`); absent: its
    /// Router and every Manager of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_from: Option<Vec<AllowFrom>>,
    /// This Manager's event types that are delivered durably: the sidecar pulls them from JetStream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub durable_events: Vec<EventType>,
    /// The JetStream servers, when this Manager or a destination is durable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jetstream: Option<JetStreamConfig>,
    /// How long this Manager's stream remembers a published ce-id, in milliseconds
    /// (`spec.durable.duplicateWindow`); absent: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_window_ms: Option<u64>,
    /// Bytes this Manager's stream holds at most (`spec.durable.maxBytes`); absent: no byte limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}
