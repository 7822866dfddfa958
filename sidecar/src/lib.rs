//! The Switchyard sidecar: one binary, two roles. The router role turns client requests into events
//! and routes them to manager sidecars; the manager role delivers events to the handler app.
//!
//! The stack, top to bottom (a room imports only rooms below it; `layering.rs` holds it true):
//! `roles` (composition) -> `admin` -> `listener` and `manager` (the front doors and delivery) ->
//! `middleware` -> `dispatch` (broker and routing stage) -> `upstream` (routing table and frame
//! connections) -> the pure cores (`answer`, `routes`, `edge`, `params`, `timing`, `problem`) and the
//! process plumbing (`net`, `metrics`, `load`, `otel`, `config`, `secrets`, `backoff`, ...).
//!
//! Everything is crate-private; the few items below are exported for the binary, the benches, the
//! CLI, the tests and the fuzz target, and nothing else; the public modules (`start_checks`,
//! `fuzz_checks`, `bench`, `spans`) hold only what those users name.

#![forbid(unsafe_code)]
// `pub` only on what lib.rs makes public: everything else is `pub(crate)`, so rustc reports dead
// code and a reader sees the crate's surface here.
#![warn(unreachable_pub)]

mod admin;
mod answer;
mod backoff;
mod cgroup;
mod cli;
mod config;
mod dispatch;
mod durable;
mod edge;
mod hex;
mod listener;
mod load;
mod manager;
mod metrics;
mod middleware;
mod nats_reload;
mod net;
mod otel;
mod params;
mod problem;
mod roles;
mod routes;
mod runtime;
mod secrets;
mod shutdown;
mod tap;
mod telemetry;
mod timing;
mod traceparent;
mod upstream;

#[cfg(test)]
mod layering;

// The binary: the whole sidecar behind `main.rs`, which only sets the allocator.
pub use cli::run;

// `switchyard check`: what a config is refused for at start, so the CLI refuses it first with the same
// message.
pub mod start_checks;

// The span reference: the CLI writes `docs/reference/spans.md` from it, and the sidecar's tests check
// every span they receive against it.
pub use otel::catalog as spans;

// The cargo-fuzz target (`fuzz/fuzz_targets/http_request.rs`): the edge's parsing on arbitrary input.
#[doc(hidden)]
pub mod fuzz_checks;

// The benches, in process; the CLI's metric reference test names `Metrics` and `Role` too.
/// What the benches measure in process: edge checks, route lookup, the broker and the stage timing.
#[doc(hidden)]
pub mod bench {
    pub use crate::dispatch::Broker;
    pub use crate::edge::{body_event, params_payload};
    pub use crate::metrics::Metrics;
    pub use crate::metrics::Role;
    pub use crate::routes::http::{Lookup, RouteTable};
    pub use crate::timing::StageTimes;
}
