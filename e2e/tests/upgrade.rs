//! Upgrade under load, and back (issue 39, item 5): the previous version (the pinned commit of
//! `switchyard_e2e::previous`, built by the harness and pushed to the cluster's registry) installed
//! with its own CRD and operator charts, its operator a pod on the real node with the chart's
//! JetStream; a mesh of real pods serving steady HTTP and WebSocket requests and durable publishes
//! from outside; `helm upgrade` to the current release from the registry, the CRDs first as
//! docs/upgrading.md says; then `helm rollback` to the previous version. Every mesh pod is rolled
//! twice (its sidecar image changes each time), under the load.
//!
//! What it holds the versions to: no request failed (HTTP and WebSocket answered 200, each durable
//! publish 202); every durable event answered 202 was stored (by its CloudEvents id, read back from
//! a durable subscriber's stream that no pod consumes) and delivered (the handler's stream, which
//! holds each event until a sidecar acknowledges it after the app's 2xx, drained to nothing, its
//! consumer acknowledging every event stored); and pods of both versions served side by side during
//! the roll (their request counters, read from each pod's metrics, rose in the same sampling round
//! while their sidecars ran the previous and the current image, as the pods' status reports).
//!
//! The client spreads its requests over the Ready router pods as a Service's endpoints would: a pod
//! leaves the list once it is terminating, and a request already sent to it must still be answered.

use anyhow::{Context, Result, ensure};
use async_nats::jetstream;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_e2e::client::{RouterClient, websocket_command};
use switchyard_e2e::lock::FileLock;
use switchyard_e2e::mesh_nats::{certified, connect};
use switchyard_e2e::node::Node;
use switchyard_e2e::operator::{Metrics, OperatorLock, refuse_foreign_operator};
use switchyard_e2e::pods::{check_running_on, live_pods, routed_ip};
use switchyard_e2e::previous::previous;
use switchyard_e2e::release::release;
use switchyard_e2e::upgrade_release as up;
use switchyard_e2e::{Cluster, TestNamespace, cluster, eventually, timeout};
use switchyard_identity::Ca;
use switchyard_protocol::durable::{self as plan, Lane};
use switchyard_protocol::{nats_access, ports};

const ROUTER_PODS: &str = "switchyard.dev/router=edge";
/// The mesh pods a roll replaces, and how many of each run when nothing rolls.
const MESH: [(&str, usize); 4] = [
    (ROUTER_PODS, 2),
    ("switchyard.dev/manager=handlers", 2),
    ("switchyard.dev/manager=front", 1),
    ("switchyard.dev/manager=orders", 1),
];

/// Two routers and two handler pods, so a roll keeps an old and a new pod of each serving at once;
/// `front` publishes `echo` durably for `orders` (its handler) and `ledger` (a durable subscriber
/// with no pods: its stream keeps every copy, for reading back by id). `APP` is the release's
/// example app by digest: a user's app image stays as it is across a Switchyard upgrade.
const MANIFESTS: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  replicas: 2
  listeners: {http: {port: 8080}, websocket: {path: /ws}}
  routes:
    - event: noop
      http: {method: GET, path: /noop}
    - event: noop
      websocket: {command: noop}
    - event: publish
      http: {method: POST, path: /publish}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: handlers}
spec:
  routerRef: {name: edge}
  replicas: 2
  events: [noop]
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - {name: app, image: "APP", command: [switchyard-example-app, --port, "8000"]}
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
        - {name: app, image: "APP", command: [switchyard-example-app, --port, "8000"]}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: orders}
