//! The history checker of durable delivery (`history/`): its unit tests, and a run with real
//! processes under faults whose recorded history must pass every check (docs/delivery.md,
//! "Checking the promise under faults").

#![allow(clippy::unwrap_used)]

mod common;
mod history;

use history::check::{Outcome, acknowledged, check, duplicates, table};
use history::record::History;
use history::run::World;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Faults in the run: `SWITCHYARD_HISTORY_FAULTS` (benches/run's `history` section asks for 24),
/// else the short run of `make test`.
fn faults() -> usize {
    std::env::var("SWITCHYARD_HISTORY_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// A second delivery within this long after a fault touching its Manager (or NATS) healed (every
/// node healthy again) is explained by it: AckWait (4 s here), a restarted sidecar's start and its
/// first pull.
const REDELIVERY_WINDOW: Duration = Duration::from_secs(10);
/// How long every acknowledged event gets to reach every receiver once the faults are over.
const DRAIN: Duration = Duration::from_secs(120);

fn lost(h: &History) -> usize {
    check(h, REDELIVERY_WINDOW)[0].violations
}

/// The run's summary and table, as the docs and benches/run show them.
fn report(h: &History, outcomes: &[Outcome]) -> String {
    let acked = acknowledged(h).len();
    let events: std::collections::BTreeSet<_> = h.publishes.iter().map(|p| &p.event).collect();
    let mut out = format!(
        "events published: {} (202: {acked}, never acknowledged: {}), publish attempts: {}, \
         deliveries: {}, faults injected: {}\n",
        events.len(),
        events.len() - acked,
        h.publishes.len(),
        h.deliveries.len(),
        h.faults.len(),
    );
    for f in &h.faults {
        out.push_str(&format!(
            "  fault {:>6.1}s..{:>6.1}s {}\n",
            f.start.as_secs_f64(),
            f.end.as_secs_f64(),
            f.what
        ));
    }
    out.push_str(&format!(
        "acknowledged events lost: {}, unexplained duplicates: {}\n",
        outcomes[0].violations, outcomes[1].violations
    ));
    out.push_str(&explained(h));
    out.push('\n');
    out.push_str(&table(outcomes));
    out
}

/// The duplicates per fault that explains them, with the latest one's distance from the heal.
fn explained(h: &History) -> String {
    let mut by_fault: std::collections::BTreeMap<usize, (usize, Duration)> = Default::default();
    for dup in duplicates(h, REDELIVERY_WINDOW) {
        let Some(f) = dup.fault else { continue };
        let i = h
            .faults
            .iter()
            .position(|g| std::ptr::eq(g, f))
            .unwrap_or(0);
        let e = by_fault.entry(i).or_insert((0, Duration::ZERO));
        e.0 += 1;
        e.1 = e.1.max(dup.delivery.at.saturating_sub(f.end));
    }
    let mut out = String::new();
    for (i, (n, late)) in by_fault {
        out.push_str(&format!(
            "  {n} duplicates after {} (the last {:.1}s after its heal)\n",
            h.faults[i].what,
            late.as_secs_f64()
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_under_faults_passes_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut world = World::start(dir.path()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = world.publish(stop.clone());
    for n in 0..faults() {
        world.fault(n).await;
    }
    stop.store(true, Ordering::SeqCst);
    let publishes = load.await.unwrap();
    // Drained: every acknowledged event at every receiver, or the deadline. Polled by hand rather
    // than with `poll`, which panics: a run that loses events must still end in its table.
    let drain = tokio::time::Instant::now();
    let deadline = drain + DRAIN;
    while tokio::time::Instant::now() < deadline && lost(&world.history(&publishes)) > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let h = world.history(&publishes);
    let outcomes = check(&h, REDELIVERY_WINDOW);
    let text = format!(
        "{}drained in {:.1}s\n",
        report(&h, &outcomes),
        drain.elapsed().as_secs_f64()
    );
    println!("{text}");
    if let Ok(path) = std::env::var("SWITCHYARD_HISTORY_OUT") {
        std::fs::write(path, &text).unwrap();
    }
    assert_eq!(h.faults.len(), faults());
    assert!(acknowledged(&h).len() > 100, "{text}");
    assert!(
        outcomes.iter().all(|o| o.violations == 0),
        "the history fails a check (logs in {}):\n{text}",
        dir.keep().display()
    );
}
