//! The Switchyard operator: one controller per custom resource, each a pipeline
//! observe → validate → build → apply → status. Only observe, apply and status touch the API server;
//! `validate` and `build` are pure and unit-tested from YAML fixtures.

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
pub mod nats_access;
pub mod render;
mod scope;
mod settings;
mod telemetry;
pub mod validate;
mod wiring;

// Public modules: the pure build step (validate, then render) that `switchyard up` and
// `switchyard check` share with the operator, and the JetStream access the NATS test checks.

// The binary: its flags, its logs, and the operator it runs.
pub use error::{Error, Result};
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
pub const FIELD_MANAGER: &str = "switchyard-operator";

/// Waiting on observable conditions in tests.
#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Duration;

    /// Waits (at most ten seconds, then panics) until `ready` holds.
    pub async fn until(ready: impl Fn() -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !ready() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the condition never held");
    }
}
