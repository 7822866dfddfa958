//! A kwok node whose pods are reachable from this host: kwok gives a pod an IP from its node's
//! `spec.podCIDR` (kwok v0.7.0 `funcPodIPWith`, falling back to `--cidr`), so a node with podCIDR
//! `127.77.0.1/32` gives its (one) pod 127.77.0.1, a loopback address where a real manager sidecar
//! process of the test listens. The node is tainted, so only pods that tolerate the taint (the
//! Managers of the tests that want it) land there; it is created once and kept, like the cluster.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use std::net::Ipv4Addr;

/// Name of the node.
pub const NODE: &str = "kwok-loopback";
/// Its pod CIDR: one address, which kwok hands out again once the previous pod is gone.
pub const POD_CIDR: &str = "127.77.0.1/32";
/// The IP its pod gets.
pub const POD_IP: Ipv4Addr = Ipv4Addr::new(127, 77, 0, 1);
/// The taint that keeps other pods off it (`NoSchedule`).
pub const TAINT: &str = "switchyard.dev/loopback";

/// Lines of a Manager's `spec.template.spec` (indented for [`crate::fixtures::manager`]'s template)
/// that put its pods on the node.
pub const TEMPLATE_LINES: &str = "      nodeSelector: {kubernetes.io/hostname: kwok-loopback}
      tolerations: [{key: switchyard.dev/loopback, operator: Exists, effect: NoSchedule}]
";

fn node() -> Result<Node> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok-loopback",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": NODE,
            },
        },
        "spec": {
            "podCIDR": POD_CIDR,
            "podCIDRs": [POD_CIDR],
            "taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}],
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.240.0.99"},
                {"type": "Hostname", "address": NODE},
            ],
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }))?)
}

/// Creates the node unless it exists, waits until it is Ready with only its own taint, and until
/// no pod holds its address (a pod of an earlier run still terminating would get it first).
pub async fn ensure_node(client: &kube::Client) -> Result<Ipv4Addr> {
    let nodes = Api::<Node>::all(client.clone());
    match nodes.get_opt(NODE).await? {
        Some(n) => {
            let cidr = n.spec.and_then(|s| s.pod_cidr).unwrap_or_default();
            ensure!(
                cidr == POD_CIDR,
                "node {NODE} exists with podCIDR {cidr:?}, not {POD_CIDR}; delete it"
            );
        }
        None => {
            nodes
                .create(&PostParams::default(), &node()?)
                .await
                .with_context(|| format!("creating node {NODE}"))?;
        }
    }
    crate::eventually(
        &format!("node {NODE} Ready with only its own taint"),
        crate::timeout(),
        || async {
            let n = nodes.get(NODE).await?;
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.key)
                .collect();
            ensure!(
                ready && taints == [TAINT],
                "ready {ready}, taints {taints:?}"
            );
            Ok(())
        },
    )
    .await?;
    let pods = Api::<Pod>::all(client.clone());
    crate::eventually(
        &format!("no pod left on node {NODE}"),
        crate::timeout(),
        || async {
            let on = pods
                .list(&ListParams::default().fields(&format!("spec.nodeName={NODE}")))
                .await?;
            let names: Vec<String> = on.items.iter().map(|p| p.name_any()).collect();
            if !names.is_empty() {
                bail!("pods still there: {names:?}");
            }
            Ok(())
        },
    )
    .await?;
    Ok(POD_IP)
}
