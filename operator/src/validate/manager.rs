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
        out.extend(template::escalations(name, &spec.template));
    }
    check_subscriptions(spec, &mut out);
    check_targets(spec, &mut out);
    check_durable(spec, &mut out);
    super::memory::manager(spec, &mut out);
    out
}

/// Every key of `scaling.targets` names a handled type or a subscription's event as written
/// (the CRD cannot say it: a CEL rule over both lists exceeds the API server's cost budget).
fn check_targets(spec: &ManagerSpec, out: &mut Vec<FieldError>) {
    let known = |k: &str| {
        spec.events.iter().any(|e| e.as_str() == k)
            || spec.subscriptions.iter().any(|s| s.event == k)
    };
    for k in spec.scaling.targets.keys().filter(|k| !known(k)) {
        out.push(FieldError::new(
            format!("spec.scaling.targets.{k}"),
            "every key of scaling.targets must be one of spec.events or a subscription's event (as written in spec.subscriptions)",
        ));
    }
}

/// `spec.durable` as its CEL rules check it, for files that never pass the API server
/// (`switchyard up` and `check`).
fn check_durable(spec: &ManagerSpec, out: &mut Vec<FieldError>) {
    use switchyard_crds::manager::{MAX_STREAM_BYTES, MIN_STREAM_BYTES};
    if let Some(b) = spec.durable.max_bytes
        && !(MIN_STREAM_BYTES..=MAX_STREAM_BYTES).contains(&b)
    {
        out.push(FieldError::new(
            "spec.durable.maxBytes",
            format!(
                "{b} is outside {MIN_STREAM_BYTES} (32 MiB: room for the largest event the mesh carries, 16 MiB with its headers) to {MAX_STREAM_BYTES} (1 TiB)"
            ),
        ));
    }
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
            if let Err(e) = s.start() {
                out.push(FieldError::new(format!("{at}.startFrom"), e));
            }
        } else if s.start_from.is_some() {
            out.push(FieldError::new(
                format!("{at}.startFrom"),
                "startFrom replays stored events, so it needs delivery: durable",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANAGER: &str = "
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: handlers}
spec:
  routerRef: {name: edge}
  events: [orders.created]
  delivery: durable
  template:
    spec:
      containers: [{name: app, image: app:1}]
";

    fn with_max_bytes(max_bytes: Option<i64>) -> Vec<FieldError> {
        let mut m = switchyard_crds::yaml::parse(MANAGER)
            .expect("fixture parses")
            .managers
            .remove(0);
        m.spec.durable.max_bytes = max_bytes;
        validate("handlers", &m.spec, TemplatePolicy::Restricted)
    }

    #[test]
    fn a_streams_byte_limit_is_refused_outside_its_bounds_naming_the_field() {
        use switchyard_crds::manager::{MAX_STREAM_BYTES, MIN_STREAM_BYTES};
        for ok in [None, Some(MIN_STREAM_BYTES), Some(MAX_STREAM_BYTES)] {
            assert_eq!(with_max_bytes(ok), [], "{ok:?}");
        }
        for bad in [0, 1 << 20, MIN_STREAM_BYTES - 1, MAX_STREAM_BYTES + 1] {
            let errors = with_max_bytes(Some(bad));
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
            assert_eq!(errors[0].field, "spec.durable.maxBytes");
            assert!(
                errors[0]
                    .message
                    .starts_with(&format!("{bad} is outside 33554432")),
                "{}",
                errors[0].message
            );
        }
    }

    #[test]
    fn a_target_key_names_a_handled_type_or_a_subscriptions_event() {
        let text = format!(
            "{MANAGER}  subscriptions: [{{event: users.*}}]\n  scaling:\n    targets:\n      \
             orders.created: {{targetInFlight: 4}}\n      users.*: {{targetRate: 9}}\n      \
             users.created: {{targetRate: 9}}\n"
        );
        let m = switchyard_crds::yaml::parse(&text)
            .expect("fixture parses")
            .managers
            .remove(0);
        let errors = validate("handlers", &m.spec, TemplatePolicy::Restricted);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["spec.scaling.targets.users.created"], "{errors:?}");
        assert!(errors[0].message.contains("or a subscription's event"));
    }
}
