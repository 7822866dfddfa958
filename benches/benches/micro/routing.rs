//! Core routing round trips in one process (lookup, admission, REQUEST over an in-memory duplex to a
//! manager task, RESPONSE back), in events per second. Issue 5's goal is >= 1M events/s.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use switchyard_benches::routing::{Loop, quickstart_table};

/// Events per measured iteration.
const EVENTS: usize = 1024;

fn round_trips(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut lp = rt.block_on(async { Loop::start(quickstart_table().expect("table"), 1024) });
    let mut g = c.benchmark_group("routing");
    g.throughput(Throughput::Elements(EVENTS as u64));
    for window in [1usize, 64, 256] {
        g.bench_with_input(
            BenchmarkId::new("round_trip_window", window),
            &window,
            |b, &w| {
                b.iter(|| {
                    let ok = rt.block_on(lp.run("/noop", EVENTS, w)).expect("routes");
                    assert_eq!(ok, EVENTS);
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, round_trips);
