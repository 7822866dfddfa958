//! Checks of a Manager's pod template for what would let its pods take the mesh identity or more
//! of the node than a workload needs (pure). The operator creates these pods with its own rights,
//! so whoever may create a Manager would otherwise get, through it, pods they might not be allowed
//! to create themselves.
//!
//! Two kinds. Identity theft (a container mounting the sidecar's token volume, a volume projecting
//! a token for the mesh's audience) is refused always: such a token certifies its holder as this
//! Manager. Escalation (privileged, privilege escalation, added capabilities, host namespaces, host
//! paths and ports, a ServiceAccount other than the Manager's own) is refused unless the Manager's namespace is labelled
//! [`ALLOW_PRIVILEGED_LABEL`]`: "true"`; the controller reads the label and passes a
//! [`TemplatePolicy`] in, so this file reads nothing.

use super::FieldError;
use crate::render::identity::TOKEN_VOLUME;
use crate::render::meta::MANAGER;
use crate::render::service_account::own_name;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, SecurityContext};
use std::collections::BTreeMap;
use switchyard_identity::TOKEN_AUDIENCE;

/// Namespace label that lets Manager templates in it escalate (never take the mesh identity).
pub const ALLOW_PRIVILEGED_LABEL: &str = "switchyard.dev/allow-privileged-templates";

/// What a Manager's namespace allows its pod template.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TemplatePolicy {
    /// No escalation (every namespace without the label, and `switchyard check`, which sees none).
    #[default]
    Restricted,
    /// Escalation allowed by [`ALLOW_PRIVILEGED_LABEL`].
    Privileged,
}

impl TemplatePolicy {
    /// The policy given by a namespace's labels: only the exact value `"true"` lifts the checks.
    pub(crate) fn of_labels(labels: Option<&BTreeMap<String, String>>) -> Self {
        match labels.and_then(|l| l.get(ALLOW_PRIVILEGED_LABEL)) {
            Some(v) if v == "true" => TemplatePolicy::Privileged,
            _ => TemplatePolicy::Restricted,
        }
    }
}

const TEMPLATE: &str = "spec.template.spec";

/// Every container the pod runs from the template, with its field path.
fn containers(pod: &PodSpec) -> impl Iterator<Item = (String, &Container)> {
    let main = pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{TEMPLATE}.containers[{i}]"), c));
    let init = pod
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("{TEMPLATE}.initContainers[{i}]"), c));
    main.chain(init)
}

/// What no namespace label allows: a template reaching the token that proves the mesh identity.
pub(crate) fn identity_theft(template: &PodTemplateSpec) -> Vec<FieldError> {
    let Some(pod) = template.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (at, c) in containers(pod) {
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            if m.name == TOKEN_VOLUME {
                out.push(FieldError::new(
                    format!("{at}.volumeMounts[{j}].name"),
                    format!(
                        "{TOKEN_VOLUME:?} holds the sidecar's identity token, which certifies its holder as this Manager in the mesh; remove the mount (the app reaches the mesh through the sidecar's local API). No namespace label allows this"
                    ),
                ));
            }
        }
    }
    for (i, v) in pod.volumes.iter().flatten().enumerate() {
        let sources = v.projected.iter().flat_map(|p| p.sources.iter().flatten());
        for (k, s) in sources.enumerate() {
            let mesh = s
                .service_account_token
                .as_ref()
                .is_some_and(|t| t.audience.as_deref() == Some(TOKEN_AUDIENCE));
            if mesh {
                out.push(FieldError::new(
                    format!("{TEMPLATE}.volumes[{i}].projected.sources[{k}].serviceAccountToken.audience"),
                    format!(
                        "a token for audience {TOKEN_AUDIENCE:?} certifies its holder as this Manager in the mesh, and only the sidecar may hold one; give the app's own tokens another audience. No namespace label allows this"
                    ),
                ));
            }
        }
    }
    out
}

/// Escalations of the template, whatever the namespace allows: refused under
/// [`TemplatePolicy::Restricted`], reported as allowed under [`TemplatePolicy::Privileged`].
/// `manager` is the Manager's name: its own ServiceAccount is no escalation.
pub(crate) fn escalations(manager: &str, template: &PodTemplateSpec) -> Vec<FieldError> {
    let Some(pod) = template.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    pod_escalations(pod, &own_name(MANAGER, manager), &mut out);
    for (at, c) in containers(pod) {
        container_escalations(&at, c, &mut out);
    }
    out
}

