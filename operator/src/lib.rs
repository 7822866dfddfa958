//! The Switchyard operator: one controller per custom resource, each a pipeline
//! observe → validate → build → apply → status. Only observe, apply and status touch the API server;
//! `validate` and `build` are pure and unit-tested from YAML fixtures.

pub mod admin;
pub mod apply;
pub mod autoscale;
pub mod backlog;
pub mod conditions;
pub mod conn;
pub mod context;
pub mod control_plane;
pub mod controller;
pub mod error;
pub mod identity;
pub mod leader;
pub mod metrics;
pub mod nats_access;
pub mod render;
pub mod scope;
pub mod settings;
pub mod telemetry;
pub mod validate;

pub use error::{Error, Result};

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
