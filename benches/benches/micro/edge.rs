//! JSON to event payload at the edge: a body checked for syntax only, a body checked against the
//! route's schema, and GET parameters turned into a JSON object.

use bytes::Bytes;
use criterion::{Criterion, criterion_group};
use serde_json::Map;
use std::hint::black_box;
use switchyard_benches::routing::quickstart_table;
use switchyard_sidecar::bench::Lookup;
use switchyard_sidecar::bench::{body_event, params_payload};

fn payloads(c: &mut Criterion) {
    let table = quickstart_table().expect("table");
    let route = |m, p| match table.lookup(m, p) {
        Lookup::Found { route, .. } => route,
        _ => panic!("route {m} {p}"),
    };
    let echo = route("POST", "/echo");
    let update = route("PUT", "/orders/1");
    let search = route("GET", "/orders/search");
    let body = Bytes::from_static(br#"{"value": 42, "note": "a short note", "tags": ["a", "b"]}"#);
    let mut g = c.benchmark_group("edge");
    g.bench_function("body_syntax_only", |b| {
        b.iter(|| black_box(body_event(update, body.clone(), Map::new()).expect("valid")))
    });
    g.bench_function("body_with_schema", |b| {
        b.iter(|| black_box(body_event(echo, body.clone(), Map::new()).expect("valid")))
    });
    g.bench_function("query_params", |b| {
        b.iter(|| {
            black_box(
                params_payload(
                    search,
                    Some("status=open&limit=20&q=blue%20shoes"),
                    Map::new(),
                )
                .expect("valid"),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, payloads);
