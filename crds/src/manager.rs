//! The `Manager` custom resource: the user's handler containers plus the sidecar that feeds them events.

use crate::common::Duration;
pub use crate::delivery::DeliveryMode;
use crate::event_type::EventType;
use crate::schema;
use crate::status::ManagerStatus;
use crate::subscription::Subscription;
use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A Manager: the event types it handles, how its sidecar reaches the app, its workers and its scaling.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "switchyard.dev",
    version = "v1alpha1",
    kind = "Manager",
    namespaced,
    status = "ManagerStatus",
    shortname = "mgr",
    category = "switchyard",
    doc = "A Manager runs the handler containers for a set of event types, with the Switchyard sidecar that delivers events to them.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether the manager pods are ready",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Events",
        type_ = "string",
        description = "Event types handled",
        json_path = ".status.eventTypes"
    ),
    printcolumn(
        name = "Observes",
        type_ = "string",
        description = "Event types observed (spec.subscriptions)",
        json_path = ".spec.subscriptions[*].event"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        description = "Current pods",
        json_path = ".status.replicas"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.scaling) || !self.scaling.enabled || self.events.all(e, has(self.scaling.targets) && e in self.scaling.targets)",
        // `[0]` names the first missing type: `join` over the whole list exceeds the API server's CEL cost budget.
        "messageExpression": "'scaling is enabled, so every event type needs a target in spec.scaling.targets; missing: ' + self.events.filter(e, !has(self.scaling.targets) || !(e in self.scaling.targets))[0]",
        "fieldPath": ".scaling.targets",
        "reason": "FieldValueRequired",
    },
    {
        // A subscriber scales on its own load too: each subscription's load is reported under its
        // event as written (a pattern stays a pattern), and its target is keyed the same way. A
        // static message: a messageExpression over the subscriptions (objects with deep filters)
        // exceeds the API server's CEL cost budget.
        "rule": "!has(self.scaling) || !self.scaling.enabled || !has(self.subscriptions) || self.subscriptions.all(s, has(self.scaling.targets) && s.event in self.scaling.targets)",
        "message": "scaling is enabled, so every subscription needs a target in spec.scaling.targets, keyed by its event as written (e.g. orders.*)",
        "fieldPath": ".scaling.targets",
        "reason": "FieldValueRequired",
    },
    // That every key of scaling.targets is a handled type or a subscription's event is checked by
    // the operator (`validate::manager`): the rule over both lists exceeds the CEL cost budget.
    {
        "rule": "!has(self.eventDelivery) || self.eventDelivery.all(k, k in self.events)",
        "message": "every key of eventDelivery must be one of spec.events",
        "fieldPath": ".eventDelivery",
    },
    {
        "rule": "!has(self.workers) || !has(self.workers.deadLetter) || !(self.workers.deadLetter in self.events)",
        "message": "workers.deadLetter must not be one of this Manager's own event types (it would loop)",
        "fieldPath": ".workers.deadLetter",
    },
]))]
pub struct ManagerSpec {
    /// The Router whose events this Manager handles.
    pub router_ref: RouterRef,
    /// Event types this Manager handles; each name appears once.
    #[schemars(length(min = 1, max = 64), extend("x-kubernetes-list-type" = "set"))]
    pub events: Vec<EventType>,
    /// Event types this Manager observes beside the ones it handles: every subscriber of a type
    /// gets each of its publishes (and, as asked, copies of its requests and its handler's
    /// answers), once per Manager. One subscription per `event`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["event"])
    )]
    pub subscriptions: Vec<Subscription>,
    /// Event types this Manager's app may push to WebSocket clients (the local API's
    /// `/v1/push/{event}`) besides the ones it handles. A push of any other type is refused (403)
    /// by its sidecar, so one team's handler cannot send another team's notifications.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "set"))]
    pub push: Vec<EventType>,
    /// How the sidecar reaches the handler app inside the pod.
    #[serde(default)]
    pub app: App,
    /// Pod template of the handler containers (a core/v1 PodTemplateSpec; its fields are documented
    /// by `kubectl explain pod.spec`); the operator adds the sidecar as a native sidecar.
    #[schemars(schema_with = "schema::pod_template_spec")]
    pub template: PodTemplateSpec,
    /// Delivery to the app: concurrency, queue, deadline, retries, dead letters, ordering.
    #[serde(default)]
    pub workers: Workers,
    /// Pods per Deployment. Set by `kubectl scale` or by the autoscaler when scaling is enabled.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
    /// Scaling by event-type load.
    #[serde(default)]
    pub scaling: Scaling,
    /// Who may send this Manager events over the mesh (mTLS identities of the frame connections
    /// to its sidecars). Absent: its Router and every Manager of the namespace (their relays and
    /// dead letters). A list replaces that default: list fewer to narrow it, more to widen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub allow_from: Option<Vec<AllowFrom>>,
    /// How published events reach this Manager: `direct` (the default: in the receiving pod's
    /// memory; a killed pod loses what it had admitted) or `durable` (kept in NATS JetStream until
    /// the app answered 2xx; redelivered after a crash). Request/response is always direct.
    #[serde(default, skip_serializing_if = "DeliveryMode::is_direct")]
    pub delivery: DeliveryMode,
    /// `delivery` for single event types, overriding the Manager's. Keyed by event type (checked by
    /// the CEL rule above: every key is one of `events`; a key typed `EventType` would render as
    /// `patternProperties`, which the API server does not take in a CRD).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub event_delivery: BTreeMap<String, DeliveryMode>,
    /// Settings of durable delivery, for the types delivered durably.
    #[serde(default, skip_serializing_if = "Durable::is_default")]
    pub durable: Durable,
    /// The manager sidecar container the operator adds to each pod (the app's containers are the
    /// template's).
    #[serde(default, skip_serializing_if = "ManagerSidecar::is_default")]
    pub sidecar: ManagerSidecar,
}

