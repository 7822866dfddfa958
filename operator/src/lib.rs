//! The Switchyard operator: one controller per custom resource, each a pipeline
//! observe → validate → build → apply → status. Only observe, apply and status touch the API server;
//! `validate` and `build` are pure and unit-tested from YAML fixtures.

// `pub` only on what lib.rs makes public: everything else is `pub(crate)`, so rustc reports dead
// code and a reader sees the crate's surface here.
#![warn(unreachable_pub)]

mod admin;
mod apply;
mod autoscale;
mod backlog;
mod conditions;
mod conn;
mod context;
mod control_plane;
mod controller;
mod error;
mod identity;
mod leader;
mod metrics;
mod scope;
mod settings;
mod telemetry;
mod wiring;

// Public modules (their own public items are only what these users name): the pure build step
// (validate, then render) that `switchyard up`/`check` share with the operator and the fixture
// tests call, with its error; and the JetStream access Secret the NATS test builds.
pub mod nats_access;
pub mod render;
pub mod validate;
// Every span the operator exports: the span reference page and the telemetry e2e read it.
pub mod spans;
pub use error::{Error, Result};

// The binary: its flags, its logs, and the operator it runs.
pub use settings::Settings;
pub use telemetry::init as init_telemetry;
pub use wiring::run;

// The CLI: the CA Secret's default name (`switchyard cluster`) and the metric names (its reference).
pub use identity::ca_secret::DEFAULT_SECRET;
pub use metrics::Metrics;

// The autoscale_tick bench: the autoscaler's tick in process.
pub use autoscale::STALE_AFTER;
pub use autoscale::observe::aggregate;
pub use autoscale::scaler::{Backlog, Scaler};
pub use control_plane::load::LoadBook;

/// Field manager of every server-side apply, and the `managed-by` label value.
pub(crate) const FIELD_MANAGER: &str = "switchyard-operator";

/// Waiting on observable conditions in tests.
#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Duration;

    /// Waits (at most ten seconds, then panics) until `ready` holds.
    pub(crate) async fn until(ready: impl Fn() -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !ready() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the condition never held");
    }
}
