//! The route tables of the three front doors, side by side: HTTP (method and path template), WebSocket
//! (command) and gRPC (method), each mapping a request to an event type, its deadline and its schema,
//! and who may subscribe to the WebSocket pushes of which event type (`subscribe.rs`).
//! Built once at start-up from the Router spec; pure.

pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod subscribe;
pub(crate) mod ws;

use std::sync::Arc;
use switchyard_crds::router::RouterSpec;

/// A configuration error in the routes: the field path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError {
    /// Field path, e.g. `spec.routes[2].http.path`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Compiles the JSON Schema of route `i`, naming the field when it is not a valid schema.
pub(crate) fn compile_schema(
    i: usize,
    schema: Option<&serde_json::Value>,
) -> Result<Option<Arc<jsonschema::Validator>>, RouteError> {
    schema
        .map(|s| {
            switchyard_crds::route_schema::compile(i, s)
                .map(Arc::new)
                .map_err(|e| RouteError {
                    field: e.field,
                    message: e.message,
                })
        })
        .transpose()
}

/// The bodyLimit middleware's size, or `default` when the spec has none.
pub(crate) fn body_limit(spec: &RouterSpec, default: usize) -> usize {
    spec.middleware
        .iter()
        .find_map(|m| m.body_limit.as_ref())
        .and_then(|b| usize::try_from(b.max_bytes).ok())
        .unwrap_or(default)
}

/// The most of a body read whole under `limit`: capped at what one event carries.
pub(crate) fn whole_limit(limit: usize) -> usize {
    limit.min(switchyard_protocol::frame::MAX_PAYLOAD)
}
