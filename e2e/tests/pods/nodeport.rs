//! A Router reachable from outside the cluster (docs/edge.md): `examples/nodeport.yaml` on the real
//! node, reached from this host, outside the node's network namespace, at the node's address and
//! node port 30080, through kube-proxy. With `externalTrafficPolicy: Local` the router sees this
//! host's own address (the host end of the veth), in its rate limit and in its access log.

use super::{Env, node_namespace, ready_router_pod};
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr};
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::{Cmd, eventually, repo_root, timeout};

/// The node port `examples/nodeport.yaml` fixes for the HTTP listener.
const NODE_PORT: u16 = 30080;

/// This host's address towards `ip` (the `src` of its route), as a peer in the node sees it.
async fn source_address(ip: Ipv4Addr) -> Result<Ipv4Addr> {
    let out = Cmd::new("ip")
        .args(["-o", "route", "get"])
        .arg(ip.to_string())
        .ok()
        .await?;
    let words: Vec<&str> = out.stdout.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "src")
        .and_then(|w| w[1].parse().ok())
        .with_context(|| format!("no src in `ip route get {ip}`: {}", out.stdout.trim()))
}

/// The router sidecar's access lines so far: (client, path, status).
async fn access_lines(env: &Env, ns: &str, pod: &str) -> Result<Vec<(String, String, u64)>> {
    let logs = env
        .cluster
        .kubectl()
        .args(["-n", ns, "logs", pod, "-c", "switchyard-sidecar"])
        .ok()
        .await?;
    Ok(logs
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "access")
        .map(|l| {
            let f = &l["fields"];
            (
                f["client"].as_str().unwrap_or_default().to_owned(),
                f["path"].as_str().unwrap_or_default().to_owned(),
                f["status"].as_u64().unwrap_or_default(),
            )
        })
        .collect())
}

pub(super) async fn nodeport_router_reached_from_outside_the_node(env: &'static Env) -> Result<()> {
    let ns = node_namespace(env, "nodeport").await?;
    // The example as shipped, with a rate limit a short burst empties.
    let example = std::fs::read_to_string(repo_root().join("examples/nodeport.yaml"))?;
    let manifest = example
        .replace("requestsPerSecond: 50", "requestsPerSecond: 1")
        .replace("burst: 100", "burst: 5");
    ensure!(
        manifest != example,
        "examples/nodeport.yaml has no rate limit of 50/s, burst 100 to tighten"
    );
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f", "-"])
        .stdin(manifest)
        .ok()
        .await?;
    let client = env.cluster.client().await?;
    let router = ready_router_pod(env, &client, &ns.name).await?;

    // The Service the operator made from spec.service.
    let svc = Api::<Service>::namespaced(client.clone(), &ns.name)
        .get("edge-router")
        .await?;
    let spec = svc.spec.clone().unwrap_or_default();
    ensure!(
        spec.type_.as_deref() == Some("NodePort")
            && spec.external_traffic_policy.as_deref() == Some("Local"),
        "Service edge-router: type {:?}, externalTrafficPolicy {:?}",
        spec.type_,
        spec.external_traffic_policy
    );
    let http_port = spec
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("http"))
        .and_then(|p| p.node_port);
    ensure!(
        http_port == Some(i32::from(NODE_PORT)),
        "Service edge-router's http node port is {http_port:?}"
    );

    // From this host, outside the node's network namespace, to the node's own address.
    env.node.check_route(env.node.ip).await?;
    let me = source_address(env.node.ip).await?;
    let http = RouterClient::new(SocketAddr::new(env.node.ip.into(), NODE_PORT));
    let first = eventually(
        &format!("GET {}:{NODE_PORT}/noop answered 200", env.node.ip),
        timeout(),
        || async {
            let a = http.get("/noop").await?;
            ensure!(a.status == 200, "GET /noop: {} {}", a.status, a.body);
            Ok(a)
        },
    )
    .await?;
    let timing = first.server_timing.clone().unwrap_or_default();
    ensure!(
        timing.contains("app;dur="),
        "GET /noop through the node port: Server-Timing {timing:?}"
    );
    eprintln!(
        "[e2e] curl http://{}:{NODE_PORT}/noop from outside the node: 200, Server-Timing {timing}",
        env.node.ip
    );

    // The rate limit keys on this host's address: a burst past 5 is refused.
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(http.get("/noop").await?.status);
    }
    ensure!(
        statuses.contains(&429),
        "10 requests at once past a burst of 5 got {statuses:?}"
    );

    // The access log names this host, not the node, for both the answered and the refused.
    let pod = router.name_any();
    let lines = eventually("the access log's 200 and 429", timeout(), || async {
        let lines = access_lines(env, &ns.name, &pod).await?;
        ensure!(
            [200, 429].iter().all(|s| lines.iter().any(|l| l.2 == *s)),
            "access lines {lines:?}"
        );
        Ok(lines)
    })
    .await?;
    ensure!(
        lines
            .iter()
            .all(|(client, path, _)| client == &me.to_string() && path == "/noop"),
        "access lines name another client than this host ({me}): {lines:?}"
    );
    eprintln!(
        "[e2e] the router saw the client as {me} (this host) in {} access lines, and limited it",
        lines.len()
    );
    Ok(())
}