/// The manager sidecar container of a Manager's pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagerSidecar {
    /// Compute resources of the sidecar container. Absent: the operator's defaults (requests 100m
    /// CPU and 32Mi memory, a 256Mi memory limit). The memory limit sets the sidecar's byte
    /// budgets: half of what is left after 32Mi for the events it admits (past it, 503 with
    /// Retry-After), a quarter for its local API's bodies. A limit below 64Mi plus one event of the
    /// largest size (16Mi) is refused. Without a memory limit the budgets are those of 1Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

impl ManagerSidecar {
    fn is_default(&self) -> bool {
        *self == ManagerSidecar::default()
    }
}

/// Settings of a Manager's JetStream stream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.duplicateWindow) || (duration(self.duplicateWindow) >= duration('1s') && duration(self.duplicateWindow) <= duration('1h'))",
        "message": "durable.duplicateWindow must be between 1s and 1h",
        "fieldPath": ".duplicateWindow",
    },
    {
        // A rule beside the schema's range so the refusal names the field and says why the floor is where it is.
        "rule": "!has(self.maxBytes) || (self.maxBytes >= 33554432 && self.maxBytes <= 1099511627776)",
        "message": "durable.maxBytes must be between 33554432 (32 MiB: room for the largest event the mesh carries, 16 MiB with its headers) and 1099511627776 (1 TiB)",
        "fieldPath": ".maxBytes",
    },
]))]
pub struct Durable {
    /// How long the stream remembers a published event's ce-id, so a retried publish with the same
    /// one (an `Idempotency-Key`, a 503 retried) is dropped rather than delivered twice. Longer covers
    /// slower retries; nats-server holds every id of the window in memory (rate x window ids), and a
    /// publish's tail latency grows with them (docs/delivery.md).
    #[serde(default = "default_duplicate_window")]
    #[schemars(schema_with = "schema::duration")]
    pub duplicate_window: Duration,
    /// Bytes the stream holds at most: its backlog, the events stored and not yet delivered. A
    /// publish that would pass it is refused (503 with Retry-After, naming this limit), never an old
    /// event dropped; it is taken again once the app has worked the backlog down. At least 32 MiB
    /// (two events of the largest size the mesh carries, so an empty stream always takes one), at
    /// most 1 TiB. The servers reserve it (times the stream's replicas) from their store when the
    /// stream is created, so the Managers' limits together must fit the servers' volumes. Absent: no
    /// byte limit, only the 1,000,000 events every stream holds at most and the servers' store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 33554432, max = 1099511627776_i64))]
    pub max_bytes: Option<i64>,
}

/// The least `durable.maxBytes`: two events of the largest size the mesh carries
/// ([`crate::router::MAX_EVENT_BYTES`]), so a stream emptied of its backlog always takes the largest
/// event with its headers and the server's per-event overhead.
pub const MIN_STREAM_BYTES: i64 = 2 * crate::router::MAX_EVENT_BYTES;
/// The most `durable.maxBytes`: 1 TiB.
pub const MAX_STREAM_BYTES: i64 = 1 << 40;

fn default_duplicate_window() -> Duration {
    // switchyard_protocol::durable::DUPLICATE_WINDOW (that crate depends on this one; a test there pins them equal).
    Duration::from(std::time::Duration::from_secs(30))
}

impl Default for Durable {
    fn default() -> Self {
        Durable {
            duplicate_window: default_duplicate_window(),
            max_bytes: None,
        }
    }
}

impl Durable {
    fn is_default(&self) -> bool {
        *self == Durable::default()
    }

    /// The window in milliseconds when it is not the default (the default travels as none, so
    /// peers of an older version and this one agree on it).
    pub fn duplicate_window_ms(&self) -> Option<u64> {
        (self.duplicate_window != default_duplicate_window()).then(|| {
            u64::try_from(std::time::Duration::from(self.duplicate_window).as_millis())
                .unwrap_or(u64::MAX)
        })
    }

