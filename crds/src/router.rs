//! The `Router` custom resource: the edge that turns HTTP, WebSocket and gRPC requests into events.

use crate::common::{Duration, PodOverrides, SecretKeyRef};
use crate::event_type::EventType;
pub use crate::router_service::RouterService;
use crate::schema;
use crate::status::RouterStatus;
use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A Router: listeners, the routes that map requests to event types, and the edge middleware.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "switchyard.dev",
    version = "v1alpha1",
    kind = "Router",
    namespaced,
    status = "RouterStatus",
    shortname = "rtr",
    category = "switchyard",
    doc = "A Router accepts HTTP, WebSocket and gRPC requests, turns each into a typed event and routes it to the Manager that handles that event type.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether the router pods are ready",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Routes",
        type_ = "integer",
        description = "Number of routes",
        json_path = ".status.routes"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        priority = 1,
        description = "Ready router pods",
        json_path = ".status.readyReplicas"
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
        // Port 0 (any free port, for `switchyard up`; a cluster's schema minimum is 1) may repeat.
        "rule": "!has(self.listeners.grpc) || self.listeners.grpc.port != self.listeners.http.port || self.listeners.http.port == 0",
        "message": "listeners.grpc.port must differ from listeners.http.port",
        "fieldPath": ".listeners.grpc.port",
    },
    {
        "rule": "!self.routes.exists(r, has(r.websocket)) || has(self.listeners.websocket)",
        "message": "a route with `websocket` needs listeners.websocket",
        "fieldPath": ".listeners",
    },
    {
        "rule": "!has(self.listeners.websocket) || !has(self.listeners.websocket.subscribe) || self.listeners.websocket.subscribe.all(r, (!has(r.scopes) || size(r.scopes) == 0) && (!has(r.claims) || size(r.claims) == 0)) || self.middleware.exists(m, has(m.auth) && (has(m.auth.jwt) || has(m.auth.oidc)))",
        "message": "a subscribe rule with scopes or claims needs an auth middleware with jwt or oidc (the scopes and claims are the token's)",
        "fieldPath": ".listeners.websocket.subscribe",
    },
    {
        "rule": "!self.routes.exists(r, has(r.grpc)) || has(self.listeners.grpc)",
        "message": "a route with `grpc` needs listeners.grpc",
        "fieldPath": ".listeners",
    },
    {
        "rule": "!has(self.service) || !has(self.service.nodePorts) || !has(self.service.nodePorts.grpc) || has(self.listeners.grpc)",
        "message": "service.nodePorts.grpc needs listeners.grpc",
        "fieldPath": ".service.nodePorts.grpc",
    },
]))]
pub struct RouterSpec {
    /// Number of router pods. Also set through the scale subresource (`kubectl scale router/NAME`).
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,
    /// Where the router listens.
    pub listeners: Listeners,
    /// Routes from requests to event types. Checked in order; the first match wins.
    #[schemars(length(min = 1, max = 512))]
    pub routes: Vec<Route>,
    /// Edge middleware, applied in the order listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub middleware: Vec<Middleware>,
    /// Tracing export. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Tracing>,
    /// Broker queues and response deadline.
    #[serde(default)]
    pub broker: Broker,
    /// Compute resources of the router sidecar container. Absent: the operator's defaults (requests
    /// 100m CPU and 32Mi memory, a 256Mi memory limit). The memory limit caps
    /// `broker.bodyBudgetBytes` at half of what is left after 32Mi; a limit that cannot hold one
    /// body of the largest size read whole is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Overrides merged into the router pods (labels, annotations, scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodOverrides>,
    /// The NetworkPolicies the operator makes for this Router's pods and its Managers' pods:
    /// frame connections to Manager pods only from the mesh's pods, the edge ports open.
    #[serde(default, skip_serializing_if = "NetworkPolicySpec::is_default")]
    pub network_policy: NetworkPolicySpec,
    /// The Service in front of the router pods: ClusterIP (the default), NodePort or LoadBalancer,
    /// its annotations and external traffic policy.
    #[serde(default, skip_serializing_if = "RouterService::is_default")]
    pub service: RouterService,
    /// One log line per HTTP request (client address, method, path, status, duration), at info
    /// level under the log target `access`. Off when absent.
    #[serde(default, skip_serializing_if = "AccessLog::is_default")]
    pub access_log: AccessLog,
}

