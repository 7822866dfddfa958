//! Route-table lookup: a static path, a typed path parameter, and a miss.

use criterion::{Criterion, criterion_group};
use std::hint::black_box;
use switchyard_benches::routing::quickstart_table;

fn lookup(c: &mut Criterion) {
    let table = quickstart_table().expect("table");
    let mut g = c.benchmark_group("routes");
    for (name, method, path) in [
        ("static", "GET", "/noop"),
        ("param", "GET", "/orders/12345"),
        ("miss", "GET", "/nowhere/at/all"),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(table.lookup(black_box(method), black_box(path))))
        });
    }
    g.finish();
}

criterion_group!(benches, lookup);
