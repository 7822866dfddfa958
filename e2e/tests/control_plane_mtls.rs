//! The certified control plane end to end (issue 12: "a spoofed load report and an oversized one
//! are refused and counted"). Two operator replicas with mesh TLS, a leader and a standby, run
//! under a release of the chart with `meshTLS.enabled=true` (`src/mesh_release.rs`), so they have
//! exactly the rights the chart grants for certifying, against the real API server. The Manager's
//! pods exist as API objects on kwok nodes with their owner chain pod -> ReplicaSet -> Deployment ->
//! Manager, which is what certification checks.
//!
//! The test is a manager sidecar: it gets a token bound to one of the Manager's pods (TokenRequest,
//! audience `switchyard-identity`, as the kubelet projects it), trades it and a fresh key's request
//! for a certificate at `Identity.Certify` (trust bundle: the `ca.crt` the operator wrote into the
//! sidecar's ConfigMap), and calls the control plane with it over mTLS, the server checked to be the
//! operator: on the leader, and on the standby, which forwards reports to the leader over
//! operator-to-operator mTLS. Every refusal is printed as `[e2e] refused: ...` and must be counted
//! in the operators' metrics by reason.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use prost::Message;
use rustls_pki_types::CertificateDer;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_crds::Manager;
use switchyard_e2e::identity::{Certified, certify, channel, pod_token};
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::mesh_release::{self, MeshRelease};
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::{
    Metrics, OperatorOpts, Replicas, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_identity::TOKEN_AUDIENCE;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{
    ActivateRequest, EventLoad, LoadAck, LoadReport, RoutingTable, WatchRoutesRequest,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The Router whose table the Manager's sidecars may read.
const ROUTER: &str = "edge";
/// Another Router of the namespace, whose table they may not.
const OTHER_ROUTER: &str = "admin";
/// The Manager the test is a sidecar of.
const MANAGER: &str = "handlers";
/// Its one event type.
const EVENT: &str = "noop";
/// Frame port of manager sidecars, in the table's endpoints.
const FRAME_PORT: u16 = 7070;
/// The control plane's message limit (`operator::control_plane::caller::MAX_MESSAGE`).
const MAX_MESSAGE: usize = 64 * 1024;
/// In flight in the reports sent straight to the leader, and through the standby: different, so the
/// Manager's status tells which one the leader's autoscaler used.
const LEADER_IN_FLIGHT: u32 = 3;
const STANDBY_IN_FLIGHT: u32 = 7;

/// Two pods kept at two (a high target: the reports never ask for more), with short windows so the
/// reported figure shows in status within seconds.
const SPEC: &str = "  replicas: 2
  scaling:
    enabled: true
    minReplicas: 2
    maxReplicas: 3
    targets:
      noop: {targetInFlight: 1000}
    scaleUp: {stableWindow: 6s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 6s}
";

/// Checks that `answer` was refused with `code` and a message containing `message`, and prints the
/// refusal as the server gave it.
fn refused<T: std::fmt::Debug>(
    what: &str,
    answer: std::result::Result<T, Status>,
    code: Code,
    message: &str,
) -> Result<()> {
    let status = match answer {
        Ok(v) => bail!("{what}: expected a {code:?} refusal, got {v:?}"),
        Err(s) => s,
    };
    eprintln!(
        "[e2e] refused: {what}: {:?}: {}",
        status.code(),
        status.message()
    );
    ensure!(
        status.code() == code && status.message().contains(message),
        "{what}: expected {code:?} with {message:?}, got {:?}: {}",
        status.code(),
        status.message()
    );
    Ok(())
}

/// A status as an error (for calls that must succeed).
fn ok<T>(what: &str, answer: std::result::Result<T, Status>) -> Result<T> {
    answer.map_err(|s| anyhow::anyhow!("{what}: {:?}: {}", s.code(), s.message()))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A load report of `pod`, as the Manager's sidecar sends it, with `entries` entries for the
/// Manager's event type.
fn report(ns: &str, pod: &str, in_flight: u32, entries: usize) -> LoadReport {
    LoadReport {
        pod: pod.into(),
        namespace: ns.into(),
        role: "manager".into(),
        owner: MANAGER.into(),
        timestamp_ms: now_ms(),
        window_ms: 500,
        events: (0..entries)
            .map(|_| EventLoad {
                event_type: EVENT.into(),
                in_flight,
                arrivals_per_second: 1.0,
                latency_p50_ms: 2.0,
                latency_p99_ms: 5.0,
                ..EventLoad::default()
            })
            .collect(),
    }
}

/// One `ReportLoad` stream carrying `reports`, then ended: the server's acknowledgement or refusal.
async fn send(channel: &Channel, reports: Vec<LoadReport>) -> std::result::Result<LoadAck, Status> {
    ControlPlaneClient::new(channel.clone())
        .report_load(futures::stream::iter(reports))
        .await
        .map(tonic::Response::into_inner)
}

fn watch_request(ns: &str, router: &str, pod: &str) -> WatchRoutesRequest {
    WatchRoutesRequest {
        router: router.into(),
        namespace: ns.into(),
        pod: pod.into(),
        deltas: false,
        parts: false,
    }
}

/// Opens `WatchRoutes` for `router`.
async fn watch(
    channel: &Channel,
    ns: &str,
    router: &str,
    pod: &str,
) -> std::result::Result<tonic::Streaming<RoutingTable>, Status> {
    ControlPlaneClient::new(channel.clone())
        .watch_routes(watch_request(ns, router, pod))
        .await
        .map(tonic::Response::into_inner)
}

/// Checks that a client without a certificate gets nothing from the control plane at `url`: with
/// TLS 1.3 the client may finish its side of the handshake before the server refuses it, so the
/// refusal shows at the connect or at the first call.
async fn closed_without_certificate(
    what: &str,
    url: &str,
    trust: &[CertificateDer<'static>],
    ns: &str,
) -> Result<()> {
    let answer = match channel(url, trust, None).await {
        Err(e) => Err(format!("{e:#}")),
        Ok(anonymous) => watch(&anonymous, ns, ROUTER, "")
            .await
            .map(|_| ())
            .map_err(|s| format!("{:?}: {}", s.code(), s.message())),
    };
    match answer {
        Ok(()) => bail!("{what}: a client without a certificate got a routing table"),
        Err(e) => {
            eprintln!("[e2e] refused: {what} without a client certificate: {e}");
            Ok(())
        }
    }
}

/// Follows the own Router's table until its route lists exactly `want` (the Manager's Ready pods).
async fn own_table(channel: &Channel, ns: &str, pod: &str, want: &[String]) -> Result<()> {
    let mut stream = ok(
        "WatchRoutes of the own Router",
        watch(channel, ns, ROUTER, pod).await,
    )?;
    loop {
        let table = tokio::time::timeout(timeout(), stream.message())
            .await
            .with_context(|| format!("no table listing {want:?} in time"))?
            .map_err(|s| anyhow::anyhow!("the table stream failed: {s}"))?
            .context("the table stream ended")?;
        ensure!(
            table.router == ROUTER && table.namespace == ns,
            "a table of {}/{}",
            table.namespace,
            table.router
        );
        let route = table
            .routes
            .iter()
            .find(|r| r.event_type == EVENT)
            .with_context(|| format!("no {EVENT} route: {table:?}"))?;
        ensure!(route.manager == MANAGER, "route {route:?}");
        let mut got: Vec<String> = route.endpoints.iter().map(|e| e.address.clone()).collect();
        got.sort();
        if got == want {
            return Ok(());
        }
    }
}

/// The Manager's pods, by name, each Ready with an IP.
async fn manager_pods(client: &kube::Client, ns: &str) -> Result<Vec<Pod>> {
    let mut pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("switchyard.dev/manager={MANAGER}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by_key(ResourceExt::name_any);
    for p in &pods {
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ensure!(ready, "pod {} is not Ready", p.name_any());
    }
    Ok(pods)
}

fn endpoint(pod: &Pod) -> Result<String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .with_context(|| format!("pod {} has no IP", pod.name_any()))?;
    Ok(format!("{ip}:{FRAME_PORT}"))
}

/// The pod is rendered to be certified: the projected token of the identity audience, and no
/// default API token.
fn check_rendered_for_identity(pod: &Pod) -> Result<()> {
    let spec = pod.spec.as_ref().context("pod without spec")?;
    ensure!(
        spec.automount_service_account_token == Some(false),
        "pod {} mounts the default API token",
        pod.name_any()
    );
    let audience = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .find_map(|s| s.service_account_token.as_ref())
        .and_then(|t| t.audience.clone());
    ensure!(
        audience.as_deref() == Some(TOKEN_AUDIENCE),
        "pod {}: projected token audience {audience:?}",
        pod.name_any()
    );
    Ok(())
}

/// The mesh trust bundle as a sidecar reads it: `ca.crt` of the Manager's ConfigMap, which must be
/// the certificate of the CA the operator made and stored in its namespace.
async fn trust_bundle(client: &kube::Client, ns: &str) -> Result<Vec<CertificateDer<'static>>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(&format!("{MANAGER}-manager-config"))
        .await?;
    let pem = cm
        .data
        .as_ref()
        .and_then(|d| d.get(switchyard_identity::TRUST_FILE))
        .context("the sidecar ConfigMap has no ca.crt")?;
    let trust = switchyard_identity::pem::parse_certs(pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("ca.crt: {e}"))?;
    let secret = Api::<Secret>::namespaced(client.clone(), mesh_release::NAMESPACE)
        .get(mesh_release::CA_SECRET)
        .await
        .context("the CA Secret the operator makes")?;
    ensure!(
        secret
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("switchyard-operator"),
        "the CA Secret was not made by the operator: {:?}",
        secret.labels()
    );
    let cert = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .context("the CA Secret has no tls.crt")?;
    let root = switchyard_identity::pem::parse_certs(&cert.0)
        .map_err(|e| anyhow::anyhow!("tls.crt: {e}"))?;
    ensure!(
        trust == root,
        "ca.crt in the sidecar ConfigMap is not the CA the operator keeps"
    );
    Ok(trust)
}

/// A plain pod in the namespace, owned by nothing, with the same ServiceAccount.
async fn plain_pod(client: &kube::Client, ns: &str) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "app", "image": "ghcr.io/switchyard-dev/switchyard-example-app:0.1.0"}]},
    }))?;
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?)
}

