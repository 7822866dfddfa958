//! Real pods on the kubelet node: their state, addresses and the routers' tables, as the tests of
//! `tests/pods.rs` look at them.

use crate::client::RouterClient;
use crate::node::Node;
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr};

/// Ok when the pod runs on `node`, phase Running, condition Ready.
pub fn check_running_on(pod: &Pod, node: &str) -> Result<()> {
    let on = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ensure!(
        on == node && phase == "Running" && ready,
        "pod {} is on node {on:?}, phase {phase:?}, ready {ready}; container states: {:?}",
        pod.name_any(),
        status
            .container_statuses
            .iter()
            .chain(status.init_container_statuses.iter())
            .flatten()
            .map(|c| (c.name.clone(), c.state.clone(), c.restart_count))
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// The live (not terminating) pods of `ns` matching `selector`.
pub async fn live_pods(client: &kube::Client, ns: &str, selector: &str) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

/// Every pod of `ns`, terminating ones included.
pub async fn all_pods(client: &kube::Client, ns: &str, selector: &str) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// The pod's IP, after checking that this host routes it into the node.
pub async fn routed_ip(node: &Node, pod: &Pod) -> Result<Ipv4Addr> {
    let ip: Ipv4Addr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .with_context(|| format!("pod {} has no IP", pod.name_any()))?
        .parse()
        .with_context(|| format!("pod {} IP", pod.name_any()))?;
    node.check_route(ip).await?;
    Ok(ip)
}

/// The router sidecar's `/routes` (admin port 9901 of the pod at `ip`).
pub async fn routes(ip: Ipv4Addr) -> Result<Value> {
    let admin = RouterClient::new(SocketAddr::new(
        ip.into(),
        switchyard_protocol::ports::ADMIN,
    ));
    let a = admin.get("/routes").await?;
    ensure!(a.status == 200, "/routes answered {}: {}", a.status, a.body);
    serde_json::from_str(&a.body).context("/routes is not JSON")
}

/// The endpoints (`ip:port`) the table routes `event` to, sorted.
pub fn route_endpoints(table: &Value, event: &str) -> Result<Vec<String>> {
    let Some(route) = table["routes"]
        .as_array()
        .context("no routes array")?
        .iter()
        .find(|r| r["eventType"] == event)
    else {
        bail!("no route for {event}: {table}");
    };
    let mut eps: Vec<String> = route["endpoints"]
        .as_array()
        .context("no endpoints array")?
        .iter()
        .filter_map(|e| e["address"].as_str().map(str::to_owned))
        .collect();
    eps.sort();
    Ok(eps)
}

/// `ip:7070` of each pod, sorted: what a router's table lists for them.
pub fn frame_endpoints(pods: &[Pod]) -> Vec<String> {
    let mut eps: Vec<String> = pods
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("{ip}:{}", switchyard_protocol::ports::MANAGER_INBOUND))
        .collect();
    eps.sort();
    eps
}