/// The router's access log.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessLog {
    /// `true`: each HTTP request is logged once answered. The client is the TCP peer's address
    /// (never a forwarded header): behind a NodePort or LoadBalancer Service it is the client's
    /// own only with `service.externalTrafficPolicy: Local`.
    #[serde(default)]
    pub enabled: bool,
}

impl AccessLog {
    fn is_default(&self) -> bool {
        *self == AccessLog::default()
    }
}

fn one() -> i32 {
    1
}

/// Largest event the mesh carries whole, in bytes (the frame's payload limit): a body read whole
/// (schema routes, JSON, gRPC messages) and `listeners.websocket.maxMessageBytes` are capped at it.
pub const MAX_EVENT_BYTES: i64 = 16 * 1024 * 1024;

/// Largest `bodyLimit.maxBytes`: a streamed body (issue 14) is held one window at a time, so its
/// length is bounded only by what a client and an app sensibly move in one request.
pub const MAX_STREAMED_BODY_BYTES: i64 = 64 * 1024 * 1024 * 1024;

/// The most of a body a router reads whole under `body_limit` (`bodyLimit.maxBytes`): the limit,
/// capped at what one event carries.
pub fn whole_body_limit(body_limit: i64) -> i64 {
    body_limit.min(MAX_EVENT_BYTES)
}

/// Whether the operator generates NetworkPolicies.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// `false`: no NetworkPolicy is made (and those made before are removed), e.g. when the
    /// cluster's own policies already cover the mesh.
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        NetworkPolicySpec { enabled: true }
    }
}

impl NetworkPolicySpec {
    fn is_default(&self) -> bool {
        *self == NetworkPolicySpec::default()
    }
}

/// Ports and paths the router serves.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listeners {
    /// HTTP listener (HTTP/1.1 and h2c). WebSocket upgrades are served on the same port.
    pub http: HttpListener,
    /// WebSocket endpoint on the HTTP port. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<WebSocketListener>,
    /// gRPC listener. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcListener>,
    /// TLS for the HTTP and gRPC listeners. Plain text when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// Limits on client connections of the HTTP and gRPC listeners (timeouts and caps).
    #[serde(default, skip_serializing_if = "Connections::is_default")]
    pub connections: Connections,
}