/// A pod whose owners lead to the Manager but which runs as another ServiceAccount (the
/// namespace's `default`): a Deployment of the admin's, owned by the Manager (the chart's policy
/// lets a cluster admin write that ownerReference; a namespace user is refused, see
/// tests/owner_references.rs), without the operator's labels, so the operator neither watches nor
/// prunes it. Its pod need not run: certifying reads it, not its containers.
async fn impostor_pod(client: &kube::Client, ns: &str) -> Result<Pod> {
    let manager = Api::<Manager>::namespaced(client.clone(), ns)
        .get(MANAGER)
        .await?;
    let labels = serde_json::json!({"app": "impostor"});
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "impostor", "ownerReferences": [{
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Manager",
            "name": MANAGER,
            "uid": manager.uid().context("Manager without uid")?,
            "controller": true,
        }]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "default",
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "app", "image": "ghcr.io/switchyard-dev/switchyard-example-app:0.1.0"}],
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually("the impostor's pod", timeout(), || async {
        pods.list(&ListParams::default().labels("app=impostor"))
            .await?
            .items
            .into_iter()
            .next()
            .context("no pod yet")
    })
    .await
}

/// A refusal reason's count on a replica's `counter` (0 when absent).
fn count(m: &Metrics, counter: &str, reason: &str) -> f64 {
    m.samples(counter)
        .iter()
        .filter(|(l, _)| l.get("reason").map(String::as_str) == Some(reason))
        .map(|(_, v)| v)
        .sum()
}

