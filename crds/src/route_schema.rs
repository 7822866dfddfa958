//! The JSON Schema of a route's request bodies, compiled. The CRD keeps it free-form (any object),
//! so the API server accepts a schema that is not one; the router sidecar compiles it at start with
//! [`compile`], and the operator and `switchyard check` refuse it with the same function and message.

use serde_json::Value;

/// A route's schema that does not compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    /// Field path, `spec.routes[i].schema`.
    pub field: String,
    /// Why it is not a valid JSON Schema.
    pub message: String,
}

/// Compiles the JSON Schema of route `i`.
pub fn compile(i: usize, schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    jsonschema::validator_for(schema).map_err(|e| SchemaError {
        field: format!("spec.routes[{i}].schema"),
        message: format!("not a valid JSON Schema: {e}"),
    })
}
