//! `cargo run -p switchyard-e2e --bin scale-control-plane -- --managers N --pods-per-manager K
//! --routers R`: the operator's control plane at scale on the e2e cluster (a benchmark, not a test).
//!
//! Adds kwok nodes for the pods, starts the operator (`SWITCHYARD_OPERATOR_BIN` picks a release
//! build; without it the debug build is used), applies a few Routers and N Managers of K replicas
//! each, waits for the N×K pods to be Ready, and opens R simulated router sidecars: real gRPC
//! clients following `WatchRoutes` in-process (spread over the Routers). Then, for `--duration`
//! seconds at `--rate` changes per second, it flips a pod Ready/NotReady (status patch; kwok leaves
//! it) or scales one of the Managers kept for that, and times each change until every stream of
//! the affected Router holds it. Meanwhile one load report per pod per second goes to `ReportLoad`.
//! A quarter of the Managers (`--subscribing-every 4`) also subscribe to another Manager's event
//! type on the same Router, so each Router's table carries their subscriber routes
//! (`<event>@<manager>`) beside the handlers', a flip of a subscriber's pod is timed on its
//! subscriber route, and its pods report load under the subscription too.
//! Records bytes per stream, the autoscaler's tick time, the operator's CPU and peak RSS,
//! reconciles per second and the API server's request counts; writes
//! `<out>/<label>.json` and `<out>/propagation.svg` (every run in `<out>`).

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use switchyard_crds::{Manager, Router};
use switchyard_e2e::operator::OperatorLock;
use switchyard_e2e::scale::api_watch::{self, ApiWatch};
use switchyard_e2e::scale::stats::{self, Summary};
use switchyard_e2e::scale::streams::{self, Condition, Streams};
use switchyard_e2e::scale::{plot, procfs};
use switchyard_e2e::{Metrics, Operator, OperatorOpts, TestNamespace, cluster, fixtures};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

/// Frame port of manager sidecars, as the routing tables list it.
const FRAME_PORT: u16 = 7070;
/// Pods per added kwok node.
const PODS_PER_NODE: usize = 500;
/// Every tenth Manager is scaled by the benchmark (scaling off); the others by nobody (scaling on,
/// min = max, so the autoscaler decides over them every tick but never moves them).
const SCALED_EVERY: usize = 10;

#[derive(Parser, Debug)]
#[command(
    about = "Measures the operator's control plane with many Managers, pods and router streams"
)]
struct Args {
    /// Managers (N).
    #[arg(long, default_value_t = 100)]
    managers: usize,
    /// Ready pods per Manager (K).
    #[arg(long, default_value_t = 10)]
    pods_per_manager: usize,
    /// Simulated router sidecar streams (R).
    #[arg(long, default_value_t = 50)]
    routers: usize,
    /// Router objects the Managers and streams are spread over.
    #[arg(long, default_value_t = 4)]
    router_objects: usize,
    /// Changes (pod flips and Manager scales) per second during the churn.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Seconds of churn.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Every this many Managers, one also subscribes to another Manager's event type (0: none).
    #[arg(long, default_value_t = 4)]
    subscribing_every: usize,
    /// Send no load reports.
    #[arg(long)]
    no_reports: bool,
    /// Ask for whole tables only (as older sidecars do) instead of deltas.
    #[arg(long)]
    whole_tables: bool,
    /// Folder of the JSON and SVG results.
    #[arg(long, default_value = "target/scale-control-plane")]
    out: PathBuf,
    /// Name of this run in the results (default: N-K-R and the table mode).
    #[arg(long)]
    label: Option<String>,
    /// Seconds allowed for the pods to become Ready.
    #[arg(long, default_value_t = 3600)]
    rollout_timeout: u64,
    /// Namespace to use, reusing the Routers, Managers and pods a `--keep` run left there (another
    /// operator build can then be measured on the same objects without a new rollout). Default: a
    /// fresh namespace, deleted at the end.
    #[arg(long)]
    namespace: Option<String>,
    /// Leave the namespace and the added kwok nodes in place at the end.
    #[arg(long)]
    keep: bool,
}

/// A manager pod as the benchmark knows it.
#[derive(Clone, Debug)]
struct PodInfo {
    name: String,
    addr: String,
    manager: usize,
    ready: bool,
    /// Its Manager's subscription, which it reports load under too.
    subscribed: Option<String>,
}

fn event(i: usize) -> String {
    format!("ev{i}")
}

