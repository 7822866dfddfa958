//! After install: is the installed Switchyard healthy. The CRDs and their versions, the operator's
//! Deployment ready and one of its pods leading, the mesh CA's anchors and issuer not near expiry,
//! the sidecars of the mesh pods on the image the operator injects (version skew), and every Router
//! and Manager Ready, or why not. The API calls gather; the `*_check` functions judge, purely.

use super::operator::{OperatorDeployment, find_operator};
use super::report::Check;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use kube::{Client, CustomResourceExt, Resource, ResourceExt};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
use switchyard_crds::status::{DEGRADED, HasConditions, READY};
use switchyard_crds::{Manager, Router};
use switchyard_operator::render::sidecar::CONTAINER as SIDECAR_CONTAINER;
use switchyard_protocol::labels::NAME as NAME_LABEL;

/// A CA certificate closer than this to its end is a warning: time to rotate (docs/ca-rotation.md).
pub const CA_WARN_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The `app.kubernetes.io/name` of Router and Manager pods. Their templates carry the selector
/// labels of their Deployment, not `managed-by`, which only the children themselves get.
const MESH_POD_NAMES: &str = "switchyard-router,switchyard-manager";

/// Where to look.
pub struct Scope<'a> {
    /// The operator's namespace.
    pub namespace: &'a str,
    /// The namespaces of the mesh pods and custom resources to check; empty: all.
    pub mesh_namespaces: &'a [String],
}

/// Every post-install check, in order.
pub async fn run(client: &Client, scope: &Scope<'_>) -> Vec<Check> {
    let mut checks = crds(client).await;
    let operator = find_operator(client, scope.namespace).await;
    checks.push(operator_ready_check(scope.namespace, &operator));
    match &operator {
        Ok(Some(op)) => {
            checks.push(leader(client, scope.namespace, op).await);
            checks.push(mesh_ca(client, scope.namespace, op).await);
            checks.push(sidecar_skew(client, scope, op).await);
        }
        _ => checks.push(Check::fail(
            "operator-leader",
            "no operator to lead",
            "install the switchyard chart (see operator-ready)",
        )),
    }
    checks.push(resources_ready::<Router>(client, scope, "routers-ready").await);
    checks.push(resources_ready::<Manager>(client, scope, "managers-ready").await);
    checks
}

async fn crds(client: &Client) -> Vec<Check> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for want in [Router::crd(), Manager::crd()] {
        let name = want.metadata.name.clone().unwrap_or_default();
        out.push(match api.get_opt(&name).await {
            Ok(found) => crd_check(&want, found.as_ref()),
            Err(e) => Check::fail(
                "crds",
                format!("{name}: cannot read it: {e}"),
                "the checks need to get customresourcedefinitions",
            ),
        });
    }
    out
}

/// The `crds` check of one CRD: present, Established, and serving the versions this CLI speaks,
/// with the one this CLI stores as the storage version.
pub fn crd_check(
    want: &CustomResourceDefinition,
    found: Option<&CustomResourceDefinition>,
) -> Check {
    const NAME: &str = "crds";
    let name = want.metadata.name.clone().unwrap_or_default();
    let install =
        "install or upgrade the switchyard-crds chart (docs/upgrading.md: the CRDs first)";
    let Some(found) = found else {
        return Check::fail(NAME, format!("{name} is not installed"), install);
    };
    let established = found
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    if !established {
        return Check::fail(
            NAME,
            format!("{name} is not Established"),
            format!(
                "kubectl describe crd {name} says why (a name conflict, or the API server is still taking it)"
            ),
        );
    }
    let served: Vec<&str> = found
        .spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    let storage = found
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.as_str());
    let missing: Vec<&str> = want
        .spec
        .versions
        .iter()
        .map(|v| v.name.as_str())
        .filter(|v| !served.contains(v))
        .collect();
    if !missing.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "{name} serves {} but not {}",
                served.join(", "),
                missing.join(", ")
            ),
            install,
        );
    }
    let detail = format!(
        "{name}: Established, serving {} (storage {})",
        served.join(", "),
        storage.unwrap_or("none")
    );
    let want_storage = want
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.as_str());
    if storage != want_storage {
        return Check::warn(
            NAME,
            detail,
            format!(
                "this CLI stores {}: upgrade the switchyard-crds chart and the CLI to the same release",
                want_storage.unwrap_or("none")
            ),
        );
    }
    Check::pass(NAME, detail)
}

