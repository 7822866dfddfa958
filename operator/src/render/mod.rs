//! Pure builders: from a custom resource (plus observed facts) to the desired child objects.
//! No I/O here; everything is unit-tested from YAML fixtures. The public submodules are what
//! `switchyard up`/`check` and the fixture tests call; the rest serve them.

pub(crate) mod app_socket;
pub mod identity;
pub mod manager;
pub mod meta;
pub(crate) mod names;
pub(crate) mod network_policy;
pub(crate) mod pod_security;
pub mod router;
pub(crate) mod router_service;
pub mod secrets;
pub(crate) mod service_account;
pub mod sidecar;
pub(crate) mod stop_order;

/// Inputs of the build step that come from the operator's settings, not from the resource.
#[derive(Clone, Debug)]
pub struct RenderSettings {
    /// Image of the sidecar container.
    pub sidecar_image: String,
    /// URL of the operator's control plane, given to every sidecar (env [`sidecar::CONTROL_PLANE_ENV`]);
    /// `None` leaves sidecars on DNS discovery.
    pub control_plane_url: Option<String>,
    /// Mesh TLS: the Identity service and the trust bundle every sidecar gets; `None` leaves the
    /// mesh on plain TCP.
    pub mesh: Option<identity::MeshRender>,
    /// The JetStream servers given to the sidecars of Managers with durable event types (the
    /// operator's `--jetstream-url`); `None`: no durable delivery in this cluster.
    pub jetstream: Option<switchyard_protocol::durable::JetStreamConfig>,
}
