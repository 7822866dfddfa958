//! Real pods on the kubelet node: their state, addresses and the routers' tables, as the tests of
//! `tests/pods.rs` look at them.

use crate::node::Node;
use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::net::Ipv4Addr;

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

/// Ok when container `name` of the pod names the image `image` in its spec and the node pulled
/// exactly `digest` for it: the kubelet reports a pulled image's id as
/// `<repository>@<manifest digest>`, while an image imported into containerd has no repository digest.
/// (The status's `image` is no help: for a reference by digest containerd reports the config's id.)
pub fn check_pulled(pod: &Pod, name: &str, image: &str, digest: &str) -> Result<()> {
    let spec = pod.spec.clone().unwrap_or_default();
    let named = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.image.clone())
        .with_context(|| format!("pod {} has no container {name}", pod.name_any()))?;
    ensure!(
        named == image,
        "container {name} of pod {} names {named:?}, not {image}",
        pod.name_any()
    );
    let status = pod.status.clone().unwrap_or_default();
    let c = status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .find(|c| c.name == name)
        .with_context(|| format!("pod {} has no status of container {name}", pod.name_any()))?;
    ensure!(
        c.image_id.ends_with(&format!("@{digest}")),
        "container {name} of pod {} runs the image {:?}, not one pulled by its digest {digest}",
        pod.name_any(),
        c.image_id
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

/// The router sidecar's `/routes`, read through a port-forward to admin port 9901 of pod `name`:
/// the sidecar serves its table to loopback clients only, and a port-forward arrives on the pod's
/// loopback (through the API server, the kubelet and containerd, as `kubectl port-forward` does).
pub async fn routes(client: &kube::Client, ns: &str, name: &str) -> Result<Value> {
    let port = switchyard_protocol::ports::ADMIN;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut forward = pods
        .portforward(name, &[port])
        .await
        .with_context(|| format!("port-forward to {ns}/{name}:{port}"))?;
    let stream = forward
        .take_stream(port)
        .with_context(|| format!("port-forward to {ns}/{name} has no stream for {port}"))?;
    let answer = get_over(stream, "/routes").await;
    forward.abort();
    let (status, body) = answer?;
    ensure!(status == 200, "/routes answered {status}: {body}");
    serde_json::from_str(&body).context("/routes is not JSON")
}

/// One HTTP/1.1 `GET path` over `stream`: the status and the body as text.
async fn get_over<S>(stream: S, path: &str) -> Result<(u16, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake over the port-forward")?;
    let driver = tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .body(Empty::<Bytes>::new())
        .context("request")?;
    let answer = async {
        let resp = sender
            .send_request(request)
            .await
            .context("GET over the port-forward")?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.context("body")?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
    .await;
    driver.abort();
    answer
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
