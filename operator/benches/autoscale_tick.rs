//! `cargo bench -p switchyard-operator --bench autoscale_tick [-- --managers N --pods K --ticks T]`:
//! the autoscaler's tick (aggregate the reports, decide, status figures) at the scale benchmark's
//! size, in process: 1,000 scaled Managers of 10 pods, one report per pod. Prints the tick's time
//! (p50, p99, max over the ticks).
//!
//! Not a test (nothing asserts on time); `scale-control-plane` measures the same loop in the
//! running operator.

use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_operator::autoscale::observe;
use switchyard_operator::autoscale::scaler::{Backlog, Scaler};
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} wants a whole number, not {v:?}"))
        })
        .unwrap_or(default)
}

/// A Manager as the scale benchmark makes them: one event type, min = max = K.
fn manager(i: usize, k: usize) -> Manager {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "Manager",
        "metadata": {"name": format!("m{i}"), "namespace": "scale", "uid": format!("u{i}")},
        "spec": {
            "routerRef": {"name": format!("r{}", i % 4)},
            "events": [format!("ev{i}")],
            "app": {"port": 8000},
            "replicas": k,
            "template": {"spec": {"containers": [{"name": "app", "image": "app"}]}},
            "scaling": {
                "enabled": true, "minReplicas": k, "maxReplicas": k,
                "targets": {format!("ev{i}"): {"targetInFlight": 1000}},
            },
        },
        "status": {"events": [{"event": format!("ev{i}"), "deployment": format!("m{i}"), "replicas": k}]},
    }))
    .expect("manager")
}

fn report(i: usize, pod: usize, tick: usize) -> LoadReport {
    LoadReport {
        pod: format!("m{i}-{pod}"),
        namespace: "scale".into(),
        role: "manager".into(),
        events: vec![EventLoad {
            event_type: format!("ev{i}"),
            arrivals_per_second: ((i + pod + tick) % 50) as f64,
            in_flight: u32::try_from((i + tick) % 7).unwrap_or(0),
            latency_p99_ms: 3.0,
            ..EventLoad::default()
        }],
        ..LoadReport::default()
    }
}

fn main() {
    let n = arg("--managers", 1000);
    let k = arg("--pods", 10);
    let ticks = arg("--ticks", 120);
    let managers: Vec<Arc<Manager>> = (0..n).map(|i| Arc::new(manager(i, k))).collect();
    let mut scaler = Scaler::default();
    let backlog = Backlog::new();
    let started = Instant::now();
    let mut times = Vec::new();
    let mut patches = 0;
    for t in 0..ticks {
        // The reports of this second, as the load book hands them out.
        let fresh: Vec<Arc<LoadReport>> = (0..n)
            .flat_map(|i| (0..k).map(move |p| Arc::new(report(i, p, t))))
            .collect();
        let now = started + Duration::from_secs(t as u64);
        let now_ms = 1000 * t as u64;
        let t0 = Instant::now();
        let samples = observe::aggregate(fresh.iter().map(|r| &**r));
        let changes = scaler.decide(&managers, &samples, &backlog, now_ms);
        drop(samples);
        let statuses = scaler.statuses(&managers, &[], &backlog, now, now_ms);
        times.push(t0.elapsed());
        assert!(changes.is_empty(), "min = max: nothing to scale");
        patches += statuses.len();
    }
    // The first ticks create the state; the steady state is what the loop runs at.
    let steady = ticks / 4;
    let mut t: Vec<Duration> = times[steady..].to_vec();
    t.sort();
    let q = |v: &[Duration], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "autoscale tick, {n} Managers x {k} pods ({} reports): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {patches} status patches in {ticks} ticks",
        n * k,
        q(&t, 0.5).as_secs_f64() * 1e3,
        q(&t, 0.99).as_secs_f64() * 1e3,
        t.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
}
