//! Building the `Server-Timing` header of a response that went through every stage.

use criterion::{Criterion, criterion_group};
use std::hint::black_box;
use std::time::Duration;
use switchyard_sidecar::bench::StageTimes;

fn header(c: &mut Criterion) {
    let mut t = StageTimes {
        listener: Some(Duration::from_micros(21)),
        broker: Some(Duration::from_micros(2)),
        router: Some(Duration::from_micros(5)),
        total: Duration::from_micros(231),
        ..StageTimes::default()
    };
    t.set_round_trip(
        Duration::from_micros(190),
        Duration::from_micros(12),
        Duration::from_micros(90),
    );
    c.bench_function("timing/header_value", |b| {
        b.iter(|| black_box(black_box(&t).header_value()))
    });
    t.trace_id = Some(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736);
    c.bench_function("timing/header_value_traced", |b| {
        b.iter(|| black_box(black_box(&t).header_value()))
    });
}

criterion_group!(benches, header);