/// Every reason of `counter` on `m` is in `want` with exactly that count (`handshake` at least).
fn check_counts(replica: &str, m: &Metrics, counter: &str, want: &[(&str, f64)]) -> Result<()> {
    for (reason, n) in want {
        let got = count(m, counter, reason);
        let fine = if *reason == "handshake" {
            got >= *n
        } else {
            got == *n
        };
        ensure!(
            fine,
            "{replica}: {counter}{{reason={reason:?}}} is {got}, want {n}; all: {:?}",
            m.samples(counter)
        );
    }
    for (labels, v) in m.samples(counter) {
        let reason = labels.get("reason").map(String::as_str).unwrap_or_default();
        ensure!(
            v == 0.0 || want.iter().any(|(r, _)| *r == reason),
            "{replica}: unexpected {counter}{{reason={reason:?}}} {v}"
        );
    }
    Ok(())
}

/// What the test does as the Manager's sidecar on one replica: its own table is served, another
/// Router's refused; a report for its own pod is taken, one naming the other pod and an oversized
/// one are refused.
async fn calls_as_the_manager(
    replica: &str,
    channel: &Channel,
    ns: &str,
    me: &Certified,
    sibling: &str,
    in_flight: u32,
    want: &[String],
) -> Result<()> {
    let mine = me
        .peer
        .pod
        .clone()
        .context("the certificate names no pod")?;
    let id = me.peer.id.uri();
    own_table(channel, ns, &mine, want).await?;
    refused(
        &format!("{replica} WatchRoutes of Router {OTHER_ROUTER}"),
        watch(channel, ns, OTHER_ROUTER, &mine).await,
        Code::PermissionDenied,
        &format!("{id} may not read the table of Router {ns}/{OTHER_ROUTER}"),
    )?;
    let ack = ok(
        &format!("{replica} ReportLoad of the own pod"),
        send(channel, vec![report(ns, &mine, in_flight, 1)]).await,
    )?;
    ensure!(ack.received == 1, "{replica}: {ack:?}");
    refused(
        &format!("{replica} ReportLoad naming pod {sibling}"),
        send(channel, vec![report(ns, sibling, 500, 1)]).await,
        Code::PermissionDenied,
        &format!("{id} is pod {mine:?}, not {sibling:?}"),
    )?;
    // Over the limit by its many entries, each in bounds: the size alone is refused.
    let big = report(ns, &mine, in_flight, 5000);
    ensure!(
        big.encoded_len() > MAX_MESSAGE,
        "{} bytes",
        big.encoded_len()
    );
    refused(
        &format!("{replica} ReportLoad of {} bytes", big.encoded_len()),
        send(channel, vec![big]).await,
        Code::OutOfRange,
        &format!("messages are limited to {MAX_MESSAGE} bytes"),
    )?;
    Ok(())
}

