//! The sidecars' memory limits against what their settings ask, as the sidecars refuse them at
//! start (`switchyard_protocol::memory`): a Manager's `spec.sidecar.resources` must hold one event of
//! the largest size the mesh carries, a Router's `spec.resources` one body of its largest size read
//! whole. Here such a spec is a status condition instead of a crash loop. Pure.

use super::FieldError;
use k8s_openapi::api::core::v1::ResourceRequirements;
use switchyard_crds::{ManagerSpec, RouterSpec};
use switchyard_protocol::frame::DEFAULT_MAX_FRAME;
use switchyard_protocol::memory::{self, ManagerLoad};

/// The memory limit the operator renders when the spec sets no resources at all.
pub(crate) const DEFAULT_LIMIT: &str = "256Mi";

/// The largest body a manager's local API reads whole (the sidecar's `local_api::MAX_BODY`).
const LOCAL_API_BODY: u64 = 1 << 20;

/// A Manager's sidecar limit against its queue settings.
pub(crate) fn manager(spec: &ManagerSpec, out: &mut Vec<FieldError>) {
    let events = i64::from(spec.workers.queue_capacity) + i64::from(spec.workers.max_in_flight);
    let load = ManagerLoad {
        largest_event: DEFAULT_MAX_FRAME as u64,
        admitted_events: u64::try_from(events).unwrap_or(1),
        local_api_body: LOCAL_API_BODY,
    };
    if let Err(m) = memory::manager_budgets(limit(spec.sidecar.resources.as_ref()), load) {
        out.push(FieldError::new(m.limit_field, m.to_string()));
    }
}

/// A Router's sidecar limit against its body budget and largest body read whole.
pub(crate) fn router(spec: &RouterSpec, largest_body: i64, out: &mut Vec<FieldError>) {
    let configured = u64::try_from(spec.broker.body_budget_bytes).unwrap_or(0);
    let largest = u64::try_from(largest_body).unwrap_or(0);
    if let Err(m) = memory::router_budget(limit(spec.resources.as_ref()), configured, largest) {
        out.push(FieldError::new(m.limit_field, m.to_string()));
    }
}

/// The memory limit a sidecar renders with: the default when no resources are set, none when they
/// are set without a memory limit (or with one this cannot read: the API server checks its form).
fn limit(resources: Option<&ResourceRequirements>) -> Option<u64> {
    match resources {
        None => bytes(DEFAULT_LIMIT),
        Some(r) => r.limits.as_ref()?.get("memory").and_then(|q| bytes(&q.0)),
    }
}

/// A Kubernetes quantity of bytes (`128Mi`, `1G`, `134217728`, `0.5Gi`); `None` when unreadable.
fn bytes(q: &str) -> Option<u64> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let q = q.trim();
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(s, f)| q.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((q, 1.0));
    let n: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    // Whole bytes; a quantity's exponent forms (`1e9`) parse as floats too.
    Some((n * factor).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn with_limit(q: &str) -> ResourceRequirements {
        ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity(q.into()))])),
            ..ResourceRequirements::default()
        }
    }

    #[test]
    fn quantities_read_as_bytes() {
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("134217728"), Some(128 << 20));
        assert_eq!(bytes("0.5Gi"), Some(512 << 20));
        assert_eq!(bytes("1e9"), Some(1_000_000_000));
        assert_eq!(bytes("lots"), None);
        assert_eq!(limit(None), Some(256 << 20));
        assert_eq!(limit(Some(&ResourceRequirements::default())), None);
    }

    #[test]
    fn a_manager_sidecar_limit_below_one_largest_event_is_a_field_error() {
        let mut spec: ManagerSpec =
            switchyard_crds::yaml::parse(include_str!("../../../examples/quickstart.yaml"))
                .expect("the quickstart parses")
                .managers
                .remove(0)
                .spec;
        let mut out = Vec::new();
        manager(&spec, &mut out);
        assert!(out.is_empty(), "the default 256Mi fits: {out:?}");
        spec.sidecar.resources = Some(with_limit("64Mi"));
        manager(&spec, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "spec.sidecar.resources.limits.memory");
        assert!(
            out[0]
                .message
                .contains("set spec.sidecar.resources.limits.memory to at least"),
            "{}",
            out[0]
        );
    }
}