/// Reason of the Degraded=False condition of a Manager whose template escalates by the label's leave.
pub(crate) const ALLOWED_REASON: &str = "PrivilegedTemplateAllowed";

/// What a Manager's status says of `escalations` its namespace's label allowed; `None` when there
/// are none.
pub(crate) fn allowed_by_label(escalations: &[FieldError]) -> Option<String> {
    if escalations.is_empty() {
        return None;
    }
    let fields: Vec<&str> = escalations.iter().map(|e| e.field.as_str()).collect();
    Some(format!(
        "allowed by the namespace's label {ALLOW_PRIVILEGED_LABEL}=true: {}",
        fields.join(", ")
    ))
}

/// An escalation refused: what it gives, what to do instead, and the label that would allow it.
fn refused(field: String, gives: &str, instead: &str) -> FieldError {
    FieldError::new(
        field,
        format!(
            "{gives}; {instead}, or, where the pods are meant to have it, label the Manager's namespace {ALLOW_PRIVILEGED_LABEL}=true"
        ),
    )
}

fn pod_escalations(pod: &PodSpec, own_account: &str, out: &mut Vec<FieldError>) {
    for (set, name, what) in [
        (pod.host_network, "hostNetwork", "the node's network"),
        (pod.host_pid, "hostPID", "the node's processes"),
        (pod.host_ipc, "hostIPC", "the node's IPC"),
    ] {
        if set == Some(true) {
            out.push(refused(
                format!("{TEMPLATE}.{name}"),
                &format!("shares {what} with the pod"),
                "remove it",
            ));
        }
    }
    // Left unset, the pods run as the Manager's own ServiceAccount, which the operator makes and
    // the Identity service requires of their tokens; another one would lend the app its RBAC
    // rights through a Manager, or (`default`) share the pods' identity with every pod of the
    // namespace.
    for (value, name) in [
        (&pod.service_account_name, "serviceAccountName"),
        (&pod.service_account, "serviceAccount"),
    ] {
        if let Some(sa) = value
            .as_deref()
            .filter(|sa| !sa.is_empty() && *sa != own_account)
        {
            out.push(refused(
                format!("{TEMPLATE}.{name}"),
                &format!("runs the pods as ServiceAccount {sa:?}, with its API rights, where the operator runs them as the Manager's own, {own_account:?}"),
                "remove it",
            ));
        }
    }
    for (i, v) in pod.volumes.iter().flatten().enumerate() {
        if v.host_path.is_some() {
            out.push(refused(
                format!("{TEMPLATE}.volumes[{i}].hostPath"),
                "mounts the node's files (among them every pod's tokens)",
                "use an emptyDir, a ConfigMap, a Secret or a PersistentVolumeClaim",
            ));
        }
    }
}

fn container_escalations(at: &str, c: &Container, out: &mut Vec<FieldError>) {
    if let Some(sc) = &c.security_context {
        security_context_escalations(&format!("{at}.securityContext"), sc, out);
    }
    for (j, p) in c.ports.iter().flatten().enumerate() {
        if let Some(port) = p.host_port.filter(|p| *p != 0) {
            out.push(refused(
                format!("{at}.ports[{j}].hostPort"),
                &format!("binds port {port} of the node"),
                "remove it (the Manager is reached through its sidecar and Service)",
            ));
        }
    }
}

fn security_context_escalations(at: &str, sc: &SecurityContext, out: &mut Vec<FieldError>) {
    if sc.privileged == Some(true) {
        out.push(refused(
            format!("{at}.privileged"),
            "a privileged container has every device and capability of the node",
            "remove it",
        ));
    }
    if sc.allow_privilege_escalation == Some(true) {
        out.push(refused(
            format!("{at}.allowPrivilegeEscalation"),
            "lets a process gain more privileges than its parent (setuid binaries)",
            "remove it (the operator sets false)",
        ));
    }
    let added = sc.capabilities.as_ref().and_then(|c| c.add.as_deref());
    if let Some(caps) = added.filter(|a| !a.is_empty()) {
        out.push(refused(
            format!("{at}.capabilities.add"),
            &format!("adds capabilities {caps:?}"),
            "remove them (the operator drops ALL)",
        ));
    }
}

#[cfg(test)]
mod tests;
