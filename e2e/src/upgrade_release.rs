//! The release the upgrade test moves between versions: `switchyard-upgrade` in its own namespace,
//! the operator as a pod on the real node with the chart's JetStream, as [`crate::pod_operator`]'s but
//! first from the previous version's chart (pushed to the registry, images by digest), then
//! `helm upgrade` to the current release's chart from the registry, then `helm rollback` to the
//! first revision.
//!
//! Operators watch every namespace, so the test holds the operator lock throughout; its release and
//! namespace are its own, and its pinned ClusterIPs differ from the pod operator's.

use crate::cluster::Cluster;
use crate::cmd::Cmd;
use crate::lock::FileLock;
use crate::node::Node;
use crate::previous::Previous;
use crate::release::Release;
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// Helm release (and full name of its objects).
pub const RELEASE: &str = crate::UPGRADE_NAMESPACE;
/// Its namespace.
pub const NAMESPACE: &str = crate::UPGRADE_NAMESPACE;
/// ClusterIP pinned for its control-plane Service (static band; the pod operator has .10).
pub const CONTROL_PLANE_IP: &str = "10.0.0.12";
/// ClusterIP pinned for its JetStream client Service (the pod operator has .11).
pub const NATS_IP: &str = "10.0.0.13";

/// StorageClass name of the JetStream server's claim, bound to [`store_volume`]'s volume.
const STORE_CLASS: &str = "switchyard-upgrade";
/// The claim the chart's StatefulSet makes for its one server.
const STORE_CLAIM: &str = "data-switchyard-upgrade-nats-0";

/// Values both versions' charts take alike: where to run, the control plane and JetStream at pinned
/// IPs (no cluster DNS here), one JetStream server whose store survives its restart (the sidecar
/// image runs in its pod as the config reloader, so each version change replaces the pod).
fn common(node: &Node, release: &Release) -> Value {
    let on_node = json!({node.label.0.clone(): node.label.1.clone()});
    let tolerate = json!([{"key": node.taint_key, "operator": "Exists", "effect": "NoSchedule"}]);
    json!({
        "replicaCount": 1,
        "logFormat": "text",
        "nodeSelector": on_node,
        "tolerations": tolerate,
        "meshTLS": {"enabled": true},
        "controlPlane": {
            "clusterIP": CONTROL_PLANE_IP,
            "url": format!("https://{CONTROL_PLANE_IP}:7443"),
            "port": 7443,
        },
        "jetstream": {
            "enabled": true,
            "clusterIP": NATS_IP,
            // One reference both charts render alike (the previous chart knows no digest value), so
            // the upgrade does not replace the server for its image.
            "image": {
                "repository": format!("{}/nats", release.registry),
                "tag": format!("{}@{}", release.nats_tag, release.nats.digest),
            },
            "cluster": {"replicas": 1},
            "persistence": {"enabled": true, "size": "1Gi", "storageClassName": STORE_CLASS},
            "nodeSelector": on_node,
            "tolerations": tolerate,
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
            "gc": {"percent": 800, "memoryLimit": "450MiB"},
        },
    })
}

/// The previous chart's values: its images (pushed under `switchyard-previous/`) by digest.
fn previous_values(node: &Node, release: &Release, previous: &Previous) -> Value {
    let mut v = common(node, release);
    let (op_repo, _) = previous.tagged(&previous.operator);
    let (sc_repo, _) = previous.tagged(&previous.sidecar);
    v["image"] = json!({"repository": op_repo, "digest": previous.operator.digest});
    v["sidecar"] = json!({"image": {"repository": sc_repo, "digest": previous.sidecar.digest}});
    v
}

/// The current chart's values: its own images (by digest, as released) under the registry.
fn current_values(node: &Node, release: &Release) -> Value {
    let mut v = common(node, release);
    v["global"] = json!({"imageRegistry": release.registry});
    v
}

