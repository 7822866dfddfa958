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

/// The schema of a core/v1 `PodTemplateSpec` embedded in a CRD, with every description dropped.
///
/// Kubernetes' own descriptions make up five sixths of the pod template's schema: with them the Manager
/// CRD was 597 KB of YAML, over the 262,144 bytes of annotations an object may carry, so a client-side
/// `kubectl apply -f` (which copies the object into `last-applied-configuration`) and Argo CD without
/// server-side apply failed on it. Dropped, as KEDA and Knative do for theirs; every type, format,
/// `required`, enum and `x-kubernetes-*` marker stays, so the API server validates the template as
/// before. Its documentation is Kubernetes' (`kubectl explain pod.spec`).
pub fn pod_template_spec(g: &mut SchemaGenerator) -> Schema {
    let mut s = g.subschema_for::<k8s_openapi::api::core::v1::PodTemplateSpec>();
    if let Some(map) = s.as_object_mut() {
        strip_descriptions(map);
    }
    s
}

/// Removes `description` from a schema object and from every subschema under it. Walks only the
/// keywords that hold subschemas, so a property that happens to be named `description` is kept.
fn strip_descriptions(schema: &mut serde_json::Map<String, serde_json::Value>) {
    schema.remove("description");
    for (keyword, value) in schema.iter_mut() {
        match (keyword.as_str(), value) {
            ("properties", serde_json::Value::Object(props)) => {
                for sub in props.values_mut() {
                    strip_value(sub);
                }
            }
            ("items" | "additionalProperties" | "not", sub) => strip_value(sub),
            ("allOf" | "anyOf" | "oneOf", serde_json::Value::Array(subs)) => {
                for sub in subs {
                    strip_value(sub);
                }
            }
            _ => {}
        }
    }
}

fn strip_value(v: &mut serde_json::Value) {
    if let serde_json::Value::Object(map) = v {
        strip_descriptions(map);
    }
}