    /// The stream's byte limit, when the Manager sets one (none travels as none: no byte limit).
    pub fn max_bytes(&self) -> Option<u64> {
        self.max_bytes.and_then(|b| u64::try_from(b).ok())
    }
}

/// A workload allowed to open frame connections to a Manager's sidecars.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowFrom {
    /// What the workload is.
    pub kind: WorkloadKind,
    /// Its name, or `*` for any of that kind.
    #[schemars(
        regex(pattern = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"),
        length(min = 1, max = 63)
    )]
    pub name: String,
    /// Its namespace; the Manager's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub namespace: Option<String>,
}

/// Kinds of mesh workloads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum WorkloadKind {
    /// A Router's sidecars.
    Router,
    /// A Manager's sidecars.
    Manager,
}

impl ManagerSpec {
    /// The delivery of event type `event`: its own setting, else the Manager's.
    pub fn delivery_of(&self, event: &EventType) -> DeliveryMode {
        self.event_delivery
            .get(event.as_str())
            .copied()
            .unwrap_or(self.delivery)
    }

    /// The event types delivered durably, in spec order.
    pub fn durable_events(&self) -> Vec<EventType> {
        self.events
            .iter()
            .filter(|e| self.delivery_of(e) == DeliveryMode::Durable)
            .cloned()
            .collect()
    }

    /// The subscriptions delivered durably (kept in this Manager's stream), in spec order.
    pub fn durable_subscriptions(&self) -> impl Iterator<Item = &Subscription> {
        self.subscriptions
            .iter()
            .filter(|s| s.delivery == DeliveryMode::Durable)
    }

    /// Whether this Manager's sidecars consume a stream of their own: a durable type or a durable
    /// subscription.
    pub fn consumes_durably(&self) -> bool {
        !self.durable_events().is_empty() || self.durable_subscriptions().next().is_some()
    }
}

fn one() -> i32 {
    1
}

/// Reference to a Router in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterRef {
    /// Name of the Router.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// How the sidecar delivers events to the app.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct App {
    /// Port the app listens on inside the pod (localhost).
    #[serde(default = "default_app_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Protocol the app speaks: CloudEvents over HTTP (binary mode) or the gRPC Handler service.
    #[serde(default)]
    pub protocol: AppProtocol,
    /// HTTP path events are POSTed to (HTTP protocol only).
    #[serde(default = "default_app_path")]
    #[schemars(regex(pattern = r"^/[A-Za-z0-9._~/-]*$"), length(max = 1024))]
    pub path: String,
    /// How the sidecar reaches the app: TCP on `port` (localhost), or a Unix domain socket in a
    /// volume the two containers share, whose path the app reads from `SWITCHYARD_APP_SOCKET`.
    #[serde(default)]
    pub transport: AppTransport,
}

fn default_app_port() -> i32 {
    8000
}

fn default_app_path() -> String {
    "/".into()
}

impl Default for App {
    fn default() -> Self {
        App {
            port: default_app_port(),
            protocol: AppProtocol::default(),
            path: default_app_path(),
            transport: AppTransport::default(),
        }
    }
}

/// How the sidecar and the app reach each other inside the pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AppTransport {
    /// TCP to `127.0.0.1:<port>`.
    #[default]
    Tcp,
    /// A Unix domain socket the app listens on, at the path in `SWITCHYARD_APP_SOCKET` (the
    /// operator puts it in an `emptyDir` mounted in the sidecar and in every app container). It
    /// skips loopback TCP's per-packet work, which both sides pay for on every event.
    Unix,
}

/// Protocols the app can speak.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AppProtocol {
    /// CloudEvents HTTP binary mode.
    #[default]
    Http,
    /// The gRPC `Handler` service.
    Grpc,
}

/// Worker settings of the manager sidecar.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workers {
    /// Events delivered to the app at once, per pod.
    #[serde(default = "default_max_in_flight")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_in_flight: i32,
    /// Events waiting for a worker, per pod; past it the sender is told to back off.
    #[serde(default = "default_queue_capacity")]
    #[schemars(range(min = 1, max = 1000000))]
    pub queue_capacity: i32,
    /// Deadline of one delivery attempt.
    #[serde(default = "default_timeout")]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Duration,
    /// Retries of failed deliveries.
    #[serde(default)]
    pub retries: Retries,
    /// Event type that receives events whose retries ran out. Dropped with a metric when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<EventType>,
    /// JSON pointer into the payload (e.g. `/customerId`); events with the same key are delivered in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(/[^/]+)+$"), length(max = 256))]
    pub ordering_key: Option<String>,
}

fn default_max_in_flight() -> i32 {
    64
}

