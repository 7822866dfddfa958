//! What the operator and the sidecars agree on: the rendered sidecar configuration (the content of the
//! ConfigMap the operator writes and the file the sidecar reads), well-known ports, and label keys.

pub mod config;
pub mod frame;
#[doc(hidden)]
pub mod fuzz_checks;
pub mod ports;

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
