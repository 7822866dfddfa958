//! A document checked against its kind's structural schema, as the API server checks it under
//! `kubectl apply`'s strict field validation: unknown fields (with the field probably meant), wrong
//! types and the schema's value bounds, each named by its path (`spec.workers.maxInflight`).
//!
//! The schemas are the ones the CRDs are generated from (the `openAPIV3Schema` of [`Router::crd`] and
//! [`Manager::crd`]), and k8s-openapi's for the core kinds, so the CLI and the API server agree by
//! construction, not by a second list of fields. CEL rules (`x-kubernetes-validations`) are not
//! evaluated here: `check` runs them on the typed object.

use crate::{Manager, Router};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::OnceLock;

/// One field the API server would refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Field path, dotted, with `[i]` for list items (`spec.routes[1].http.path`).
    pub path: String,
    /// What is wrong, and the field probably meant when one is close.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The kinds whose documents the CLI reads, and so checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `switchyard.dev/v1alpha1` Router.
    Router,
    /// `switchyard.dev/v1alpha1` Manager.
    Manager,
    /// Core `v1` Secret.
    Secret,
}

/// Values only a local run (`switchyard up`) takes where the API server refuses them: listener
/// port 0, any free port, which `up` prints once bound.
pub const LOCAL_ONLY: &[(&str, i64)] = &[
    ("spec.listeners.http.port", 0),
    ("spec.listeners.grpc.port", 0),
];

/// Every problem of `doc` as a `kind` object; empty when the API server's schema check would pass.
pub fn check(kind: Kind, doc: &Value) -> Vec<Problem> {
    check_except(kind, doc, &[])
}

/// [`check`], taking the (path, value) pairs of `exempt` (such as [`LOCAL_ONLY`]) outside a
/// number's bounds.
pub fn check_except(kind: Kind, doc: &Value, exempt: &[(&str, i64)]) -> Vec<Problem> {
    let mut out = Vec::new();
    let schemas = schemas();
    let root = match kind {
        Kind::Router => &schemas.router,
        Kind::Manager => &schemas.manager,
        Kind::Secret => &schemas.secret,
    };
    Walk {
        out: &mut out,
        object_meta: &schemas.object_meta,
        exempt,
    }
    .resource(doc, root, "");
    out
}

struct Schemas {
    router: Value,
    manager: Value,
    secret: Value,
    object_meta: Value,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| Schemas {
        router: crd_schema(Router::crd()),
        manager: crd_schema(Manager::crd()),
        secret: core_schema::<k8s_openapi::api::core::v1::Secret>(),
        object_meta: core_schema::<ObjectMeta>(),
    })
}

/// The served version's `openAPIV3Schema`, as JSON.
fn crd_schema(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    crd.spec
        .versions
        .into_iter()
        .find(|v| v.name == crate::VERSION)
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Bool(true))
}

/// A core type's OpenAPI schema, sub-schemas inlined as in a CRD.
fn core_schema<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

struct Walk<'a> {
    out: &'a mut Vec<Problem>,
    object_meta: &'a Value,
    exempt: &'a [(&'a str, i64)],
}

/// `path` joined with one more field.
fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

