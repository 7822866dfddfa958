//! Durable delivery through the chart's JetStream on the real node, behind the mesh's identity:
//! the servers take only mesh certificates, and each Manager's certificate is the NATS user the
//! operator wrote for it from its Router's table. The Managers are created after the servers
//! started, so their users reach the servers only through the reloader (no restart).

use super::{Env, ROUTER_PODS, check_running_on, live_pods, node_namespace, pod_metrics, sample};
use anyhow::{Context, Result, ensure};
use async_nats::jetstream;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::mesh_nats::{TRUST_DOMAIN, certified, connect};
use switchyard_e2e::pod_operator::{NAMESPACE, RELEASE};
use switchyard_e2e::pods::routed_ip;
use switchyard_e2e::{eventually, timeout};
use switchyard_identity::{Ca, CertStore};
use switchyard_protocol::durable::{self as plan, Lane};
use switchyard_protocol::nats_access;

/// `front` turns `POST /publish` into a publish of `data.event` through its local API; `orders`
/// handles `echo`, durably, and `audit` subscribes to it durably (a copy kept in its own stream).
const MANIFESTS: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  listeners: {http: {port: 8080}}
  routes:
    - event: publish
      http: {method: POST, path: /publish}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: front}
spec:
  routerRef: {name: edge}
  events: [publish]
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
          command: [switchyard-example-app, --port, "8000"]
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: orders}
spec:
  routerRef: {name: edge}
  events: [echo]
  delivery: durable
  # Scaled, so the operator reads its backlog from JetStream under its own (read-only) NATS user.
  scaling: {enabled: true, minReplicas: 1, maxReplicas: 1, targets: {echo: {targetInFlight: 32}}}
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
          command: [switchyard-example-app, --port, "8000"]
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: audit}
spec:
  routerRef: {name: edge}
  events: [audit.noop]
  subscriptions:
    - {event: echo, delivery: durable}
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
          command: [switchyard-example-app, --port, "8000"]
"#;