/// How long client connections may stay and how many a router pod holds, for the HTTP (with
/// WebSocket) and gRPC listeners together. Every field has a default; a refused or closed
/// connection is counted in `switchyard_connections_refused_total` and
/// `switchyard_connections_closed_total`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "duration(self.firstByteTimeout) > duration('0s')",
        "message": "firstByteTimeout must be longer than 0s (it cannot be turned off)",
        "fieldPath": ".firstByteTimeout",
    },
    {
        "rule": "!has(self.maxConnections) || self.maxConnectionsPerClient <= self.maxConnections",
        "message": "maxConnectionsPerClient must not exceed maxConnections",
        "fieldPath": ".maxConnectionsPerClient",
    },
]))]
pub struct Connections {
    /// Time a new connection has to deliver its first request (HTTP/1.1: the whole request head;
    /// HTTP/2: the preface, SETTINGS and the first HEADERS). Then it is closed (HTTP/2: GOAWAY), so
    /// sockets that send nothing cannot pile up. An HTTP/2 client that connects long before its
    /// first call gets a GOAWAY and reconnects for the call.
    #[serde(default = "default_first_byte_timeout")]
    #[schemars(schema_with = "schema::duration")]
    pub first_byte_timeout: Duration,
    /// A connection with no request in flight for this long, after its first request, is closed
    /// (HTTP/2: GOAWAY). `0s` keeps idle connections open. A WebSocket session is not idle.
    #[serde(default = "default_idle_timeout")]
    #[schemars(schema_with = "schema::duration")]
    pub idle_timeout: Duration,
    /// Age at which a connection is asked to end (HTTP/2: GOAWAY; HTTP/1.1: `Connection: close`
    /// on the next answer), with up to 10 % jitter, so long-lived clients spread over new router
    /// pods. `0s` never ends a connection for its age.
    #[serde(default = "default_max_connection_age")]
    #[schemars(schema_with = "schema::duration")]
    pub max_connection_age: Duration,
    /// How long requests in flight get after `maxConnectionAge` before the connection is closed.
    #[serde(default = "default_max_connection_age_grace")]
    #[schemars(schema_with = "schema::duration")]
    pub max_connection_age_grace: Duration,
    /// Most client connections one router pod holds (HTTP, gRPC and WebSocket together); past it a
    /// new connection is accepted and closed at once, so accepting never stops. Absent: the
    /// process's open-file limit less a reserve (a tenth of it, 64 to 1024) kept for probes, the
    /// admin port and the connections to managers; a larger value is lowered to that too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000000))]
    pub max_connections: Option<i32>,
    /// Most connections from one client address (IPv6: one /64) at once; past it a new one from
    /// that client is closed at once. Behind a proxy or SNAT every client shares its address:
    /// raise it there.
    #[serde(default = "default_max_connections_per_client")]
    #[schemars(range(min = 1, max = 10000000))]
    pub max_connections_per_client: i32,
}

fn default_first_byte_timeout() -> Duration {
    Duration::from(std::time::Duration::from_secs(10))
}

fn default_idle_timeout() -> Duration {
    Duration::from(std::time::Duration::from_secs(75))
}

fn default_max_connection_age() -> Duration {
    Duration::from(std::time::Duration::from_secs(3600))
}

fn default_max_connection_age_grace() -> Duration {
    Duration::from(std::time::Duration::from_secs(30))
}

fn default_max_connections_per_client() -> i32 {
    1024
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            first_byte_timeout: default_first_byte_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connection_age: default_max_connection_age(),
            max_connection_age_grace: default_max_connection_age_grace(),
            max_connections: None,
            max_connections_per_client: default_max_connections_per_client(),
        }
    }
}

impl Connections {
    fn is_default(&self) -> bool {
        *self == Connections::default()
    }
}

/// The HTTP listener.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpListener {
    /// TCP port, 1 to 65535; `switchyard up` also takes 0, any free port, which it prints once bound.
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

fn default_http_port() -> i32 {
    8080
}

/// The WebSocket endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebSocketListener {
    /// Path of the upgrade request, e.g. `/ws`.
    #[serde(default = "default_ws_path")]
    #[schemars(regex(pattern = r"^/[A-Za-z0-9._~/-]*$"), length(max = 256))]
    pub path: String,
    /// Largest accepted message in bytes; a larger one gets an error message. At most 16 MiB,
    /// what one event carries over the mesh.
    #[serde(default = "default_ws_max_message")]
    #[schemars(range(min = 1, max = 16777216))]
    pub max_message_bytes: i64,
    /// Who may subscribe to the pushes of which event types. Rules are checked in order and the
    /// first whose `events` cover the type decides: the subscription is allowed when the
    /// session's token has every scope and claim the rule asks for. Absent: any connection may
    /// subscribe to any event type. Present: a type no rule covers is refused (end with a rule
    /// for `*` to open the rest). A refused subscribe gets an error reply naming the event type
    /// and why; the connection stays open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub subscribe: Option<Vec<SubscribeRule>>,
}

