//! Memory bounded in bytes below the container's limit, in real pods (issue 37, item 6): a Manager
//! whose sidecar has a 128Mi memory limit (`spec.sidecar.resources`), which the node's kernel
//! enforces on the container's cgroup (v1), takes a flood of 1 MiB publishes into an app that is
//! slow on purpose. The publisher gets 202s, then 503s with Retry-After; the sidecar is never
//! OOM-killed or restarted; every 202 reaches the app. The shape and numbers are those of
//! `sidecar/tests/memory_limit.rs` (real processes in a cgroup the test makes), here with the
//! operator's pods, the kubelet's cgroups and the certified mesh between two pods.
//!
//! The publishes go into the local API of a second Manager's sidecar (`sender`), through a
//! port-forward to its pod's loopback (where the local API listens), and from there over the mesh
//! to `handlers`. Not through the Router: a Router's routes are request/response (the caller waits
//! for the app's answer, so nothing acknowledged is left to lose), and publishing is what a Manager's
//! local API does. A Router-fronted app that publishes for its caller (the example app's `publish`)
//! would hide the mesh's answers: its Manager retries the app's 503s, and the app does not pass on
//! Retry-After.

use super::{Env, check_running_on, live_pods, node_namespace, pod_metrics, sample};
use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use kube::api::{Api, Portforwarder};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_e2e::memcg::MemCgroup;
use switchyard_e2e::pods::routed_ip;
use switchyard_e2e::{eventually, timeout};
use switchyard_protocol::ports;

/// `handlers` takes `burn`, whose app spends `ms` of wall time on each event, one at a time: the
/// app container's CPU limit (100m) gives it one core's worth of parallelism (the example app burns
/// one event per core at once) and keeps the burning to a tenth of a core. Its sidecar has the
/// 128Mi limit and the default queue of 1024 events (which, counted in events alone, would admit
/// 1 GiB of these). `sender`'s sidecar gets room in its local API for the 64 bodies the flood has
/// under way (a quarter of 512Mi after 32Mi: 120 MiB), so the 503s are `handlers`'.
const MANIFESTS: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  listeners: {http: {port: 8080}}
  routes:
    - event: noop
      http: {method: GET, path: /noop}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: sender}
spec:
  routerRef: {name: edge}
  events: [noop]
  sidecar:
    resources: {limits: {memory: 512Mi}}
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
metadata: {name: handlers}
spec:
  routerRef: {name: edge}
  events: [burn]
  sidecar:
    resources: {limits: {memory: 128Mi}}
  workers:
    maxInFlight: 4
    queueCapacity: 1024
    timeout: 10s
    retries: {attempts: 3, backoff: 20ms, maxBackoff: 200ms}
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/switchyard-dev/switchyard-example-app:0.1.0
          command: [switchyard-example-app, --port, "8000"]
          resources:
            requests: {cpu: 50m, memory: 32Mi}
            limits: {cpu: 100m, memory: 64Mi}
"#;

/// The sidecar container the operator injects (a native sidecar: an init container).
const SIDECAR: &str = "switchyard-sidecar";
/// `handlers`' sidecar memory limit, and the share of it for admitted events: half of what is
/// left after 32 MiB (`protocol/src/memory.rs`).
const LIMIT: u64 = 128 << 20;
const EVENTS_BUDGET: u64 = 48 << 20;
/// Publishes in the flood, and how many are under way at once.
const PUBLISHES: usize = 300;
const CONCURRENCY: usize = 64;
/// Each one's payload: the 1 MiB the local API takes, less room for the JSON around it.
const PAD: usize = (1 << 20) - 64;
/// Wall time the app spends on each event.
const NAP_MS: u64 = 150;

/// What the publisher was told.
#[derive(Default, Debug)]
struct Told {
    accepted: usize,
    refused: usize,
    refused_without_retry_after: usize,
    other: Vec<String>,
}