/// The event type Manager `i` subscribes to, if it is one of the subscribing ones: the next
/// Manager's on the same Router (Managers are spread over the Routers round-robin).
fn subscribes_to(i: usize, args: &Args) -> Option<String> {
    let every = args.subscribing_every;
    let j = (i + args.router_objects.max(1)) % args.managers.max(1);
    (every > 0 && i % every == 1 % every && j != i).then(|| event(j))
}

fn manager_yaml(i: usize, args: &Args) -> String {
    let (routers, k) = (args.router_objects, args.pods_per_manager);
    let scaled_by_bench = i % SCALED_EVERY == SCALED_EVERY - 1;
    let subscribed = subscribes_to(i, args);
    let scaling = if scaled_by_bench {
        String::new()
    } else {
        let sub_target = subscribed
            .as_ref()
            .map(|e| format!("      {e}: {{targetInFlight: 1000}}\n"))
            .unwrap_or_default();
        format!(
            "  scaling:\n    enabled: true\n    minReplicas: {k}\n    maxReplicas: {k}\n    targets:\n      {}: {{targetInFlight: 1000}}\n{sub_target}",
            event(i)
        )
    };
    let subscriptions = subscribed
        .map(|e| format!("  subscriptions:\n    - event: {e}\n"))
        .unwrap_or_default();
    fixtures::manager(
        &format!("m{i}"),
        &format!("r{}", i % routers),
        &format!("[{}]", event(i)),
        &format!("  replicas: {k}\n{subscriptions}{scaling}"),
    )
}

fn node(i: usize) -> Result<Node> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("scale-node-{i}"),
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": format!("scale-node-{i}"), "switchyard.dev/scale-bench": "true"},
        },
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("10.241.{}.{}", i / 250, i % 250 + 1)}],
            "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": (PODS_PER_NODE + 10).to_string()},
            "capacity": {"cpu": "1000", "memory": "4Ti", "pods": (PODS_PER_NODE + 10).to_string()},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }))?)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

/// Sum of `apiserver_request_total` by "verb resource".
async fn api_requests(client: &kube::Client) -> Result<BTreeMap<String, f64>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut out = BTreeMap::new();
    for (labels, v) in Metrics(text).samples("apiserver_request_total") {
        let key = format!(
            "{} {}",
            labels.get("verb").map_or("", String::as_str),
            labels.get("resource").map_or("", String::as_str)
        );
        *out.entry(key).or_insert(0.0) += v;
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let label = args.label.clone().unwrap_or_else(|| {
        format!(
            "N{}-K{}-R{}{}",
            args.managers,
            args.pods_per_manager,
            args.routers,
            if args.whole_tables { "-whole" } else { "" }
        )
    });
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let total_pods = args.managers * args.pods_per_manager;

    // Nodes for the pods (the cluster's two default ones hold 110 each).
    let nodes: Api<Node> = Api::all(client.clone());
    let node_count = total_pods.div_ceil(PODS_PER_NODE);
    for i in 0..node_count {
        match nodes.create(&PostParams::default(), &node(i)?).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating a kwok node"),
        }
    }
    eprintln!("[scale] {node_count} kwok nodes for {total_pods} pods");

    let (ns_name, fresh) = match &args.namespace {
        Some(name) => {
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
            let obj = serde_json::from_value(json!({"metadata": {"name": name}}))?;
            create_or_keep(&api, &obj).await?;
            (name.clone(), None)
        }
        None => {
            let ns = TestNamespace::create(c, "scale").await?;
            (ns.name.clone(), Some(ns))
        }
    };
    let op = Operator::start(c, OperatorOpts::new("scale-bench")).await?;
    let cp_url = format!("http://127.0.0.1:{}", op.control_plane_port);
    let result = run(&args, &label, &client, &ns_name, &op, &cp_url, total_pods).await;
    if let Err(e) = &result {
        eprintln!(
            "[scale] failed: {e:#}\n--- operator log ---\n{}",
            op.log_tail(40)
        );
    }
    op.stop().await?;
    if args.keep {
        if let Some(mut ns) = fresh {
            ns.keep();
        }
        eprintln!("[scale] kept namespace {ns_name} and {node_count} kwok nodes");
        return result;
    }
    match fresh {
        Some(ns) => drop(ns),
        None => {
            let _ = c
                .kubectl()
                .args(["delete", "namespace", &ns_name, "--wait=false"])
                .ok()
                .await;
        }
    }
    for i in 0..node_count {
        let _ = nodes
            .delete(&format!("scale-node-{i}"), &DeleteParams::default())
            .await;
    }
    result
}