spec:
  routerRef: {name: edge}
  events: [echo]
  delivery: durable
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - {name: app, image: "APP", command: [switchyard-example-app, --port, "8000"]}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: ledger}
spec:
  routerRef: {name: edge}
  replicas: 0
  events: [ledger.noop]
  subscriptions:
    - {event: echo, delivery: durable}
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - {name: app, image: "APP", command: [switchyard-example-app, --port, "8000"]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_under_load_and_rollback_lose_nothing() -> Result<()> {
    let cluster = cluster().await?;
    let node = Node::load()?;
    let t = Instant::now();
    let release = release(&node).await?;
    eprintln!(
        "[e2e] current release {} in the registry after {:.1}s",
        release.version,
        t.elapsed().as_secs_f64()
    );
    let previous = previous(&node).await?;
    eprintln!(
        "[e2e] previous version {} ({}) built and pushed in {:.1}s",
        previous.commit,
        previous.tag,
        previous.took.as_secs_f64()
    );
    // Operators watch every namespace: no other may run meanwhile.
    let _operator = OperatorLock::acquire().await?;
    up::remove(cluster).await?;
    refuse_foreign_operator(cluster).await?;
    let result = run(cluster, &node).await;
    if let Err(e) = up::remove(cluster).await {
        eprintln!("[e2e] warning: removing the upgrade release: {e:#}");
    }
    result
}

async fn run(cluster: &'static Cluster, node: &Node) -> Result<()> {
    let release = release(node).await?;
    let previous = previous(node).await?;
    // The shared CRD release goes back to the previous version's CRDs until step 1 of the upgrade:
    // other tests' chart installs wait on the charts lock meanwhile.
    let charts = FileLock::acquire("charts").await?;
    let installed = async {
        up::install_previous_crds(cluster, previous, &charts).await?;
        up::install_previous(cluster, node, release, previous).await
    }
    .await;
    if let Err(e) = installed {
        // Whatever failed, the other tests get the current CRDs back.
        up::upgrade_crds(cluster, release, &charts).await?;
        return Err(e);
    }
    let ns = mesh_namespace(cluster, node).await?;
    let app = &release.example_app.reference;
    cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f", "-"])
        .stdin(MANIFESTS.replace("APP", app))
        .ok()
        .await?;
    let old = &previous.sidecar.digest;
    let new = &release.sidecar.digest;
    let mesh = Mesh::new(cluster, &ns.name).await?;
    let warm = mesh.rolled_to(old, "the previous version's mesh").await;
    let warm = match warm {
        Ok(()) => mesh.warm_up().await,
        Err(e) => Err(e),
    };
    if let Err(e) = warm {
        up::upgrade_crds(cluster, release, &charts).await?;
        return Err(e);
    }

    let load = Load::start(mesh.clone());
    let sampler = Sampler::start(mesh.clone(), old.clone(), new.clone());
    load.wait_more(100).await?;
    let upgrade_start = load.elapsed();
    // docs/upgrading.md: 1. the CRDs, 2. the operator chart with the values again.
    up::upgrade_crds(cluster, release, &charts).await?;
    drop(charts);
    let t = Instant::now();
    up::upgrade(cluster, node, release).await?;
    mesh.rolled_to(new, "the current version's mesh").await?;
    let upgrade_end = load.elapsed();
    eprintln!(
        "[e2e] helm upgrade to {}: every mesh pod on the current sidecar {:.1}s later",
        release.version,
        t.elapsed().as_secs_f64()
    );
    // The load goes on a while over the rolled mesh, its last pods new.
    load.wait_more(100).await?;
    let rollback_start = load.elapsed();
    let t = Instant::now();
    up::rollback(cluster).await?;
    mesh.rolled_to(old, "the previous version's mesh again")
        .await?;
    let rollback_end = load.elapsed();
    eprintln!(
        "[e2e] helm rollback: every mesh pod on the previous sidecar {:.1}s later",
        t.elapsed().as_secs_f64()
    );
    // The load goes on a while over the rolled mesh, its last pods new.
    load.wait_more(100).await?;
    let outcomes = load.stop().await?;
    let rounds = sampler.stop().await?;

    let report = Report::of(&outcomes);
    eprintln!(
        "[e2e] load during upgrade and rollback: {}",
        report.counts()
    );
    let side_up = side_by_side(&rounds, upgrade_start, upgrade_end);
    let side_back = side_by_side(&rounds, rollback_start, rollback_end);
    eprintln!(
        "[e2e] sampling rounds in which pods of both versions served: {} during the upgrade, {} during the rollback (of {} rounds)",
        side_up.len(),
        side_back.len(),
        rounds.len()
    );
    for r in rounds.iter().filter(|r| !r.served.is_empty()).step_by(5) {
        eprintln!(
            "[e2e] round at {:.1}s: {}",
            r.at.as_secs_f64(),
            r.describe()
        );
    }
    eprintln!(
        "[e2e] upgrade {:.1}s..{:.1}s, rollback {:.1}s..{:.1}s",
        upgrade_start.as_secs_f64(),
        upgrade_end.as_secs_f64(),
        rollback_start.as_secs_f64(),
        rollback_end.as_secs_f64()
    );
    if let Some(r) = side_up.first() {
        eprintln!("[e2e] e.g. at {:.1}s: {}", r.at.as_secs_f64(), r.describe());
    }
    let failures = report.failures();
    ensure!(
        failures.is_empty(),
        "{} of {} requests failed: {}",
        failures.len(),
        outcomes.len(),
        failures.join("; ")
    );
    ensure!(
        !side_up.is_empty(),
        "no sampling round saw pods of the previous ({old}) and the current ({new}) sidecar both serving during the upgrade"
    );
    ensure!(
        !side_back.is_empty(),
        "no sampling round saw pods of both sidecars serving during the rollback"
    );
    let acked = report.acked_ids();
    mesh.check_durable(&acked).await
}

/// A namespace enforcing Pod Security `restricted` whose pods all go to the real node.
async fn mesh_namespace(cluster: &Cluster, node: &Node) -> Result<TestNamespace> {
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
    TestNamespace::create_with(cluster, "upgrade", labels, node.namespace_annotations()).await
}

/// The mesh namespace, its Ready router pods' addresses (kept current), and the cluster.
#[derive(Clone)]
struct Mesh {
    client: kube::Client,
    node: Arc<Node>,
    ns: String,
    routers: Arc<Mutex<Vec<Ipv4Addr>>>,
    routed: Arc<Mutex<BTreeSet<Ipv4Addr>>>,
}

impl Mesh {
    async fn new(cluster: &Cluster, ns: &str) -> Result<Mesh> {
        Ok(Mesh {
            client: cluster.client().await?,
            node: Arc::new(Node::load()?),
            ns: ns.to_string(),
            routers: Arc::new(Mutex::new(Vec::new())),
            routed: Arc::new(Mutex::new(BTreeSet::new())),
        })
    }

    /// Refreshes the Ready, not terminating, router pods' IPs (an EndpointSlice's view).
    async fn refresh_routers(&self) -> Result<()> {
        let pods = live_pods(&self.client, &self.ns, ROUTER_PODS).await?;
        let mut ips = Vec::new();
        for p in pods.iter().filter(|p| ready(p)) {
            let Some(ip) = pod_ip(p) else { continue };
            let known = self.routed.lock().map(|r| r.contains(&ip)).unwrap_or(false);
            if !known {
                routed_ip(&self.node, p).await?;
                if let Ok(mut r) = self.routed.lock() {
                    r.insert(ip);
                }
            }
            ips.push(ip);
        }
        if let Ok(mut r) = self.routers.lock() {
            *r = ips;
        }
        Ok(())
    }

    fn router(&self, n: usize) -> Option<Ipv4Addr> {
        let r = self.routers.lock().ok()?;
        (!r.is_empty()).then(|| r[n % r.len()])
    }

    /// Waits until every mesh pod runs the sidecar of `digest`, Ready on the node, the old ones gone.
    async fn rolled_to(&self, digest: &str, what: &str) -> Result<()> {
        eventually(what, timeout() * 6, || async {
            for (selector, want) in MESH {
                let pods = switchyard_e2e::pods::all_pods(&self.client, &self.ns, selector).await?;
                ensure!(
                    pods.len() == want,
                    "{} pods of {selector} (terminating ones included), want {want}",
                    pods.len()
                );
                for p in &pods {
                    ensure!(
                        p.metadata.deletion_timestamp.is_none(),
                        "{} terminating",
                        p.name_any()
                    );
                    check_running_on(p, &self.node.name)?;
                    let image = sidecar_image_id(p).unwrap_or_default();
                    ensure!(
                        image.ends_with(digest),
                        "{} runs sidecar {image:?}, not {digest}",
                        p.name_any()
                    );
                }
            }
            Ok(())
        })
        .await?;
        self.refresh_routers().await
    }

    /// Until each kind of request is answered: GET /noop 200, and a durable publish 202 (once the
    /// JetStream servers have loaded front's user: the kubelet's refresh of a mounted Secret can
    /// take a minute).
    async fn warm_up(&self) -> Result<()> {
        self.refresh_routers().await?;
        let addr = self.router(0).context("no Ready router pod")?;
        let http = RouterClient::new(SocketAddr::new(addr.into(), 8080));
        eventually("GET /noop answered 200", timeout(), || async {
            let a = http.get("/noop").await?;
            ensure!(a.status == 200, "GET /noop: {} {}", a.status, a.body);
            Ok(())
        })
        .await?;
        eventually("a durable publish answered 202", timeout() * 3, || async {
            let a = http.post("/publish", &publish_body(0)).await?;
            ensure!(a.status == 202, "POST /publish: {} {}", a.status, a.body);
            Ok(())
        })
        .await
    }

    /// Every durable event answered 202 stored (by id, in ledger's stream, which no pod consumes)
    /// and delivered (orders' stream, which keeps an event until a sidecar acknowledges it after
    /// its app's 2xx, drained; its consumer acknowledged every event stored).
    async fn check_durable(&self, acked: &BTreeSet<String>) -> Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), up::NAMESPACE);
        let ca = secrets
            .get("switchyard-ca")
            .await
            .context("the CA Secret")?;
        let text = |key: &str| {
            ca.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .with_context(|| format!("no {key} in the CA Secret"))
        };
        let ca = Ca::from_pem(&text("tls.crt")?, &text("tls.key")?, None)
            .map_err(|e| anyhow::anyhow!("the mesh CA: {e}"))?;
        let nats = live_pods(
            &self.client,
            up::NAMESPACE,
            "app.kubernetes.io/name=switchyard-nats",
        )
        .await?
        .into_iter()
        .next()
        .context("no NATS pod")?;
        let url = format!("tls://{}:4222", routed_ip(&self.node, &nats).await?);
        let as_manager = |name: &'static str| {
            let (url, ca, ns) = (url.clone(), &ca, self.ns.clone());
            async move {
                let store = certified(ca, &ns, name)?;
                let (nc, _) = connect(&url, ca, store, &nats_access::inbox_prefix(&ns, name))
                    .await
                    .with_context(|| format!("connecting to JetStream as {name}"))?;
                anyhow::Ok(jetstream::new(nc))
            }
        };

        // Stored: ledger's copies, read back one by one.
        let js = as_manager("ledger").await?;
        let mut ledger = js.get_stream(plan::stream_name(&self.ns, "ledger")).await?;
        let state = ledger.info().await?.state.clone();
        let mut stored = BTreeSet::new();
        for seq in state.first_sequence..=state.last_sequence {
            let m = ledger
                .get_raw_message(seq)
                .await
                .with_context(|| format!("ledger's stored event {seq}"))?;
            let id = m
                .headers
                .get("ce-id")
                .map(|v| v.as_str().to_string())
                .with_context(|| format!("ledger's event {seq} has no ce-id"))?;
            stored.insert(id);
        }
        let missing: Vec<&String> = acked.difference(&stored).collect();
        ensure!(
            missing.is_empty(),
            "{} of {} durable events answered 202 are not stored: {missing:?}",
            missing.len(),
            acked.len()
        );

        // Delivered: orders' stream drained, its consumer having acknowledged every stored event.
        let js = as_manager("orders").await?;
        let stream_name = plan::stream_name(&self.ns, "orders");
        let consumer = plan::consumer_name("echo", Lane::Unordered);
        let (last, ack_floor) = eventually(
            "orders' stream drained by its sidecars",
            timeout() * 2,
            || async {
                let mut s = js.get_stream(&stream_name).await?;
                let st = s.info().await?.state.clone();
                let c = s.consumer_info(&consumer).await?;
                ensure!(
                    st.messages == 0 && c.num_pending == 0 && c.num_ack_pending == 0,
                    "{} events kept, consumer: {} pending, {} unacknowledged",
                    st.messages,
                    c.num_pending,
                    c.num_ack_pending
                );
                Ok((st.last_sequence, c.ack_floor.stream_sequence))
            },
        )
        .await?;
        ensure!(
            ack_floor == last,
            "orders' consumer acknowledged up to {ack_floor} of {last} stored"
        );
        ensure!(
            last == state.last_sequence,
            "orders' stream stored {last} events, ledger's {}: a publish stored for one only",
            state.last_sequence
        );
        eprintln!(
            "[e2e] durable: {} answered 202, {} distinct ids stored (ledger), {last} stored and {ack_floor} acknowledged after delivery (orders), 0 lost",
            acked.len(),
            stored.len(),
        );
        Ok(())
    }
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ip(p: &Pod) -> Option<Ipv4Addr> {
    p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

/// The image the sidecar container runs, by digest (`repo@sha256:…`), from the pod's status.
fn sidecar_image_id(p: &Pod) -> Option<String> {
    let s = p.status.as_ref()?;
    s.init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .find(|c| c.name == "switchyard-sidecar")
        .map(|c| c.image_id.clone())
}

fn publish_body(n: usize) -> String {
    json!({"event": "echo", "data": {"n": n}}).to_string()
}

/// One request of the load.
#[derive(Clone, Debug)]
struct Outcome {
    kind: &'static str,
    at: Duration,
    ok: bool,
    /// Status, or the failure.
    what: String,
    /// A durable publish's CloudEvents id, when answered 202.
    id: Option<String>,
    /// 503s a durable publish got (and sent again) before its last answer.
    refused: usize,
}

/// Steady load from outside: two HTTP clients, one WebSocket client (a connection per command)
/// and one durable publisher, each to the Ready routers in turn, bounded to 20 minutes.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    start: Instant,
    tasks: Vec<tokio::task::JoinHandle<Vec<Outcome>>>,
}

