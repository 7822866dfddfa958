//! The operator as a pod, as a platform team runs it: both charts installed with
//! `helm upgrade --install … oci://…` from the cluster's registry, where `deploy/release` pushed them
//! with the images they name by digest ([`crate::release`]); `global.imageRegistry` points every image
//! at that registry. The operator runs under the chart's own ServiceAccount, on the real node (chart
//! values `nodeSelector` and `tolerations`), in a namespace that enforces Pod Security `restricted`.
//!
//! A release of its own (`switchyard-node`), so the shared release in switchyard-system that the
//! other tests' host-process operators use stays as it is. It holds the operator lock while it
//! runs: operators watch every namespace, so two must never run at once.
//!
//! The cluster has no DNS (no CoreDNS image to run), so the chart's default control-plane URL, the
//! Service's DNS name, would resolve nowhere. The control-plane Service gets a pinned ClusterIP
//! (`controlPlane.clusterIP`) and sidecars the URL with that IP (`controlPlane.url`); kube-proxy on
//! the node sends it to the operator pod. The operator itself reaches the API server the usual way,
//! through the `kubernetes` Service's ClusterIP that the kubelet puts in its environment.

use crate::cluster::Cluster;
use crate::cmd::Cmd;
use crate::lock::FileLock;
use crate::node::Node;
use crate::operator::OperatorLock;
use crate::release::Release;
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Helm release (and full name of its objects).
pub const RELEASE: &str = "switchyard-node";
/// Its namespace (named in the crate root, which `operator` reads to refuse a foreign operator).
pub const NAMESPACE: &str = crate::NODE_NAMESPACE;
/// ClusterIP pinned for the control-plane Service (the static band of the e2e service range).
pub const CONTROL_PLANE_IP: &str = "10.0.0.10";
/// ClusterIP pinned for the chart's JetStream client Service (`jetstream.clusterIP`): no cluster
/// DNS resolves the servers' names here.
pub const NATS_IP: &str = "10.0.0.11";
/// Port of the operator's metrics server (chart default).
pub const METRICS_PORT: u16 = 8080;

/// The installed release; [`PodOperator::uninstall`] removes it.
#[derive(Debug)]
pub struct PodOperator {
    /// The operator pod.
    pub pod: String,
    /// Its IP (routed into the node).
    pub pod_ip: Ipv4Addr,
    /// Seconds from `helm upgrade --install` to the pod Ready.
    pub ready_after: Duration,
    _lock: OperatorLock,
}

