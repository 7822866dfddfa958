//! Not a test: keeps a router + manager + echo app running on loopback for a load tool, e.g.
//! `SWITCHYARD_HOLD_SECS=60 cargo test --release -p switchyard-sidecar --test load_local -- --ignored --nocapture`
//! then `wrk -c32 -t2 -d10s --latency http://127.0.0.1:<port>/noop` with the port it prints.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load-test fixture, run by hand"]
async fn hold_a_mesh_for_load() {
    let mesh = Mesh::start(Opts {
        queue_capacity: 1024,
        max_in_flight: 64,
        response_timeout: "30s",
        start_manager: true,
    })
    .await;
    let secs = std::env::var("SWITCHYARD_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!("LOAD_URL {}", mesh.url("/noop"));
    if let Ok(f) = std::env::var("SWITCHYARD_HOLD_URL_FILE") {
        std::fs::write(f, mesh.url("/noop")).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
}