const LOAD_LIMIT: Duration = Duration::from_secs(20 * 60);

impl Load {
    fn start(mesh: Mesh) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        // The endpoints, refreshed as a Service's would be.
        {
            let (mesh, stop) = (mesh.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) && start.elapsed() < LOAD_LIMIT {
                    if let Err(e) = mesh.refresh_routers().await {
                        eprintln!("[e2e] refreshing the router endpoints: {e:#}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Vec::new()
            }));
        }
        for (kind, pause) in [
            ("http", Duration::from_millis(20)),
            ("http", Duration::from_millis(20)),
            ("websocket", Duration::from_millis(50)),
            ("durable", Duration::from_millis(100)),
        ] {
            let (mesh, stop, sent) = (mesh.clone(), stop.clone(), sent.clone());
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) && start.elapsed() < LOAD_LIMIT {
                    n += 1;
                    let at = start.elapsed();
                    let (ok, what, id, refused) = one(kind, &mesh, n).await;
                    out.push(Outcome {
                        kind,
                        at,
                        ok,
                        what,
                        id,
                        refused,
                    });
                    sent.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                }
                out
            }));
        }
        Load {
            stop,
            sent,
            start,
            tasks,
        }
    }

    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Until `n` more requests than now have been answered (or failed), within a minute.
    async fn wait_more(&self, n: usize) -> Result<()> {
        let want = self.sent.load(Ordering::Relaxed) + n;
        let within = Duration::from_secs(60);
        let start = Instant::now();
        while self.sent.load(Ordering::Relaxed) < want {
            let sent = self.sent.load(Ordering::Relaxed);
            ensure!(
                start.elapsed() < within,
                "only {} of {n} more requests finished within {within:?}",
                n - (want - sent)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn stop(self) -> Result<Vec<Outcome>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.context("a load task panicked")?);
        }
        all.sort_by_key(|o| o.at);
        Ok(all)
    }
}

