//! The template checks driven from YAML fixtures (operator/tests/fixtures/template-*.yaml), through
//! the Manager validation that the operator and `switchyard check` share.

use super::*;
use crate::validate::manager::validate;
use switchyard_crds::Manager;

const ESCALATIONS: &str = include_str!("../../../tests/fixtures/template-escalations.yaml");
const IDENTITY: &str = include_str!("../../../tests/fixtures/template-identity.yaml");

fn manager(file: &str, name: &str) -> Manager {
    switchyard_crds::yaml::parse(file)
        .expect("fixture parses")
        .managers
        .into_iter()
        .find(|m| m.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no Manager {name} in the fixture"))
}

fn errors(file: &str, name: &str, policy: TemplatePolicy) -> Vec<FieldError> {
    validate(name, &manager(file, name).spec, policy)
}

fn fields(file: &str, name: &str, policy: TemplatePolicy) -> Vec<String> {
    errors(file, name, policy)
        .into_iter()
        .map(|e| e.field)
        .collect()
}

fn refused(name: &str) -> Vec<String> {
    fields(ESCALATIONS, name, TemplatePolicy::Restricted)
}

#[test]
fn a_template_asking_for_nothing_more_is_valid() {
    for name in ["plain", "own-service-account"] {
        for policy in [TemplatePolicy::Restricted, TemplatePolicy::Privileged] {
            assert_eq!(errors(ESCALATIONS, name, policy), [], "{name} {policy:?}");
        }
    }
    assert_eq!(
        errors(IDENTITY, "own-audience", TemplatePolicy::Restricted),
        []
    );
}

#[test]
fn a_privileged_container_is_refused_naming_its_field_and_the_label_that_allows_it() {
    let e = errors(ESCALATIONS, "privileged", TemplatePolicy::Restricted);
    assert_eq!(
        e.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.template.spec.containers[0].securityContext.privileged: a privileged container has every device and capability of the node; remove it, or, where the pods are meant to have it, label the Manager's namespace switchyard.dev/allow-privileged-templates=true"
        ]
    );
}

#[test]
fn privilege_escalation_is_refused_in_init_containers_too() {
    assert_eq!(
        refused("privilege-escalation"),
        ["spec.template.spec.initContainers[0].securityContext.allowPrivilegeEscalation"]
    );
}

#[test]
fn added_capabilities_are_refused() {
    let e = errors(ESCALATIONS, "capabilities", TemplatePolicy::Restricted);
    assert_eq!(
        e.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
        ["spec.template.spec.containers[1].securityContext.capabilities.add"]
    );
    assert!(e[0].message.contains("NET_ADMIN"), "{}", e[0].message);
}

#[test]
fn host_namespaces_are_refused() {
    assert_eq!(
        refused("host-namespaces"),
        [
            "spec.template.spec.hostNetwork",
            "spec.template.spec.hostPID",
            "spec.template.spec.hostIPC"
        ]
    );
}

#[test]
fn host_path_volumes_are_refused() {
    assert_eq!(
        refused("host-path"),
        ["spec.template.spec.volumes[1].hostPath"]
    );
}

#[test]
fn host_ports_are_refused() {
    assert_eq!(
        refused("host-port"),
        ["spec.template.spec.containers[0].ports[1].hostPort"]
    );
}

#[test]
fn another_service_account_is_refused() {
    assert_eq!(
        refused("service-account"),
        [
            "spec.template.spec.serviceAccountName",
            "spec.template.spec.serviceAccount"
        ]
    );
    // The namespace's default is shared by every pod there: the identity would be too.
    let e = errors(
        ESCALATIONS,
        "default-service-account",
        TemplatePolicy::Restricted,
    );
    assert_eq!(
        e.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.template.spec.serviceAccountName: runs the pods as ServiceAccount \"default\", with its API rights, where the operator runs them as the Manager's own, \"default-service-account-manager\"; remove it, or, where the pods are meant to have it, label the Manager's namespace switchyard.dev/allow-privileged-templates=true"
        ]
    );
}

const ESCALATING: [&str; 8] = [
    "privileged",
    "privilege-escalation",
    "capabilities",
    "host-namespaces",
    "host-path",
    "host-port",
    "service-account",
    "default-service-account",
];

#[test]
fn the_namespace_label_allows_every_escalation_and_the_status_names_them() {
    for name in ESCALATING {
        assert!(
            !refused(name).is_empty(),
            "{name} refused without the label"
        );
        assert_eq!(
            errors(ESCALATIONS, name, TemplatePolicy::Privileged),
            [],
            "{name} with the label"
        );
    }
    let m = manager(ESCALATIONS, "host-namespaces");
    assert_eq!(
        allowed_by_label(&escalations("host-namespaces", &m.spec.template)).as_deref(),
        Some(
            "allowed by the namespace's label switchyard.dev/allow-privileged-templates=true: spec.template.spec.hostNetwork, spec.template.spec.hostPID, spec.template.spec.hostIPC"
        )
    );
    let plain = manager(ESCALATIONS, "plain");
    assert_eq!(
        allowed_by_label(&escalations("plain", &plain.spec.template)),
        None
    );
}

#[test]
fn mounting_the_identity_volume_is_refused_even_with_the_label() {
    for policy in [TemplatePolicy::Restricted, TemplatePolicy::Privileged] {
        let e = errors(IDENTITY, "mounts-identity", policy);
        assert_eq!(
            e.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            [
                "spec.template.spec.containers[0].volumeMounts[1].name",
                "spec.template.spec.initContainers[0].volumeMounts[0].name"
            ],
            "{policy:?}"
        );
        assert!(e[0].message.contains("No namespace label allows this"));
    }
}

#[test]
fn projecting_a_token_for_the_mesh_audience_is_refused_even_with_the_label() {
    for policy in [TemplatePolicy::Restricted, TemplatePolicy::Privileged] {
        assert_eq!(
            fields(IDENTITY, "mesh-audience", policy),
            ["spec.template.spec.volumes[0].projected.sources[1].serviceAccountToken.audience"],
            "{policy:?}"
        );
    }
}

#[test]
fn only_the_exact_label_value_true_allows_escalation() {
    let labels = |v: &str| BTreeMap::from([(ALLOW_PRIVILEGED_LABEL.to_owned(), v.to_owned())]);
    assert_eq!(
        TemplatePolicy::of_labels(Some(&labels("true"))),
        TemplatePolicy::Privileged
    );
    for v in ["True", "yes", "1", ""] {
        assert_eq!(
            TemplatePolicy::of_labels(Some(&labels(v))),
            TemplatePolicy::Restricted,
            "{v:?}"
        );
    }
    assert_eq!(TemplatePolicy::of_labels(None), TemplatePolicy::Restricted);
    let other = BTreeMap::from([("team".to_owned(), "true".to_owned())]);
    assert_eq!(
        TemplatePolicy::of_labels(Some(&other)),
        TemplatePolicy::Restricted
    );
}