fn default_queue_capacity() -> i32 {
    1024
}

fn default_timeout() -> Duration {
    Duration::from(std::time::Duration::from_secs(30))
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            max_in_flight: default_max_in_flight(),
            queue_capacity: default_queue_capacity(),
            timeout: default_timeout(),
            retries: Retries::default(),
            dead_letter: None,
            ordering_key: None,
        }
    }
}

/// Retry policy: exponential backoff with jitter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retries {
    /// Delivery attempts in all, the first included; 1 means no retry.
    #[serde(default = "default_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub attempts: i32,
    /// Wait before the first retry; doubles with each further one.
    #[serde(default = "default_backoff")]
    #[schemars(schema_with = "schema::duration")]
    pub backoff: Duration,
    /// Longest wait between retries.
    #[serde(default = "default_max_backoff")]
    #[schemars(schema_with = "schema::duration")]
    pub max_backoff: Duration,
}

fn default_attempts() -> i32 {
    3
}

fn default_backoff() -> Duration {
    Duration::from(std::time::Duration::from_millis(100))
}

fn default_max_backoff() -> Duration {
    Duration::from(std::time::Duration::from_secs(10))
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            attempts: default_attempts(),
            backoff: default_backoff(),
            max_backoff: default_max_backoff(),
        }
    }
}

/// Scaling by event-type load.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.minReplicas <= self.maxReplicas",
    "message": "minReplicas must not exceed maxReplicas",
    "fieldPath": ".minReplicas",
}]))]
pub struct Scaling {
    /// Let the operator set replicas from load. When false, `kubectl scale` or an HPA decides.
    #[serde(default)]
    pub enabled: bool,
    /// Fewest pods per Deployment; 0 allows scale to zero.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 10000))]
    pub min_replicas: i32,
    /// Most pods per Deployment.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_replicas: i32,
    /// Target load per pod, by event type, and by subscription (keyed by its `event` as written,
    /// so `orders.*` for a pattern): with scaling enabled, each needs one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub targets: BTreeMap<String, ScalingTarget>,
    /// One Deployment for all event types, or one per event type scaled on its own.
    #[serde(default)]
    pub split: Split,
    /// How fast to scale up.
    #[serde(default)]
    pub scale_up: ScaleUp,
    /// How fast to scale down.
    #[serde(default)]
    pub scale_down: ScaleDown,
}

fn default_max_replicas() -> i32 {
    10
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling {
            enabled: false,
            min_replicas: 1,
            max_replicas: default_max_replicas(),
            targets: BTreeMap::new(),
            split: Split::default(),
            scale_up: ScaleUp::default(),
            scale_down: ScaleDown::default(),
        }
    }
}

/// Target load of one pod for one event type: exactly one of the fields.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.targetInFlight) != has(self.targetRate)",
    "message": "a scaling target sets exactly one of targetInFlight or targetRate",
}]))]
pub struct ScalingTarget {
    /// Events in flight per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub target_in_flight: Option<i32>,
    /// Arrivals per second per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 10000000.0))]
    pub target_rate: Option<f64>,
}

/// How a Manager's event types map to Deployments.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Split {
    /// One Deployment serves every event type.
    #[default]
    Shared,
    /// One Deployment per event type, each scaled on its own load.
    PerEventType,
}

/// Scale-up behaviour (Knative KPA style stable and panic windows).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUp {
    /// Averaging window of the stable mode.
    #[serde(default = "default_stable_window")]
    #[schemars(schema_with = "schema::duration")]
    pub stable_window: Duration,
    /// Averaging window of the panic mode, entered when load reaches panicThreshold × target.
    #[serde(default = "default_panic_window")]
    #[schemars(schema_with = "schema::duration")]
    pub panic_window: Duration,
    /// Load, as a multiple of the target, that enters panic mode.
    #[serde(default = "default_panic_threshold")]
    #[schemars(range(min = 1.1, max = 100.0))]
    pub panic_threshold: f64,
}

fn default_stable_window() -> Duration {
    Duration::from(std::time::Duration::from_secs(60))
}

fn default_panic_window() -> Duration {
    Duration::from(std::time::Duration::from_secs(6))
}

fn default_panic_threshold() -> f64 {
    2.0
}

impl Default for ScaleUp {
    fn default() -> Self {
        ScaleUp {
            stable_window: default_stable_window(),
            panic_window: default_panic_window(),
            panic_threshold: default_panic_threshold(),
        }
    }
}

/// Scale-down behaviour.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDown {
    /// Replicas only go down after the load has stayed lower for this long.
    #[serde(default = "default_stable_window")]
    #[schemars(schema_with = "schema::duration")]
    pub stabilization_window: Duration,
}

impl Default for ScaleDown {
    fn default() -> Self {
        ScaleDown {
            stabilization_window: default_stable_window(),
        }
    }
}
