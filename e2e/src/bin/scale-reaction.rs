//! `cargo run -p switchyard-e2e --bin scale-reaction [-- STEPS] [--smoke]`: the autoscaler's
//! reaction time on the e2e cluster (a benchmark; `--smoke` is its test, `tests/benches.rs`).
//!
//! Runs the chart's default of two operator replicas, and applies Router `edge`, which routes the
//! event types `step0`..`stepN-1`, and STEPS (default 5) Managers with the default scaling windows
//! (stable 60 s, panic 6 s) and a target of 10 in flight per pod, each handling one of those types.
//! A `ReportLoad` client stands in for a router sidecar of `edge` and reports to the standby (which
//! forwards to the leader, as the Service sends half of the sidecars there) once a second.
//! After 10 s of idle reports, each step in turn raises one type from 0 to 40 in flight (4x
//! target), at a random point of the report period (a real sidecar's reports land anywhere in the
//! operator's tick), and times from that first report to the Manager's `spec.replicas` going up and
//! to its first new pod Ready, split into stages (`scale::reaction`). Each Manager is stepped once
//! from idle, so no step waits for another to scale down. Prints one JSON document.
//!
//! A step whose reports the control plane refuses or drops (counted by reason on the replicas'
//! `/metrics`), or a report stream that ends, fails the run with that reason, at once.
//! `--smoke`: one step after 2 s of idle, for `make test`.

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use switchyard_crds::Manager;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::operator::OperatorLock;
use switchyard_e2e::scale::reaction::{self, Refused, Scaled, StepTimes};
use switchyard_e2e::{Operator, Replicas, TestNamespace, cluster, fixtures};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};
use tokio::sync::Notify;

const TARGET: u32 = 10;
const STEP: u32 = 40;
const PERIOD: Duration = Duration::from_secs(1);
/// A step that has not scaled after this is reported as failed.
const GIVE_UP: Duration = Duration::from_secs(60);
/// How often the refusal counters are read while a step waits.
const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How often the watches' findings are looked at (the watches time the events themselves).
const WATCH_EVERY: Duration = Duration::from_millis(20);

fn manager(i: usize) -> String {
    let event = format!("step{i}");
    let extra = format!(
        "  replicas: 1
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 10
    targets:
      {event}: {{targetInFlight: {TARGET}}}
"
    );
    fixtures::manager(&format!("bench{i}"), "edge", &format!("[{event}]"), &extra)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the stand-in router reports, and when each step's first report left.
#[derive(Default)]
struct Load {
    /// In flight per event type, as the next report carries it.
    in_flight: Vec<(String, u32)>,
    /// Per step: when the first report carrying it was sent.
    first_sent: Vec<Option<SystemTime>>,
}

/// Reports once per PERIOD, and at once when `now` is notified (then the period restarts).
fn push(
    cp: String,
    ns: String,
    load: Arc<Mutex<Load>>,
    now: Arc<Notify>,
) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut client = ControlPlaneClient::connect(cp).await?;
        let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(4);
        let call = tokio::spawn(async move { client.report_load(rx).await });
        loop {
            let report = {
                let mut l = lock(&load);
                let events = l
                    .in_flight
                    .iter()
                    .map(|(e, n)| EventLoad {
                        event_type: e.clone(),
                        in_flight: *n,
                        arrivals_per_second: f64::from(*n) * 10.0,
                        ..EventLoad::default()
                    })
                    .collect();
                let sent = SystemTime::now();
                let busy: Vec<usize> = (0..l.in_flight.len())
                    .filter(|i| l.in_flight[*i].1 > 0)
                    .collect();
                for i in busy {
                    l.first_sent[i].get_or_insert(sent);
                }
                LoadReport {
                    pod: "bench-router".into(),
                    namespace: ns.clone(),
                    role: "router".into(),
                    owner: "edge".into(),
                    timestamp_ms: sent
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)),
                    window_ms: 1000,
                    events,
                }
            };
            if tx.send(report).await.is_err() {
                match call.await? {
                    Ok(ack) => bail!("the control plane ended the report stream: {ack:?}"),
                    Err(status) => bail!(
                        "the control plane refused the reports: {:?}: {}",
                        status.code(),
                        status.message()
                    ),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(PERIOD) => {}
                () = now.notified() => {}
            }
        }
    })
}