/// Pattern of a subscribe rule's event-type entry: an event type, a prefix ending in `.*`, or `*`.
pub const SUBSCRIBE_EVENTS_PATTERN: &str = r"^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$";

/// One subscribe rule: which event types it covers, and what the token must carry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeRule {
    /// Event types this rule covers: a name (`prices.tick`), a prefix ending in `.*`
    /// (`prices.*` covers `prices.tick` and `prices.eu.tick`, not `prices`), or `*` (every type).
    #[schemars(
        length(min = 1, max = 64),
        inner(
            regex(pattern = r"^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$"),
            length(min = 1, max = 65)
        )
    )]
    pub events: Vec<String>,
    /// OAuth scopes the token must all have, in its `scope` claim (space-separated, RFC 8693) or
    /// `scp` (an array or a space-separated string). Needs `auth.jwt` or `auth.oidc` middleware.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(regex(pattern = r"^[!#-\[\]-~]+$"), length(min = 1, max = 256))
    )]
    pub scopes: Vec<String>,
    /// Claims the token must carry, each with the value given: a string claim equal to it, an
    /// array claim holding it, or a number or boolean claim written that way (`"true"`, `"3"`).
    /// A name is a top-level claim (`https://example.com/roles` included); one that is not, with
    /// dots, is a path into nested objects (`realm_access.roles`). Needs `auth.jwt` or `auth.oidc` middleware.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub claims: BTreeMap<String, String>,
}

fn default_ws_path() -> String {
    "/ws".into()
}

fn default_ws_max_message() -> i64 {
    1 << 20
}

/// The gRPC listener.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcListener {
    /// TCP port, 1 to 65535; must differ from the HTTP port. `switchyard up` also takes 0, as for HTTP.
    #[serde(default = "default_grpc_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

fn default_grpc_port() -> i32 {
    50051
}

/// TLS settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// Name of a `kubernetes.io/tls` Secret in the same namespace (keys `tls.crt` and `tls.key`).
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// One route: exactly one of `http`, `websocket` or `grpc`, mapped to an event type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.http), has(self.websocket), has(self.grpc)].filter(x, x).size() == 1",
        "message": "a route sets exactly one of http, websocket or grpc",
    },
    {
        "rule": "!has(self.params) || has(self.http)",
        "message": "params apply to http routes only",
        "fieldPath": ".params",
    },
]))]
pub struct Route {
    /// Event type the request becomes; the Manager that lists it handles it.
    pub event: EventType,
    /// Match an HTTP method and path template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpRoute>,
    /// Match a WebSocket message by its `command` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<WebSocketRoute>,
    /// Match a gRPC `Call` or `Connect` message by method name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcRoute>,
    /// Types of the `{name}` parameters in the HTTP path template; untyped parameters are strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 16))]
    pub params: Option<BTreeMap<String, ParamType>>,
    /// JSON Schema (draft 2020-12) the request body must satisfy; checked at the edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub schema: Option<serde_json::Value>,
    /// Deadline for the reply; overrides broker.responseTimeout for this route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::optional_duration")]
    pub timeout: Option<Duration>,
}

/// An HTTP route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// HTTP method.
    pub method: HttpMethod,
    /// Path template, e.g. `/orders/{id}`; `{name}` captures one segment.
    #[schemars(regex(pattern = r"^/[A-Za-z0-9._~/{}-]*$"), length(max = 1024))]
    pub path: String,
}

/// HTTP methods a route can match.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// PATCH
    Patch,
    /// DELETE
    Delete,
}

impl HttpMethod {
    /// The method as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

/// A WebSocket route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebSocketRoute {
    /// Value of the message's `command` field, e.g. `noop`.
    #[schemars(regex(pattern = r"^[A-Za-z][A-Za-z0-9._-]*$"), length(max = 128))]
    pub command: String,
}