impl Walk<'_> {
    fn problem(&mut self, path: &str, message: impl Into<String>) {
        self.out.push(Problem {
            path: if path.is_empty() {
                "(root)".to_owned()
            } else {
                path.to_owned()
            },
            message: message.into(),
        });
    }

    /// An object with `apiVersion`, `kind` and `metadata` besides its schema's fields: a document's
    /// root, or an embedded resource (`x-kubernetes-embedded-resource`).
    fn resource(&mut self, value: &Value, schema: &Value, path: &str) {
        self.node(value, schema, path, true);
    }

    fn node(&mut self, value: &Value, schema: &Value, path: &str, resource: bool) {
        // The API server drops a null in a field that is not nullable rather than refusing it.
        if value.is_null() {
            return;
        }
        if !self.type_ok(value, schema, path) {
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            self.problem(
                path,
                format!(
                    "unsupported value {value}: supported values: {}",
                    list.join(", ")
                ),
            );
        }
        match value {
            Value::Object(map) => self.object(map, schema, path, resource),
            Value::Array(items) => self.array(items, schema, path),
            Value::String(s) => self.string(s, schema, path),
            Value::Number(n) => self.number(n, schema, path),
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// Whether `value` has the schema's type; reports it when not.
    fn type_ok(&mut self, value: &Value, schema: &Value, path: &str) -> bool {
        if flag(schema, "x-kubernetes-int-or-string") {
            let ok = value.is_string() || value.is_i64() || value.is_u64();
            if !ok {
                self.problem(
                    path,
                    format!("must be an integer or a string, not {}", type_name(value)),
                );
            }
            return ok;
        }
        let Some(want) = schema.get("type").and_then(Value::as_str) else {
            return true;
        };
        let ok = match want {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            _ => true,
        };
        if !ok {
            self.problem(
                path,
                format!("must be of type {want}, not {}", type_name(value)),
            );
        }
        ok
    }

    fn object(&mut self, map: &Map<String, Value>, schema: &Value, path: &str, resource: bool) {
        if flag(schema, "x-kubernetes-preserve-unknown-fields")
            && schema.get("properties").is_none()
            && schema.get("additionalProperties").is_none()
        {
            return;
        }
        let resource = resource || flag(schema, "x-kubernetes-embedded-resource");
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (key, v) in map {
            let at = join(path, key);
            if let Some(s) = props.and_then(|p| p.get(key)) {
                self.node(v, s, &at, false);
            } else if resource && key == "metadata" {
                self.node(v, self.object_meta, &at, false);
            } else if resource && (key == "apiVersion" || key == "kind") {
                if !v.is_string() {
                    self.problem(&at, format!("must be a string, not {}", type_name(v)));
                }
            } else if let Some(s) = additional.filter(|a| a.is_object()) {
                self.node(v, s, &at, false);
            } else if additional.and_then(Value::as_bool) == Some(true)
                || flag(schema, "x-kubernetes-preserve-unknown-fields")
            {
            } else {
                let mut known: Vec<&str> = props
                    .into_iter()
                    .flat_map(|p| p.keys())
                    .map(String::as_str)
                    .collect();
                if resource {
                    known.extend(["apiVersion", "kind", "metadata"]);
                }
                let message = match suggest(key, &known) {
                    Some(meant) => format!("unknown field, did you mean {meant}?"),
                    None => "unknown field".to_owned(),
                };
                self.problem(&at, message);
            }
        }
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            // The API server defaults before it validates: a field with a default is never missing.
            let defaulted = props
                .and_then(|p| p.get(req))
                .is_some_and(|s| s.get("default").is_some());
            if !map.contains_key(req) && !defaulted {
                self.problem(&join(path, req), "required field is missing");
            }
        }
        self.bounds(
            map.len(),
            schema,
            path,
            ("minProperties", "maxProperties"),
            "fields",
        );
    }

    fn array(&mut self, items: &[Value], schema: &Value, path: &str) {
        if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
            for (i, v) in items.iter().enumerate() {
                self.node(v, s, &format!("{path}[{i}]"), false);
            }
        }
        self.bounds(items.len(), schema, path, ("minItems", "maxItems"), "items");
        self.unique(items, schema, path);
    }

    /// Lists of type `set` hold each value once; lists of type `map` each key once.
    fn unique(&mut self, items: &[Value], schema: &Value, path: &str) {
        let keys: Vec<&str> = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let identity = |v: &Value| -> Option<Value> {
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => Some(v.clone()),
                Some("map") => Some(Value::Array(
                    keys.iter()
                        .map(|k| v.get(k).cloned().unwrap_or(Value::Null))
                        .collect(),
                )),
                _ => None,
            }
        };
        let ids: Vec<Option<Value>> = items.iter().map(identity).collect();
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id
                && ids[..i].iter().any(|e| e.as_ref() == Some(id))
            {
                self.problem(&format!("{path}[{i}]"), format!("duplicate value {id}"));
            }
        }
    }

    fn string(&mut self, s: &str, schema: &Value, path: &str) {
        self.bounds(
            s.chars().count(),
            schema,
            path,
            ("minLength", "maxLength"),
            "characters",
        );
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            // A pattern the regex crate cannot compile is left to the API server.
            && let Ok(re) = regex::Regex::new(pattern)
            && !re.is_match(s)
        {
            self.problem(path, format!("{s:?} does not match the pattern {pattern}"));
        }
    }

    fn number(&mut self, n: &serde_json::Number, schema: &Value, path: &str) {
        let Some(x) = n.as_f64() else { return };
        if let Some(v) = n.as_i64()
            && self.exempt.contains(&(path, v))
        {
            return;
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let exclusive = flag(schema, "exclusiveMinimum");
            if x < min || (exclusive && x == min) {
                let op = if exclusive {
                    "greater than"
                } else {
                    "at least"
                };
                self.problem(path, format!("{n} must be {op} {min}"));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let exclusive = flag(schema, "exclusiveMaximum");
            if x > max || (exclusive && x == max) {
                let op = if exclusive { "less than" } else { "at most" };
                self.problem(path, format!("{n} must be {op} {max}"));
            }
        }
    }

    fn bounds(&mut self, len: usize, schema: &Value, path: &str, keys: (&str, &str), unit: &str) {
        let get = |k: &str| schema.get(k).and_then(Value::as_u64);
        if let Some(min) = get(keys.0)
            && (len as u64) < min
        {
            self.problem(path, format!("has {len} {unit}, needs at least {min}"));
        }
        if let Some(max) = get(keys.1)
            && (len as u64) > max
        {
            self.problem(path, format!("has {len} {unit}, at most {max} allowed"));
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The known field closest to `typed`, when it is close enough to be the one meant: the same but
/// for case, or a few edits away for its length.
pub(crate) fn suggest<'a>(typed: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = typed.to_lowercase();
    let limit = (typed.chars().count() / 4).clamp(1, 3);
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&lower, &k.to_lowercase()), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manager(workers: Value) -> Value {
        json!({
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Manager",
            "metadata": {"name": "m"},
            "spec": {
                "routerRef": {"name": "edge"},
                "events": ["noop"],
                "app": {"port": 8000},
                "template": {"spec": {"containers": [{"name": "app", "image": "x"}]}},
                "workers": workers,
            }
        })
    }

    fn lines(p: &[Problem]) -> Vec<String> {
        p.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_misspelled_field_is_named_with_the_one_meant() {
        let p = check(Kind::Manager, &manager(json!({"maxInflight": 64})));
        assert_eq!(
            lines(&p),
            ["spec.workers.maxInflight: unknown field, did you mean maxInFlight?"]
        );
    }

    #[test]
    fn a_field_far_from_any_is_unknown_without_a_guess() {
        let p = check(Kind::Manager, &manager(json!({"colour": "blue"})));
        assert_eq!(lines(&p), ["spec.workers.colour: unknown field"]);
    }

    #[test]
    fn a_valid_manager_has_no_problem() {
        assert_eq!(
            check(Kind::Manager, &manager(json!({"maxInFlight": 64}))),
            []
        );
    }

    #[test]
    fn wrong_types_and_bounds_are_named() {
        let p = check(
            Kind::Manager,
            &manager(json!({"maxInFlight": "many", "queueCapacity": 0})),
        );
        let l = lines(&p);
        assert!(
            l.contains(&"spec.workers.maxInFlight: must be of type integer, not string".to_owned()),
            "{l:?}"
        );
        assert!(
            l.iter()
                .any(|x| x.starts_with("spec.workers.queueCapacity: 0 must be at least")),
            "{l:?}"
        );
    }

    #[test]
    fn the_pod_template_and_metadata_are_checked_too() {
        let mut doc = manager(json!({}));
        doc["metadata"]["lables"] = json!({"a": "b"});
        doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        doc["spec"]["template"]["spec"]["containers"][0]["comand"] = json!(["x"]);
        assert_eq!(
            lines(&check(Kind::Manager, &doc)),
            [
                "metadata.lables: unknown field, did you mean labels?",
                "spec.template.spec.containers[0].comand: unknown field, did you mean command?"
            ]
        );
    }

    #[test]
    fn set_lists_hold_each_value_once() {
        let mut doc = manager(json!({}));
        doc["spec"]["events"] = json!(["noop", "noop"]);
        assert_eq!(
            lines(&check(Kind::Manager, &doc)),
            ["spec.events[1]: duplicate value \"noop\""]
        );
    }

    #[test]
    fn free_form_fields_keep_anything() {
        let doc = json!({
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Router",
            "metadata": {"name": "edge"},
            "spec": {
                "listeners": {"http": {"port": 8080}},
                "routes": [{"event": "e", "http": {"method": "POST", "path": "/e"},
                            "schema": {"type": "object", "anything": {"goes": 1}}}]
            }
        });
        assert_eq!(check(Kind::Router, &doc), []);
    }

    #[test]
    fn secrets_are_checked_against_the_core_schema() {
        let doc = json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k"},
            "stringdata": {"a": "b"}
        });
        assert_eq!(
            lines(&check(Kind::Secret, &doc)),
            ["stringdata: unknown field, did you mean stringData?"]
        );
    }
}
