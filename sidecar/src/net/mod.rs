//! Serving plumbing below every front door: the shared accept loop (connections under caps and
//! timers, optional TLS, graceful drain), request bodies read within a limit and a byte budget, what gRPC servers read off the wire,
//! and the mesh's mTLS: this workload's identity (certified and renewed), the TLS of frame
//! connections and of the control plane.

pub(crate) mod accept;
pub(crate) mod body;
pub(crate) mod budget;
pub(crate) mod conn;
pub(crate) mod control_plane;
pub(crate) mod frame_writer;
pub(crate) mod grpc_timeout;
pub(crate) mod identity;
pub(crate) mod io;
pub(crate) mod mesh;
pub(crate) mod silence;
pub(crate) mod stream;
