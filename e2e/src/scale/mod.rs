//! The control plane at scale (`cargo run -p switchyard-e2e --bin scale-control-plane`): pieces of
//! the benchmark that are worth testing alone. `mirror` (a stream's table from whole tables and
//! deltas) and `stats` are pure; `streams` runs the simulated router sidecars; `procfs` reads the
//! operator's CPU and memory; `api_watch` times the API server's share of a change; `plot` draws the
//! SVGs. `reaction` is the scale-reaction benchmark's arithmetic (pure).

pub mod api_watch;
pub mod mirror;
pub mod plot;
pub mod procfs;
pub mod reaction;
pub mod stats;
pub mod streams;