/// The HTTP address of the `n`th Ready router pod now, as a Service would pick an endpoint.
fn router_addr(mesh: &Mesh, n: usize) -> Option<SocketAddr> {
    mesh.router(n).map(|ip| SocketAddr::new(ip.into(), 8080))
}

/// One request of `kind` to a Ready router pod: (ok, status or failure, durable id, refusals
/// before it).
async fn one(kind: &str, mesh: &Mesh, n: usize) -> (bool, String, Option<String>, usize) {
    if kind == "durable" {
        return publish(mesh, n).await;
    }
    let Some(addr) = router_addr(mesh, n) else {
        return (false, "no Ready router pod".to_string(), None, 0);
    };
    let limit = Duration::from_secs(30);
    match kind {
        "http" => match RouterClient::new(addr)
            .send("GET", "/noop", None, limit)
            .await
        {
            Ok(a) => (
                a.status == 200,
                format!("{} from {addr}", a.status),
                None,
                0,
            ),
            Err(e) => (false, format!("{e:#} ({addr})"), None, 0),
        },
        "websocket" => {
            match websocket_command(addr, "/ws", json!({"command": "noop", "id": n})).await {
                Ok(r) => (
                    r["status"] == 200 && r["id"] == n,
                    format!("{r} from {addr}"),
                    None,
                    0,
                ),
                Err(e) => (false, format!("{e:#} ({addr})"), None, 0),
            }
        }
        other => (false, format!("no request of kind {other}"), None, 0),
    }
}