/// The values a user of an air-gapped cluster would give: the registry, and where to run. The
/// operator's and the sidecar's images are the chart's own (by digest, as released).
fn values(node: &Node, release: &Release) -> serde_json::Value {
    serde_json::json!({
        "global": {"imageRegistry": release.registry},
        "replicaCount": 1,
        "logFormat": "text",
        "nodeSelector": {node.label.0.clone(): node.label.1.clone()},
        "tolerations": [{"key": node.taint_key, "operator": "Exists", "effect": "NoSchedule"}],
        // The chart's default, spelled out: every pod test runs over the certified mesh.
        "meshTLS": {"enabled": true},
        "controlPlane": {
            "clusterIP": CONTROL_PLANE_IP,
            "url": format!("https://{CONTROL_PLANE_IP}:7443"),
            "port": 7443,
        },
        // The chart's JetStream, one server (the node has two cores), behind the mesh's identity
        // as a user's would be: durable tests publish through it.
        "jetstream": {
            "enabled": true,
            "clusterIP": NATS_IP,
            "image": {"tag": release.nats_tag, "digest": release.nats.digest},
            "cluster": {"replicas": 1},
            "persistence": {"enabled": false},
            "nodeSelector": {node.label.0.clone(): node.label.1.clone()},
            "tolerations": [{"key": node.taint_key, "operator": "Exists", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
            "gc": {"percent": 800, "memoryLimit": "450MiB"},
        },
    })
}

impl PodOperator {
    /// Installs (or upgrades) the release and waits for the operator pod to be Ready on the node.
    pub async fn install(cluster: &Cluster, node: &Node, release: &Release) -> Result<PodOperator> {
        let lock = OperatorLock::acquire().await?;
        // A run that died may have left its release behind: that operator is ours, not foreign.
        remove(cluster).await?;
        crate::operator::refuse_foreign_operator(cluster).await?;
        match install_release(cluster, node, release).await {
            Ok((pod, pod_ip, ready_after)) => Ok(PodOperator {
                pod,
                pod_ip,
                ready_after,
                _lock: lock,
            }),
            Err(e) => {
                // No half-installed operator left for the tests that run after this one.
                if let Err(r) = remove(cluster).await {
                    eprintln!("[e2e] warning: removing the failed operator release: {r:#}");
                }
                Err(e)
            }
        }
    }

    /// Uninstalls the release and waits until its pods are gone; then the lock is released.
    pub async fn uninstall(self, cluster: &Cluster) -> Result<()> {
        remove(cluster).await
    }
}

/// The namespace and the release, up to a Ready operator pod: (pod, IP, time to Ready).
async fn install_release(
    cluster: &Cluster,
    node: &Node,
    release: &Release,
) -> Result<(String, Ipv4Addr, Duration)> {
    install_crds(cluster, release).await?;
    cluster
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                }},
            })
            .to_string(),
        )
        .ok()
        .await?;
    let file = crate::work_dir().join(format!("{RELEASE}-values.json"));
    std::fs::write(&file, values(node, release).to_string())
        .with_context(|| format!("writing {}", file.display()))?;
    let start = std::time::Instant::now();
    release
        .helm_install(cluster.helm(), RELEASE, &release.operator_chart)
        .args(["--namespace", NAMESPACE, "--values"])
        .arg(&file)
        .args(["--wait", "--timeout=120s"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .with_context(|| {
            format!(
                "helm install {} {} with the operator as a pod",
                release.operator_chart, release.version
            )
        })?;
    let client = cluster.client().await?;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let pod = crate::eventually(
        "the operator pod Ready on the node",
        crate::timeout(),
        || async {
            // The operator's own pods: the release's NATS servers carry its instance label too.
            let list = pods
                .list(&ListParams::default().labels(&format!(
                    "app.kubernetes.io/name=switchyard,app.kubernetes.io/instance={RELEASE}"
                )))
                .await?;
            let live: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            ensure!(live.len() == 1, "{} operator pods", live.len());
            crate::pods::check_running_on(live[0], &node.name)?;
            Ok(live[0].clone())
        },
    )
    .await?;
    let pod_ip: Ipv4Addr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("operator pod without an IP")?
        .parse()
        .context("operator pod IP")?;
    Ok((pod.name_any(), pod_ip, start.elapsed()))
}

/// The CRD chart from the registry, as the first of a user's two installs: an upgrade of the CRD
/// release the other tests share (helm would not give its CRDs to a second release), wherever it is.
async fn install_crds(cluster: &Cluster, release: &Release) -> Result<()> {
    let _lock = FileLock::acquire("charts").await?;
    let namespace = crate::cluster::release_namespace(&cluster.kubeconfig, crate::CRD_RELEASE)
        .await?
        .unwrap_or_else(|| crate::SYSTEM_NAMESPACE.to_string());
    release
        .helm_install(cluster.helm(), crate::CRD_RELEASE, &release.crds_chart)
        .args(["--namespace", &namespace, "--create-namespace", "--wait"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .with_context(|| format!("helm install {} {}", release.crds_chart, release.version))?;
    Ok(())
}

/// `helm uninstall` of the release if it exists, its pods gone, its Lease deleted.
async fn remove(cluster: &Cluster) -> Result<()> {
    if crate::cluster::release_namespace(&cluster.kubeconfig, RELEASE)
        .await?
        .is_some()
    {
        cluster
            .helm()
            .args([
                "uninstall",
                RELEASE,
                "--namespace",
                NAMESPACE,
                "--wait",
                "--timeout=120s",
            ])
            .timeout(Duration::from_secs(180))
            .ok()
            .await?;
    }
    let client = cluster.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    crate::eventually(
        "the operator pods gone",
        Duration::from_secs(120),
        || async {
            let left = pods
                .list(
                    &ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")),
                )
                .await?;
            ensure!(
                left.items.is_empty(),
                "{} pods of the release left",
                left.items.len()
            );
            Ok(())
        },
    )
    .await?;
    Cmd::kubectl(&cluster.kubeconfig)
        .args([
            "-n",
            NAMESPACE,
            "delete",
            "lease",
            crate::operator::DEFAULT_LEASE,
            "--ignore-not-found",
        ])
        .ok()
        .await?;
    Ok(())
}