pub(super) async fn durable_through_the_charts_jetstream(env: &'static Env) -> Result<()> {
    let ns = node_namespace(env, "durable").await?;
    let started = std::time::Instant::now();
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f", "-"])
        .stdin(MANIFESTS.to_owned())
        .ok()
        .await?;
    let client = env.cluster.client().await?;
    let pod_of = |selector: String| {
        let (client, ns, node) = (client.clone(), ns.name.clone(), env.node.name.clone());
        async move {
            eventually(&format!("a Ready pod of {selector}"), timeout(), || async {
                let pods = live_pods(&client, &ns, &selector).await?;
                ensure!(pods.len() == 1, "{} pods", pods.len());
                check_running_on(&pods[0], &node)?;
                Ok(pods[0].clone())
            })
            .await
        }
    };
    let router = pod_of(ROUTER_PODS.to_owned()).await?;
    let orders = pod_of("switchyard.dev/manager=orders".to_owned()).await?;
    let orders_ip = routed_ip(&env.node, &orders).await?;
    let audit = pod_of("switchyard.dev/manager=audit".to_owned()).await?;
    let audit_ip = routed_ip(&env.node, &audit).await?;
    let http = RouterClient::new(SocketAddr::new(
        routed_ip(&env.node, &router).await?.into(),
        8080,
    ));
    let delivered_at = |ip| async move {
        let m = pod_metrics(ip, switchyard_protocol::ports::ADMIN).await?;
        Ok::<f64, anyhow::Error>(sample(
            &m,
            "switchyard_requests_total",
            &[("event", "echo"), ("status", "200")],
        ))
    };
    let publish = |n: u32| {
        let http = &http;
        async move {
            let body = format!(r#"{{"event":"echo","data":{{"n":{n}}}}}"#);
            let a = http.post("/publish", &body).await?;
            ensure!(a.status == 202, "POST /publish: {} {}", a.status, a.body);
            Ok(())
        }
    };
    // 202 once front's user is loaded by the servers (the operator's write, the kubelet's update of
    // the mounted Secret, the reloader's SIGHUP): until then the store is refused and retried here.
    // The kubelet refreshes a mounted Secret on its pod's next sync, up to its sync period (1 min by
    // default) later, so this waits up to three of the usual timeouts.
    eventually("a durable publish answered 202", timeout() * 3, || {
        publish(1)
    })
    .await?;
    // The handler's event and the subscriber's copy, each from its own stream, through the NATS
    // users the operator wrote (front may store into both streams; each consumes its own).
    for (who, ip) in [("orders", orders_ip), ("audit", audit_ip)] {
        eventually(
            &format!("{who}'s app to receive the stored echo"),
            timeout(),
            || async {
                let n = delivered_at(ip).await?;
                ensure!(n >= 1.0, "delivered {n}");
                Ok(())
            },
        )
        .await?;
    }
    eprintln!(
        "[e2e] a durable publish through the chart's JetStream was stored and delivered {:.1}s after the Managers were applied",
        started.elapsed().as_secs_f64()
    );

    // The status says what a 202 promises here: one server (the node's), over TLS; and the
    // operator reads orders' backlog over TLS as its own NATS user.
    let managers: Api<switchyard_crds::Manager> = Api::namespaced(client.clone(), &ns.name);
    for (type_, status, reason, says) in [
        (
            switchyard_crds::status::DURABILITY,
            "False",
            "FewReplicas",
            "1 replica",
        ),
        (switchyard_crds::status::BACKLOG_READ, "True", "Read", ""),
    ] {
        eventually(&format!("orders' {type_} condition"), timeout(), || async {
            let m = managers.get("orders").await?;
            let c = m
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == type_)
                .cloned()
                .with_context(|| format!("no {type_} condition"))?;
            ensure!(
                c.status == status && c.reason == reason && c.message.contains(says),
                "{type_}: {} {} {}",
                c.status,
                c.reason,
                c.message
            );
            Ok(())
        })
        .await?;
    }

    // The operator's users: one per Manager of this namespace that uses JetStream.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let access = secrets
        .get(&format!("{RELEASE}-nats-access"))
        .await
        .context("the operator's JetStream access Secret")?;
    let text = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .with_context(|| format!("no {key} in Secret {:?}", s.metadata.name))
    };
    let conf = text(&access, "access.conf")?;
    for m in ["front", "orders", "audit"] {
        let user = format!("spiffe://{TRUST_DOMAIN}/ns/{}/manager/{m}", ns.name);
        ensure!(conf.contains(&user), "no NATS user {user} in:\n{conf}");
    }

    // Strangers at the servers' own address: no certificate, no connection; front's certificate
    // (made here from the mesh CA, as its sidecar's is) cannot touch orders' stream or consumer.
    let nats = live_pods(&client, NAMESPACE, "app.kubernetes.io/name=switchyard-nats")
        .await?
        .into_iter()
        .next()
        .context("no NATS pod")?;
    let url = format!("tls://{}:4222", routed_ip(&env.node, &nats).await?);
    let ca_secret = secrets
        .get("switchyard-ca")
        .await
        .context("the CA Secret")?;
    let ca = Ca::from_pem(
        &text(&ca_secret, "tls.crt")?,
        &text(&ca_secret, "tls.key")?,
        None,
    )
    .map_err(|e| anyhow::anyhow!("the mesh CA: {e}"))?;
    let none = connect(&url, &ca, Arc::new(CertStore::default()), "_X").await;
    ensure!(none.is_err(), "a client without a certificate connected");
    let front = certified(&ca, &ns.name, "front")?;
    let (nc, errors) = connect(
        &url,
        &ca,
        front,
        &nats_access::inbox_prefix(&ns.name, "front"),
    )
    .await
    .context("front's certificate could not connect")?;
    let stream = plan::stream_name(&ns.name, "orders");
    let consumer = plan::consumer_name("echo", Lane::Unordered);
    for subject in [
        format!("$JS.API.STREAM.DELETE.{stream}"),
        format!("$JS.API.STREAM.PURGE.{stream}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
    ] {
        nc.publish(subject.clone(), bytes::Bytes::new()).await?;
        eventually(
            &format!("a permissions violation for {subject}"),
            Duration::from_secs(10),
            || async {
                let seen = errors.lock().map(|e| e.clone()).unwrap_or_default();
                ensure!(
                    seen.iter()
                        .any(|e| e.to_ascii_lowercase().contains("permissions violation")
                            && e.contains(&subject)),
                    "server errors so far: {seen:?}"
                );
                Ok(())
            },
        )
        .await?;
    }
    // What front's table routes is allowed: the stream survived, and delivery goes on.
    let js = jetstream::new(nc);
    js.publish(
        plan::subject(&ns.name, "orders", "echo", Lane::Unordered),
        bytes::Bytes::from_static(b"{}"),
    )
    .await?
    .await
    .context("front's certificate could not store echo in orders' stream")?;
    let before = delivered_at(orders_ip).await?;
    publish(2).await?;
    eventually("orders to receive the next echo", timeout(), || async {
        let n = delivered_at(orders_ip).await?;
        ensure!(n > before, "delivered {n}, {before} before");
        Ok(())
    })
    .await?;
    eprintln!(
        "[e2e] the chart's JetStream refused a client without a certificate and front's certificate on orders' stream and consumer"
    );
    Ok(())
}
