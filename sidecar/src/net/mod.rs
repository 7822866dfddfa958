//! Serving plumbing below every front door: the shared accept loop (bounded connections, optional
//! TLS, graceful drain), request bodies read within a limit, and what gRPC servers read off the wire.

pub(crate) mod accept;
pub(crate) mod body;
pub(crate) mod grpc_timeout;
