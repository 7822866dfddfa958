//! Scale to zero and back, end to end: a Manager at zero replicas, a real router sidecar process
//! following the real operator's control plane, and one HTTP request. The router holds it and
//! activates; the operator scales the Manager from 0 to 1; kwok runs the pod on a node whose pod
//! CIDR is a loopback address (`switchyard_e2e::loopback`), where a real manager sidecar and the
//! example app listen; the table brings that endpoint and the held request is answered 200. With
//! no more load the Manager returns to zero after the stabilization window.
//!
//! Two operator replicas run, as the chart deploys them, and the router follows the standby: its
//! activation must reach the leader's autoscaler through the standby's forwarding.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::operator::{OperatorLock, http_get_within};
use switchyard_e2e::sidecar::{ManagerSidecar, RouterSidecar};
use switchyard_e2e::{
    Cluster, Replicas, TestNamespace, cluster, eventually, fixtures, loopback, timeout,
};
use switchyard_protocol::ports::MANAGER_INBOUND;

/// The loose correctness bound for the whole path (request to answer) on a noisy shared machine.
const BOUND: Duration = Duration::from_secs(15);

const SCALING: &str = "  replicas: 0
  scaling:
    enabled: true
    minReplicas: 0
    maxReplicas: 2
    targets:
      noop: {targetInFlight: 10}
    scaleUp: {stableWindow: 6s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 6s}
";

fn endpoints(routes: &serde_json::Value) -> Option<Vec<serde_json::Value>> {
    routes["routes"]
        .as_array()?
        .iter()
        .find(|r| r["eventType"] == "noop")?["endpoints"]
        .as_array()
        .cloned()
}

/// Applies Router `edge` and Manager `lazy` (handling `events`, a flow sequence, with `spec` lines
/// after the loopback template's) in `ns`, and waits until lazy's Deployment is at zero.
async fn apply_lazy(
    c: &Cluster,
    client: &kube::Client,
    ns: &str,
    events: &str,
    spec: &str,
) -> Result<()> {
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager(
            "lazy",
            "edge",
            events,
            &format!("{}{spec}", loopback::TEMPLATE_LINES)
        ),
    );
    c.kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(client, ns, "lazy-manager", 0).await?;
    Ok(())
}

/// Fails unless a `ScaledUp` Event in `ns` says the Manager went from 0 to 1 on an activation.
async fn scaled_up_by_activation(client: &kube::Client, ns: &str) -> Result<()> {
    let events = Api::<Event>::namespaced(client.clone(), ns);
    let notes: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ScaledUp"))
        .filter_map(|e| e.note.clone())
        .collect();
    ensure!(
        notes
            .iter()
            .any(|n| n.contains("from 0 to 1") && n.contains("activation")),
        "ScaledUp notes: {notes:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_manager_at_zero_is_held_scaled_up_for_and_answered() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let pod_ip = loopback::ensure_node(&client).await?;
    let ns = TestNamespace::create(c, "zero").await?;
    // The pod's address, served by real processes on this host before the pod exists.
    let manager = ManagerSidecar::start(
        &ns.name,
        "lazy",
        "edge",
        &["noop"],
        SocketAddr::new(pod_ip.into(), MANAGER_INBOUND),
    )
    .await?;
    let ops = Replicas::start(c, "e2e-zero").await?;
    apply_lazy(c, &client, &ns.name, "[noop]", SCALING).await?;
    let router = RouterSidecar::start(&ns.name, "edge", &ops.standby_url()).await?;
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);

    let result = async {
        eventually("the noop route with no endpoint", timeout(), || async {
            let r = router.routes().await?;
            let eps = endpoints(&r).context("no noop route yet")?;
            ensure!(eps.is_empty(), "endpoints {eps:?}");
            Ok(())
        })
        .await?;
        ensure!(managers.get("lazy").await?.spec.replicas == 0);

        let sent = Instant::now();
        let port = router.http_port;
        let request =
            tokio::spawn(async move { http_get_within(port, "/noop", Duration::from_secs(40)).await });
        eventually("the Manager scaled from zero", BOUND, || async {
            let n = managers.get("lazy").await?.spec.replicas;
            ensure!(n >= 1, "lazy has {n} replicas");
            Ok(())
        })
        .await?;
        let scaled = sent.elapsed();
        let want = format!("{pod_ip}:{MANAGER_INBOUND}");
        eventually("the pod's loopback endpoint connected", BOUND, || async {
            let r = router.routes().await?;
            let eps = endpoints(&r).context("no noop route")?;
            ensure!(
                eps.iter()
                    .any(|e| e["address"] == want.as_str() && e["connected"] == true),
                "endpoints {eps:?}"
            );
            Ok(())
        })
        .await?;
        let connected = sent.elapsed();
        let (status, body) = request.await??;
        let answered = sent.elapsed();
        println!(
            "scale from zero: replicas written after {scaled:?}, endpoint connected after {connected:?}, answered after {answered:?}"
        );
        ensure!(status == 200, "the held request got {status}: {body}");
        ensure!(answered < BOUND, "answered only after {answered:?}");

        scaled_up_by_activation(&client, &ns.name).await?;
        let forwarded = ops.standby.metrics().await?.sum_where(
            "switchyard_operator_control_plane_forwarded_total",
            "kind",
            "activation",
        );
        ensure!(forwarded >= 1.0, "the standby forwarded {forwarded} activations");

        // Idle again: back to zero once the stable and stabilization windows have passed.
        let idle = Instant::now();
        eventually("the Manager back at zero", timeout(), || async {
            let n = managers.get("lazy").await?.spec.replicas;
            ensure!(n == 0, "lazy has {n} replicas");
            Ok(())
        })
        .await?;
        println!("back to zero {:?} after the answer", idle.elapsed());
        wait_rolled_out(&client, &ns.name, "lazy-manager", 0).await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        bail!(
            "{e:#}\n--- router log ---\n{}\n--- manager log ---\n{}\n{}",
            router.log_tail(30),
            manager.log_tail(20),
            ops.log_tails(40)
        );
    }
    ops.stop().await?;
    Ok(())
}

