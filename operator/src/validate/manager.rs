//! Checks of a Manager spec beyond its schema.

use super::{FieldError, check_name};
use crate::render::sidecar;
use switchyard_crds::ManagerSpec;
use switchyard_protocol::ports;

/// Every problem of `spec`, in field order; empty when valid.
pub fn validate(name: &str, spec: &ManagerSpec) -> Vec<FieldError> {
    let mut out = Vec::new();
    check_name(name, &mut out);
    if ports::RESERVED
        .iter()
        .any(|p| i32::from(*p) == spec.app.port)
    {
        out.push(FieldError::new(
            "spec.app.port",
            format!(
                "{} is used by the sidecar; reserved ports are {:?}",
                spec.app.port,
                ports::RESERVED
            ),
        ));
    }
    let pod = spec.template.spec.as_ref();
    let containers = pod.map(|p| p.containers.as_slice()).unwrap_or_default();
    let inits = pod
        .and_then(|p| p.init_containers.as_deref())
        .unwrap_or_default();
    for (list, field) in [(containers, "containers"), (inits, "initContainers")] {
        for (i, c) in list.iter().enumerate() {
            if c.name == sidecar::CONTAINER {
                out.push(FieldError::new(
                    format!("spec.template.spec.{field}[{i}].name"),
                    format!(
                        "{:?} is reserved for the sidecar the operator adds",
                        sidecar::CONTAINER
                    ),
                ));
            }
        }
    }
    if containers.is_empty() {
        out.push(FieldError::new(
            "spec.template.spec.containers",
            "needs at least one handler container",
        ));
    }
    for (i, v) in pod
        .and_then(|p| p.volumes.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        for (reserved, purpose) in [
            (sidecar::CONFIG_VOLUME, "the sidecar's config"),
            (
                crate::render::app_socket::APP_SOCKET_VOLUME,
                "the app's Unix socket",
            ),
            (
                crate::render::identity::TOKEN_VOLUME,
                "the sidecar's identity token",
            ),
        ] {
            if v.name == reserved {
                out.push(FieldError::new(
                    format!("spec.template.spec.volumes[{i}].name"),
                    format!("{reserved:?} is reserved for {purpose}"),
                ));
            }
        }
    }
    out
}