/// Creates `obj`, taking an existing one of the same name as it is.
async fn create_or_keep<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn run(
    args: &Args,
    label: &str,
    client: &kube::Client,
    ns: &str,
    op: &Operator,
    cp_url: &str,
    total_pods: usize,
) -> Result<()> {
    let k = args.pods_per_manager;
    let setup = Instant::now();
    let routers: Api<Router> = Api::namespaced(client.clone(), ns);
    for r in 0..args.router_objects {
        let obj: Router = serde_saphyr::from_str(&fixtures::router(&format!("r{r}")))?;
        create_or_keep(&routers, &obj).await?;
    }
    let managers: Api<Manager> = Api::namespaced(client.clone(), ns);
    let created = futures::stream::iter(0..args.managers)
        .map(|i| {
            let managers = managers.clone();
            async move {
                let m: Manager = serde_saphyr::from_str(&manager_yaml(i, args))?;
                create_or_keep(&managers, &m).await?;
                // A kept run may have left it scaled, and have had no (or other) subscriptions.
                let spec = serde_json::to_value(&m.spec)?;
                let patch = json!({"spec": {
                    "replicas": k,
                    "subscriptions": spec.get("subscriptions"),
                    "scaling": spec.get("scaling"),
                }});
                managers
                    .patch(
                        &format!("m{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for r in created {
        r?;
    }
    eprintln!(
        "[scale] {} Managers applied in {:?}; waiting for {total_pods} Ready pods",
        args.managers,
        setup.elapsed()
    );
    // A kept run may have left pods NotReady.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in pods_api
        .list(&ListParams::default().labels("app.kubernetes.io/name=switchyard-manager"))
        .await?
        .items
    {
        let flipped = p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().is_some_and(|s| {
                s.pod_ip.is_some()
                    && s.conditions.as_ref().is_some_and(|cs| {
                        cs.iter().any(|c| c.type_ == "Ready" && c.status != "True")
                    })
            });
        if flipped {
            // Gone meanwhile (a kept scale-down) is fine.
            let patch = Patch::Strategic(ready_patch(true));
            match pods_api
                .patch_status(&p.name_any(), &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(args.rollout_timeout);
    loop {
        let ready: i32 = deployments
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|d| d.status.as_ref()?.ready_replicas)
            .sum();
        if usize::try_from(ready).unwrap_or(0) >= total_pods {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of {total_pods} pods Ready after {:?}",
                setup.elapsed()
            );
        }
        eprintln!(
            "[scale] {ready}/{total_pods} Ready after {:?}",
            setup.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let rollout = setup.elapsed();
    eprintln!("[scale] all pods Ready after {rollout:?}");

    let mut pods: Vec<PodInfo> = pods_api
        .list(&ListParams::default().labels("app.kubernetes.io/name=switchyard-manager"))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let manager = p.labels().get("switchyard.dev/manager")?;
            let manager: usize = manager.strip_prefix('m')?.parse().ok()?;
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some(PodInfo {
                name: p.name_any(),
                addr: format!("{ip}:{FRAME_PORT}"),
                manager,
                ready: true,
                subscribed: subscribes_to(manager, args),
            })
        })
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));

    // The simulated router sidecars.
    let streams = Streams::new(args.routers, args.router_objects);
    let mut tasks = Vec::new();
    for s in 0..args.routers {
        tasks.push(tokio::spawn(streams::follow(
            streams.clone(),
            s,
            cp_url.to_owned(),
            ns.to_owned(),
            format!("r{}", streams.router_of[s]),
            !args.whole_tables,
        )));
    }
    let synced_by = Instant::now() + Duration::from_secs(120);
    while streams.synced() < args.routers {
        if Instant::now() > synced_by {
            bail!(
                "{} of {} streams got a table",
                streams.synced(),
                args.routers
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let initial_bytes: u64 = streams
        .stats
        .iter()
        .map(|s| s.bytes.load(Ordering::Relaxed))
        .sum();

    // One load report per pod per second, over a few streams.
    if !args.no_reports {
        let per_stream = pods.len().div_ceil(16).max(1);
        for chunk in pods.chunks(per_stream) {
            let (url, ns, chunk) = (cp_url.to_owned(), ns.to_owned(), chunk.to_vec());
            tasks.push(tokio::spawn(async move {
                if let Err(e) = report(url, ns, chunk).await {
                    eprintln!("[scale] load reports stopped: {e:#}");
                }
            }));
        }
    }
    // The operator's start-up reconciles of every Manager must be over before measuring: wait until
    // its reconcile counter grows by fewer than 5 a second, for 5 s in a row (at most 10 min).
    let quiet_by = Instant::now() + Duration::from_secs(600);
    let mut quiet = 0;
    let mut last = op
        .metrics()
        .await?
        .sum("switchyard_operator_reconciles_total");
    while quiet < 5 && Instant::now() < quiet_by {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = op
            .metrics()
            .await?
            .sum("switchyard_operator_reconciles_total");
        quiet = if now - last < 5.0 { quiet + 1 } else { 0 };
        last = now;
    }
    eprintln!("[scale] operator settled ({last} reconciles); churn starts");

    let cpu0 = procfs::cpu_seconds(op.pid())?;
    let m0 = op.metrics().await?;
    let api0 = api_requests(client).await?;
    let bytes0: u64 = streams
        .stats
        .iter()
        .map(|s| s.bytes.load(Ordering::Relaxed))
        .sum();
    let msgs0: u64 = streams
        .stats
        .iter()
        .map(|s| s.messages.load(Ordering::Relaxed))
        .sum();
    let whole0: u64 = streams
        .stats
        .iter()
        .map(|s| s.whole.load(Ordering::Relaxed))
        .sum();

    // The benchmark's own pod watch, to split each flip's time at the API server.
    let api_watch = Arc::new(ApiWatch::default());
    tasks.push(tokio::spawn(api_watch::run(
        pods_api.clone(),
        api_watch.clone(),
    )));
    let listed_by = Instant::now() + Duration::from_secs(120);
    while !api_watch.listed() {
        if Instant::now() > listed_by {
            bail!("the benchmark's pod watch did not list the pods in 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The churn.
    let mut rng = fastrand::Rng::with_seed(16);
    let scaled: Vec<usize> = (0..args.managers)
        .filter(|i| i % SCALED_EVERY == SCALED_EVERY - 1)
        .collect();
    let mut replicas: HashMap<usize, usize> = scaled.iter().map(|i| (*i, k)).collect();
    // Pods of the Managers the benchmark scales are left alone: a scale-down may delete one that a
    // flip is waiting on.
    let flippable: Vec<usize> = (0..pods.len())
        .filter(|i| !replicas.contains_key(&pods[*i].manager))
        .collect();
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut busy: HashMap<String, usize> = HashMap::new();
    let mut kinds: HashMap<usize, &'static str> = HashMap::new();
    let mut ticks: Vec<f64> = Vec::new();
    let mut rss_samples: Vec<f64> = Vec::new();
    let period = Duration::from_secs_f64(1.0 / args.rate.max(0.01));
    let mut interval = tokio::time::interval(period);
    let churn = Instant::now();
    let mut last_sample = Instant::now();
    let mut changes = 0usize;
    while churn.elapsed() < Duration::from_secs(args.duration) {
        interval.tick().await;
        let pending = streams.pending_ids();
        busy.retain(|_, id| pending.contains(id));
        if last_sample.elapsed() >= Duration::from_secs(1) {
            last_sample = Instant::now();
            if let Some(t) = op
                .metrics()
                .await?
                .value("switchyard_operator_autoscale_last_tick_seconds")
            {
                ticks.push(t * 1000.0);
            }
            rss_samples.push(procfs::memory(op.pid())?.0 as f64 / (1 << 20) as f64);
        }
        let scale_now = !scaled.is_empty() && rng.usize(..10) == 0;
        if scale_now {
            let m = scaled[rng.usize(..scaled.len())];
            let key = format!("manager m{m}");
            if busy.contains_key(&key) {
                continue;
            }
            let cur = replicas[&m];
            let next = if cur > k { cur - 1 } else { cur + 1 };
            let id = streams.expect(m % args.router_objects, &event(m), Condition::Count(next));
            kinds.insert(id, "scale");
            busy.insert(key, id);
            // Sent without waiting for the answer, so a slow API server does not lower the rate.
            let managers = managers.clone();
            let failed = failed.clone();
            tokio::spawn(async move {
                let patch = Patch::Merge(json!({"spec": {"replicas": next}}));
                if let Err(e) = managers
                    .patch(&format!("m{m}"), &PatchParams::default(), &patch)
                    .await
                {
                    eprintln!("[scale] scaling m{m}: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            });
            replicas.insert(m, next);
        } else {
            let i = flippable[rng.usize(..flippable.len())];
            if busy.contains_key(&pods[i].name) {
                continue;
            }
            let p = &mut pods[i];
            p.ready = !p.ready;
            // A subscriber's pod is timed on its subscriber route (the same delta carries both).
            let route = match subscribes_to(p.manager, args) {
                Some(e) => format!("{e}@m{}", p.manager),
                None => event(p.manager),
            };
            let subscriber = route.contains('@');
            let id = streams.expect(
                p.manager % args.router_objects,
                &route,
                Condition::Endpoint {
                    addr: p.addr.clone(),
                    present: p.ready,
                },
            );
            kinds.insert(
                id,
                if subscriber {
                    "flip-subscriber"
                } else {
                    "flip"
                },
            );
            api_watch.expect(&p.name, p.ready, id);
            busy.insert(p.name.clone(), id);
            let (pods_api, name, ready) = (pods_api.clone(), p.name.clone(), p.ready);
            let failed = failed.clone();
            tokio::spawn(async move {
                let patch = Patch::Strategic(ready_patch(ready));
                if let Err(e) = pods_api
                    .patch_status(&name, &PatchParams::default(), &patch)
                    .await
                {
                    eprintln!("[scale] flipping {name}: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        changes += 1;
    }
    let churned = churn.elapsed();
    let cpu1 = procfs::cpu_seconds(op.pid())?;
    let m1 = op.metrics().await?;
    let api1 = api_requests(client).await?;
    // Changes still in flight get a while to arrive; what never does is counted.
    let drain = Instant::now();
    while streams.pending() > 0 && drain.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unfinished = streams.pending();
    let (_, peak_rss) = procfs::memory(op.pid())?;
    for t in &tasks {
        t.abort();
    }

    let done = streams.take_done();
    let watched = api_watch.seen();
    let mut flip_max = Vec::new();
    let mut flip_each = Vec::new();
    let mut flip_api = Vec::new();
    let mut flip_after_api = Vec::new();
    let mut scale_max = Vec::new();
    let mut subscriber_flip_max = Vec::new();
    for d in &done {
        let slowest = d.per_stream.iter().copied().max();
        let max = slowest.map_or(0.0, ms);
        let kind = kinds.get(&d.id).copied();
        if kind == Some("flip-subscriber") {
            subscriber_flip_max.push(max);
        }
        match kind {
            Some("scale") => scale_max.push(max),
            _ => {
                flip_max.push(max);
                flip_each.extend(d.per_stream.iter().map(|x| ms(*x)));
                if let (Some(api), Some(slowest)) = (watched.get(&d.id), slowest) {
                    flip_api.push(ms(*api));
                    flip_after_api.push(ms(slowest.saturating_sub(*api)));
                }
            }
        }
    }
    let sum =
        |f: fn(&streams::StreamStats) -> u64| -> u64 { streams.stats.iter().map(|s| f(s)).sum() };
    let bytes = sum(|s| s.bytes.load(Ordering::Relaxed)) - bytes0;
    let messages = sum(|s| s.messages.load(Ordering::Relaxed)) - msgs0;
    let whole = sum(|s| s.whole.load(Ordering::Relaxed)) - whole0;
    let reconnects = sum(|s| s.reconnects.load(Ordering::Relaxed));
    let subscriber_routes = sum(|s| s.subscriber_routes.load(Ordering::Relaxed));
    let subscribing = (0..args.managers)
        .filter(|i| subscribes_to(*i, args).is_some())
        .count();
    let affected = args.routers as f64 / args.router_objects.max(1) as f64;
    let delta = |name: &str| m1.sum(name) - m0.sum(name);
    let mut api: Vec<(String, f64)> = api1
        .iter()
        .map(|(k, v)| (k.clone(), v - api0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    api.sort_by(|a, b| b.1.total_cmp(&a.1));
    let api_total: f64 = api.iter().map(|(_, v)| v).sum();
    let secs = churned.as_secs_f64();
    let mut sorted = flip_each.clone();
    sorted.sort_by(f64::total_cmp);
    let cdf: Vec<f64> = (1..=200)
        .map(|q| stats::quantile(&sorted, f64::from(q) / 200.0))
        .collect();
    let summary = |v: &[f64]| -> Summary { stats::summarize(v) };
    let report = json!({
        "label": label,
        "managers": args.managers,
        "pods_per_manager": k,
        "pods": total_pods,
        "streams": args.routers,
        "router_objects": args.router_objects,
        "subscribing_managers": subscribing,
        "subscriber_routes_per_stream": subscriber_routes as f64 / args.routers.max(1) as f64,
        "deltas": !args.whole_tables,
        "rate_per_s": args.rate,
        "churn_s": secs,
        "changes": changes,
        "setup": {
            "rollout_s": rollout.as_secs_f64(),
            "initial_table_bytes_per_stream": initial_bytes as f64 / args.routers.max(1) as f64,
        },
        "propagation_ms": {
            "flip_all_streams": summary(&flip_max),
            // The flips of subscribers' pods, timed on their subscriber routes (among the above).
            "flip_subscriber_route_all_streams": summary(&subscriber_flip_max),
            "flip_per_stream": summary(&flip_each),
            // Patch sent until the benchmark's own pod watch showed it (the API server's path).
            "flip_api_server_watch": summary(&flip_api),
            // From there until the slowest stream had it (the operator's part, and the streams').
            "flip_after_api_server_watch": summary(&flip_after_api),
            "scale_all_streams_incl_scheduling": summary(&scale_max),
            "unfinished": unfinished,
            "failed_requests": failed.load(Ordering::Relaxed),
        },
        "bytes": {
            "during_churn": bytes,
            "per_change_all_streams": bytes as f64 / changes.max(1) as f64,
            "per_change_per_affected_stream": bytes as f64 / changes.max(1) as f64 / affected,
            "messages": messages,
            "whole_tables_during_churn": whole,
            "reconnects": reconnects.saturating_sub(0),
        },
        "autoscaler_tick_ms": summary(&ticks),
        "load_reports_per_s": if args.no_reports { 0.0 } else { delta("switchyard_operator_control_plane_load_reports_total") / secs },
        "operator": {
            "cpu_s": cpu1 - cpu0,
            "cpu_cores_avg": (cpu1 - cpu0) / secs,
            "peak_rss_mib": peak_rss as f64 / (1 << 20) as f64,
            "rss_mib": summary(&rss_samples),
            "reconciles_per_s": delta("switchyard_operator_reconciles_total") / secs,
            "table_messages_sent": delta("switchyard_operator_control_plane_tables_sent_total"),
        },
        "apiserver_requests": {
            "total": api_total,
            "per_s": api_total / secs,
            "top": api.iter().take(15).map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        },
        "flip_per_stream_cdf_ms": cdf,
    });
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join(format!("{label}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!("[scale] wrote {}", path.display());
    plot_all(&args.out)?;
    Ok(())
}

/// A status patch setting a pod's Ready and ContainersReady conditions.
fn ready_patch(ready: bool) -> Value {
    let status = if ready { "True" } else { "False" };
    json!({"status": {"conditions": [
        {"type": "Ready", "status": status},
        {"type": "ContainersReady", "status": status},
    ]}})
}

/// One CDF per run found in `out`.
fn plot_all(out: &std::path::Path) -> Result<()> {
    let mut series = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        let label = v["label"].as_str().unwrap_or("?").to_owned();
        let cdf: Vec<f64> = v["flip_per_stream_cdf_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        series.push((label, cdf));
    }
    series.sort_by(|a, b| a.0.cmp(&b.0));
    let svg = out.join("propagation.svg");
    plot::cdf(
        &svg,
        "Pod readiness change -> every affected router stream",
        &series,
    )?;
    eprintln!("[scale] wrote {}", svg.display());
    Ok(())
}

/// Sends one report per pod of `pods` per second on one `ReportLoad` stream, spread over the second.
async fn report(url: String, ns: String, pods: Vec<PodInfo>) -> Result<()> {
    let mut client = ControlPlaneClient::connect(url).await?;
    let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(256);
    let call = tokio::spawn(async move { client.report_load(rx).await });
    let slices = 10usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut n = 0usize;
    loop {
        tick.tick().await;
        let slice = n % slices;
        n += 1;
        for p in pods.iter().skip(slice).step_by(slices) {
            let r = LoadReport {
                pod: p.name.clone(),
                namespace: ns.clone(),
                role: "manager".into(),
                owner: format!("m{}", p.manager),
                timestamp_ms: now_ms(),
                window_ms: 1000,
                events: std::iter::once(event(p.manager))
                    .chain(p.subscribed.clone())
                    .map(|event_type| EventLoad {
                        event_type,
                        arrivals_per_second: 5.0,
                        in_flight: 1,
                        latency_p50_ms: 2.0,
                        latency_p99_ms: 9.0,
                        ..EventLoad::default()
                    })
                    .collect(),
            };
            if tx.send(r).await.is_err() {
                let answer = call.await?;
                bail!("the report stream ended: {answer:?}");
            }
        }
    }
}
