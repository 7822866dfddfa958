//! Cluster-side helpers: per-test namespaces, conditions, owner references, children.

use crate::cluster::Cluster;
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{Api, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::path::PathBuf;
use switchyard_crds::{Manager, Router};

/// A namespace of one test, named `e2e-<prefix>-<suffix>`, deleted (without waiting) on drop.
/// Kept when the test panicked or `SWITCHYARD_E2E_KEEP=1`, for a post-mortem.
#[derive(Debug)]
pub struct TestNamespace {
    /// The namespace name.
    pub name: String,
    kubeconfig: PathBuf,
    keep: bool,
}

impl TestNamespace {
    /// Creates the namespace and waits for its `default` ServiceAccount (pods need it).
    pub async fn create(cluster: &Cluster, prefix: &str) -> Result<TestNamespace> {
        TestNamespace::create_with(cluster, prefix, BTreeMap::new(), BTreeMap::new()).await
    }

    /// [`TestNamespace::create`] with further labels and annotations (e.g. Pod Security, or the
    /// real node's scheduling defaults).
    pub async fn create_with(
        cluster: &Cluster,
        prefix: &str,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    ) -> Result<TestNamespace> {
        let name = format!("e2e-{prefix}-{}", crate::unique_suffix());
        let client = cluster.client().await?;
        let mut all_labels =
            BTreeMap::from([("switchyard.dev/e2e".to_string(), "true".to_string())]);
        all_labels.extend(labels);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(all_labels),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client, &name);
        crate::eventually(
            &format!("ServiceAccount default in {name}"),
            crate::timeout(),
            || async { Ok(sa.get("default").await?) },
        )
        .await?;
        Ok(TestNamespace {
            name,
            kubeconfig: cluster.kubeconfig.clone(),
            keep: std::env::var("SWITCHYARD_E2E_KEEP").is_ok_and(|v| v == "1"),
        })
    }

    /// Keeps the namespace after the test (e.g. on a failure worth inspecting).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.keep || std::thread::panicking() {
            eprintln!("[e2e] keeping namespace {}", self.name);
            return;
        }
        // Synchronous and quick (--wait=false): drop cannot await.
        let _ = std::process::Command::new(crate::kubectl_bin())
            .env("KUBECONFIG", &self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The condition of `type_`, if set.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Short text of all conditions, for messages.
pub fn describe_conditions(conditions: &[Condition]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Status conditions and observed generation of a Router or Manager, whatever the kind.
pub trait Reconciled {
    /// metadata.generation.
    fn generation(&self) -> Option<i64>;
    /// status.observedGeneration.
    fn observed_generation(&self) -> Option<i64>;
    /// status.conditions.
    fn conditions(&self) -> &[Condition];
}

impl Reconciled for Router {
    fn generation(&self) -> Option<i64> {
        self.metadata.generation
    }
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref().and_then(|s| s.observed_generation)
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Reconciled for Manager {
    fn generation(&self) -> Option<i64> {
        self.metadata.generation
    }
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref().and_then(|s| s.observed_generation)
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// Ok when observedGeneration == generation and the condition `type_` has `status`
/// (and, if given, `reason`); otherwise an error describing what the object shows.
pub fn check_condition<K: Reconciled + ResourceExt>(
    obj: &K,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> Result<()> {
    let observed = obj.observed_generation();
    ensure!(
        observed.is_some() && observed == obj.generation(),
        "{} observedGeneration {:?} != generation {:?}; conditions: {}",
        obj.name_any(),
        observed,
        obj.generation(),
        describe_conditions(obj.conditions())
    );
    let Some(c) = condition(obj.conditions(), type_) else {
        bail!(
            "{} has no {type_} condition; conditions: {}",
            obj.name_any(),
            describe_conditions(obj.conditions())
        );
    };
    ensure!(
        c.status == status && reason.is_none_or(|r| c.reason == r),
        "{} has {type_}={} reason {:?} (want {status}{}); conditions: {}",
        obj.name_any(),
        c.status,
        c.reason,
        reason.map(|r| format!(" reason {r}")).unwrap_or_default(),
        describe_conditions(obj.conditions())
    );
    Ok(())
}

/// Waits until the object `name` has condition `type_`=`status` at its current generation.
pub async fn wait_condition<K>(
    api: &Api<K>,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> Result<K>
where
    K: Reconciled
        + Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    crate::eventually(
        &format!("{} {name} to have {type_}={status}", K::kind(&())),
        crate::timeout(),
        || async {
            let obj = api.get(name).await?;
            check_condition(&obj, type_, status, reason)?;
            Ok(obj)
        },
    )
    .await
}

/// Waits until the object `name` is Ready=True at its current generation.
pub async fn wait_ready<K>(api: &Api<K>, name: &str) -> Result<K>
where
    K: Reconciled
        + Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_condition(api, name, "Ready", "True", None).await
}

/// Checks that `meta` has exactly one controller ownerReference, to the given owner.
pub fn check_owned_by<O: Resource<DynamicType = ()>>(meta: &ObjectMeta, owner: &O) -> Result<()> {
    let name = meta.name.as_deref().unwrap_or("?");
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let controllers: Vec<_> = refs.iter().filter(|r| r.controller == Some(true)).collect();
    ensure!(
        controllers.len() == 1,
        "{name} has {} controller ownerReferences: {refs:?}",
        controllers.len()
    );
    let r = controllers[0];
    ensure!(
        r.kind == O::kind(&())
            && r.api_version == O::api_version(&())
            && Some(&r.name) == owner.meta().name.as_ref()
            && Some(&r.uid) == owner.meta().uid.as_ref(),
        "{name}'s controller ownerReference {r:?} does not point at {} {:?} (uid {:?})",
        O::kind(&()),
        owner.meta().name,
        owner.meta().uid
    );
    Ok(())
}

/// Checks the operator's labels on a child of the CR `owner_name` (`owner_label` is
/// `switchyard.dev/router` or `switchyard.dev/manager`).
pub fn check_labels(meta: &ObjectMeta, owner_label: &str, owner_name: &str) -> Result<()> {
    let name = meta.name.as_deref().unwrap_or("?");
    let labels = meta.labels.clone().unwrap_or_default();
    for (k, v) in [
        crate::MANAGED_BY,
        ("app.kubernetes.io/instance", owner_name),
        (owner_label, owner_name),
    ] {
        ensure!(
            labels.get(k).map(String::as_str) == Some(v),
            "{name} lacks label {k}={v}; labels: {labels:?}"
        );
    }
    Ok(())
}

/// Identity and resourceVersion of every operator-managed Deployment, Service and ConfigMap in a
/// namespace, keyed `Kind/name`.
pub async fn children(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, String>> {
    let lp =
        ListParams::default().labels(&format!("{}={}", crate::MANAGED_BY.0, crate::MANAGED_BY.1));
    let mut out = BTreeMap::new();
    for d in Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
    {
        out.insert(
            format!("Deployment/{}", d.name_any()),
            d.resource_version().unwrap_or_default(),
        );
    }
    for s in Api::<Service>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
    {
        out.insert(
            format!("Service/{}", s.name_any()),
            s.resource_version().unwrap_or_default(),
        );
    }
    for c in Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
    {
        out.insert(
            format!("ConfigMap/{}", c.name_any()),
            c.resource_version().unwrap_or_default(),
        );
    }
    Ok(out)
}

/// Names of the Deployments in a namespace, sorted.
pub async fn deployment_names(client: &kube::Client, ns: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|d| d.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// Ok when the Deployment has rolled out: observedGeneration current and `replicas` pods
/// updated, ready and available.
pub fn check_rolled_out(d: &Deployment, replicas: i32) -> Result<()> {
    let name = d.name_any();
    let spec_replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    ensure!(
        spec_replicas == replicas,
        "Deployment {name} spec.replicas {spec_replicas} != {replicas}"
    );
    let st = d.status.clone().unwrap_or_default();
    ensure!(
        st.observed_generation == d.metadata.generation
            && st.replicas.unwrap_or(0) == replicas
            && st.updated_replicas.unwrap_or(0) == replicas
            && st.ready_replicas.unwrap_or(0) == replicas
            && st.available_replicas.unwrap_or(0) == replicas,
        "Deployment {name} not rolled out to {replicas}: status {st:?}"
    );
    Ok(())
}

/// Waits until Deployment `name` exists and has rolled out to `replicas`.
pub async fn wait_rolled_out(
    client: &kube::Client,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<Deployment> {
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    crate::eventually(
        &format!("Deployment {ns}/{name} rolled out to {replicas}"),
        crate::timeout(),
        || async {
            let d = api.get(name).await?;
            check_rolled_out(&d, replicas)?;
            Ok(d)
        },
    )
    .await
}

/// The pods selected by a Deployment.
pub async fn pods_of(client: &kube::Client, d: &Deployment) -> Result<Vec<Pod>> {
    let ns = d.namespace().context("Deployment without namespace")?;
    let labels = d
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .context("Deployment without selector.matchLabels")?;
    let selector = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    Ok(Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// Ok when `n` pods of the Deployment run Ready on kwok fake nodes.
pub async fn check_pods_running_on_kwok(
    client: &kube::Client,
    d: &Deployment,
    n: usize,
) -> Result<()> {
    let pods: Vec<Pod> = pods_of(client, d)
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    ensure!(
        pods.len() == n,
        "{} has {} pods, want {n}",
        d.name_any(),
        pods.len()
    );
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ensure!(
            node.starts_with("kwok-node-") && phase == "Running" && ready,
            "pod {} is on node {node:?}, phase {phase:?}, ready {ready}",
            p.name_any()
        );
    }
    Ok(())
}
