//! Real pods on the kubelet node, tested as a user would: a release made with `deploy/release` into
//! the cluster's registry, both charts installed from it (`helm install oci://…`) and every image
//! pulled from it by the node, the operator running as a pod from its image; `kubectl apply -f examples/quickstart.yaml` into a
//! namespace that enforces Pod Security `restricted` and sends its pods to the real node; then HTTP,
//! WebSocket and gRPC from outside the pods through the Router, a rollout under load that loses
//! nothing, pods and containers killed under load, and scaling moving real pods in and out of the
//! routers' tables. One operator pod serves all tests; they run one at a time (they measure).

use anyhow::{Context, Result, ensure};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::{Manager, Router};
use switchyard_e2e::client::{self, Load, Outcome, RouterClient};
use switchyard_e2e::k8s::{wait_ready, wait_rolled_out};
use switchyard_e2e::node::Node;
use switchyard_e2e::pod_operator::{self, PodOperator};
use switchyard_e2e::pods::{
    self, check_pulled, check_running_on, live_pods, route_endpoints, routed_ip,
};
use switchyard_e2e::release::{Release, release};
use switchyard_e2e::{Cluster, TestNamespace, cluster, eventually, fixtures, timeout};
use tokio::sync::OnceCell;

#[path = "pods/ca_rotation.rs"]
mod ca_rotation;
#[path = "pods/durable.rs"]
mod durable;
#[path = "pods/handlers.rs"]
mod handlers;
#[path = "pods/memory.rs"]
mod memory;
#[path = "pods/nodeport.rs"]
mod nodeport;

const ROUTER_PODS: &str = "switchyard.dev/router=edge";
const MANAGER_PODS: &str = "switchyard.dev/manager=handlers";

struct Env {
    cluster: &'static Cluster,
    node: Node,
    release: &'static Release,
    operator: std::sync::Mutex<Option<PodOperator>>,
}

static ENV: OnceCell<Result<Env, String>> = OnceCell::const_new();

async fn env() -> Result<&'static Env> {
    ENV.get_or_init(|| async { start_env().await.map_err(|e| format!("{e:#}")) })
        .await
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

async fn start_env() -> Result<Env> {
    let cluster = cluster().await?;
    let node = Node::load()?;
    let t = Instant::now();
    let release = release(&node).await?;
    eprintln!(
        "[e2e] release {} built and pushed to {} in {:.1}s",
        release.version,
        release.registry,
        t.elapsed().as_secs_f64()
    );
    let op = PodOperator::install(cluster, &node, release).await?;
    eprintln!(
        "[e2e] operator pod {} Ready on {} {:.1}s after helm install",
        op.pod,
        node.name,
        op.ready_after.as_secs_f64()
    );
    Ok(Env {
        cluster,
        node,
        release,
        operator: std::sync::Mutex::new(Some(op)),
    })
}

