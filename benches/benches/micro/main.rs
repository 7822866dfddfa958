//! Criterion micro benchmarks of the sidecar's hot-path pieces. `cargo bench -p switchyard-benches`;
//! in test mode (`cargo test --all-targets`) each runs once.

#![forbid(unsafe_code)]

mod broker;
mod codec;
mod edge;
mod routes;
mod routing;
mod timing;

criterion::criterion_main!(
    codec::benches,
    routes::benches,
    broker::benches,
    timing::benches,
    edge::benches,
    routing::benches
);
