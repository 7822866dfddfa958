//! What the operator and the sidecars agree on: the rendered sidecar configuration (the content of the
//! ConfigMap the operator writes and the file the sidecar reads), well-known ports, and label keys.

pub mod config;
pub mod frame;
pub mod ports;
