//! Names of a Router's and a Manager's children. Children and the control plane refer to each
//! other by them (a NetworkPolicy to the router pods, a routing table to a Manager's Service), so
//! they live apart from the renderers, which import them. Each stays within
//! [`super::meta::MAX_NAME_LEN`] plus its longest suffix.

use switchyard_crds::EventType;

/// Name of the router Deployment and Service.
pub(crate) fn router_workload(router: &str) -> String {
    format!("{router}-router")
}

/// Name of the router's ConfigMap.
pub(crate) fn router_config_map(router: &str) -> String {
    format!("{router}-router-config")
}

/// Name of the Manager's Service (and of its Deployment with `split: shared`).
pub(crate) fn manager_service(manager: &str) -> String {
    format!("{manager}-manager")
}

/// Name of the Manager's ConfigMap.
pub(crate) fn manager_config_map(manager: &str) -> String {
    format!("{manager}-manager-config")
}

/// Name of the Deployment serving one event type with `split: perEventType`.
pub(crate) fn manager_per_type(manager: &str, event: &EventType) -> String {
    format!("{manager}-{}", event.dns_fragment())
}
