//! Each Router's and Manager's own ServiceAccount (pure): the identity Kubernetes gives its pods,
//! which the Identity service requires of the token a sidecar presents (`identity::owner`). One per
//! workload, owned by it, so no other pod of the namespace shares it by default, and with no API
//! token mounted unless a Manager's template asks for one.

use super::meta::{self, MANAGER, ROUTER};
use crate::Error;
use k8s_openapi::api::core::v1::{PodSpec, ServiceAccount};
use kube::ResourceExt;
use switchyard_crds::{Manager, Router};

/// Name of a workload's own ServiceAccount: `<name>-router` or `<name>-manager` (a Router and a
/// Manager of one name never share it; within [`meta::MAX_NAME_LEN`] like every child).
pub(crate) fn own_name(kind_label: &str, name: &str) -> String {
    if kind_label == ROUTER {
        format!("{name}-router")
    } else {
        format!("{name}-manager")
    }
}

/// The ServiceAccount a Manager's pods run as: the one its template names (validation refuses any
/// but its own unless the namespace's label allows it), else its own.
pub(crate) fn of_manager(manager: &Manager) -> String {
    let named = manager.spec.template.spec.as_ref().and_then(|p| {
        [&p.service_account_name, &p.service_account]
            .into_iter()
            .flatten()
            .find(|sa| !sa.is_empty())
            .cloned()
    });
    named.unwrap_or_else(|| own_name(MANAGER, &manager.name_any()))
}

/// The ServiceAccount a Router's pods run as: `spec.podTemplate.serviceAccountName`, else its own.
pub(crate) fn of_router(router: &Router) -> String {
    router
        .spec
        .pod_template
        .as_ref()
        .and_then(|t| t.service_account_name.clone())
        .filter(|sa| !sa.is_empty())
        .unwrap_or_else(|| own_name(ROUTER, &router.name_any()))
}

/// The workload's own ServiceAccount, owned by `owner`: no API token mounted by default (a pod
/// that needs one says so in its template).
pub(crate) fn build<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
    kind_label: &str,
) -> Result<ServiceAccount, Error> {
    let name = owner
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingMetadata("name"))?;
    Ok(ServiceAccount {
        metadata: meta::child_meta(
            owner,
            own_name(kind_label, &name),
            meta::labels(kind_label, &name),
        )?,
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    })
}

/// Runs `pod` as `service_account` (the deprecated `serviceAccount` alias cleared, so the two
/// cannot disagree).
pub(crate) fn run_as(pod: &mut PodSpec, service_account: String) {
    pod.service_account_name = Some(service_account);
    pod.service_account = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    fn manager(template_sa: Option<&str>) -> Manager {
        let mut m = switchyard_crds::yaml::parse(
            "apiVersion: switchyard.dev/v1alpha1\nkind: Manager\nmetadata: {name: orders, namespace: shop, uid: u-1}\nspec: {routerRef: {name: edge}, events: [noop], app: {port: 8000}, template: {spec: {containers: [{name: app, image: a}]}}}\n",
        )
        .expect("manager")
        .managers
        .remove(0);
        if let Some(sa) = template_sa {
            let t: &mut PodTemplateSpec = &mut m.spec.template;
            t.spec.as_mut().expect("spec").service_account = Some(sa.into());
        }
        m
    }

    #[test]
    fn a_workload_runs_as_its_own_account_unless_its_template_names_one() {
        assert_eq!(of_manager(&manager(None)), "orders-manager");
        assert_eq!(of_manager(&manager(Some(""))), "orders-manager");
        assert_eq!(of_manager(&manager(Some("deployer"))), "deployer");
        assert_ne!(own_name(ROUTER, "x"), own_name(MANAGER, "x"));
    }

    #[test]
    fn the_account_is_owned_by_the_workload_and_mounts_no_token() {
        let sa = build(&manager(None), MANAGER).expect("built");
        assert_eq!(sa.metadata.name.as_deref(), Some("orders-manager"));
        assert_eq!(sa.metadata.namespace.as_deref(), Some("shop"));
        let owner = &sa.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Manager", "u-1")
        );
        assert_eq!(sa.automount_service_account_token, Some(false));
    }
}
