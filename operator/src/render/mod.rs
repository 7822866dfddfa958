//! Pure builders: from a custom resource (plus observed facts) to the desired child objects.
//! No I/O here; everything is unit-tested from YAML fixtures.

pub mod app_socket;
pub mod identity;
pub mod manager;
pub mod meta;
pub mod names;
pub mod network_policy;
pub mod pod_security;
pub mod router;
pub mod router_service;
pub mod secrets;
pub mod service_account;
pub mod sidecar;
pub mod stop_order;

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
