//! Durable routes in a cluster, end to end: the real operator (with `--jetstream-url` of a real
//! nats-server) serves the routing table of a Router with two Managers, `queue` (delivery durable,
//! at zero replicas) and `shop` (direct, a publisher only). A manager sidecar run locally with
//! `shop`'s config as the operator rendered it (its ConfigMap) and following the operator's control
//! plane, as a pod's sidecar does, gets the JetStream servers and learns from its route that
//! `orders.created` is durable: its app's publish through the local API lands in `queue`'s stream
//! (read back here) and is answered 202 once stored. Turning `queue` direct changes the route with
//! the next table, and the publish no longer goes to the stream.

use anyhow::{Context, Result, bail, ensure};
use async_nats::jetstream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::Value;
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::nats::NatsServer;
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::sidecar::ManagerSidecar;
use switchyard_e2e::{
    Operator, OperatorOpts, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_protocol::durable::{self as plan, Lane};

const EVENT: &str = "orders.created";

/// The `orders.created` route of the sidecar's `/routes`, once it satisfies `ok`.
async fn route_where(
    sidecar: &ManagerSidecar,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    eventually(what, timeout(), || async {
        let table = sidecar.routes().await?;
        let route = table["routes"]
            .as_array()
            .context("no routes array")?
            .iter()
            .find(|r| r["eventType"] == EVENT)
            .cloned()
            .with_context(|| format!("no route for {EVENT}: {table}"))?;
        ensure!(ok(&route), "{route}");
        Ok(route)
    })
    .await
}

/// Messages in `queue`'s stream now.
async fn stored(js: &jetstream::Context, ns: &str) -> Result<u64> {
    let mut s = js.get_stream(plan::stream_name(ns, "queue")).await?;
    Ok(s.info().await?.state.messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_another_managers_durable_type_lands_in_its_stream() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let nats = NatsServer::start("durable-routes").await?;
    let ns = TestNamespace::create(c, "durable-routes").await?;
    let cp_port = free_port()?;
    let opts = OperatorOpts {
        control_plane_port: Some(cp_port),
        extra_args: vec![format!("--jetstream-url={}", nats.url())],
        ..OperatorOpts::new("e2e-durable-routes")
    };
    let op = Operator::start(c, opts).await?;
    let manifests = format!(
        "{}---\n{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager(
            "queue",
            "edge",
            &format!("[{EVENT}]"),
            "  replicas: 0\n  delivery: durable\n"
        ),
        fixtures::manager("shop", "edge", "[shop.checkout]", "  replicas: 0\n"),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;

    let mut sidecar = None;
    let result = async {
        // The publisher's config as the operator renders it: the servers, though `shop` has no
        // durable type of its own.
        let maps = Api::<ConfigMap>::namespaced(client.clone(), &ns.name);
        let config: Value = eventually("shop's rendered config", timeout(), || async {
            let cm = maps.get("shop-manager-config").await?;
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get(switchyard_protocol::config::FILE_NAME))
                .context("no config.json")?;
            Ok(serde_json::from_str::<Value>(text)?)
        })
        .await?;
        ensure!(config["jetstream"]["url"] == nats.url(), "{config}");
        ensure!(config.get("durableEvents").is_none(), "{config}");
        let s = sidecar.insert(
            ManagerSidecar::start_rendered(config, &format!("http://127.0.0.1:{cp_port}")).await?,
        );

        // The control plane's route says the type is durable.
        let route = route_where(s, "a durable route from the control plane", |r| {
            r["manager"] == "queue" && r.get("durable").is_some()
        })
        .await?;
        ensure!(route["endpoints"] == serde_json::json!([]), "{route}");

        let js = jetstream::new(async_nats::connect(nats.url()).await?);
        let local = RouterClient::new(([127, 0, 0, 1], s.local_api_port).into());
        let path = format!("/v1/publish/{EVENT}");
        let body = r#"{"order":1}"#;
        let a = local.post(&path, body).await?;
        ensure!(a.status == 202, "publish: {} {}", a.status, a.body);
        // Stored when the 202 came (it waits for the PubAck).
        ensure!(stored(&js, &ns.name).await? == 1, "not in the stream");
        let id: Value = serde_json::from_str(&a.body)?;
        let stream = js.get_stream(plan::stream_name(&ns.name, "queue")).await?;
        let m = stream
            .get_last_raw_message_by_subject(&plan::subject(
                &ns.name,
                "queue",
                EVENT,
                Lane::Unordered,
            ))
            .await?;
        ensure!(&m.payload[..] == body.as_bytes(), "payload {:?}", m.payload);
        // Stored under the ce-id it answered; the stream's dedupe id is that key scoped to (type,
        // publisher), never the bare key (issue 37: keys of other types and publishers collided).
        ensure!(
            m.headers.get("ce-id").map(|v| v.as_str()) == id["id"].as_str(),
            "ce-id {:?}, answered {id}",
            m.headers.get("ce-id")
        );
        let msg_id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned());
        ensure!(
            msg_id.as_deref().is_some_and(|m| m.starts_with("sy1-")
                && m.len() == 36
                && Some(m) != id["id"].as_str()),
            "Nats-Msg-Id {msg_id:?}, answered {id}"
        );

        // `queue` turns direct: the next table says so, and the publish no longer goes to the
        // stream (it has no pod to go to: refused, 503).
        c.kubectl()
            .args(["patch", "manager", "queue", "-n", &ns.name, "--type=merge"])
            .args(["-p", r#"{"spec":{"delivery":"direct"}}"#])
            .ok()
            .await?;
        route_where(s, "the route direct again", |r| r.get("durable").is_none()).await?;
        let a = local.post(&path, body).await?;
        ensure!(
            a.status == 503,
            "direct publish with no pod: {} {}",
            a.status,
            a.body
        );
        ensure!(
            stored(&js, &ns.name).await? == 1,
            "a direct publish in the stream"
        );
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        bail!(
            "{e:#}\n--- publisher sidecar ---\n{}\n--- operator ---\n{}\n--- nats-server ---\n{}",
            sidecar.as_ref().map(|s| s.log_tail(30)).unwrap_or_default(),
            op.log_tail(40),
            nats.log_tail(20)
        );
    }
    op.stop().await?;
    Ok(())
}