/// Reports `in_flight` for `pod` every 500 ms through `channel` (a sidecar's pace, not a wait for
/// anything) until `stop` fires; returns the acknowledgement of the ended stream.
fn pace_reports(
    channel: Channel,
    ns: String,
    pod: String,
    in_flight: u32,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<std::result::Result<LoadAck, Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<LoadReport>(4);
    let call = tokio::spawn(async move {
        ControlPlaneClient::new(channel)
            .report_load(ReceiverStream::new(rx))
            .await
            .map(tonic::Response::into_inner)
    });
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = every.tick() => {
                    if tx.send(report(&ns, &pod, in_flight, 1)).await.is_err() {
                        break;
                    }
                }
                _ = &mut stop => break,
            }
        }
        drop(tx);
        call.await
            .unwrap_or_else(|e| Err(Status::internal(format!("the report task failed: {e}"))))
    })
}

async fn checks(c: &switchyard_e2e::Cluster, ns: &str, ops: &Replicas) -> Result<()> {
    let client = c.client().await?;
    let manifests = format!(
        "{}---\n{}---\n{}",
        fixtures::router(ROUTER),
        fixtures::router(OTHER_ROUTER),
        fixtures::manager(MANAGER, ROUTER, "[noop]", SPEC),
    );
    c.kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, ns, &format!("{MANAGER}-manager"), 2).await?;
    let pods = eventually("the Manager's two pods Ready", timeout(), || async {
        let pods = manager_pods(&client, ns).await?;
        ensure!(pods.len() == 2, "{} pods", pods.len());
        Ok(pods)
    })
    .await?;
    let (mine, sibling) = (&pods[0], &pods[1]);
    let mut want = vec![endpoint(mine)?, endpoint(sibling)?];
    want.sort();
    check_rendered_for_identity(mine)?;
    let trust = trust_bundle(&client, ns).await?;
    let (leader_url, standby_url) = (
        ops.leader.control_plane_url(),
        ops.standby.control_plane_url(),
    );
    let (leader_identity, standby_identity) =
        (ops.leader.identity_url(), ops.standby.identity_url());
    ensure!(leader_url.starts_with("https://"), "{leader_url}");

    // Certified as the sidecar is: a token bound to its pod, a fresh key, Certify at the leader's
    // Identity port (the control plane's requires a certificate already).
    let token = pod_token(&client, mine, TOKEN_AUDIENCE).await?;
    let me = ok(
        "Certify with the pod's token",
        certify(channel(&leader_identity, &trust, None).await?, &token).await?,
    )?;
    let want_id = format!("spiffe://cluster.local/ns/{ns}/manager/{MANAGER}");
    ensure!(
        me.reply.identity == want_id && me.peer.id.uri() == want_id,
        "certified as {} (leaf {}), want {want_id}",
        me.reply.identity,
        me.peer.id
    );
    ensure!(
        me.peer.pod.as_deref() == Some(mine.name_any().as_str()),
        "the leaf names pod {:?}, not {}",
        me.peer.pod,
        mine.name_any()
    );
    let bundle: Vec<CertificateDer<'static>> = me
        .reply
        .trust_bundle
        .iter()
        .cloned()
        .map(CertificateDer::from)
        .collect();
    ensure!(bundle == trust, "the reply's trust bundle is not ca.crt");
    let lifetime = me.reply.not_after_ms.saturating_sub(now_ms());
    eprintln!(
        "[e2e] certified {want_id} pod {} for {} s",
        mine.name_any(),
        lifetime / 1000
    );

    // The leader: with the certificate, over mTLS.
    let leader = channel(&leader_url, &trust, Some(me.store.clone())).await?;
    calls_as_the_manager(
        "leader",
        &leader,
        ns,
        &me,
        &sibling.name_any(),
        LEADER_IN_FLIGHT,
        &want,
    )
    .await?;

    // Reports are checked beyond their origin: a figure out of bounds refuses the report, an entry
    // for an event type the Manager does not handle is dropped (and counted), the rest is taken.
    let mine_name = mine.name_any();
    refused(
        "leader ReportLoad with 2000000 in flight",
        send(&leader, vec![report(ns, &mine_name, 2_000_000, 1)]).await,
        Code::InvalidArgument,
        &format!("{EVENT}: in_flight 2000000 is more than 1000000"),
    )?;
    let mut mixed = report(ns, &mine_name, LEADER_IN_FLIGHT, 1);
    mixed.events.push(EventLoad {
        event_type: "orders.create".into(),
        in_flight: 900,
        ..EventLoad::default()
    });
    let ack = ok(
        "leader ReportLoad with an event type the Manager lacks",
        send(&leader, vec![mixed]).await,
    )?;
    ensure!(ack.received == 1, "{ack:?}");
    // A Manager's sidecar asks for a pod of a type scaled to zero only within its own Router (its
    // app's publishes); naming another Router is refused. (Before subscribers could be activated,
    // only a Router's sidecar could call Activate at all.)
    let activate = |router: &str| ActivateRequest {
        namespace: ns.to_owned(),
        router: router.into(),
        pod: mine_name.clone(),
        event_type: EVENT.into(),
        held: 1,
        manager: String::new(),
    };
    ok(
        "leader Activate by a Manager's sidecar within its Router",
        ControlPlaneClient::new(leader.clone())
            .activate(activate(ROUTER))
            .await,
    )?;
    refused(
        "leader Activate by a Manager's sidecar for another Router",
        ControlPlaneClient::new(leader.clone())
            .activate(activate("elsewhere"))
            .await,
        Code::PermissionDenied,
        &format!("{} may not activate for Router {ns}/elsewhere", me.peer.id),
    )?;

    // The standby: the same answers; what it takes it forwards to the leader over mTLS.
    let standby = channel(&standby_url, &trust, Some(me.store.clone())).await?;
    calls_as_the_manager(
        "standby",
        &standby,
        ns,
        &me,
        &sibling.name_any(),
        STANDBY_IN_FLIGHT,
        &want,
    )
    .await?;
    refused(
        &format!("standby ReportLoad as the router of {ROUTER}"),
        send(
            &standby,
            vec![LoadReport {
                role: "router".into(),
                owner: ROUTER.into(),
                ..report(ns, &mine_name, 500, 1)
            }],
        )
        .await,
        Code::PermissionDenied,
        &format!(
            "{} may not report load as the router of {ns}/{ROUTER}",
            me.peer.id
        ),
    )?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let pacer = pace_reports(
        standby.clone(),
        ns.to_owned(),
        mine_name.clone(),
        STANDBY_IN_FLIGHT,
        stopped,
    );
    let managers = Api::<Manager>::namespaced(client.clone(), ns);
    let shown = eventually(
        "the load reported through the standby in the Manager's status",
        timeout(),
        || async {
            let m = managers.get(MANAGER).await?;
            let e = m
                .status
                .as_ref()
                .and_then(|s| s.events.iter().find(|e| e.event == EVENT).cloned());
            let in_flight = e.as_ref().and_then(|e| e.in_flight);
            ensure!(
                in_flight == Some(f64::from(STANDBY_IN_FLIGHT)),
                "status of {EVENT}: {e:?}"
            );
            Ok(())
        },
    )
    .await;
    let _ = stop.send(());
    let ack = ok(
        "the paced report stream through the standby",
        pacer.await.context("the report task")?,
    )?;
    shown?;
    ensure!(ack.received >= 1, "{ack:?}");

    // No certificate: the control plane's TLS refuses the client (counted as `handshake`); the
    // Identity port, which takes it, serves nothing but Certify; and plain h2c gets no control
    // plane at all.
    closed_without_certificate("leader WatchRoutes", &leader_url, &trust, ns).await?;
    closed_without_certificate("standby WatchRoutes", &standby_url, &trust, ns).await?;
    refused(
        "WatchRoutes at the leader's Identity port",
        watch(
            &channel(&leader_identity, &trust, None).await?,
            ns,
            ROUTER,
            "",
        )
        .await,
        Code::Unimplemented,
        "",
    )?;
    // The control plane is TLS only: an h2c client's preface fails the handshake (counted as
    // `handshake`), and the client sees its connection closed, whatever code its library makes of that.
    let h2c = format!("http://127.0.0.1:{}", ops.leader.control_plane_port);
    let plain = match ControlPlaneClient::connect(h2c).await {
        Ok(mut client) => client
            .watch_routes(watch_request(ns, ROUTER, ""))
            .await
            .map(|_| ())
            .map_err(|s| format!("{:?}: {}", s.code(), s.message())),
        Err(e) => Err(format!("{e}: {:?}", std::error::Error::source(&e))),
    };
    match plain {
        Ok(()) => bail!("an h2c client got a routing table from the TLS-only control plane"),
        Err(e) => eprintln!("[e2e] refused: leader WatchRoutes over h2c: {e}"),
    }

    // Tokens that prove no mesh workload get no certificate.
    let plain = plain_pod(&client, ns).await?;
    let plain_token = pod_token(&client, &plain, TOKEN_AUDIENCE).await?;
    refused(
        "Certify with the token of a pod no Router or Manager owns",
        certify(channel(&leader_identity, &trust, None).await?, &plain_token)
            .await?
            .map(|c| c.peer),
        Code::PermissionDenied,
        "pod plain has no controller",
    )?;
    // Owned through the Manager's chain, but not running as the Manager's ServiceAccount.
    let impostor = impostor_pod(&client, ns).await?;
    let impostor_token = pod_token(&client, &impostor, TOKEN_AUDIENCE).await?;
    refused(
        "Certify with the token of a pod under the Manager that runs as another ServiceAccount",
        certify(
            channel(&leader_identity, &trust, None).await?,
            &impostor_token,
        )
        .await?
        .map(|c| c.peer),
        Code::PermissionDenied,
        &format!(
            "runs as ServiceAccount \"default\"; the pods of Manager {MANAGER} run as \"{MANAGER}-manager\""
        ),
    )?;
    let api_token = pod_token(&client, mine, "https://kubernetes.default.svc").await?;
    refused(
        "Certify with the pod's token for another audience",
        certify(channel(&leader_identity, &trust, None).await?, &api_token)
            .await?
            .map(|c| c.peer),
        Code::Unauthenticated,
        "the token was refused by the API server",
    )?;

    // The standby certifies too (the other pod, for its own count).
    let sibling_token = pod_token(&client, sibling, TOKEN_AUDIENCE).await?;
    let other = ok(
        "Certify the other pod at the standby",
        certify(
            channel(&standby_identity, &trust, None).await?,
            &sibling_token,
        )
        .await?,
    )?;
    ensure!(
        other.peer.id.uri() == want_id
            && other.peer.pod.as_deref() == Some(sibling.name_any().as_str()),
        "the standby certified {} pod {:?}",
        other.peer.id,
        other.peer.pod
    );

    // The same token again: its review was kept (no TokenReview made); certifying in a loop from
    // one address then runs into the per-caller limit.
    ok(
        "Certify again with the same token",
        certify(channel(&leader_identity, &trust, None).await?, &token).await?,
    )?;
    let mut limited = None;
    for _ in 0..30 {
        if let Err(s) = certify(channel(&leader_identity, &trust, None).await?, &token).await? {
            limited = Some(s);
            break;
        }
    }
    refused(
        "Certify in a loop from one address",
        limited.map_or(Ok(()), Err),
        Code::ResourceExhausted,
        "too many certificate requests",
    )?;

    // Every refusal counted where it happened, by reason; the leader never saw the standby's.
    let cp = "switchyard_operator_control_plane_refused_total";
    let idr = "switchyard_operator_identity_refused_total";
    let issued = "switchyard_operator_certificates_issued_total";
    let lm = ops.leader.metrics().await?;
    check_counts(
        "leader",
        &lm,
        cp,
        &[
            ("not_allowed", 1.0),
            ("spoofed", 2.0),
            ("oversized", 1.0),
            ("bounds", 1.0),
            ("unknown_event", 1.0),
            ("handshake", 2.0),
        ],
    )?;
    check_counts(
        "leader",
        &lm,
        idr,
        &[
            ("owner", 1.0),
            ("service_account", 1.0),
            ("token", 1.0),
            ("rate_peer", 1.0),
        ],
    )?;
    ensure!(
        lm.sum_where(issued, "kind", "manager") >= 2.0,
        "leader: {:?}",
        lm.samples(issued)
    );
    // Four tokens reviewed (the pod's, the plain pod's, the impostor's, the other audience's);
    // every repeat of the pod's token was answered from the kept review.
    let reviews = "switchyard_operator_identity_token_reviews_total";
    ensure!(
        lm.sum_where(reviews, "result", "reviewed") == 4.0
            && lm.sum_where(reviews, "result", "cached") >= 2.0,
        "leader: token reviews {:?}",
        lm.samples(reviews)
    );
    ensure!(
        lm.sum("switchyard_operator_control_plane_load_reports_total") >= 4.0,
        "leader: load reports {:?}",
        lm.samples("switchyard_operator_control_plane_load_reports_total")
    );
    let sm = ops.standby.metrics().await?;
    check_counts(
        "standby",
        &sm,
        cp,
        &[
            ("not_allowed", 1.0),
            ("spoofed", 2.0),
            ("oversized", 1.0),
            ("handshake", 1.0),
        ],
    )?;
    check_counts("standby", &sm, idr, &[])?;
    ensure!(
        sm.sum_where(issued, "kind", "manager") == 1.0,
        "standby: {:?}",
        sm.samples(issued)
    );
    let forwarded = sm.sum_where(
        "switchyard_operator_control_plane_forwarded_total",
        "kind",
        "report",
    );
    ensure!(
        forwarded >= 2.0,
        "standby forwarded {forwarded} reports; dropped {:?}",
        sm.value("switchyard_operator_control_plane_forward_dropped_total")
    );
    eprintln!(
        "[e2e] counted: leader {:?} {:?}; standby {:?}; standby forwarded {forwarded} reports",
        lm.samples(cp),
        lm.samples(idr),
        sm.samples(cp)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certified_sidecar_gets_only_its_own_and_spoofed_or_oversized_reports_are_refused()
-> Result<()> {
    let asked = std::time::Instant::now();
    let lock = OperatorLock::acquire().await?;
    eprintln!("[e2e] operator lock after {:?}", asked.elapsed());
    let started = std::time::Instant::now();
    let c = cluster().await?;
    let release = MeshRelease::install(c, &lock).await?;
    let ns = TestNamespace::create(c, "cp-mtls").await?;
    let cp_port = free_port()?;
    let base = OperatorOpts {
        mesh_tls: true,
        run_as: release.run_as(),
        control_plane_port: Some(cp_port),
        // Rendered pods carry the mesh identity (projected token, ca.crt), as the chart's would.
        extra_args: vec![format!("--control-plane-url=https://127.0.0.1:{cp_port}")],
        ..OperatorOpts::new("e2e-mtls")
    };
    let ops = match Replicas::start_with(c, "e2e-mtls", base).await {
        Ok(ops) => ops,
        Err(e) => {
            let _ = release.uninstall(c).await;
            return Err(e);
        }
    };
    eprintln!(
        "[e2e] release and both replicas up after {:?}",
        started.elapsed()
    );
    let checked = checks(c, &ns.name, &ops).await;
    eprintln!("[e2e] checks done after {:?}", started.elapsed());
    let tails = ops.log_tails(60);
    let stopped = ops.stop().await;
    let uninstalled = release.uninstall(c).await;
    if let Err(e) = checked {
        bail!("{e:#}\n{tails}");
    }
    stopped?;
    uninstalled
}
