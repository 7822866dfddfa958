//! Before install: can this cluster take Switchyard. The API server's version against the charts'
//! `kubeVersion`, whether the CRDs can be applied (a server-side dry run, and whether each fits the
//! annotation a client-side `kubectl apply` writes), Pod Security admission of the namespaces the
//! mesh will run in, and NetworkPolicy support (the chart and the operator write NetworkPolicies).

use super::report::Check;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use std::collections::BTreeMap;
use switchyard_crds::{Manager, Router};
use switchyard_operator::validate::template::ALLOW_PRIVILEGED_LABEL;

/// The oldest Kubernetes the charts install on (their `kubeVersion: ">=1.30.0-0"`).
pub const MIN_KUBERNETES: (u32, u32) = (1, 30);
/// What a client-side `kubectl apply` may store in `kubectl.kubernetes.io/last-applied-configuration`
/// (all annotations of an object together, in fact).
pub const ANNOTATION_LIMIT: usize = 262_144;
/// Pod Security admission's label for the level it enforces.
const PSA_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
/// Field manager of the dry-run applies (never persisted).
const FIELD_MANAGER: &str = "switchyard-check";

/// Every pre-install check, in order.
pub async fn run(client: &Client, namespaces: &[String]) -> Vec<Check> {
    let mut checks = vec![kubernetes_version(client).await];
    checks.extend(crd_apply(client).await);
    for ns in namespaces {
        checks.push(pod_security(client, ns).await);
    }
    checks.push(network_policy(client, namespaces.first().map(String::as_str)).await);
    checks
}

async fn kubernetes_version(client: &Client) -> Check {
    match client.apiserver_version().await {
        Ok(info) => version_check(&info.major, &info.minor, &info.git_version),
        Err(e) => Check::fail(
            "kubernetes-version",
            format!("cannot read the API server's version: {e}"),
            "check that the kubeconfig's context points at a reachable cluster",
        ),
    }
}

/// Parses a `/version` answer's major and minor (a minor may carry a `+`, as some providers print).
pub fn parse_version(major: &str, minor: &str) -> Option<(u32, u32)> {
    let digits = |s: &str| -> Option<u32> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().ok()
    };
    Some((digits(major)?, digits(minor)?))
}

/// The `kubernetes-version` check of a `/version` answer.
pub fn version_check(major: &str, minor: &str, git_version: &str) -> Check {
    const NAME: &str = "kubernetes-version";
    let (want_major, want_minor) = MIN_KUBERNETES;
    match parse_version(major, minor) {
        None => Check::warn(
            NAME,
            format!(
                "the API server says major {major:?}, minor {minor:?} ({git_version}): not a version"
            ),
            format!(
                "the charts need Kubernetes {want_major}.{want_minor} or later; check it by hand"
            ),
        ),
        Some(v) if v >= MIN_KUBERNETES => Check::pass(
            NAME,
            format!("{git_version} (the charts need {want_major}.{want_minor} or later)"),
        ),
        Some(_) => Check::fail(
            NAME,
            format!("{git_version} is older than {want_major}.{want_minor}"),
            format!(
                "upgrade the cluster to Kubernetes {want_major}.{want_minor} or later: the CRDs' validation rules and the charts need it"
            ),
        ),
    }
}

/// One check per CRD: does the API server take it (server-side dry run), and can it be applied
/// client-side too.
async fn crd_apply(client: &Client) -> Vec<Check> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut checks = Vec::new();
    for crd in [Router::crd(), Manager::crd()] {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let taken = api
            .patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        let size = serde_json::to_vec(&crd).map_or(0, |v| v.len());
        checks.push(crd_apply_check(&name, taken, size));
    }
    checks
}