/// A gRPC route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRoute {
    /// Method name carried in the generic `Call`/`Connect` request, e.g. `noop`.
    #[schemars(regex(pattern = r"^[A-Za-z][A-Za-z0-9._/-]*$"), length(max = 256))]
    pub method: String,
}

/// Type of a path parameter; a value that does not parse gets 400 naming the parameter.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ParamType {
    /// Any non-empty segment.
    String,
    /// A signed 64-bit integer.
    Integer,
    /// A floating-point number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A UUID.
    Uuid,
}

/// One middleware: exactly one of its fields.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.timing), has(self.cors), has(self.auth), has(self.rateLimit), has(self.bodyLimit)].filter(x, x).size() == 1",
    "message": "a middleware entry sets exactly one of timing, cors, auth, rateLimit or bodyLimit",
}]))]
pub struct Middleware {
    /// Adds the `Server-Timing` header with one entry per stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// Cross-origin resource sharing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// Authentication by JWT or API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Token-bucket rate limit per client key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Largest accepted request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_limit: Option<BodyLimit>,
}

/// Server-Timing settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// Also add `trace;desc=<trace-id>` when tracing is on.
    #[serde(default = "yes")]
    pub trace_id: bool,
    /// Origins whose pages may read the timing (`Timing-Allow-Origin`): `*`, or origins such as
    /// `https://shop.example.com`. Browsers hide `Server-Timing` from cross-origin pages without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(regex(pattern = r"^(\*|https?://[^/\s,;]+)$")))]
    pub allow_origins: Vec<String>,
}

fn yes() -> bool {
    true
}

/// CORS settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cors {
    /// Allowed origins; `*` allows any.
    #[schemars(length(min = 1, max = 64))]
    pub allow_origins: Vec<String>,
    /// Allowed methods; all route methods when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_methods: Vec<HttpMethod>,
    /// Allowed request headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_headers: Vec<String>,
    /// How long browsers may cache a preflight answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::optional_duration")]
    pub max_age: Option<Duration>,
}

/// Authentication: exactly one of `jwt`, `oidc` or `apiKey`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.jwt), has(self.oidc), has(self.apiKey)].filter(x, x).size() == 1",
    "message": "auth sets exactly one of jwt, oidc or apiKey",
}]))]
pub struct Auth {
    /// JSON Web Tokens in the `Authorization: Bearer` header, checked with a key from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<Jwt>,
    /// JSON Web Tokens in the `Authorization: Bearer` header, checked with the signing keys an
    /// OpenID Connect issuer publishes (its JWKS), followed through rotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<Oidc>,
    /// Static API keys in a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<ApiKey>,
}

impl Auth {
    /// Whether this checks JWTs (a static key or an OIDC issuer's keys): the token's claims are
    /// then there for subscribe rules and a WebSocket session can refresh its token.
    pub fn checks_jwt(&self) -> bool {
        self.jwt.is_some() || self.oidc.is_some()
    }
}

/// JWT verification against an OpenID Connect issuer: its discovery document
/// (`<issuer>/.well-known/openid-configuration`) names its key set (`jwks_uri`), fetched over
/// HTTPS, cached for the response's `Cache-Control: max-age` (kept between 1 minute and 1 day),
/// and fetched again early when a token names a key (`kid`) the set lacks, at most once per 10
/// seconds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "duration(self.leeway) <= duration('5m')",
        "message": "leeway is at most 5m",
        "fieldPath": ".leeway",
    },
    {
        "rule": "self.issuer.startsWith('https://')",
        "message": "issuer must be an https:// URL (the key set is trusted only over TLS)",
        "fieldPath": ".issuer",
    },
]))]
pub struct Oidc {
    /// The issuer URL, exactly as tokens carry it in `iss` (a trailing slash aside), such as
    /// `https://accounts.example.com/realms/shop`. Must be `https://`.
    #[schemars(length(min = 9, max = 2048))]
    pub issuer: String,
    /// Accepted `aud` values: a token must carry at least one of them.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 512)))]
    pub audiences: Vec<String>,
    /// Accepted signature algorithms; `none` and the shared-secret HS* algorithms are never
    /// accepted from an issuer. Defaults to RS256 and ES256.
    #[serde(default = "default_oidc_algorithms")]
    #[schemars(length(min = 1, max = 3))]
    pub algorithms: Vec<OidcAlgorithm>,
    /// Secret key holding CA certificates (PEM) trusted for the issuer's HTTPS besides the
    /// system's roots, for an issuer with a private CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<SecretKeyRef>,
    /// Clock skew allowed on `exp` and `nbf`, at most 5m. A WebSocket session or gRPC `Connect`
    /// stream opened with a token is closed when the token's `exp` plus this has passed.
    #[serde(default = "default_jwt_leeway")]
    #[schemars(schema_with = "schema::duration")]
    pub leeway: Duration,
}