/// A durable publish as a client of the delivery contract makes it: a 503 (the event store not
/// reachable: the one JetStream server restarts when its pod is replaced) is not accepted, and is
/// sent again, for at most a minute, each time to a router pod Ready then (a new connection through
/// a Service is balanced anew: the pod that answered 503 may have left since, and a retry to its
/// address would time out connecting to a pod that is gone). (ok, last status or failure, id if
/// answered 202, refusals).
async fn publish(mesh: &Mesh, n: usize) -> (bool, String, Option<String>, usize) {
    let body = publish_body(n);
    let start = Instant::now();
    let mut refused = 0;
    loop {
        let Some(addr) = router_addr(mesh, n + refused) else {
            return (false, "no Ready router pod".to_string(), None, refused);
        };
        let what = match RouterClient::new(addr)
            .send("POST", "/publish", Some(&body), Duration::from_secs(30))
            .await
        {
            Ok(a) if a.status == 202 => {
                let id = serde_json::from_str::<serde_json::Value>(&a.body)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_string));
                return match id {
                    Some(id) => (true, "202".into(), Some(id), refused),
                    None => (
                        false,
                        format!("202 without an id: {}", a.body),
                        None,
                        refused,
                    ),
                };
            }
            Ok(a) if a.status == 503 && start.elapsed() < Duration::from_secs(60) => {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Ok(a) => format!("{} {} from {addr}", a.status, a.body),
            Err(e) => format!("{e:#} ({addr})"),
        };
        return (false, what, None, refused);
    }
}

