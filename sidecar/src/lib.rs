//! The Switchyard sidecar: one binary, two roles. The router role turns client requests into events
//! and routes them to manager sidecars; the manager role delivers events to the handler app.
//!
//! The stack, top to bottom (a room imports only rooms below it; `layering.rs` holds it true):
//! `roles` (composition) -> `admin` -> `listener` and `manager` (the front doors and delivery) ->
//! `middleware` -> `dispatch` (broker and routing stage) -> `upstream` (routing table and frame
//! connections) -> the pure cores (`answer`, `routes`, `edge`, `params`, `timing`, `problem`) and the
//! process plumbing (`net`, `metrics`, `load`, `otel`, `config`, `secrets`, `backoff`, ...).
//!
//! Everything is crate-private; the few items below are exported for the binary, the benches and
//! the fuzz targets, and `start_checks` for `switchyard check` (what a config is refused for at
//! start, so the CLI refuses it first with the same message), and nothing else.

#![forbid(unsafe_code)]

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
pub mod start_checks;
mod tap;
mod telemetry;
mod timing;
mod traceparent;
mod upstream;

#[doc(hidden)]
pub mod fuzz_checks;
#[cfg(test)]
mod layering;

pub use cli::run;

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