pub(super) async fn a_flood_of_1_mib_publishes_ends_in_503s_not_an_oom_kill(
    env: &'static Env,
) -> Result<()> {
    let ns = node_namespace(env, "memflood").await?;
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f", "-"])
        .stdin(MANIFESTS.to_owned())
        .ok()
        .await?;
    let client = env.cluster.client().await?;
    let handlers = ready_pod(env, &client, &ns.name, "handlers").await?;
    let sender = ready_pod(env, &client, &ns.name, "sender").await?;
    let handlers_ip = routed_ip(&env.node, &handlers).await?;

    // The limit as the sidecar read it from its cgroup, the budget it made of it, and the limit
    // the kernel holds the container to.
    let metrics = pod_metrics(handlers_ip, ports::ADMIN).await?;
    let budget = |which| {
        sample(
            &metrics,
            "switchyard_admission_budget_bytes",
            &[("budget", which)],
        )
    };
    ensure!(
        budget("limit") == LIMIT as f64 && budget("events") == EVENTS_BUDGET as f64,
        "handlers' sidecar made its budgets for a limit of {} bytes, {} of admitted events; expected {LIMIT} and {EVENTS_BUDGET}",
        budget("limit"),
        budget("events")
    );
    let cgroup = MemCgroup::of_container(&env.node, &handlers, SIDECAR)?;
    let enforced = cgroup.limit()?;
    ensure!(
        enforced == LIMIT,
        "the kernel holds handlers' sidecar to {enforced} bytes ({}), not {LIMIT}",
        cgroup.dir().display()
    );
    let at_ready = cgroup.peak()?;

    let api = LocalApi::connect(&client, &ns.name, &sender.name_any()).await?;
    // 202 once sender's table routes burn to handlers' pod and its connection there is up: until
    // then a publish is refused (503) and tried again here. A small event, delivered like the rest.
    eventually("a publish of burn answered 202", timeout(), || async {
        let (status, _) = api
            .publish("warm-up", Bytes::from_static(b"{\"ms\":1}"))
            .await?;
        ensure!(status == 202, "publish of burn: {status}");
        Ok(())
    })
    .await?;

    let started = Instant::now();
    let told = flood(&api).await;
    let flood_took = started.elapsed();
    // Alive and never OOM-killed while it held the flood's admitted events.
    let sidecar_alive = || async {
        let pod = Api::<Pod>::namespaced(client.clone(), &ns.name)
            .get(&handlers.name_any())
            .await?;
        never_restarted(&pod)?;
        ensure!(
            cgroup.oom_kills()? == 0,
            "the kernel OOM-killed a process of handlers' sidecar"
        );
        Ok::<_, anyhow::Error>(())
    };
    sidecar_alive().await?;
    ensure!(told.other.is_empty(), "only 202 or 503: {:?}", told.other);
    ensure!(
        told.refused > 0,
        "a flood past the byte budget gets 503s: {told:?}"
    );
    ensure!(told.accepted > 0, "some publishes were admitted: {told:?}");
    ensure!(
        told.refused_without_retry_after == 0,
        "every 503 has Retry-After: {told:?}"
    );

    // Every 202 (the warm-up's too) reaches the app, once: handlers counts each event it handed to
    // the app by the app's final answer.
    let acknowledged = told.accepted as f64 + 1.0;
    // At the app's pace: one NAP_MS after another.
    let drain = Duration::from_millis(NAP_MS) * u32::try_from(told.accepted).unwrap_or(u32::MAX);
    eventually(
        "every publish answered 202 handled by the app",
        timeout() + drain,
        || async {
            let ok = handled(handlers_ip, Some("200")).await?;
            ensure!(
                ok == acknowledged,
                "{ok} of {acknowledged} acknowledged events handled with 200"
            );
            Ok(())
        },
    )
    .await?;
    let all = handled(handlers_ip, None).await?;
    ensure!(
        all == acknowledged,
        "{all} events of burn reached the app, {acknowledged} were acknowledged"
    );
    let metrics = pod_metrics(handlers_ip, ports::ADMIN).await?;
    let refused_bytes = sample(
        &metrics,
        "switchyard_admission_refused_total",
        &[("reason", "bytes")],
    );
    ensure!(
        refused_bytes > 0.0,
        "handlers counts its refusals for bytes"
    );
    sidecar_alive().await?;
    let (peak, failcnt) = (cgroup.peak()?, cgroup.failcnt()?);
    eprintln!(
        "[e2e] [128Mi on the node] published {PUBLISHES} x 1 MiB ({CONCURRENCY} at once, {:.1}s): 202 {}, 503 {} (all with Retry-After), refused for bytes {refused_bytes}, every 202 handled; sidecar cgroup peak {:.1} MiB (at ready {:.1} MiB) of {:.0} MiB, failcnt {failcnt}, oom kills 0, restarts 0",
        flood_took.as_secs_f64(),
        told.accepted,
        told.refused,
        mib(peak),
        mib(at_ready),
        mib(LIMIT),
    );
    ensure!(peak < LIMIT, "peak {peak} at the limit");
    drop(api);
    Ok(())
}