/// The `operator-ready` check: the Deployment found, with all its replicas ready.
pub fn operator_ready_check(
    namespace: &str,
    found: &Result<Option<OperatorDeployment>, String>,
) -> Check {
    const NAME: &str = "operator-ready";
    let op = match found {
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot list Deployments in {namespace}: {e}"),
                "the checks need to list deployments in the operator's namespace (-n)",
            );
        }
        Ok(None) => {
            return Check::fail(
                NAME,
                format!("no switchyard operator Deployment in namespace {namespace}"),
                "install the switchyard chart, or name its namespace with -n",
            );
        }
        Ok(Some(op)) => op,
    };
    let name = &op.name;
    match (op.desired, op.ready) {
        (0, _) => Check::fail(
            NAME,
            format!(
                "Deployment {namespace}/{name} is scaled to 0: nothing reconciles Routers and Managers"
            ),
            format!(
                "kubectl scale deploy/{name} -n {namespace} --replicas=2 (or helm upgrade with replicaCount)"
            ),
        ),
        (want, 0) => Check::fail(
            NAME,
            format!("Deployment {namespace}/{name}: 0 of {want} replicas ready"),
            format!(
                "kubectl describe pods -n {namespace} -l app.kubernetes.io/name=switchyard, and the operator's logs"
            ),
        ),
        (want, ready) if ready < want => Check::warn(
            NAME,
            format!("Deployment {namespace}/{name}: {ready} of {want} replicas ready"),
            "a rollout in progress, or a replica that cannot start: see its pod's events",
        ),
        (want, _) => Check::pass(
            NAME,
            format!(
                "Deployment {namespace}/{name}: {want} of {want} replicas ready (image {})",
                op.image
            ),
        ),
    }
}

async fn leader(client: &Client, namespace: &str, op: &OperatorDeployment) -> Check {
    if !op.leader_election {
        return leader_check(
            &op.lease_name,
            None,
            &op.ready_pods,
            false,
            SystemTime::now(),
        );
    }
    match Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&op.lease_name)
        .await
    {
        Ok(lease) => leader_check(
            &op.lease_name,
            lease.as_ref(),
            &op.ready_pods,
            true,
            SystemTime::now(),
        ),
        Err(e) => Check::warn(
            "operator-leader",
            format!("cannot read Lease {namespace}/{}: {e}", op.lease_name),
            "the checks need to get leases in the operator's namespace",
        ),
    }
}

/// The `operator-leader` check: a ready operator pod holds the Lease and renewed it within its
/// duration (a stale Lease means no replica reconciles until another takes it).
pub fn leader_check(
    lease_name: &str,
    lease: Option<&Lease>,
    ready_pods: &[String],
    election: bool,
    now: SystemTime,
) -> Check {
    const NAME: &str = "operator-leader";
    if !election {
        return Check::pass(
            NAME,
            "leader election is off (--leader-election=false): the one replica leads",
        );
    }
    let logs = "the operator's logs say why no replica takes the Lease (its RBAC on leases, or the API server)";
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Check::fail(
            NAME,
            format!("no Lease {lease_name}: no replica leads"),
            logs,
        );
    };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return Check::fail(
            NAME,
            format!("Lease {lease_name} has no holder: no replica leads"),
            logs,
        );
    };
    let duration =
        Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15));
    let age = spec
        .renew_time
        .as_ref()
        .and_then(|t| now.duration_since(SystemTime::from(t.0)).ok())
        .unwrap_or_default();
    if age > duration {
        return Check::fail(
            NAME,
            format!(
                "Lease {lease_name} is held by {holder}, last renewed {}s ago (its duration is {}s): the leader is gone",
                age.as_secs(),
                duration.as_secs()
            ),
            "a standby takes it once it expires; if none does, check the operator pods and their logs",
        );
    }
    if !ready_pods.iter().any(|p| p == holder) {
        return Check::warn(
            NAME,
            format!(
                "Lease {lease_name} is held by {holder}, which is not a ready pod of the operator Deployment"
            ),
            "another operator (another install, or one run outside the cluster) leads with this Lease name; run one per cluster",
        );
    }
    Check::pass(
        NAME,
        format!(
            "{holder} leads (Lease {lease_name}, renewed {}s ago)",
            age.as_secs()
        ),
    )
}

