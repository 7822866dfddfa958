//! What the operator and the sidecars agree on: the rendered sidecar configuration (the content of the
//! ConfigMap the operator writes and the file the sidecar reads), well-known ports, label keys, and the
//! control-plane gRPC API.

pub mod config;
pub mod durable;
pub mod env;
pub mod frame;
mod frame_error;
#[doc(hidden)]
pub mod fuzz_checks;
pub mod headers;
pub mod labels;
pub mod memory;
pub mod nats_access;
pub mod path_template;
pub mod ports;
pub mod spans;
pub mod stream;
pub mod tracestate;

/// The router's client-facing gRPC API (`proto/switchyard/v1/gateway.proto`) and the manager's local
/// API for the app (`local_api.proto`).
pub mod gateway {
    /// Package `switchyard.v1`.
    pub mod v1 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        tonic::include_proto!("switchyard.v1");

        /// Encoded file descriptor set of `switchyard.v1`, for gRPC server reflection.
        pub const FILE_DESCRIPTOR_SET: &[u8] =
            tonic::include_file_descriptor_set!("switchyard_v1_descriptor");
    }
}

/// The operator's control-plane API (`proto/switchyard/v1/control.proto`): routing tables streamed to
/// sidecars, load reports streamed back; and workload identity (`identity.proto`): certificates for
/// tokens.
pub mod control {
    /// Package `switchyard.v1` (control-plane half).
    pub mod v1 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/control/switchyard.v1.rs"));
    }
}