/// A subscriber at zero replicas, activated by an app's publish: the publishing manager sidecar
/// (following the real control plane, as a pod's does) holds the publish, asks the operator for a
/// pod of the subscribing Manager, and answers 202 only once that pod admitted its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_a_subscriber_at_zero_activates_it_and_is_delivered() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let pod_ip = loopback::ensure_node(&client).await?;
    let ns = TestNamespace::create(c, "zerosub").await?;
    // The subscriber's pod address, served by real processes here before the pod exists.
    let subscriber = ManagerSidecar::start_config(
        serde_json::json!({
            "name": "lazy",
            "namespace": ns.name,
            "router": "edge",
            "events": ["audit.other"],
            "subscriptions": [{"event": "orders.*"}],
            "app": {"port": 0, "protocol": "http", "path": "/events"},
            "workers": {"maxInFlight": 16, "queueCapacity": 64, "timeout": "5s"},
            "split": "shared",
        }),
        SocketAddr::new(pod_ip.into(), MANAGER_INBOUND),
    )
    .await?;
    let ops = Replicas::start(c, "e2e-zerosub").await?;
    let scaling = "  replicas: 0
  subscriptions:
    - event: orders.*
  scaling:
    enabled: true
    minReplicas: 0
    maxReplicas: 2
    targets:
      audit.other: {targetInFlight: 10}
      orders.*: {targetInFlight: 10}
    scaleUp: {stableWindow: 6s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 6s}
";
    apply_lazy(c, &client, &ns.name, "[audit.other]", scaling).await?;
    // The publishing app's sidecar, following the standby as a pod's sidecar of Manager `shop` would.
    let publisher = ManagerSidecar::start_rendered(
        serde_json::json!({
            "name": "shop",
            "namespace": ns.name,
            "router": "edge",
            "events": ["noop"],
            "app": {"port": 0, "protocol": "http", "path": "/events"},
            "workers": {"maxInFlight": 16, "queueCapacity": 64, "timeout": "5s"},
            "split": "shared",
        }),
        &ops.standby_url(),
    )
    .await?;
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);

    let result = async {
        eventually("the publisher's table has lazy's subscription", timeout(), || async {
            let r = publisher.routes().await?;
            ensure!(r.to_string().contains("orders.*@lazy"), "routes {r}");
            Ok(())
        })
        .await?;
        ensure!(managers.get("lazy").await?.spec.replicas == 0);
        let delivered_before = requests_of(subscriber.admin_port, "orders.*").await?;

        let sent = Instant::now();
        let local_api = RouterClient::new(SocketAddr::from(([127, 0, 0, 1], publisher.local_api_port)));
        let publish = tokio::spawn(async move {
            local_api
                .send(
                    "POST",
                    "/v1/publish/orders.created",
                    Some(r#"{"order":7}"#),
                    Duration::from_secs(40),
                )
                .await
        });
        eventually("lazy scaled from zero", BOUND, || async {
            let n = managers.get("lazy").await?.spec.replicas;
            ensure!(n >= 1, "lazy has {n} replicas");
            Ok(())
        })
        .await?;
        let scaled = sent.elapsed();
        let answer = publish.await??;
        let answered = sent.elapsed();
        println!("subscriber from zero: replicas written after {scaled:?}, publish answered after {answered:?}");
        ensure!(answer.status == 202, "the held publish got {}: {}", answer.status, answer.body);
        eventually("lazy's app got the copy", BOUND, || async {
            let n = requests_of(subscriber.admin_port, "orders.*").await?;
            ensure!(n >= delivered_before + 1.0, "lazy delivered {n}, {delivered_before} before");
            Ok(())
        })
        .await?;
        scaled_up_by_activation(&client, &ns.name).await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        bail!(
            "{e:#}\n--- publisher log ---\n{}\n--- subscriber log ---\n{}\n{}",
            publisher.log_tail(30),
            subscriber.log_tail(20),
            ops.log_tails(40)
        );
    }
    ops.stop().await?;
    Ok(())
}

/// `switchyard_requests_total` of `label` on the manager sidecar whose admin port is `admin_port`.
async fn requests_of(admin_port: u16, label: &str) -> Result<f64> {
    let (code, text) = http_get_within(admin_port, "/metrics", Duration::from_secs(10)).await?;
    ensure!(code == 200, "/metrics answered {code}");
    let needle = format!("event=\"{label}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("switchyard_requests_total{") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}