async fn mesh_ca(client: &Client, namespace: &str, op: &OperatorDeployment) -> Check {
    if !op.mesh_tls {
        return Check::pass("mesh-ca", "mesh TLS is off (--mesh-tls=false): no mesh CA");
    }
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&op.ca_secret)
        .await
    {
        Ok(secret) => {
            let certs = secret.as_ref().map(ca_certificates);
            ca_check(namespace, &op.ca_secret, certs, SystemTime::now())
        }
        Err(e) => Check::warn(
            "mesh-ca",
            format!("cannot read Secret {namespace}/{}: {e}", op.ca_secret),
            "the CA check needs to get that Secret; the operator's metrics switchyard_operator_mesh_{anchor,issuer}_expiry_seconds say the same",
        ),
    }
}

/// A CA certificate and when it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaCert {
    /// `anchor` or `issuer`.
    pub role: &'static str,
    /// Its subject, for the message.
    pub subject: String,
    pub not_after: Option<SystemTime>,
}

/// The anchors (`ca.crt`, or the issuer itself when it is a root) and the issuer (`tls.crt`) of
/// the CA Secret, or why they cannot be read.
fn ca_certificates(secret: &Secret) -> Result<Vec<CaCert>, String> {
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
    };
    let issuer_pem = field("tls.crt").ok_or("it has no tls.crt")?;
    let parse = |pem: &[u8], role: &'static str| -> Result<Vec<CaCert>, String> {
        let certs = switchyard_identity::pem::parse_certs(pem)?;
        Ok(certs
            .iter()
            .map(|c| CaCert {
                role,
                subject: x509_subject(c),
                not_after: switchyard_identity::trust::not_after(c),
            })
            .collect())
    };
    let mut out: Vec<CaCert> = parse(&issuer_pem, "issuer")?.into_iter().take(1).collect();
    // Without ca.crt, a self-signed issuer is the mesh's one anchor too.
    if let Some(anchors) = field("ca.crt").filter(|t| !t.iter().all(u8::is_ascii_whitespace)) {
        out.extend(parse(&anchors, "anchor")?);
    }
    Ok(out)
}