/// Events of `burn` handlers' sidecar at `ip` handed to its app, by the app's final answer
/// (`status`) or all of them.
async fn handled(ip: std::net::Ipv4Addr, status: Option<&str>) -> Result<f64> {
    let m = pod_metrics(ip, ports::ADMIN).await?;
    let mut labels = vec![("role", "manager"), ("event", "burn")];
    labels.extend(status.map(|s| ("status", s)));
    Ok(sample(&m, "switchyard_requests_total", &labels))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// The one pod of Manager `manager`, once it is Ready on the real node.
async fn ready_pod(env: &Env, client: &kube::Client, ns: &str, manager: &str) -> Result<Pod> {
    let selector = format!("switchyard.dev/manager={manager}");
    eventually(&format!("a Ready pod of {manager}"), timeout(), || async {
        let pods = live_pods(client, ns, &selector).await?;
        ensure!(pods.len() == 1, "{} pods", pods.len());
        check_running_on(&pods[0], &env.node.name)?;
        Ok(pods[0].clone())
    })
    .await
}

/// Ok when no container of the pod restarted or was ever terminated (OOMKilled or otherwise).
fn never_restarted(pod: &Pod) -> Result<()> {
    let status = pod.status.clone().unwrap_or_default();
    let all: Vec<&ContainerStatus> = status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .collect();
    ensure!(
        all.iter().any(|c| c.name == SIDECAR),
        "pod {} has no status of {SIDECAR}",
        pod.name_any()
    );
    for c in all {
        let last = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.reason.clone().unwrap_or_default());
        ensure!(
            c.restart_count == 0 && last.is_none(),
            "container {} of pod {} restarted {} times, last terminated: {last:?}",
            c.name,
            pod.name_any(),
            c.restart_count
        );
    }
    Ok(())
}

/// `PUBLISHES` publishes of `PAD` bytes, `CONCURRENCY` at once: what each was answered.
async fn flood(api: &LocalApi) -> Told {
    let body = Bytes::from(format!(
        "{{\"ms\":{NAP_MS},\"pad\":\"{}\"}}",
        "x".repeat(PAD)
    ));
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..PUBLISHES {
        // The semaphore is never closed.
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let (api, body) = (api.clone(), body.clone());
        tasks.spawn(async move {
            let answer = api.publish(&format!("flood-{i}"), body).await;
            drop(permit);
            answer
        });
    }
    let mut told = Told::default();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok((202, _))) => told.accepted += 1,
            Ok(Ok((503, retry_after))) => {
                told.refused += 1;
                if !retry_after {
                    told.refused_without_retry_after += 1;
                }
            }
            Ok(Ok((status, _))) => told.other.push(status.to_string()),
            Ok(Err(e)) => told.other.push(format!("{e:#}")),
            Err(e) => told.other.push(e.to_string()),
        }
    }
    told
}

/// `sender`'s local API, reached through a port-forward to its pod's loopback (through the API
/// server, the kubelet and containerd, as `kubectl port-forward` does), spoken as h2c so the flood's
/// publishes share one forwarded connection.
#[derive(Clone)]
struct LocalApi {
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    _forward: Arc<Forward>,
}

/// The port-forward and the connection's driver, stopped when the last clone goes.
struct Forward {
    forwarder: std::sync::Mutex<Option<Portforwarder>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.driver.abort();
        if let Ok(mut f) = self.forwarder.lock()
            && let Some(f) = f.take()
        {
            f.abort();
        }
    }
}

impl LocalApi {
    async fn connect(client: &kube::Client, ns: &str, pod: &str) -> Result<LocalApi> {
        let port = ports::MANAGER_LOCAL_API;
        let mut forwarder = Api::<Pod>::namespaced(client.clone(), ns)
            .portforward(pod, &[port])
            .await
            .with_context(|| format!("port-forward to {ns}/{pod}:{port}"))?;
        let stream = forwarder
            .take_stream(port)
            .with_context(|| format!("port-forward to {ns}/{pod} has no stream for {port}"))?;
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .context("h2c handshake with sender's local API over the port-forward")?;
        let driver = tokio::spawn(async move {
            if let Err(e) = conn.await {
                eprintln!("[e2e] the connection to sender's local API ended: {e}");
            }
        });
        Ok(LocalApi {
            send,
            _forward: Arc::new(Forward {
                forwarder: std::sync::Mutex::new(Some(forwarder)),
                driver,
            }),
        })
    }

    /// `POST /v1/publish/burn` with `body` and ce-id `id`: the status, and whether it carried
    /// Retry-After.
    async fn publish(&self, id: &str, body: Bytes) -> Result<(u16, bool)> {
        let req = hyper::Request::post("http://127.0.0.1/v1/publish/burn")
            .header("content-type", "application/json")
            .header("ce-id", id)
            .body(Full::new(body))
            .context("publish request")?;
        let mut send = self.send.clone();
        let resp = tokio::time::timeout(Duration::from_secs(30), send.send_request(req))
            .await
            .context("no answer to a publish in 30 s")?
            .context("publish over the port-forward")?;
        Ok((
            resp.status().as_u16(),
            resp.headers().contains_key(hyper::header::RETRY_AFTER),
        ))
    }
}
