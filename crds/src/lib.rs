//! Rust types of the Switchyard custom resources: `Router` and `Manager` in `switchyard.dev/v1alpha1`.
//!
//! Pure types and pure checks; no I/O. The CRD YAML in `charts/switchyard-crds/templates/` is generated
//! from these types by the `crdgen` binary, and a test fails when it is stale.

// The kube derive takes one `printcolumn(...)` per column; clippy reads their repeated keys as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod crd;
mod delivery;
pub mod event_type;
pub mod manager;
pub mod route_schema;
pub mod router;
pub mod router_service;
pub mod schema;
pub mod status;
pub mod strict;
pub mod subscription;
pub mod yaml;
pub mod yaml_lines;

pub use event_type::EventType;
pub use manager::{Manager, ManagerSpec};
pub use router::{Router, RouterSpec};

/// API group of every Switchyard resource.
pub const GROUP: &str = "switchyard.dev";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";