/// First-seen moments, by key, kept by a watch.
type Seen = Arc<Mutex<HashMap<String, SystemTime>>>;

/// Watches `api`, recording the first moment `key(object)` names each key.
fn first_seen<K>(api: Api<K>, key: impl Fn(&K) -> Option<String> + Send + 'static) -> Seen
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let seen: Seen = Arc::default();
    let into = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(o) => {
                    if let Some(k) = key(&o) {
                        lock(&into).entry(k).or_insert_with(SystemTime::now);
                    }
                }
                Err(e) => eprintln!("[scale-reaction] watch: {e}"),
            }
        }
    });
    seen
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `switchyard_operator_control_plane_refused_total` by reason, summed over both replicas.
async fn refused(ops: &Replicas) -> Result<Refused> {
    let mut out = Refused::new();
    for op in [&ops.leader, &ops.standby] {
        for (labels, v) in op
            .metrics()
            .await?
            .samples("switchyard_operator_control_plane_refused_total")
        {
            let reason = labels.get("reason").cloned().unwrap_or_default();
            *out.entry(reason).or_default() += v;
        }
    }
    Ok(out)
}

async fn reports_counted(op: &Operator) -> Result<f64> {
    Ok(op
        .metrics()
        .await?
        .sum("switchyard_operator_control_plane_load_reports_total"))
}

/// The failure line of refusals counted since `before`, if any.
async fn refusals(ops: &Replicas, before: &Refused, during: &str) -> Result<Option<String>> {
    let now = refused(ops).await?;
    let new = reaction::refused_since(before, &now);
    Ok((!new.is_empty()).then(|| {
        let why: Vec<String> = new
            .iter()
            .map(|r| {
                let reason = r.split(' ').next().unwrap_or_default();
                format!("{r} ({})", reaction::explain(reason))
            })
            .collect();
        format!(
            "{during}: the control plane refused the stand-in router's reports: {}",
            why.join("; ")
        )
    }))
}

struct Args {
    steps: usize,
    idle: Duration,
    smoke: bool,
}