/// The `crd-apply` check of one CRD: the dry run's outcome and the CRD's size as compact JSON (what
/// a client-side apply stores in its annotation).
pub fn crd_apply_check(name: &str, dry_run: Result<(), String>, json_size: usize) -> Check {
    const NAME: &str = "crd-apply";
    if let Err(e) = dry_run {
        return Check::fail(
            NAME,
            format!("{name}: the API server refused a dry-run apply: {e}"),
            "installing CRDs takes cluster-wide rights (create and patch customresourcedefinitions); ask a cluster admin to install the switchyard-crds chart",
        );
    }
    let kib = json_size.div_ceil(1024);
    if json_size > ANNOTATION_LIMIT {
        Check::warn(
            NAME,
            format!(
                "{name}: accepted (dry run), but {kib} KiB is over the {} KiB a client-side apply can store",
                ANNOTATION_LIMIT / 1024
            ),
            "apply it with `kubectl apply --server-side` (Argo CD: ServerSideApply=true), or with helm",
        )
    } else {
        Check::pass(
            NAME,
            format!(
                "{name}: accepted (server-side dry run); {kib} KiB fits a client-side `kubectl apply`"
            ),
        )
    }
}

async fn pod_security(client: &Client, namespace: &str) -> Check {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(namespace).await {
        Ok(ns) => pod_security_check(namespace, ns.as_ref().map(|n| n.metadata.labels.as_ref())),
        Err(e) => Check::warn(
            "pod-security",
            format!("namespace {namespace}: cannot read it: {e}"),
            "the checks need to get namespaces",
        ),
    }
}

/// The `pod-security` check of one namespace: `None` when it does not exist, else its labels.
/// Every pod Switchyard makes (operator, sidecars, NATS) meets `restricted`; what can clash is an
/// app template the namespace lets the operator accept (`switchyard.dev/allow-privileged-templates`)
/// while Pod Security would refuse its pods.
pub fn pod_security_check(
    namespace: &str,
    labels: Option<Option<&BTreeMap<String, String>>>,
) -> Check {
    const NAME: &str = "pod-security";
    let Some(labels) = labels else {
        return Check::pass(
            NAME,
            format!(
                "namespace {namespace} does not exist yet (helm's --create-namespace makes it with the cluster's default Pod Security level)"
            ),
        );
    };
    let level = labels.and_then(|l| l.get(PSA_ENFORCE)).map(String::as_str);
    let privileged_templates = labels
        .and_then(|l| l.get(ALLOW_PRIVILEGED_LABEL))
        .map(String::as_str)
        == Some("true");
    match level {
        Some(l @ ("restricted" | "baseline")) if privileged_templates => Check::warn(
            NAME,
            format!(
                "namespace {namespace} enforces {l:?} but is labelled {ALLOW_PRIVILEGED_LABEL}=true: the operator accepts templates whose pods Pod Security refuses"
            ),
            format!(
                "remove the {ALLOW_PRIVILEGED_LABEL} label, or enforce \"privileged\" in {namespace} if its apps need it"
            ),
        ),
        Some(l @ ("restricted" | "baseline" | "privileged")) => Check::pass(
            NAME,
            format!("namespace {namespace} enforces {l:?}; Switchyard's pods meet \"restricted\""),
        ),
        Some(other) => Check::fail(
            NAME,
            format!("namespace {namespace}: {PSA_ENFORCE}={other:?} is not a Pod Security level"),
            "use privileged, baseline or restricted",
        ),
        None => Check::pass(
            NAME,
            format!(
                "namespace {namespace} sets no Pod Security level (the cluster default applies); Switchyard's pods meet \"restricted\""
            ),
        ),
    }
}

