//! `cargo run -p switchyard-e2e --bin scale-reaction [-- STEPS]`: the autoscaler's reaction time
//! on the e2e cluster (a benchmark, not a test).
//!
//! Applies a Router and STEPS (default 5) Managers with the default scaling windows (stable 60 s,
//! panic 6 s) and a target of 10 in flight per pod, each handling its own event type. A
//! `ReportLoad` client stands in for a router sidecar and reports once a second, as sidecars do.
//! After 10 s of idle reports, each step in turn raises one Manager's event type from 0 to 40 in
//! flight (4x target) and times from the first report carrying the step to the Manager's
//! `spec.replicas` going up (read every 50 ms). Each Manager is stepped once from idle, so no step
//! waits for the previous one to scale back down. Prints one JSON document.

use anyhow::{Context, Result, bail};
use futures::SinkExt;
use kube::api::Api;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use switchyard_crds::Manager;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::{Operator, OperatorOpts, TestNamespace, cluster, fixtures};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

const TARGET: u32 = 10;
const STEP: u32 = 40;
const PERIOD: Duration = Duration::from_secs(1);
const IDLE: Duration = Duration::from_secs(10);
/// A step that has not scaled after this is reported as failed.
const GIVE_UP: Duration = Duration::from_secs(60);

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

/// In flight per event type, as the next report will carry it; and when a step's first report went.
type Load = Arc<Mutex<(Vec<(String, u32)>, Option<Instant>)>>;

fn push(cp: String, ns: String, load: Load) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut client = ControlPlaneClient::connect(cp).await?;
        let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(4);
        let call = tokio::spawn(async move { client.report_load(rx).await });
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            tick.tick().await;
            let events = {
                let mut l = load.lock().unwrap_or_else(|p| p.into_inner());
                let events: Vec<EventLoad> =
                    l.0.iter()
                        .map(|(e, n)| EventLoad {
                            event_type: e.clone(),
                            in_flight: *n,
                            arrivals_per_second: f64::from(*n) * 10.0,
                            ..EventLoad::default()
                        })
                        .collect();
                if l.1.is_none() && l.0.iter().any(|(_, n)| *n > 0) {
                    l.1 = Some(Instant::now());
                }
                events
            };
            let report = LoadReport {
                pod: "bench-router".into(),
                namespace: ns.clone(),
                role: "router".into(),
                owner: "edge".into(),
                timestamp_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)),
                window_ms: 1000,
                events,
            };
            if tx.send(report).await.is_err() {
                bail!("the report stream ended: {:?}", call.await?);
            }
        }
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let steps: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .with_context(|| format!("STEPS must be a number, not {a:?}"))?,
        None => 5,
    };
    if steps == 0 {
        bail!("STEPS must be at least 1");
    }
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-bench").await?;
    let cp_port = free_port()?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(cp_port),
            ..OperatorOpts::new("bench-scale")
        },
    )
    .await?;
    let mut manifests = fixtures::router("edge");
    for i in 0..steps {
        manifests.push_str("---\n");
        manifests.push_str(&manager(i));
    }
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    for i in 0..steps {
        wait_rolled_out(&client, &ns.name, &format!("bench{i}-manager"), 1).await?;
    }
    let load: Load = Arc::new(Mutex::new((
        (0..steps).map(|i| (format!("step{i}"), 0)).collect(),
        None,
    )));
    let pusher = push(
        format!("http://127.0.0.1:{cp_port}"),
        ns.name.clone(),
        load.clone(),
    );
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let mut times_ms = Vec::new();
    let mut failures = Vec::new();
    tokio::time::sleep(IDLE).await;
    for i in 0..steps {
        {
            let mut l = load.lock().unwrap_or_else(|p| p.into_inner());
            l.0[i].1 = STEP;
            l.1 = None;
        }
        let name = format!("bench{i}");
        let asked = Instant::now();
        let scaled = loop {
            if managers.get(&name).await?.spec.replicas > 1 {
                break Some(Instant::now());
            }
            if asked.elapsed() > GIVE_UP {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let first_report = load.lock().unwrap_or_else(|p| p.into_inner()).1;
        match (scaled, first_report) {
            (Some(at), Some(from)) => {
                let ms = at.saturating_duration_since(from).as_secs_f64() * 1000.0;
                eprintln!("step {i}: {ms:.0} ms");
                times_ms.push((ms * 10.0).round() / 10.0);
            }
            _ => failures.push(format!("step {i}: no scale-up within {GIVE_UP:?}")),
        }
        // The stepped type stays busy (its Manager is scaled); the next step is another type.
    }
    pusher.abort();
    op.stop().await?;
    let out = serde_json::json!({
        "benchmark": "scale-reaction",
        "what": "from the first load report of a step (idle -> 4x target in flight) to the Manager's spec.replicas going up",
        "stepsMs": times_ms,
        "medianMs": median(&times_ms),
        "failures": failures,
        "reportPeriodMs": PERIOD.as_millis() as u64,
        "readEveryMs": 50,
        "targetInFlight": TARGET,
        "stepInFlight": STEP,
        "windows": {"stable": "60s", "panic": "6s", "panicThreshold": 2.0},
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    if !failures.is_empty() {
        bail!("{} step(s) did not scale", failures.len());
    }
    Ok(())
}
