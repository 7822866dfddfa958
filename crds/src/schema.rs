//! Hand-written schema fragments where the derived one would not be a valid structural schema.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON object, kept as written (used for user-supplied JSON Schemas of request bodies).
pub fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Pattern of a positive Go-style duration such as `250ms`, `30s`, `1m30s`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// A non-negative Go-style duration string (`metav1.Duration` wire format).
pub fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": DURATION_PATTERN,
    })
}

/// An optional duration: the same as [`duration`] but nullable for optional fields.
pub fn optional_duration(g: &mut SchemaGenerator) -> Schema {
    let mut s = duration(g);
    s.insert("nullable".into(), true.into());
    s
}