/// Default of `auth.oidc.algorithms`.
fn default_oidc_algorithms() -> Vec<OidcAlgorithm> {
    vec![OidcAlgorithm::RS256, OidcAlgorithm::ES256]
}

/// Signature algorithms accepted from an OIDC issuer (asymmetric only).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum OidcAlgorithm {
    /// RSA PKCS#1 v1.5 with SHA-256.
    RS256,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// Ed25519.
    EdDSA,
}

/// JWT verification.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "duration(self.leeway) <= duration('5m')",
    "message": "leeway is at most 5m",
    "fieldPath": ".leeway",
}]))]
pub struct Jwt {
    /// Signature algorithm.
    pub algorithm: JwtAlgorithm,
    /// Secret key holding the HS256 shared secret or the RS256 public key (PEM).
    pub key_secret_ref: SecretKeyRef,
    /// Required `iss` claim, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Required `aud` claim, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, at most 5m. A WebSocket session or gRPC `Connect`
    /// stream opened with a token is closed when the token's `exp` plus this has passed.
    #[serde(default = "default_jwt_leeway")]
    #[schemars(schema_with = "schema::duration")]
    pub leeway: Duration,
}

/// Default of `auth.jwt.leeway`.
pub const DEFAULT_JWT_LEEWAY: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest `auth.jwt.leeway`.
pub const MAX_JWT_LEEWAY: std::time::Duration = std::time::Duration::from_secs(300);

fn default_jwt_leeway() -> Duration {
    Duration::from(DEFAULT_JWT_LEEWAY)
}

/// JWT signature algorithms.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JwtAlgorithm {
    /// HMAC with SHA-256 (shared secret).
    HS256,
    /// RSA PKCS#1 v1.5 with SHA-256 (public key).
    RS256,
}

/// API-key check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    /// Header that carries the key.
    #[serde(default = "default_api_key_header")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9-]+$"), length(max = 128))]
    pub header: String,
    /// Secret key holding the accepted keys, one per line.
    pub keys_secret_ref: SecretKeyRef,
}

fn default_api_key_header() -> String {
    "x-api-key".into()
}

/// Token-bucket rate limit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.burst >= self.requestsPerSecond",
        "message": "burst must be at least requestsPerSecond",
        "fieldPath": ".burst",
    },
    {
        "rule": "self.key != 'header' || has(self.header)",
        "message": "key: header needs the header field",
        "fieldPath": ".header",
    },
]))]
pub struct RateLimit {
    /// Sustained requests per second per client key.
    #[schemars(range(min = 1, max = 10000000))]
    pub requests_per_second: i32,
    /// Bucket size: the largest burst a client key may send at once.
    #[schemars(range(min = 1, max = 10000000))]
    pub burst: i32,
    /// What identifies a client.
    #[serde(default)]
    pub key: RateLimitKey,
    /// Header whose value is the client key, with `key: header`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

/// What identifies a client for rate limiting.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RateLimitKey {
    /// The peer IP address.
    #[default]
    ClientIp,
    /// A request header's value.
    Header,
}