fn args() -> Result<Args> {
    let mut steps = None;
    let mut smoke = false;
    for a in std::env::args().skip(1) {
        if a == "--smoke" {
            smoke = true;
        } else {
            let n: usize = a
                .parse()
                .with_context(|| format!("STEPS must be a number, not {a:?}"))?;
            steps = Some(n);
        }
    }
    let steps = steps.unwrap_or(if smoke { 1 } else { 5 });
    if steps == 0 {
        bail!("STEPS must be at least 1");
    }
    let idle = Duration::from_secs(if smoke { 2 } else { 10 });
    Ok(Args { steps, idle, smoke })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = args()?;
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-bench").await?;
    let ops = Replicas::start(c, "bench-scale").await?;
    let run = measure(&args, c, &client, &ns.name, &ops).await;
    let tails = ops.log_tails(30);
    ops.stop().await?;
    let (out, failures) = match run {
        Ok(r) => r,
        Err(e) => bail!("{e:#}\n{tails}"),
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    if !failures.is_empty() {
        bail!("{} step(s) failed: {}", failures.len(), failures.join("; "));
    }
    Ok(())
}

async fn measure(
    args: &Args,
    c: &switchyard_e2e::Cluster,
    client: &kube::Client,
    ns: &str,
    ops: &Replicas,
) -> Result<(serde_json::Value, Vec<String>)> {
    let steps = args.steps;
    let events: Vec<String> = (0..steps).map(|i| format!("step{i}")).collect();
    let routed: Vec<&str> = events.iter().map(String::as_str).collect();
    let mut manifests = fixtures::router_routing("edge", &routed);
    for i in 0..steps {
        manifests.push_str("---\n");
        manifests.push_str(&manager(i));
    }
    c.kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    for i in 0..steps {
        wait_rolled_out(client, ns, &format!("bench{i}-manager"), 1).await?;
    }
    let managers = first_seen(Api::<Manager>::namespaced(client.clone(), ns), |m| {
        (m.spec.replicas > 1).then(|| m.name_any())
    });
    let deployments = first_seen(Api::<Deployment>::namespaced(client.clone(), ns), |d| {
        (d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 1).then(|| d.name_any())
    });
    let pods = first_seen(Api::<Pod>::namespaced(client.clone(), ns), |p| {
        ready(p).then(|| p.name_any())
    });
    let load = Arc::new(Mutex::new(Load {
        in_flight: events.iter().map(|e| (e.clone(), 0)).collect(),
        first_sent: vec![None; steps],
    }));
    let now = Arc::new(Notify::new());
    let mut pusher = push(ops.standby_url(), ns.to_owned(), load.clone(), now.clone());
    tokio::time::sleep(args.idle).await;
    let mut failures = Vec::new();
    let baseline = refused(ops).await?;
    if let Some(f) = refusals(ops, &Refused::new(), "idle reports").await? {
        // Any refusal before the steps: the setup itself is wrong, so no step can be measured.
        bail!("{f} (counted since the operators started: {baseline:?})");
    }
    if pusher.is_finished() {
        bail!("before the first step: {:?}", pusher.await?);
    }
    let mut steps_out = Vec::new();
    for i in 0..steps {
        let name = format!("bench{i}");
        let before_pods: HashSet<String> = lock(&pods).keys().cloned().collect();
        // Anywhere in the report period, as a real sidecar's report lands anywhere in the tick.
        tokio::time::sleep(PERIOD.mul_f64(fastrand::f64())).await;
        let counted = reports_counted(&ops.leader).await?;
        lock(&load).in_flight[i].1 = STEP;
        now.notify_one();
        let ingested = ingest(&ops.leader, counted).await?;
        let asked = Instant::now();
        let mut checked = Instant::now();
        let outcome = loop {
            if lock(&managers).contains_key(&name) {
                break Ok(());
            }
            if pusher.is_finished() {
                break Err(format!(
                    "step {i}: report stream: {:?}",
                    (&mut pusher).await
                ));
            }
            if checked.elapsed() >= CHECK_EVERY {
                checked = Instant::now();
                if let Some(f) = refusals(ops, &baseline, &format!("step {i}")).await? {
                    break Err(f);
                }
            }
            if asked.elapsed() > GIVE_UP {
                break Err(format!(
                    "step {i}: no scale-up within {GIVE_UP:?} and no refusal counted"
                ));
            }
            tokio::time::sleep(WATCH_EVERY).await;
        };
        if let Err(f) = outcome {
            failures.push(f);
            // A refused or ended stream fails every later step the same way: stop here.
            break;
        }
        // The pod and the Deployment follow; wait for them (bounded) before the next step.
        let deployment = format!("{name}-manager");
        let new_pod = || {
            lock(&pods)
                .iter()
                .filter(|(p, _)| {
                    p.starts_with(&format!("{deployment}-")) && !before_pods.contains(*p)
                })
                .map(|(_, t)| *t)
                .min()
        };
        while new_pod().is_none() && asked.elapsed() < GIVE_UP {
            tokio::time::sleep(WATCH_EVERY).await;
        }
        let log = std::fs::read_to_string(&ops.leader.log).unwrap_or_default();
        let scaled: Option<Scaled> = reaction::scaled_line(&log, ns, &name);
        let sent = lock(&load).first_sent[i].context("the step's report was never sent")?;
        let times = StepTimes {
            sent,
            ingested,
            scaled,
            replicas: lock(&managers).get(&name).copied(),
            deployment: lock(&deployments).get(&deployment).copied(),
            pod_ready: new_pod(),
        };
        if times.pod_ready.is_none() {
            failures.push(format!("step {i}: no new pod Ready within {GIVE_UP:?}"));
        }
        eprintln!(
            "step {i}: spec.replicas {:?} ms, pod Ready {:?} ms, {:?}",
            times.to_replicas_ms(),
            times.to_pod_ready_ms(),
            times.stages()
        );
        steps_out.push(times);
        // The stepped type stays busy (its Manager is scaled); the next step is another type.
    }
    pusher.abort();
    let mut out = summary(&steps_out, &failures);
    out["smoke"] = serde_json::json!(args.smoke);
    Ok((out, failures))
}

/// Polls the leader's report counter until it passes `counted` (the step's report arrived through
/// the standby), for at most a second; None if it did not move.
async fn ingest(leader: &Operator, counted: f64) -> Result<Option<SystemTime>> {
    let t = Instant::now();
    while t.elapsed() < PERIOD {
        if reports_counted(leader).await? > counted {
            return Ok(Some(SystemTime::now()));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(None)
}

fn summary(steps: &[StepTimes], failures: &[String]) -> serde_json::Value {
    let round = |v: Option<f64>| v.map(|x| (x * 10.0).round() / 10.0);
    let to_replicas: Vec<f64> = steps.iter().filter_map(StepTimes::to_replicas_ms).collect();
    let to_ready: Vec<f64> = steps
        .iter()
        .filter_map(StepTimes::to_pod_ready_ms)
        .collect();
    let stages: Vec<reaction::Stages> = steps.iter().map(StepTimes::stages).collect();
    let stage_median = |f: fn(&reaction::Stages) -> Option<f64>| {
        reaction::spread(&stages.iter().filter_map(f).collect::<Vec<_>>()).map(|s| s.median_ms)
    };
    let per_step: Vec<serde_json::Value> = steps
        .iter()
        .zip(&stages)
        .map(|(t, s)| {
            serde_json::json!({
                "toReplicasMs": round(t.to_replicas_ms()),
                "toPodReadyMs": round(t.to_pod_ready_ms()),
                "stages": s,
            })
        })
        .collect();
    let medians: BTreeMap<&str, Option<f64>> = BTreeMap::from([
        ("ingestMs", stage_median(|s| s.ingest_ms)),
        ("tickMs", stage_median(|s| s.tick_ms)),
        ("decisionMs", stage_median(|s| s.decision_ms)),
        ("writeMs", stage_median(|s| s.write_ms)),
        ("seenMs", stage_median(|s| s.seen_ms)),
        ("deploymentMs", stage_median(|s| s.deployment_ms)),
        ("podReadyMs", stage_median(|s| s.pod_ready_ms)),
    ]);
    let replicas = reaction::spread(&to_replicas);
    serde_json::json!({
        "benchmark": "scale-reaction",
        "what": "from the first load report of a step (idle -> 4x target in flight) to the Manager's spec.replicas going up, and to its first new pod Ready",
        "operators": {"replicas": 2, "reportsTo": "standby (forwarded to the leader)"},
        "stepsMs": to_replicas.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>(),
        "medianMs": replicas.as_ref().map(|s| s.median_ms),
        "p90Ms": replicas.as_ref().map(|s| s.p90_ms),
        "toReplicas": replicas,
        "toPodReady": reaction::spread(&to_ready),
        "stageMediansMs": medians,
        "steps": per_step,
        "failures": failures,
        "reportPeriodMs": PERIOD.as_millis() as u64,
        "targetInFlight": TARGET,
        "stepInFlight": STEP,
        "windows": {"stable": "60s", "panic": "6s", "panicThreshold": 2.0, "tick": "1s"},
        "peers": {
            "knative": "KPA: 6 s panic window, a decision every 2 s",
            "keda": "polls its scalers every 15-30 s (pollingInterval), then the HPA acts",
        },
    })
}
