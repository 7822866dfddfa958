//! The Switchyard sidecar: one binary, two roles. The router role turns client requests into events
//! and routes them to manager sidecars; the manager role delivers events to the handler app.
//!
//! Modules are named by stage. Pure cores (`routes`, `params`, `edge`, `timing`, `problem`,
//! `backoff`, `router::p2c`) have their tests beside them; sockets live in `listener`, `router`,
//! `manager` and `admin`.

#![forbid(unsafe_code)]

pub mod admin;
pub mod backoff;
pub mod broker;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod edge;
#[doc(hidden)]
pub mod fuzz_checks;
pub mod listener;
pub mod load;
pub mod manager;
pub mod metrics;
pub mod middleware;
pub mod otel;
pub mod params;
pub mod problem;
pub mod push;
pub mod roles;
pub mod router;
pub mod routes;
pub mod runtime;
pub mod secrets;
pub mod shutdown;
pub mod telemetry;
pub mod timing;
pub mod traceparent;
