//! `docs/reference/crds.md`: every field of the Router and Manager resources, walked from the CRDs' OpenAPI
//! schemas (the ones `crdgen` writes into the CRD chart): path, type, default, whether it is required, its
//! description, and the CEL rules the API server runs on it.

use kube::CustomResourceExt;
use serde_json::Value;
use std::fmt::Write as _;
use switchyard_crds::{Manager, Router};

/// The type of a schema node, as a reader would say it.
fn type_of(node: &Value) -> String {
    if node
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return "integer or string".into();
    }
    let base = node.get("type").and_then(Value::as_str).unwrap_or("");
    match base {
        "array" => match node.get("items") {
            Some(items) => format!("array of {}", type_of(items)),
            None => "array".into(),
        },
        "object" => match node.get("additionalProperties") {
            Some(v) if v.is_object() => format!("map of {}", type_of(v)),
            _ if node.get("x-kubernetes-preserve-unknown-fields").is_some() => {
                "object (any)".into()
            }
            _ => "object".into(),
        },
        "" => "any".into(),
        t => match node.get("format").and_then(Value::as_str) {
            Some(f) => format!("{t} ({f})"),
            None => t.to_string(),
        },
    }
}

/// Bounds and choices of a node, in a short phrase.
fn constraints(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values.iter().map(|v| format!("`{}`", compact(v))).collect();
        out.push(format!("one of {}", names.join(", ")));
    }
    for (key, word) in [
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("minLength", "length at least"),
        ("maxLength", "length at most"),
        ("minItems", "items at least"),
        ("maxItems", "items at most"),
        ("pattern", "matches"),
    ] {
        if let Some(v) = node.get(key) {
            out.push(format!("{word} `{}`", compact(v)));
        }
    }
    if let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            let text = rule
                .get("message")
                .or_else(|| rule.get("rule"))
                .and_then(Value::as_str)
                .unwrap_or("");
            out.push(format!("rule: {text}"));
        }
    }
    out
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Markdown-safe one-line text of a description.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A description as Markdown text: one line, and its brackets kept as text (a description written for
/// rustdoc names items as `[`X`]`, and Kubernetes' own say `conditions[x]`: neither is a link here).
fn prose(text: &str) -> String {
    one_line(text).replace('[', "\\[").replace(']', "\\]")
}

/// One table row per field under `node`, depth first, in the schema's (sorted) order.
fn rows(out: &mut String, path: &str, node: &Value) {
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, child) in props {
        let field = format!("{path}.{name}");
        let default = child
            .get("default")
            .map(|d| format!("`{}`", compact(d).replace('|', "\\|")))
            .unwrap_or_default();
        let mut what = prose(
            child
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        for c in constraints(child) {
            if !what.is_empty() {
                what.push_str("<br>");
            }
            what.push_str(&one_line(&c));
        }
        let req = if required.contains(&name.as_str()) {
            "yes"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{field}` | {} | {req} | {default} | {what} |",
            type_of(child)
        );
        // Fields of objects, of the objects in arrays and of the values of maps.
        let inner = match child.get("type").and_then(Value::as_str) {
            Some("array") => child.get("items").map(|i| (format!("{field}[]"), i)),
            Some("object") if child.get("properties").is_none() => child
                .get("additionalProperties")
                .filter(|v| v.is_object())
                .map(|v| (format!("{field}.*"), v)),
            _ => Some((field.clone(), child)),
        };
        if let Some((p, n)) = inner {
            rows(out, &p, n);
        }
    }
}

fn resource(out: &mut String, crd: &Value) {
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or("?");
    let group = crd["spec"]["group"].as_str().unwrap_or("?");
    for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
        let name = version["name"].as_str().unwrap_or("?");
        let schema = &version["schema"]["openAPIV3Schema"];
        let _ = writeln!(out, "## {kind} (`{group}/{name}`)\n");
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            let _ = writeln!(out, "{}\n", prose(d));
        }
        for top in ["spec", "status"] {
            let Some(node) = schema["properties"].get(top) else {
                continue;
            };
            let _ = writeln!(out, "### `{top}`\n");
            if let Some(rules) = node
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
            {
                for rule in rules {
                    let msg = rule.get("message").or_else(|| rule.get("rule"));
                    if let Some(m) = msg.and_then(Value::as_str) {
                        let _ = writeln!(out, "- rule: {}", one_line(m));
                    }
                }
                out.push('\n');
            }
            out.push_str("| field | type | required | default | description |\n");
            out.push_str("|---|---|---|---|---|\n");
            rows(out, top, node);
            out.push('\n');
        }
    }
}

/// The whole page.
pub fn page() -> String {
    let mut out = String::from(
        "# Router and Manager fields\n\n\
         <!-- Generated by `make reference` (cli/tests/reference) from the CRD schemas; do not edit. -->\n\n\
         Every field of the two custom resources, from the schemas the API server validates with (the CRD chart's\n\
         YAML is generated from the same types). `kubectl explain router.spec` and `kubectl explain\n\
         manager.spec` print the same descriptions; `switchyard check -f FILE` applies the same schemas and rules\n\
         offline. A path ending in `[]` is a field of each item of a list; `.*` one of each value of a map.\n\n",
    );
    for crd in [Router::crd(), Manager::crd()] {
        let value = serde_json::to_value(&crd).expect("a CRD serializes to JSON");
        resource(&mut out, &value);
    }
    out.trim_end().to_string() + "\n"
}