/// Counts of a load run.
struct Report<'a> {
    outcomes: &'a [Outcome],
}

impl<'a> Report<'a> {
    fn of(outcomes: &'a [Outcome]) -> Report<'a> {
        Report { outcomes }
    }

    fn counts(&self) -> String {
        let mut by: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
        for o in self.outcomes {
            let e = by.entry(o.kind).or_default();
            e.0 += 1;
            if !o.ok {
                e.1 += 1;
            }
            e.2 += o.refused;
        }
        by.iter()
            .map(|(k, (n, failed, refused))| {
                let again = if *refused > 0 {
                    format!(" ({refused} answers 503 sent again)")
                } else {
                    String::new()
                };
                format!("{k}: {n} sent, {failed} failed{again}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn failures(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|o| !o.ok)
            .map(|o| format!("{} at {:.2}s: {}", o.kind, o.at.as_secs_f64(), o.what))
            .collect()
    }

    fn acked_ids(&self) -> BTreeSet<String> {
        self.outcomes.iter().filter_map(|o| o.id.clone()).collect()
    }
}

/// Which sidecar a pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    Previous,
    Current,
    Other,
}

/// One sampling round: the pods whose request counters rose since the round before.
#[derive(Debug)]
struct Round {
    at: Duration,
    served: Vec<(String, Version)>,
}

impl Round {
    fn describe(&self) -> String {
        self.served
            .iter()
            .map(|(p, v)| format!("{p} ({v:?})"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Rounds within [from, to] in which pods of both versions served.
fn side_by_side(rounds: &[Round], from: Duration, to: Duration) -> Vec<&Round> {
    rounds
        .iter()
        .filter(|r| r.at >= from && r.at <= to)
        .filter(|r| {
            let has = |v| r.served.iter().any(|(_, x)| *x == v);
            has(Version::Previous) && has(Version::Current)
        })
        .collect()
}

/// Reads every mesh pod's request counter (`switchyard_requests_total` on its admin port) about
/// four times a second, with the sidecar image its status reports.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Round>>,
}

impl Sampler {
    fn start(mesh: Mesh, previous: String, current: String) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let mut last: HashMap<String, f64> = HashMap::new();
            let mut rounds = Vec::new();
            while !flag.load(Ordering::Relaxed) && start.elapsed() < LOAD_LIMIT {
                let at = start.elapsed();
                let mut served = Vec::new();
                let pods = mesh_pods(&mesh).await.unwrap_or_default();
                for p in pods {
                    let (Some(ip), Some(image)) = (pod_ip(&p), sidecar_image_id(&p)) else {
                        continue;
                    };
                    let Ok(n) = requests(ip).await else { continue };
                    let name = p.name_any();
                    let before = last.insert(name.clone(), n);
                    if before.is_some_and(|b| n > b) {
                        let v = if image.ends_with(&previous) {
                            Version::Previous
                        } else if image.ends_with(&current) {
                            Version::Current
                        } else {
                            Version::Other
                        };
                        served.push((name, v));
                    }
                }
                rounds.push(Round { at, served });
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            rounds
        });
        Sampler { stop, task }
    }

    async fn stop(self) -> Result<Vec<Round>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.context("the sampler panicked")
    }
}

async fn mesh_pods(mesh: &Mesh) -> Result<Vec<Pod>> {
    let mut all = Vec::new();
    for (selector, _) in MESH {
        let pods: Api<Pod> = Api::namespaced(mesh.client.clone(), &mesh.ns);
        all.extend(
            pods.list(&ListParams::default().labels(selector))
                .await?
                .items,
        );
    }
    Ok(all)
}

/// The sum of a sidecar's `switchyard_requests_total` samples.
async fn requests(ip: Ipv4Addr) -> Result<f64> {
    let a = RouterClient::new(SocketAddr::new(ip.into(), ports::ADMIN))
        .send("GET", "/metrics", None, Duration::from_secs(2))
        .await?;
    ensure!(a.status == 200, "{ip} /metrics: {}", a.status);
    Ok(Metrics(a.body)
        .samples("switchyard_requests_total")
        .into_iter()
        .map(|(_, v)| v)
        .sum())
}
