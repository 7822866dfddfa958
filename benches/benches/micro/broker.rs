//! Broker admission: taking and releasing a pending-request slot (the hand-off into the routing stage).

use criterion::{Criterion, criterion_group};
use std::hint::black_box;
use switchyard_sidecar::bench::Broker;
use switchyard_sidecar::bench::{Metrics, Role};

fn admit(c: &mut Criterion) {
    let broker = Broker::new(1024, Metrics::new(Role::Router));
    c.bench_function("broker/admit_release", |b| {
        b.iter(|| black_box(broker.admit().expect("free slot")))
    });
    let full = Broker::new(0, Metrics::new(Role::Router));
    c.bench_function("broker/shed", |b| {
        b.iter(|| black_box(full.admit().is_none()))
    });
}

criterion_group!(benches, admit);