/// NetworkPolicy support: the API serves `networking.k8s.io/v1` NetworkPolicies, and one is
/// admitted in the namespace (a server-side dry run, when the namespace exists).
async fn network_policy(client: &Client, namespace: Option<&str>) -> Check {
    const NAME: &str = "network-policy";
    let served = match client
        .list_api_group_resources("networking.k8s.io/v1")
        .await
    {
        Ok(list) => list.resources.iter().any(|r| r.name == "networkpolicies"),
        Err(e) => {
            return Check::fail(
                NAME,
                format!("networking.k8s.io/v1 is not served: {e}"),
                "the chart and the operator write NetworkPolicies; use a Kubernetes that serves networking.k8s.io/v1",
            );
        }
    };
    if !served {
        return Check::fail(
            NAME,
            "networking.k8s.io/v1 serves no networkpolicies",
            "the chart and the operator write NetworkPolicies; use a Kubernetes that serves them",
        );
    }
    let Some(ns) = namespace else {
        return Check::pass(NAME, "networking.k8s.io/v1 NetworkPolicy is served");
    };
    let exists = Api::<Namespace>::all(client.clone())
        .get_opt(ns)
        .await
        .ok()
        .flatten()
        .is_some();
    if !exists {
        return Check::pass(NAME, "networking.k8s.io/v1 NetworkPolicy is served");
    }
    let policy: NetworkPolicy = match serde_json::from_value(serde_json::json!({
        "metadata": {"name": "switchyard-check"},
        "spec": {"podSelector": {"matchLabels": {"switchyard.dev/check": "dry-run"}}, "policyTypes": ["Ingress"]},
    })) {
        Ok(p) => p,
        Err(e) => return Check::fail(NAME, format!("building the dry-run policy: {e}"), "a bug"),
    };
    let params = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    match Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .create(&params, &policy)
        .await
    {
        Ok(_) => Check::pass(
            NAME,
            format!(
                "NetworkPolicy is served and admitted in {ns} (server-side dry run); the cluster's network plugin must enforce it"
            ),
        ),
        Err(e) => Check::fail(
            NAME,
            format!("a NetworkPolicy in {ns} was refused (dry run): {e}"),
            "the chart and the operator write NetworkPolicies there; grant the installer create on networkpolicies",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::report::Status;

    #[test]
    fn versions_at_or_above_the_charts_minimum_pass() {
        assert_eq!(parse_version("1", "34+"), Some((1, 34)));
        assert_eq!(version_check("1", "30", "v1.30.0").status, Status::Pass);
        assert_eq!(
            version_check("1", "34+", "v1.34.2-eks").status,
            Status::Pass
        );
        let old = version_check("1", "29", "v1.29.9");
        assert_eq!(old.status, Status::Fail);
        assert!(old.detail.contains("older than 1.30"), "{}", old.detail);
        assert_eq!(version_check("", "", "weird").status, Status::Warn);
    }

    #[test]
    fn a_crd_over_the_annotation_limit_warns_and_a_refused_dry_run_fails() {
        let name = "managers.switchyard.dev";
        assert_eq!(crd_apply_check(name, Ok(()), 200_000).status, Status::Pass);
        let big = crd_apply_check(name, Ok(()), ANNOTATION_LIMIT + 1);
        assert_eq!(big.status, Status::Warn);
        assert!(
            big.hint
                .as_deref()
                .is_some_and(|h| h.contains("--server-side"))
        );
        let refused = crd_apply_check(name, Err("forbidden".into()), 1);
        assert_eq!(refused.status, Status::Fail);
        assert!(refused.detail.contains("forbidden"));
    }

    #[test]
    fn this_versions_crds_fit_a_client_side_apply() {
        for crd in [Router::crd(), Manager::crd()] {
            let size = serde_json::to_vec(&crd).expect("json").len();
            assert!(
                size <= ANNOTATION_LIMIT,
                "{:?}: {size} bytes",
                crd.metadata.name
            );
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn pod_security_warns_only_where_the_operator_and_admission_disagree() {
        let restricted = labels(&[(PSA_ENFORCE, "restricted")]);
        assert_eq!(
            pod_security_check("team-a", Some(Some(&restricted))).status,
            Status::Pass
        );
        assert_eq!(
            pod_security_check("team-a", Some(None)).status,
            Status::Pass
        );
        assert_eq!(pod_security_check("team-a", None).status, Status::Pass);
        let clash = labels(&[(PSA_ENFORCE, "baseline"), (ALLOW_PRIVILEGED_LABEL, "true")]);
        let c = pod_security_check("team-a", Some(Some(&clash)));
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains(ALLOW_PRIVILEGED_LABEL));
        let allowed = labels(&[
            (PSA_ENFORCE, "privileged"),
            (ALLOW_PRIVILEGED_LABEL, "true"),
        ]);
        assert_eq!(
            pod_security_check("team-a", Some(Some(&allowed))).status,
            Status::Pass
        );
        let bad = labels(&[(PSA_ENFORCE, "strict")]);
        assert_eq!(
            pod_security_check("team-a", Some(Some(&bad))).status,
            Status::Fail
        );
    }
}