fn x509_subject(cert: &[u8]) -> String {
    x509_parser::parse_x509_certificate(cert)
        .map(|(_, c)| c.subject().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The `mesh-ca` check: `None` when the Secret does not exist. Fails on an expired certificate,
/// warns within [`CA_WARN_BEFORE`] of the first end.
pub fn ca_check(
    namespace: &str,
    secret: &str,
    certs: Option<Result<Vec<CaCert>, String>>,
    now: SystemTime,
) -> Check {
    const NAME: &str = "mesh-ca";
    let runbook = "rotate it without an outage: docs/ca-rotation.md";
    let certs = match certs {
        None => {
            return Check::fail(
                NAME,
                format!("Secret {namespace}/{secret} does not exist: sidecars get no certificates"),
                "the operator writes switchyard-ca on start; a --ca-secret (meshTLS.caSecret) must be created first, e.g. by cert-manager",
            );
        }
        Some(Err(e)) => {
            return Check::fail(NAME, format!("Secret {namespace}/{secret}: {e}"), runbook);
        }
        Some(Ok(c)) if c.is_empty() => {
            return Check::fail(
                NAME,
                format!("Secret {namespace}/{secret} holds no certificate"),
                runbook,
            );
        }
        Some(Ok(c)) => c,
    };
    let days = |t: SystemTime| t.duration_since(now).map_or(0, |d| d.as_secs() / 86_400);
    let mut expired = Vec::new();
    let mut soon = Vec::new();
    let mut all = Vec::new();
    for c in &certs {
        let Some(end) = c.not_after else {
            expired.push(format!(
                "{} {} (its validity does not parse)",
                c.role, c.subject
            ));
            continue;
        };
        let left = days(end);
        all.push(format!("{} {} ends in {left} days", c.role, c.subject));
        if end <= now {
            expired.push(format!("{} {} has expired", c.role, c.subject));
        } else if end.duration_since(now).unwrap_or_default() < CA_WARN_BEFORE {
            soon.push(format!("{} {} ends in {left} days", c.role, c.subject));
        }
    }
    if !expired.is_empty() {
        Check::fail(NAME, expired.join("; "), runbook)
    } else if !soon.is_empty() {
        Check::warn(NAME, soon.join("; "), runbook)
    } else {
        Check::pass(NAME, format!("{namespace}/{secret}: {}", all.join("; ")))
    }
}

async fn sidecar_skew(client: &Client, scope: &Scope<'_>, op: &OperatorDeployment) -> Check {
    let selector = ListParams::default().labels(&format!("{NAME_LABEL} in ({MESH_POD_NAMES})"));
    let mut pods: Vec<(String, String)> = Vec::new();
    for api in namespaced_apis::<Pod>(client, scope.mesh_namespaces) {
        match api.list(&selector).await {
            Ok(list) => pods.extend(list.items.iter().filter_map(|p| {
                let image = sidecar_image(p)?;
                Some((
                    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                    image,
                ))
            })),
            Err(e) => {
                return Check::warn(
                    "sidecar-skew",
                    format!("cannot list mesh pods: {e}"),
                    "the checks need to list pods",
                );
            }
        }
    }
    skew_check(&op.sidecar_image, &pods)
}

/// The image of a mesh pod's sidecar: an init container with `restartPolicy: Always` (a native
/// sidecar) in Manager pods, a container in Router pods.
fn sidecar_image(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == SIDECAR_CONTAINER)?
        .image
        .clone()
}

/// The version in an image reference's tag (`…:0.2.1@sha256:…` or `…:v0.2.1`), when it has one.
pub fn image_version(image: &str) -> Option<(u64, u64, u64)> {
    let name = image.split('@').next()?;
    let (repo, tag) = name.rsplit_once(':')?;
    // A registry's port is not a tag: the tag comes after the last '/'.
    if tag.contains('/') || repo.is_empty() {
        return None;
    }
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let mut parts = tag.split(['.', '-', '+']);
    let mut num = || parts.next()?.parse::<u64>().ok();
    Some((num()?, num()?, num()?))
}

/// The `sidecar-skew` check: the mesh pods' sidecar images against the one the operator injects
/// (`(pod, image)` pairs). Pods on another image are a rollout in progress or not yet done (a
/// warning); a sidecar more than one minor version from the operator's is outside the supported
/// skew (docs/upgrading.md, "Versions"), a failure.
pub fn skew_check(injected: &str, pods: &[(String, String)]) -> Check {
    const NAME: &str = "sidecar-skew";
    if pods.is_empty() {
        return Check::pass(NAME, format!("no mesh pods; new ones get {injected}"));
    }
    let mut by_image: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, image) in pods {
        by_image
            .entry(image.as_str())
            .or_default()
            .push(pod.as_str());
    }
    let others: Vec<(&str, &Vec<&str>)> = by_image
        .iter()
        .filter(|(i, _)| **i != injected)
        .map(|(i, p)| (*i, p))
        .collect();
    if others.is_empty() {
        return Check::pass(
            NAME,
            format!(
                "all {} mesh pods run the sidecar the operator injects ({injected})",
                pods.len()
            ),
        );
    }
    let described: Vec<String> = others
        .iter()
        .map(|(image, p)| {
            let first = p.first().copied().unwrap_or_default();
            format!("{} pod(s) on {image} (e.g. {first})", p.len())
        })
        .collect();
    let outside: Vec<&str> = match image_version(injected) {
        Some((maj, min, _)) => others
            .iter()
            .filter(|(image, _)| {
                image_version(image).is_some_and(|(m, n, _)| m != maj || n.abs_diff(min) > 1)
            })
            .map(|(image, _)| *image)
            .collect(),
        None => Vec::new(),
    };
    if !outside.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "{}; the operator injects {injected}, and {} is more than one minor version away",
                described.join("; "),
                outside.join(", ")
            ),
            "upgrade one minor version at a time (docs/upgrading.md, \"Versions\"); restart those Deployments so they get the current sidecar",
        );
    }
    Check::warn(
        NAME,
        format!("{}; the operator injects {injected}", described.join("; ")),
        "a sidecar rollout in progress, or Deployments not yet rolled since the sidecar image changed (docs/upgrading.md, \"What a sidecar image change does to the mesh\"); adjacent minor versions interoperate",
    )
}