/// Request body limit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.maxBytes <= 68719476736",
    "message": "bodyLimit.maxBytes is at most 64 GiB (68719476736); bodies above 16 MiB stream to the app, only on routes without a schema",
    "fieldPath": ".maxBytes",
}]))]
pub struct BodyLimit {
    /// Largest body in bytes; a larger one gets 413. At most 64 GiB ([`MAX_STREAMED_BODY_BYTES`]).
    /// A body that streams to the app (a non-JSON body on a route without a schema or path
    /// parameters) may be that large: it holds one stream window in each sidecar, not its size. A
    /// body read whole (a route with a schema or path parameters, a JSON body, a gRPC message) is
    /// also capped at 16 MiB, what one event carries over the mesh.
    #[schemars(range(min = 1))]
    pub max_bytes: i64,
}

/// Trace export.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tracing {
    /// OTLP/gRPC endpoint of a collector, e.g. `http://otel-collector:4317`.
    #[schemars(regex(pattern = r"^https?://.+"), length(max = 1024))]
    pub otlp_endpoint: String,
    /// Fraction of root traces sampled, 0 to 1; a sampled parent is always followed.
    #[serde(default = "default_sampling")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub sampling_ratio: f64,
}

fn default_sampling() -> f64 {
    1.0
}

/// Broker settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Broker {
    /// Requests waiting for a Manager, per router pod; past it the router answers 503 with Retry-After.
    #[serde(default = "default_queue_capacity")]
    #[schemars(range(min = 1, max = 1000000))]
    pub queue_capacity: i32,
    /// How long a request may wait for its reply before it gets 504.
    #[serde(default = "default_response_timeout")]
    #[schemars(schema_with = "schema::duration")]
    pub response_timeout: Duration,
    /// How long a request waits for a ready endpoint when its event type has none (its Manager is
    /// scaled to zero, or its pods are starting) while the operator is asked to scale it up; then
    /// 503 with Retry-After. The request's own deadline (responseTimeout or the route's timeout)
    /// ends the wait earlier. Held requests count against queueCapacity. Only routers following the
    /// operator's control plane hold; with a static table they answer 503 at once.
    #[serde(default = "default_activation_timeout")]
    #[schemars(schema_with = "schema::duration")]
    pub activation_timeout: Duration,
    /// Bytes of request bodies a router pod holds at once (bodies being read, waiting and in
    /// flight); a body that does not fit now gets 503 with Retry-After, unread. A body read whole
    /// counts its size, a streamed one its window (256 KiB). At least one body read whole of the
    /// largest size (`bodyLimit.maxBytes` capped at 16 MiB; 1 MiB when unset), at most 64 GiB;
    /// default 256 MiB. Lowered at start to half of what the sidecar's memory limit
    /// (`spec.resources`) leaves after 32 MiB: 112 MiB under the default 256Mi.
    #[serde(default = "default_body_budget_bytes")]
    #[schemars(range(min = 1048576, max = 68719476736_i64))]
    pub body_budget_bytes: i64,
}

fn default_body_budget_bytes() -> i64 {
    256 << 20
}

/// `broker.activationTimeout` when unset; also how long a Manager's sidecar holds its app's
/// publishes for a Manager at zero replicas.
pub const DEFAULT_ACTIVATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

fn default_activation_timeout() -> Duration {
    Duration::from(DEFAULT_ACTIVATION_TIMEOUT)
}

fn default_queue_capacity() -> i32 {
    1024
}

fn default_response_timeout() -> Duration {
    Duration::from(std::time::Duration::from_secs(30))
}

impl Default for Broker {
    fn default() -> Self {
        Broker {
            queue_capacity: default_queue_capacity(),
            response_timeout: default_response_timeout(),
            activation_timeout: default_activation_timeout(),
            body_budget_bytes: default_body_budget_bytes(),
        }
    }
}
