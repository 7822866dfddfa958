//! Checks of a Manager spec beyond its schema.

use super::template::{self, TemplatePolicy};
use super::{FieldError, check_name};
use crate::render::sidecar;
use switchyard_crds::ManagerSpec;
use switchyard_crds::manager::DeliveryMode;
use switchyard_protocol::ports;

/// Every problem of `spec`, in field order; empty when valid. `policy` is what the Manager's
/// namespace allows its pod template.
pub fn validate(name: &str, spec: &ManagerSpec, policy: TemplatePolicy) -> Vec<FieldError> {
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
    out.extend(template::identity_theft(&spec.template));
    if policy == TemplatePolicy::Restricted {
        out.extend(template::escalations(&spec.template));
    }
    check_subscriptions(spec, &mut out);
    out
}

/// What the CRD's schema cannot say of `spec.subscriptions` (and, for files that never pass the
/// API server, what its CEL rules do say).
fn check_subscriptions(spec: &ManagerSpec, out: &mut Vec<FieldError>) {
    for (i, s) in spec.subscriptions.iter().enumerate() {
        let at = format!("spec.subscriptions[{i}]");
        if let Some(f) = &s.filter
            && let Err(e) = f.check(&format!("{at}.filter"))
        {
            out.push(FieldError::new(format!("{at}.filter"), e));
        }
        if s.delivery == DeliveryMode::Durable {
            out.push(FieldError::new(
                format!("{at}.delivery"),
                "durable subscriptions are not built yet (no stream keeps events for a subscriber); use delivery: direct",
            ));
        } else if s.start_from.is_some() {
            out.push(FieldError::new(
                format!("{at}.startFrom"),
                "startFrom replays stored events, so it needs delivery: durable",
            ));
        }
    }
}