fn namespaced_apis<K>(client: &Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    }
}

async fn resources_ready<K>(client: &Client, scope: &Scope<'_>, name: &'static str) -> Check
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + HasConditions
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let mut items = Vec::new();
    for api in namespaced_apis::<K>(client, scope.mesh_namespaces) {
        match api.list(&ListParams::default()).await {
            Ok(list) => items.extend(list.items),
            Err(e) => {
                return Check::fail(
                    name,
                    format!("cannot list {}: {e}", K::plural(&())),
                    "the CRDs must be installed (see crds) and the checks need to list them",
                );
            }
        }
    }
    let kind = K::kind(&()).into_owned();
    let facts: Vec<(String, &[Condition])> = items
        .iter()
        .map(|r| {
            (
                format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any()),
                r.conditions(),
            )
        })
        .collect();
    ready_check(name, &kind, &facts)
}

/// The `routers-ready` and `managers-ready` checks: every object's Ready condition True, or which
/// are not and why (Ready's reason and message, and Degraded's when it is True), a failure. One
/// Ready but Degraded (e.g. a Manager whose Router does not exist: it runs, nothing reaches it) is a
/// warning naming the reason.
pub fn ready_check(name: &'static str, kind: &str, objects: &[(String, &[Condition])]) -> Check {
    if objects.is_empty() {
        return Check::pass(name, format!("no {kind}s"));
    }
    let find = |cs: &[Condition], t: &str| cs.iter().find(|c| c.type_ == t).cloned();
    let mut not_ready = Vec::new();
    let mut degraded = Vec::new();
    for (who, conditions) in objects {
        let ready = find(conditions, READY);
        let problem = find(conditions, DEGRADED)
            .filter(|c| c.status == "True")
            .map(|d| format!("Degraded {}: {}", d.reason, d.message));
        if ready.as_ref().is_some_and(|c| c.status == "True") {
            if let Some(p) = problem {
                degraded.push(format!("{kind} {who} Ready but {p}"));
            }
            continue;
        }
        let mut why = match &ready {
            Some(c) => format!("{}: {}", c.reason, c.message),
            None => "no Ready condition yet (the operator has not reconciled it)".into(),
        };
        if let Some(p) = problem {
            why.push_str(&format!("; {p}"));
        }
        not_ready.push(format!("{kind} {who} not Ready ({why})"));
    }
    let hint = format!(
        "kubectl describe {} NAME -n NAMESPACE shows the conditions and events",
        kind.to_lowercase()
    );
    let total = objects.len();
    if !not_ready.is_empty() {
        let count = not_ready.len();
        not_ready.extend(degraded);
        Check::fail(
            name,
            format!("{count} of {total} not Ready: {}", not_ready.join("; ")),
            hint,
        )
    } else if !degraded.is_empty() {
        Check::warn(
            name,
            format!("all {total} {kind}s Ready; {}", degraded.join("; ")),
            hint,
        )
    } else {
        Check::pass(name, format!("all {total} {kind}s Ready"))
    }
}

#[cfg(test)]
#[path = "post_tests.rs"]
mod tests;