fn values_file(name: &str, values: &Value) -> Result<PathBuf> {
    let file = crate::work_dir().join(format!("{RELEASE}-{name}-values.json"));
    std::fs::write(&file, values.to_string())
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// The CRD release, wherever the shared one lives.
async fn crd_namespace(cluster: &Cluster) -> Result<String> {
    Ok(
        crate::cluster::release_namespace(&cluster.kubeconfig, crate::CRD_RELEASE)
            .await?
            .unwrap_or_else(|| crate::SYSTEM_NAMESPACE.to_string()),
    )
}

async fn crds_established(cluster: &Cluster) -> Result<()> {
    cluster
        .kubectl()
        .args(["wait", "--for=condition=Established", "--timeout=60s"])
        .args(["crd/routers.switchyard.dev", "crd/managers.switchyard.dev"])
        .ok()
        .await
        .map(|_| ())
}

/// The previous version's CRD chart, from the registry, into the shared CRD release (under the charts lock,
/// which the caller holds until the current CRDs are back: other tests' installs wait).
pub async fn install_previous_crds(
    cluster: &Cluster,
    previous: &Previous,
    _charts: &FileLock,
) -> Result<()> {
    let ns = crd_namespace(cluster).await?;
    cluster
        .helm()
        .args([
            "upgrade",
            "--install",
            crate::CRD_RELEASE,
            &previous.crds_chart,
        ])
        .args(["--version", &previous.chart_version, "--plain-http"])
        .args(["--namespace", &ns, "--create-namespace", "--wait"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .context("helm upgrade of the CRD release to the previous version's chart")?;
    crds_established(cluster).await
}

/// Step 1 of docs/upgrading.md: the current CRD chart from the registry.
pub async fn upgrade_crds(cluster: &Cluster, release: &Release, _charts: &FileLock) -> Result<()> {
    let ns = crd_namespace(cluster).await?;
    release
        .helm_install(cluster.helm(), crate::CRD_RELEASE, &release.crds_chart)
        .args(["--namespace", &ns, "--wait"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .with_context(|| format!("helm upgrade {} {}", release.crds_chart, release.version))?;
    crds_established(cluster).await
}

/// The node's folder that holds the JetStream store (the node's kubelet sees the host's paths but
/// /var/lib, /var/log and /run).
fn store_dir() -> PathBuf {
    crate::work_dir().join("upgrade-nats-store")
}

/// A hostPath PersistentVolume bound ahead to the server's claim (the cluster has no provisioner),
/// its folder writable by the server's user (1000; a hostPath volume ignores fsGroup).
async fn store_volume(cluster: &Cluster) -> Result<()> {
    let dir = store_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Cmd::new("chown")
        .arg("1000:1000")
        .arg(&dir)
        .ok()
        .await
        .context("giving the store folder to the nats user")?;
    cluster
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(
            json!({
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": STORE_CLAIM},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORE_CLASS,
                    "hostPath": {"path": dir, "type": "Directory"},
                    "claimRef": {"namespace": NAMESPACE, "name": STORE_CLAIM},
                },
            })
            .to_string(),
        )
        .ok()
        .await
        .context("creating the JetStream store's PersistentVolume")?;
    Ok(())
}

/// `helm install` of the previous operator chart from the registry, waiting for the operator pod.
pub async fn install_previous(
    cluster: &Cluster,
    node: &Node,
    release: &Release,
    previous: &Previous,
) -> Result<()> {
    cluster
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(
            json!({
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
    store_volume(cluster).await?;
    let file = values_file("previous", &previous_values(node, release, previous))?;
    cluster
        .helm()
        .args(["install", RELEASE, &previous.operator_chart])
        .args(["--version", &previous.chart_version, "--plain-http"])
        .args(["--namespace", NAMESPACE, "--values"])
        .arg(&file)
        .args(["--wait", "--timeout=180s"])
        .timeout(Duration::from_secs(240))
        .ok()
        .await
        .with_context(|| format!("helm install of the chart of {}", previous.commit))?;
    Ok(())
}

/// Step 2 of docs/upgrading.md: `helm upgrade` to the current chart from the registry, the values
/// given again.
pub async fn upgrade(cluster: &Cluster, node: &Node, release: &Release) -> Result<()> {
    let file = values_file("current", &current_values(node, release))?;
    release
        .helm_install(cluster.helm(), RELEASE, &release.operator_chart)
        .args(["--namespace", NAMESPACE, "--values"])
        .arg(&file)
        .args(["--wait", "--timeout=180s"])
        .timeout(Duration::from_secs(240))
        .ok()
        .await
        .with_context(|| {
            format!(
                "helm upgrade to {} {}",
                release.operator_chart, release.version
            )
        })?;
    Ok(())
}

/// `helm rollback` to the first revision (the previous version).
pub async fn rollback(cluster: &Cluster) -> Result<()> {
    cluster
        .helm()
        .args(["rollback", RELEASE, "1", "--namespace", NAMESPACE])
        .args(["--wait", "--timeout=180s"])
        .timeout(Duration::from_secs(240))
        .ok()
        .await
        .context("helm rollback to revision 1")?;
    Ok(())
}

/// `helm uninstall` of the release if it exists, its pods gone, its Lease, the store's claim and
/// volume deleted and its folder emptied.
pub async fn remove(cluster: &Cluster) -> Result<()> {
    if crate::cluster::release_namespace(&cluster.kubeconfig, RELEASE)
        .await?
        .is_some()
    {
        cluster
            .helm()
            .args(["uninstall", RELEASE, "--namespace", NAMESPACE])
            .args(["--wait", "--timeout=120s"])
            .timeout(Duration::from_secs(180))
            .ok()
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, NAMESPACE);
    crate::eventually(
        "the upgrade release's pods gone",
        Duration::from_secs(120),
        || async {
            let left = pods
                .list(
                    &ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")),
                )
                .await?;
            ensure!(left.items.is_empty(), "{} pods left", left.items.len());
            Ok(())
        },
    )
    .await?;
    Cmd::kubectl(&cluster.kubeconfig)
        .args(["-n", NAMESPACE, "delete", "lease"])
        .arg(crate::operator::DEFAULT_LEASE)
        .arg("--ignore-not-found")
        .ok()
        .await?;
    Cmd::kubectl(&cluster.kubeconfig)
        .args([
            "-n",
            NAMESPACE,
            "delete",
            "pvc",
            STORE_CLAIM,
            "--ignore-not-found",
        ])
        .ok()
        .await?;
    Cmd::kubectl(&cluster.kubeconfig)
        .args(["delete", "pv", STORE_CLAIM, "--ignore-not-found"])
        .ok()
        .await?;
    let dir = store_dir();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}
