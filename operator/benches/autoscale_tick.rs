//! `cargo bench -p switchyard-operator --bench autoscale_tick [-- --managers N --pods K --ticks T
//! --ingest 0|1 --period-ms P]`: the autoscaler's tick at the scale benchmark's size, in process:
//! 1,000 scaled Managers of 10 pods, one report per pod per tick. Prints the tick's time (p50, p99,
//! max over the ticks) and the p50 of each of its parts.
//!
//! The timed span is the loop's (`autoscale::run`, from its `now` to the metric): the load book's
//! fresh reports, aggregating them, deciding, dropping the reports and building the status patches.
//! With `--ingest 1` (the default) a second thread records every pod's report into the same
//! [`LoadBook`] once per tick period, spread over it, as the control plane's report streams do while
//! the loop runs: the book's lock, and the reports allocated on one thread and freed on another, are
//! part of what is measured. The ticks are `--period-ms` apart (100 by default: ten times the loop's
//! pace, the same reports per tick). `--ingest 0` records the reports before each tick instead.
//!
//! Not a test (nothing asserts on time); `scale-control-plane` measures the same loop in the
//! running operator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_operator::{Backlog, LoadBook, STALE_AFTER, Scaler, aggregate};
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

/// Records every pod's report once per `period`, a tenth of them every tenth of it (as the scale
/// benchmark's streams send them), with the tick the main thread is at, until `stop`.
fn ingest(
    book: &LoadBook,
    n: usize,
    k: usize,
    period: Duration,
    tick: &AtomicUsize,
    stop: &AtomicBool,
) {
    let slices = 10;
    let mut next = Instant::now();
    let mut slice = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = tick.load(Ordering::Relaxed);
        for i in 0..n {
            for p in (0..k).filter(|p| (i * k + p) % slices == slice) {
                book.record(report(i, p, t));
            }
        }
        slice = (slice + 1) % slices;
        next += period / slices as u32;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The value at quantile `p` of sorted `v`.
fn q(v: &[Duration], p: f64) -> f64 {
    v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn main() {
    let n = arg("--managers", 1000);
    let k = arg("--pods", 10);
    let ticks = arg("--ticks", 120);
    let concurrent = arg("--ingest", 1) != 0;
    let period = Duration::from_millis(arg("--period-ms", 100) as u64);
    let managers: Vec<Arc<Manager>> = (0..n).map(|i| Arc::new(manager(i, k))).collect();
    let book = LoadBook::default();
    let tick = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut scaler = Scaler::default();
    let backlog = Backlog::new();
    let started = Instant::now();
    // (whole tick, fresh, aggregate, decide, drop, statuses)
    let mut times: Vec<[Duration; 6]> = Vec::new();
    let mut patches = 0;
    let mut reports = 0;
    std::thread::scope(|s| {
        if concurrent {
            // Every pod reported once before the first tick, as in the running operator.
            for i in 0..n {
                for p in 0..k {
                    book.record(report(i, p, 0));
                }
            }
            s.spawn(|| ingest(&book, n, k, period, &tick, &stop));
        }
        let mut next = Instant::now();
        for t in 0..ticks {
            tick.store(t, Ordering::Relaxed);
            if concurrent {
                next += period;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            } else {
                for i in 0..n {
                    for p in 0..k {
                        book.record(report(i, p, t));
                    }
                }
            }
            let now_ms = 1000 * t as u64;
            // The span of `autoscale::run`'s metric.
            let now = Instant::now();
            let managers = managers.clone();
            let fresh = book.fresh(now, STALE_AFTER);
            let t1 = Instant::now();
            let samples = aggregate(fresh.iter().map(|r| &**r));
            let t2 = Instant::now();
            let changes = scaler.decide(&managers, &samples, &backlog, now_ms);
            let t3 = Instant::now();
            reports += fresh.len();
            drop(samples);
            drop(fresh);
            let t4 = Instant::now();
            // The status figures are compared with the latest written every `STATUS_EVERY`: the
            // ticks are a virtual second apart.
            let virtual_now = started + Duration::from_secs(t as u64);
            let statuses = scaler.statuses(&managers, &[], &backlog, virtual_now, now_ms);
            let t5 = Instant::now();
            times.push([t5 - now, t1 - now, t2 - t1, t3 - t2, t4 - t3, t5 - t4]);
            assert!(changes.is_empty(), "min = max: nothing to scale");
            patches += statuses.len();
        }
        stop.store(true, Ordering::Relaxed);
    });
    // The first ticks create the state; the steady state is what the loop runs at.
    let steady = ticks / 4;
    let part = |i: usize| {
        let mut v: Vec<Duration> = times[steady..].iter().map(|t| t[i]).collect();
        v.sort();
        v
    };
    let whole = part(0);
    println!(
        "autoscale tick, {n} Managers x {k} pods ({} reports a tick, ingest {}): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; parts at p50: fresh {:.2}, aggregate {:.2}, decide {:.2}, drop {:.2}, statuses {:.2} ms; {patches} status patches in {ticks} ticks",
        reports / ticks.max(1),
        if concurrent {
            "concurrent"
        } else {
            "before each tick"
        },
        q(&whole, 0.5),
        q(&whole, 0.99),
        q(&whole, 1.0),
        q(&part(1), 0.5),
        q(&part(2), 0.5),
        q(&part(3), 0.5),
        q(&part(4), 0.5),
        q(&part(5), 0.5),
    );
}