type TestFn = fn(&'static Env) -> BoxFuture<'static, Result<()>>;

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One at a time: they measure latencies and recovery on a small machine.
    args.test_threads = Some(1);
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime"),
    );
    let tests: Vec<(&str, TestFn)> = vec![
        (
            "operator_runs_as_a_pod_under_the_charts_service_account",
            |e| Box::pin(operator_runs_as_a_pod(e)),
        ),
        (
            "quickstart_serves_http_websocket_and_grpc_through_real_pods",
            |e| Box::pin(quickstart_serves_through_real_pods(e)),
        ),
        ("manager_rollout_under_load_loses_no_request", |e| {
            Box::pin(rollout_under_load(e))
        }),
        (
            "the_app_moves_to_a_unix_socket_by_a_rollout_under_load_losing_no_request",
            |e| Box::pin(app_moves_to_a_unix_socket(e)),
        ),
        ("killed_pod_and_container_fail_fast_and_are_replaced", |e| {
            Box::pin(killed_pod_and_container(e))
        }),
        ("scaling_moves_real_pods_in_and_out_of_the_table", |e| {
            Box::pin(scaling_moves_real_pods(e))
        }),
        (
            "the_mesh_is_certified_in_real_pods_and_plain_frames_are_refused",
            |e| Box::pin(mesh_is_certified(e)),
        ),
        (
            "two_managers_subscribed_to_order_created_both_receive_it_in_real_pods",
            |e| Box::pin(two_subscribers_receive_a_publish(e)),
        ),
        (
            "durable_events_go_through_the_charts_jetstream_which_takes_only_mesh_identities",
            |e| Box::pin(durable::durable_through_the_charts_jetstream(e)),
        ),
        (
            "a_flood_of_1_mib_publishes_into_a_slow_manager_under_128mi_ends_in_503s_not_an_oom_kill",
            |e| Box::pin(memory::a_flood_of_1_mib_publishes_ends_in_503s_not_an_oom_kill(e)),
        ),
        (
            "a_nodeport_router_is_reached_from_outside_the_node_with_the_clients_address",
            |e| Box::pin(nodeport::nodeport_router_reached_from_outside_the_node(e)),
        ),
        // It leaves the operator signing with another issuer under another root, as a user's
        // rotation does: any trial after it runs on the rotated CA.
        (
            "a_staged_ca_rotation_under_load_through_real_pods_fails_no_request",
            |e| Box::pin(ca_rotation::a_staged_ca_rotation_under_load_fails_no_request(e)),
        ),
        (
            "the_python_js_and_go_handler_examples_answer_through_real_pods_from_their_images",
            |e| Box::pin(handlers::handler_examples_answer_from_their_images(e)),
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            let rt = rt.clone();
            Trial::test(name, move || {
                rt.block_on(async {
                    let env = env().await.map_err(|e| Failed::from(format!("{e:#}")))?;
                    test(env).await.map_err(|e| Failed::from(format!("{e:#}")))
                })
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    rt.block_on(async {
        if let Some(Ok(env)) = ENV.get() {
            let op = env.operator.lock().ok().and_then(|mut o| o.take());
            if let Some(op) = op
                && let Err(e) = op.uninstall(env.cluster).await
            {
                eprintln!("[e2e] warning: uninstalling the operator release: {e:#}");
            }
        }
    });
    conclusion.exit_code()
}

/// The one router pod of `ns`, once it is Ready on the real node.
async fn ready_router_pod(env: &Env, client: &kube::Client, ns: &str) -> Result<Pod> {
    eventually("a Ready router pod on the node", timeout(), || async {
        let pods = live_pods(client, ns, ROUTER_PODS).await?;
        ensure!(pods.len() == 1, "{} router pods", pods.len());
        check_running_on(&pods[0], &env.node.name)?;
        Ok(pods[0].clone())
    })
    .await
}

/// A namespace enforcing Pod Security `restricted` whose pods all go to the real node.
async fn node_namespace(env: &Env, prefix: &str) -> Result<TestNamespace> {
    let labels = BTreeMap::from([
        (
            "pod-security.kubernetes.io/enforce".to_string(),
            "restricted".to_string(),
        ),
        (
            "pod-security.kubernetes.io/enforce-version".to_string(),
            "latest".to_string(),
        ),
    ]);
    TestNamespace::create_with(
        env.cluster,
        prefix,
        labels,
        env.node.namespace_annotations(),
    )
    .await
}

/// The quickstart applied and answering: its namespace, the router client, the router pod.
struct Quickstart {
    ns: TestNamespace,
    http: RouterClient,
    router_ip: std::net::Ipv4Addr,
    router_pod: String,
    first_200: Duration,
}

async fn apply_quickstart(env: &Env, prefix: &str) -> Result<Quickstart> {
    let ns = node_namespace(env, prefix).await?;
    let start = Instant::now();
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;
    let client = env.cluster.client().await?;
    let router = ready_router_pod(env, &client, &ns.name).await?;
    let router_ip = routed_ip(&env.node, &router).await?;
    let http = RouterClient::new(SocketAddr::new(router_ip.into(), 8080));
    eventually(
        "GET /noop answered 200 through the pods",
        timeout(),
        || async {
            let a = http.get("/noop").await?;
            ensure!(a.status == 200, "GET /noop: {} {}", a.status, a.body);
            Ok(())
        },
    )
    .await?;
    let first_200 = start.elapsed();
    Ok(Quickstart {
        ns,
        http,
        router_ip,
        router_pod: router.name_any(),
        first_200,
    })
}

/// Waits until the router's table lists exactly the Ready manager pods, `n` of them.
async fn wait_table(env: &Env, q: &Quickstart, n: usize) -> Result<Vec<String>> {
    let client = env.cluster.client().await?;
    eventually(
        &format!("the router's table to list the {n} Ready manager pods"),
        timeout(),
        || async {
            let pods = live_pods(&client, &q.ns.name, MANAGER_PODS).await?;
            let ready: Vec<Pod> = pods
                .into_iter()
                .filter(|p| check_running_on(p, &env.node.name).is_ok())
                .collect();
            ensure!(
                ready.len() == n,
                "{} Ready manager pods, want {n}",
                ready.len()
            );
            let want = pods::frame_endpoints(&ready);
            let table = pods::routes(&client, &q.ns.name, &q.router_pod).await?;
            let got = route_endpoints(&table, "noop")?;
            ensure!(got == want, "table lists {got:?}, Ready pods are {want:?}");
            Ok(got)
        },
    )
    .await
}

async fn operator_runs_as_a_pod(env: &'static Env) -> Result<()> {
    let client = env.cluster.client().await?;
    let pods: Api<Pod> = Api::namespaced(client, pod_operator::NAMESPACE);
    let name = env
        .operator
        .lock()
        .ok()
        .and_then(|o| o.as_ref().map(|o| o.pod.clone()))
        .context("no operator pod")?;
    let pod = pods.get(&name).await?;
    check_running_on(&pod, &env.node.name)?;
    let spec = pod.spec.clone().unwrap_or_default();
    ensure!(
        spec.service_account_name.as_deref() == Some(pod_operator::RELEASE),
        "operator pod runs as {:?}",
        spec.service_account_name
    );
    ensure!(
        spec.containers[0].image.as_deref() == Some(env.release.operator.reference.as_str()),
        "operator image {:?}, released {}",
        spec.containers[0].image,
        env.release.operator.reference
    );
    check_pulled(
        &pod,
        &spec.containers[0].name,
        &env.release.operator.reference,
        &env.release.operator.digest,
    )?;
    // Its own probes passed (Ready); ask its metrics port directly too, over the route into the node.
    let ip = routed_ip(&env.node, &pod).await?;
    let metrics = RouterClient::new(SocketAddr::new(ip.into(), pod_operator::METRICS_PORT));
    let a = metrics.get("/readyz").await?;
    ensure!(a.status == 200, "operator /readyz: {} {}", a.status, a.body);
    let m = metrics.get("/metrics").await?;
    ensure!(
        m.body.contains("switchyard_operator_leader 1"),
        "the operator pod is not the leader: {}",
        switchyard_e2e::tail(&m.body, 20)
    );
    Ok(())
}

async fn quickstart_serves_through_real_pods(env: &'static Env) -> Result<()> {
    let q = apply_quickstart(env, "pods").await?;
    eprintln!(
        "[e2e] kubectl apply -f examples/quickstart.yaml -> first 200 through real pods: {:.1}s",
        q.first_200.as_secs_f64()
    );
    let client = env.cluster.client().await?;
    wait_ready(
        &Api::<Router>::namespaced(client.clone(), &q.ns.name),
        "edge",
    )
    .await?;
    wait_ready(
        &Api::<Manager>::namespaced(client.clone(), &q.ns.name),
        "handlers",
    )
    .await?;

    // Every pod on the real node, admitted under `restricted`; the manager's sidecar is a native
    // sidecar that started (and passed its startup) before the app.
    let manager = live_pods(&client, &q.ns.name, MANAGER_PODS).await?;
    ensure!(manager.len() == 1, "{} manager pods", manager.len());
    let m = &manager[0];
    check_running_on(m, &env.node.name)?;
    let spec = m.spec.clone().unwrap_or_default();
    let side = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "switchyard-sidecar")
        .context("no sidecar init container")?;
    ensure!(
        side.restart_policy.as_deref() == Some("Always"),
        "not a native sidecar"
    );
    // Both images came from the registry: the sidecar the operator injects by the chart's digest,
    // under global.imageRegistry; the example app the quickstart names by tag on ghcr.io, resolved
    // through the node's mirror of ghcr.io. (Only its repository is checked: the tag is mutable and
    // the node keeps the copy it pulled first, IfNotPresent, while every commit releases a new one.)
    check_pulled(
        m,
        "switchyard-sidecar",
        &env.release.sidecar.reference,
        &env.release.sidecar.digest,
    )?;
    let app = format!(
        "ghcr.io/switchyard-dev/switchyard-example-app:{}",
        env.release.version
    );
    let named = spec.containers.iter().find(|c| c.name == "app");
    ensure!(
        named.and_then(|c| c.image.as_deref()) == Some(app.as_str()),
        "the app container names {:?}, not {app}",
        named.map(|c| &c.image)
    );
    let app_id = m
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == "app"))
        .map(|c| c.image_id.clone())
        .context("no status of the app container")?;
    ensure!(
        app_id.starts_with("ghcr.io/switchyard-dev/switchyard-example-app@sha256:"),
        "the app container runs {app_id:?}, not an image pulled through the ghcr.io mirror"
    );
    let status = m.status.clone().unwrap_or_default();
    let started = |list: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>, name: &str| {
        list.iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
            .with_context(|| format!("container {name} not running"))
    };
    let side_at = started(&status.init_container_statuses, "switchyard-sidecar")?;
    let app_at = started(&status.container_statuses, "app")?;
    ensure!(
        side_at.0 <= app_at.0,
        "sidecar started {side_at:?}, after the app {app_at:?}"
    );
    // The stop: the sidecar drains from its own preStop hook (`/drain` answers loopback only), the
    // app's preStop waits on `/drained` (sent from the node) until that drain is over.
    let pre_stop = |c: &k8s_openapi::api::core::v1::Container| {
        c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone())
    };
    let app = &spec.containers[0];
    let wait = pre_stop(app)
        .and_then(|h| h.http_get)
        .map(|g| (g.path, g.port));
    ensure!(
        wait == Some((
            Some("/drained".into()),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9901)
        )),
        "the app's preStop waits on {wait:?}, not GET :9901/drained"
    );
    let hook = pre_stop(side)
        .and_then(|h| h.exec)
        .and_then(|e| e.command)
        .unwrap_or_default();
    ensure!(
        hook == ["/usr/local/bin/switchyard-sidecar", "drain"],
        "the sidecar's preStop is {hook:?}"
    );

    // HTTP, good and bad input, with Server-Timing.
    let a = q.http.get("/noop").await?;
    ensure!(a.status == 200, "GET /noop {} {}", a.status, a.body);
    let timing = a.server_timing.clone().unwrap_or_default();
    ensure!(
        timing.contains("app;dur="),
        "GET /noop Server-Timing {timing:?}"
    );
    let a = q.http.post("/echo", r#"{"value":1}"#).await?;
    ensure!(
        a.status == 200 && a.body.contains("\"value\":1"),
        "POST /echo: {} {}",
        a.status,
        a.body
    );
    ensure!(
        a.server_timing.is_some(),
        "POST /echo without Server-Timing"
    );
    let a = q.http.post("/echo", r#"{"value":"x"}"#).await?;
    ensure!(
        a.status == 400 && a.body.contains("/value"),
        "bad POST /echo: {} {}",
        a.status,
        a.body
    );

    // WebSocket and gRPC through the same Router pod.
    let r = client::websocket_command(
        SocketAddr::new(q.router_ip.into(), 8080),
        "/ws",
        json!({"command": "noop", "id": 1}),
    )
    .await?;
    ensure!(r["id"] == 1 && r["status"] == 200, "WebSocket reply {r}");
    ensure!(
        r["timing"].as_str().is_some_and(|t| t.contains("app;dur=")),
        "WebSocket reply without timing: {r}"
    );
    let (status, _, timing) =
        client::grpc_call(SocketAddr::new(q.router_ip.into(), 50051), "noop", b"{}").await?;
    ensure!(status == 200, "gRPC Call noop status {status}");
    ensure!(timing.contains("app;dur="), "gRPC server-timing {timing:?}");

    // `restricted` is enforced here: a pod without the settings is refused.
    let bad = env
        .cluster
        .kubectl()
        .args(["-n", &q.ns.name, "run", "unrestricted", "--restart=Never"])
        .arg(format!("--image={}", env.release.example_app.reference))
        .fails()
        .await?;
    ensure!(
        bad.combined().contains("violates PodSecurity"),
        "{}",
        bad.combined()
    );
    Ok(())
}

/// Failures of a load run that are not 200.
fn failures(outcomes: &[Outcome]) -> Vec<&Outcome> {
    outcomes.iter().filter(|o| o.status != Some(200)).collect()
}

fn describe(outcomes: &[&Outcome]) -> String {
    outcomes
        .iter()
        .map(|o| {
            format!(
                "{}@{:.2}s/{}ms{}",
                o.status.map_or("error".into(), |s| s.to_string()),
                o.at.as_secs_f64(),
                o.latency.as_millis(),
                o.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies `patch` to Manager `handlers` while `/noop` load runs, waits until its one pod was
/// replaced (the old one gone for good: its preStop drain and stop are over) and the router's table
/// lists the new one, then lets the load run on a little and stops it. Returns how long the rollout
/// took and every request's outcome.
async fn roll_under_load(
    env: &Env,
    q: &Quickstart,
    patch: &str,
) -> Result<(Duration, Vec<Outcome>)> {
    wait_table(env, q, 1).await?;
    let client = env.cluster.client().await?;
    let old: Vec<String> = live_pods(&client, &q.ns.name, MANAGER_PODS)
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    let load = Load::start(
        &q.http,
        "/noop",
        4,
        Duration::from_millis(5),
        Duration::from_secs(15),
        Duration::from_secs(240),
    );
    load.wait_sent(50, Duration::from_secs(30)).await?;
    let start = Instant::now();
    env.cluster
        .kubectl()
        .args([
            "-n",
            &q.ns.name,
            "patch",
            "manager",
            "handlers",
            "--type=merge",
            "-p",
        ])
        .arg(patch)
        .ok()
        .await?;
    eventually(
        "the rollout to finish and the old pod to be gone",
        Duration::from_secs(150),
        || async {
            let all = pods::all_pods(&client, &q.ns.name, MANAGER_PODS).await?;
            let names: Vec<String> = all.iter().map(|p| p.name_any()).collect();
            ensure!(
                names.iter().all(|n| !old.contains(n)),
                "old pod still there: {names:?}"
            );
            wait_rolled_out(&client, &q.ns.name, "handlers-manager", 1).await?;
            Ok(())
        },
    )
    .await?;
    let rolled = start.elapsed();
    wait_table(env, q, 1).await?;
    let sent = load.sent();
    load.wait_sent(sent + 50, Duration::from_secs(30)).await?;
    Ok((rolled, load.stop().await?))
}

async fn rollout_under_load(env: &'static Env) -> Result<()> {
    let q = apply_quickstart(env, "rollout").await?;
    let (rolled, outcomes) = roll_under_load(
        env,
        &q,
        r#"{"spec":{"template":{"metadata":{"annotations":{"e2e.switchyard.dev/rollout":"1"}}}}}"#,
    )
    .await?;
    let failed = failures(&outcomes);
    eprintln!(
        "[e2e] rollout under load: {:.1}s to replace the manager pod; {}; lost {}",
        rolled.as_secs_f64(),
        client::summarize(&outcomes),
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "requests failed during the rollout: {}",
        describe(&failed)
    );
    Ok(())
}

/// `app.transport: unix` on a serving Manager: its pods roll (the config changed) under load with
/// nothing lost, and the new pod's sidecar and app meet on the socket in the shared `emptyDir`.
async fn app_moves_to_a_unix_socket(env: &'static Env) -> Result<()> {
    const SOCKET: &str = "/var/run/switchyard/app.sock";
    let q = apply_quickstart(env, "unixsock").await?;
    let (_, outcomes) =
        roll_under_load(env, &q, r#"{"spec":{"app":{"transport":"unix"}}}"#).await?;
    let failed = failures(&outcomes);
    eprintln!(
        "[e2e] app moved to a Unix socket under load: {}; lost {}",
        client::summarize(&outcomes),
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "requests failed while the app moved to the socket: {}",
        describe(&failed)
    );

    let client = env.cluster.client().await?;
    let pod = live_pods(&client, &q.ns.name, MANAGER_PODS)
        .await?
        .into_iter()
        .next()
        .context("no manager pod")?;
    let spec = pod.spec.clone().unwrap_or_default();
    ensure!(
        spec.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "switchyard-app-socket" && v.empty_dir.is_some()),
        "no emptyDir for the socket: {:?}",
        spec.volumes
    );
    // Each side says where it is: the app listening on the socket, the sidecar dialling it.
    for (container, wants) in [
        ("app", format!("listening on unix:{SOCKET}")),
        ("switchyard-sidecar", format!("unix:{SOCKET}")),
    ] {
        let logs = env
            .cluster
            .kubectl()
            .args(["-n", &q.ns.name, "logs", &pod.name_any(), "-c", container])
            .ok()
            .await?;
        ensure!(
            logs.stdout.contains(&wants),
            "{container}'s log does not say {wants:?}: {}",
            switchyard_e2e::tail(&logs.stdout, 10)
        );
    }
    let a = q.http.get("/noop").await?;
    ensure!(a.status == 200, "GET /noop {} {}", a.status, a.body);
    let timing = a.server_timing.clone().unwrap_or_default();
    ensure!(
        timing.contains("app;dur="),
        "GET /noop Server-Timing {timing:?}"
    );
    Ok(())
}

/// Checks the failures of a kill: every one a 502 or 503 within `fast`, none a hang or a reset.
fn check_failed_fast(what: &str, outcomes: &[Outcome], fast: Duration) -> Result<()> {
    let failed = failures(outcomes);
    eprintln!(
        "[e2e] {what}: {}; failed: [{}]",
        client::summarize(outcomes),
        describe(&failed)
    );
    let bad: Vec<&Outcome> = failed
        .iter()
        .copied()
        .filter(|o| !matches!(o.status, Some(502 | 503)) || o.latency > fast)
        .collect();
    ensure!(
        bad.is_empty(),
        "{what}: failures that were not a fast 502/503: {}",
        describe(&bad)
    );
    Ok(())
}

async fn killed_pod_and_container(env: &'static Env) -> Result<()> {
    let q = apply_quickstart(env, "kill").await?;
    let client = env.cluster.client().await?;
    env.cluster
        .kubectl()
        .args([
            "-n",
            &q.ns.name,
            "patch",
            "manager",
            "handlers",
            "--type=merge",
            "-p",
        ])
        // The autoscaler off: two replicas that stay two.
        .arg(r#"{"spec":{"replicas":2,"scaling":{"enabled":false}}}"#)
        .ok()
        .await?;
    wait_table(env, &q, 2).await?;
    let fast = Duration::from_secs(5);

    // 1. The pod, forcibly.
    let victim = live_pods(&client, &q.ns.name, MANAGER_PODS).await?[0].name_any();
    let load = Load::start(
        &q.http,
        "/noop",
        4,
        Duration::from_millis(5),
        Duration::from_secs(15),
        Duration::from_secs(180),
    );
    load.wait_sent(50, Duration::from_secs(30)).await?;
    let killed = Instant::now();
    env.cluster
        .kubectl()
        .args([
            "-n",
            &q.ns.name,
            "delete",
            "pod",
            &victim,
            "--grace-period=0",
            "--force",
        ])
        .ok()
        .await?;
    let table = wait_table(env, &q, 2).await?;
    let recovered = killed.elapsed();
    let sent = load.sent();
    load.wait_sent(sent + 50, Duration::from_secs(30)).await?;
    let outcomes = load.stop().await?;
    eprintln!(
        "[e2e] pod {victim} force-deleted: the replacement is in the table ({table:?}) after {:.1}s",
        recovered.as_secs_f64()
    );
    check_failed_fast("forced pod deletion under load", &outcomes, fast)?;
    let after: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.at > killed.elapsed().saturating_sub(Duration::ZERO))
        .collect();
    let _ = after;

    // 2. The manager sidecar container, killed through the CRI: the kubelet restarts it.
    let pod = live_pods(&client, &q.ns.name, MANAGER_PODS).await?[0].clone();
    let id = env
        .node
        .container_id(&q.ns.name, &pod.name_any(), "switchyard-sidecar")
        .await?;
    let load = Load::start(
        &q.http,
        "/noop",
        4,
        Duration::from_millis(5),
        Duration::from_secs(15),
        Duration::from_secs(180),
    );
    load.wait_sent(50, Duration::from_secs(30)).await?;
    let killed = Instant::now();
    env.node
        .crictl()
        .args(["stop", "--timeout=0", &id])
        .ok()
        .await?;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &q.ns.name);
    eventually("the killed sidecar restarted", timeout(), || async {
        let p = pods_api.get(&pod.name_any()).await?;
        let restarts = p
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|l| l.iter().find(|c| c.name == "switchyard-sidecar"))
            .map_or(0, |c| c.restart_count);
        ensure!(restarts >= 1, "sidecar restarts {restarts}");
        Ok(())
    })
    .await?;
    wait_table(env, &q, 2).await?;
    let recovered = killed.elapsed();
    let sent = load.sent();
    load.wait_sent(sent + 50, Duration::from_secs(30)).await?;
    let outcomes = load.stop().await?;
    eprintln!(
        "[e2e] sidecar container of {} killed with crictl: back in the table after {:.1}s",
        pod.name_any(),
        recovered.as_secs_f64()
    );
    check_failed_fast("sidecar container killed under load", &outcomes, fast)?;
    Ok(())
}

async fn scaling_moves_real_pods(env: &'static Env) -> Result<()> {
    let q = apply_quickstart(env, "scale").await?;
    // By hand: with the autoscaler off, `kubectl scale` sets the replicas.
    env.cluster
        .kubectl()
        .args([
            "-n",
            &q.ns.name,
            "patch",
            "manager",
            "handlers",
            "--type=merge",
            "-p",
        ])
        .arg(r#"{"spec":{"scaling":{"enabled":false}}}"#)
        .ok()
        .await?;
    for n in [3usize, 1] {
        env.cluster
            .kubectl()
            .args(["-n", &q.ns.name, "scale", "manager/handlers"])
            .arg(format!("--replicas={n}"))
            .ok()
            .await?;
        let t = wait_table(env, &q, n).await?;
        eprintln!("[e2e] kubectl scale --replicas={n}: table {t:?}");
    }
    // By load: a low rate target on noop, short windows.
    let scaling = json!({"spec": {"scaling": {
        "enabled": true, "minReplicas": 1, "maxReplicas": 3,
        // Merge patch: null drops the quickstart's in-flight target of noop.
        "targets": {"noop": {"targetInFlight": null, "targetRate": 5}},
        "scaleUp": {"stableWindow": "6s", "panicWindow": "2s"},
        "scaleDown": {"stabilizationWindow": "6s"},
    }}});
    env.cluster
        .kubectl()
        .args([
            "-n",
            &q.ns.name,
            "patch",
            "manager",
            "handlers",
            "--type=merge",
            "-p",
        ])
        .arg(scaling.to_string())
        .ok()
        .await?;
    let load = Load::start(
        &q.http,
        "/noop",
        2,
        Duration::from_millis(20),
        Duration::from_secs(15),
        Duration::from_secs(180),
    );
    let start = Instant::now();
    let up = wait_table(env, &q, 3).await;
    let outcomes = load.stop().await?;
    let up = up?;
    eprintln!(
        "[e2e] under load ({}): scaled to 3 real pods in {:.1}s, table {up:?}",
        client::summarize(&outcomes),
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let down = wait_table(env, &q, 1).await?;
    eprintln!(
        "[e2e] load stopped: back to 1 pod in {:.1}s, table {down:?}",
        start.elapsed().as_secs_f64()
    );
    ensure!(
        failures(&outcomes).is_empty(),
        "requests failed while scaling: {}",
        describe(&failures(&outcomes))
    );
    Ok(())
}

/// The chart's mesh TLS in real pods: every sidecar was certified by the operator pod (a TokenReview
/// of its projected token, matched to its pod and owner), the Router reaches the Manager over one
/// mTLS connection, and plain frames sent to a manager pod's frame port, as anything on the pod
/// network could send them, get no answer.
async fn mesh_is_certified(env: &'static Env) -> Result<()> {
    let q = apply_quickstart(env, "mesh").await?;
    let client = env.cluster.client().await?;
    let manager = live_pods(&client, &q.ns.name, MANAGER_PODS).await?;
    ensure!(manager.len() == 1, "{} manager pods", manager.len());
    let manager_ip = routed_ip(&env.node, &manager[0]).await?;

    // Identity is the projected token alone: no default API token in the pod.
    let spec = manager[0].spec.clone().unwrap_or_default();
    ensure!(
        spec.automount_service_account_token == Some(false),
        "the manager pod mounts the default API token: {:?}",
        spec.automount_service_account_token
    );
    let projected = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| t.audience.clone().unwrap_or_default())
        .collect::<Vec<_>>();
    ensure!(
        projected == ["switchyard-identity"],
        "projected token audiences {projected:?}"
    );

    // Each sidecar holds a certificate (asked for once, no failure), and the frame connection
    // from the Router to the Manager was one mTLS handshake on each side.
    let admin = switchyard_protocol::ports::ADMIN;
    let router_metrics = pod_metrics(q.router_ip, admin).await?;
    let manager_metrics = pod_metrics(manager_ip, admin).await?;
    for (who, m) in [("router", &router_metrics), ("manager", &manager_metrics)] {
        let ok = sample(
            m,
            "switchyard_mesh_certifications_total",
            &[("result", "ok")],
        );
        ensure!(ok >= 1.0, "the {who} sidecar was never certified: {ok}");
        let expiry = sample(m, "switchyard_mesh_certificate_expiry_seconds", &[]);
        ensure!(
            expiry > 0.0,
            "the {who} sidecar shows no certificate expiry"
        );
    }
    let client_ok = sample(
        &router_metrics,
        "switchyard_mesh_handshakes_total",
        &[("side", "client"), ("result", "ok")],
    );
    ensure!(client_ok >= 1.0, "the router made no mTLS handshake");
    let op_metrics = operator_metrics(env).await?;
    for kind in ["router", "manager"] {
        let n = sample(
            &op_metrics,
            "switchyard_operator_certificates_issued_total",
            &[("kind", kind)],
        );
        ensure!(n >= 1.0, "the operator issued no {kind} certificate ({n})");
    }

    // Plain frames to the manager pod: a HELLO and a REQUEST, as before the mesh had TLS.
    let failed_before = sample(
        &manager_metrics,
        "switchyard_mesh_handshakes_total",
        &[("side", "server"), ("result", "failed")],
    );
    let frames_port = switchyard_protocol::ports::MANAGER_INBOUND;
    let answered = plain_frames(SocketAddr::new(manager_ip.into(), frames_port)).await?;
    ensure!(
        answered.is_empty(),
        "plain frames to the manager pod were answered: {answered:?}"
    );
    eventually(
        "the manager to count the refused plain-text handshake",
        timeout(),
        || async {
            let m = pod_metrics(manager_ip, admin).await?;
            let failed = sample(
                &m,
                "switchyard_mesh_handshakes_total",
                &[("side", "server"), ("result", "failed")],
            );
            ensure!(
                failed > failed_before,
                "failed handshakes {failed}, before {failed_before}"
            );
            Ok(())
        },
    )
    .await?;
    eprintln!(
        "[e2e] mesh in real pods: router and manager certified by the operator pod, plain frames to {manager_ip}:{frames_port} refused"
    );

    // And the mesh still serves.
    let a = q.http.get("/noop").await?;
    ensure!(
        a.status == 200,
        "GET /noop after the refusal: {} {}",
        a.status,
        a.body
    );
    Ok(())
}

/// The headline case of subscriptions (issue 36): Managers `billing` and `shipping` both subscribe
/// to `order.created`, which nobody handles; Manager `front`'s app publishes one through its local
/// API (the example app's `publish`), and both subscribers' pods receive it, once each.
const SUBSCRIBERS: &str = r#"
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
metadata: {name: billing}
spec:
  routerRef: {name: edge}
  events: [billing.charge]
  subscriptions:
    - event: order.created
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
metadata: {name: shipping}
spec:
  routerRef: {name: edge}
  events: [shipping.ship]
  subscriptions:
    - event: order.created
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
          command: [switchyard-example-app, --port, "8000"]
"#;

async fn two_subscribers_receive_a_publish(env: &'static Env) -> Result<()> {
    let ns = node_namespace(env, "subs").await?;
    let manifest = std::env::temp_dir().join(format!("{}-subscribers.yaml", ns.name));
    std::fs::write(&manifest, SUBSCRIBERS)?;
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f"])
        .arg(&manifest)
        .ok()
        .await?;
    let _ = std::fs::remove_file(&manifest);
    let client = env.cluster.client().await?;
    let router = ready_router_pod(env, &client, &ns.name).await?;
    let http = RouterClient::new(SocketAddr::new(
        routed_ip(&env.node, &router).await?.into(),
        8080,
    ));
    let mut subscribers = Vec::new();
    for m in ["billing", "shipping"] {
        let selector = format!("switchyard.dev/manager={m}");
        let pod = eventually(&format!("a Ready {m} pod"), timeout(), || async {
            let pods = live_pods(&client, &ns.name, &selector).await?;
            ensure!(pods.len() == 1, "{} {m} pods", pods.len());
            check_running_on(&pods[0], &env.node.name)?;
            Ok(pods[0].clone())
        })
        .await?;
        subscribers.push((m, routed_ip(&env.node, &pod).await?));
    }
    let admin = switchyard_protocol::ports::ADMIN;
    let received = |ip| async move {
        let m = pod_metrics(ip, admin).await?;
        Ok::<f64, anyhow::Error>(sample(
            &m,
            "switchyard_requests_total",
            &[("event", "order.created")],
        ))
    };
    // 202 means both subscribers admitted it: until front's sidecar has both in its table and
    // connected, the publish is refused (503) and retried here.
    eventually(
        "POST /publish of order.created answered 202",
        timeout(),
        || async {
            let a = http
                .post(
                    "/publish",
                    r#"{"event":"order.created","data":{"order":1}}"#,
                )
                .await?;
            ensure!(a.status == 202, "POST /publish: {} {}", a.status, a.body);
            Ok(())
        },
    )
    .await?;
    for (m, ip) in &subscribers {
        let ip = *ip;
        eventually(
            &format!("{m}'s pod to receive order.created"),
            timeout(),
            || async {
                let n = received(ip).await?;
                ensure!(n >= 1.0, "{m} received {n}");
                Ok(())
            },
        )
        .await?;
    }
    // Once more, counted exactly: one more delivery at each, not two.
    let before: Vec<f64> = {
        let mut v = Vec::new();
        for (_, ip) in &subscribers {
            v.push(received(*ip).await?);
        }
        v
    };
    let a = http
        .post(
            "/publish",
            r#"{"event":"order.created","data":{"order":2}}"#,
        )
        .await?;
    ensure!(a.status == 202, "POST /publish: {} {}", a.status, a.body);
    for ((m, ip), b) in subscribers.iter().zip(&before) {
        let ip = *ip;
        eventually(
            &format!("{m}'s pod to receive the second"),
            timeout(),
            || async {
                let n = received(ip).await?;
                ensure!(n == b + 1.0, "{m} received {n}, {b} before");
                Ok(())
            },
        )
        .await?;
    }
    eprintln!("[e2e] order.created reached billing and shipping in their pods, once each");
    Ok(())
}

/// `/metrics` of the operator pod.
async fn operator_metrics(env: &Env) -> Result<String> {
    let op = env
        .operator
        .lock()
        .ok()
        .and_then(|o| o.as_ref().map(|o| o.pod_ip))
        .context("no operator pod")?;
    pod_metrics(op, pod_operator::METRICS_PORT).await
}

/// `/metrics` of the pod at `ip` on `port`.
async fn pod_metrics(ip: std::net::Ipv4Addr, port: u16) -> Result<String> {
    let a = RouterClient::new(SocketAddr::new(ip.into(), port))
        .get("/metrics")
        .await?;
    ensure!(
        a.status == 200,
        "{ip}:{port}/metrics: {} {}",
        a.status,
        a.body
    );
    Ok(a.body)
}

/// The value of the sample of `name` carrying `labels` (0 when absent).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    switchyard_e2e::operator::Metrics(text.to_owned())
        .samples(name)
        .into_iter()
        .filter(|(l, _)| {
            labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Sends a plain HELLO and REQUEST to `addr` and reads until the server closes (at most 10 s):
/// the frames it answered with.
async fn plain_frames(addr: SocketAddr) -> Result<Vec<String>> {
    use switchyard_protocol::frame::{self, Frame, Request};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut out = bytes::BytesMut::new();
    let hello = Frame::Hello {
        reads_headers: false,
        takes_pushes: false,
        implicit_credit: true,
        releases_credit: false,
        streams: None,
        reads_tracestate: true,
    };
    let request = Frame::Request(Request {
        headers: Vec::new(),
        id: 1,
        flags: 0,
        deadline_ms: 5_000,
        event: "noop".into(),
        ce_id: "e2e-plain-1".into(),
        traceparent: String::new(),
        tracestate: String::new(),
        content_type: "application/json".into(),
        payload: bytes::Bytes::from_static(b"{}"),
    });
    frame::encode(&hello, &mut out).context("encode HELLO")?;
    frame::encode(&request, &mut out).context("encode REQUEST")?;
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    tcp.write_all(&out).await.context("send plain frames")?;
    let mut got = bytes::BytesMut::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    ensure!(
        read.is_ok(),
        "{addr} kept the plain connection open for 10 s"
    );
    let mut answered = Vec::new();
    while let Ok(Some(f)) = frame::decode(&mut got, 1 << 20) {
        answered.push(format!("{f:?}"));
    }
    Ok(answered)
}
