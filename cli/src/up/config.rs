//! The sidecar configs of a local run: the operator's rendering, plus local addresses.

use std::collections::BTreeMap;
use switchyard_crds::{Manager, Router};
use switchyard_protocol::config::{ManagerConfig, RouterConfig};
use switchyard_protocol::durable::JetStreamConfig;

/// Namespace objects without one get, as `kubectl apply` would in a default context.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The manager-role config for `manager` (of `router`, when the file has it), with the app reached on
/// `app_port` instead of the declared port, and its durable types kept in `jetstream`.
pub fn manager_config(
    manager: &Manager,
    router: Option<&Router>,
    app_port: u16,
    jetstream: Option<&JetStreamConfig>,
) -> anyhow::Result<ManagerConfig> {
    let mut manager = manager.clone();
    manager
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.into());
    let mut config =
        switchyard_operator::render::manager::render_config(&manager, router, jetstream)?;
    config.app.port = i32::from(app_port);
    Ok(config)
}

/// The router-role config for `router`, sending each Manager's events to its local sidecar instead of a Service's
/// endpoints.
pub fn router_config(
    router: &Router,
    managers: &[Manager],
    endpoints: &BTreeMap<String, Vec<String>>,
) -> anyhow::Result<RouterConfig> {
    // The operator requires a namespace (it always has one in a cluster); a local file often has none.
    let mut router = router.clone();
    router
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.into());
    let mut config = switchyard_operator::render::router::render_config(&router, managers)?;
    // Subscribers are reached the same way: a Manager that only observes has no destination.
    config.static_endpoints = config
        .destinations
        .values()
        .chain(config.subscribers.values().map(|s| &s.destination))
        .filter_map(|d| Some((d.manager.clone(), endpoints.get(&d.manager)?.clone())))
        .collect();
    Ok(config)
}
