//! Reading Router and Manager objects (and the Secrets they reference) from multi-document YAML, as
//! `kubectl apply -f` and `switchyard up -f` accept it.

use crate::{Manager, Router};
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

/// The Switchyard objects found in a YAML file.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    /// Routers, in file order.
    pub routers: Vec<Router>,
    /// Managers, in file order.
    pub managers: Vec<Manager>,
    /// Core `v1` Secrets (`data` base64-decoded as kubectl does), in file order.
    pub secrets: Vec<Secret>,
}

/// Why a YAML file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The text is not YAML.
    #[error("document {doc}: {source}")]
    Syntax {
        /// 1-based document index.
        doc: usize,
        /// Parser error with line and column.
        source: serde_saphyr::Error,
    },
    /// Documents have fields their kind's schema refuses (unknown, of the wrong type, out of
    /// bounds), one line each: what the API server would refuse under `kubectl apply`.
    #[error("{} field problem(s), as the API server would refuse them:\n{}", .0.len(), .0.join("\n"))]
    Schema(Vec<String>),
    /// A document is a Router or Manager with a field of the wrong shape.
    #[error("document {doc} ({kind} {name}): {message}")]
    Shape {
        /// 1-based document index.
        doc: usize,
        /// kind of the document.
        kind: String,
        /// metadata.name of the document.
        name: String,
        /// serde's message, which names the field.
        message: String,
    },
}

#[derive(Deserialize)]
struct Head {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

/// Parses every document; keeps Routers and Managers of `switchyard.dev/v1alpha1` and `v1` Secrets,
/// skips other kinds. Each kept document is first checked against its kind's structural schema
/// ([`crate::strict`]); every problem of every document is reported at once.
pub fn parse(text: &str) -> Result<Objects, YamlError> {
    parse_except(text, &[])
}

/// [`parse`] for a local run: the values of [`crate::strict::LOCAL_ONLY`] (listener port 0) pass.
pub fn parse_for_local_run(text: &str) -> Result<Objects, YamlError> {
    parse_except(text, crate::strict::LOCAL_ONLY)
}

/// Every document of `text` as the JSON `kubectl apply` sends for it, so `check` and the API server
/// judge the same values. kubectl reads YAML 1.1 (sigs.k8s.io/yaml, a go-yaml v2): `yes`, `on`,
/// `off` are booleans, `0100` is octal (64), and a float with an integral value (`64.0`) reaches
/// the server as an integer, because Go's JSON writes it as `64`. YAML 1.2 readers differ on each.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options.strict_booleans = false;
    let mut docs: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(text, options)?;
    docs.iter_mut().for_each(integral_floats_as_integers);
    Ok(docs)
}

/// The largest integer a double holds exactly (2^53): beyond it a float's integral value is not
/// the number written.
const EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

fn integral_floats_as_integers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= EXACT_INTEGER
            {
                // Exact: `f` is integral and within the range a double holds exactly.
                #[allow(clippy::cast_possible_truncation)]
                let i = f as i64;
                *v = serde_json::Value::from(i);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        serde_json::Value::Object(fields) => {
            fields.values_mut().for_each(integral_floats_as_integers);
        }
        _ => {}
    }
}

fn parse_except(text: &str, exempt: &[(&str, i64)]) -> Result<Objects, YamlError> {
    let docs = documents(text).map_err(|source| YamlError::Syntax { doc: 0, source })?;
    let mut out = Objects::default();
    let mut schema_problems = Vec::new();
    // Each field's line, read only when a problem needs one.
    let lines = std::cell::OnceCell::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let head: Head = match serde_json::from_value(doc.clone()) {
            Ok(h) => h,
            Err(_) => continue,
        };
        let is_secret = head.api_version == "v1" && head.kind == "Secret";
        let name = head
            .metadata
            .as_ref()
            .and_then(|m| m.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or("<unnamed>")
            .to_owned();
        if let Some(p) = unserved(&head) {
            let at = lines
                .get_or_init(|| crate::yaml_lines::documents(text))
                .as_ref()
                .and_then(|d| d.get(i))
                .and_then(|d| d.line(p.path.as_str()))
                .map(|l| format!(", line {l}"))
                .unwrap_or_default();
            schema_problems.push(format!(
                "document {} ({} {name}){at}: {p}",
                i + 1,
                head.kind
            ));
            continue;
        }
        if !is_secret && head.api_version != format!("{}/{}", crate::GROUP, crate::VERSION) {
            continue;
        }
        let kind = match head.kind.as_str() {
            "Secret" if is_secret => Some(crate::strict::Kind::Secret),
            "Router" if !is_secret => Some(crate::strict::Kind::Router),
            "Manager" if !is_secret => Some(crate::strict::Kind::Manager),
            _ => None,
        };
        if let Some(kind) = kind {
            let problems = crate::strict::check_except(kind, &doc, exempt);
            if !problems.is_empty() {
                let placed = lines.get_or_init(|| crate::yaml_lines::documents(text));
                let document = placed.as_ref().and_then(|d| d.get(i));
                schema_problems.extend(problems.iter().map(|p| {
                    let at = document
                        .and_then(|d| d.line(&p.path))
                        .map(|l| format!(", line {l}"))
                        .unwrap_or_default();
                    format!("document {} ({} {name}){at}: {p}", i + 1, head.kind)
                }));
                continue;
            }
        }
        let shape = |e: serde_path_to_error::Error<serde_json::Error>| YamlError::Shape {
            doc: i + 1,
            kind: head.kind.clone(),
            name: name.clone(),
            message: format!("{}: {}", e.path(), e.inner()),
        };
        match head.kind.as_str() {
            "Secret" if is_secret => out
                .secrets
                .push(serde_path_to_error::deserialize(doc).map_err(shape)?),
            "Router" => out
                .routers
                .push(serde_path_to_error::deserialize(doc).map_err(shape)?),
            "Manager" => out
                .managers
                .push(serde_path_to_error::deserialize(doc).map_err(shape)?),
            _ => {}
        }
    }
    if !schema_problems.is_empty() {
        return Err(YamlError::Schema(schema_problems));
    }
    Ok(out)
}

/// A document of this project's API group that the API server serves no kind for (a misspelled
/// kind or version): the API server refuses it, so it is not skipped as another project's kind.
fn unserved(head: &Head) -> Option<crate::strict::Problem> {
    let version = head
        .api_version
        .strip_prefix(crate::GROUP)?
        .strip_prefix('/')?;
    if version != crate::VERSION {
        return Some(crate::strict::Problem {
            path: "apiVersion".into(),
            message: format!(
                "{GROUP} serves version {VERSION} only, not {version:?}",
                GROUP = crate::GROUP,
                VERSION = crate::VERSION
            ),
        });
    }
    const KINDS: &[&str] = &["Router", "Manager"];
    if KINDS.contains(&head.kind.as_str()) {
        return None;
    }
    let meant = crate::strict::suggest(&head.kind, KINDS)
        .map(|k| format!(", did you mean {k}?"))
        .unwrap_or_default();
    Some(crate::strict::Problem {
        path: "kind".into(),
        message: format!(
            "no kind {:?} in {}/{} (Router, Manager){meant}",
            head.kind,
            crate::GROUP,
            crate::VERSION
        ),
    })
}

/// The documents of a file by kind and name, to place a problem found on a typed object (a CEL
/// rule, the operator's validation) that knows its object and field but not its document.
pub struct Lines {
    heads: Vec<(String, String)>,
    docs: Vec<crate::yaml_lines::Document>,
}

impl Lines {
    /// `None` when the text is not YAML.
    pub fn of(text: &str) -> Option<Lines> {
        let values = documents(text).ok()?;
        let heads = values
            .iter()
            .map(|v| {
                let text = |x: &serde_json::Value| x.as_str().unwrap_or_default().to_owned();
                (text(&v["kind"]), text(&v["metadata"]["name"]))
            })
            .collect();
        Some(Lines {
            heads,
            docs: crate::yaml_lines::documents(text)?,
        })
    }

    /// The line of `field` in the first document of `kind` named `name`.
    pub fn line(&self, kind: &str, name: &str, field: &str) -> Option<usize> {
        let i = self
            .heads
            .iter()
            .position(|(k, n)| k == kind && n == name)?;
        self.docs.get(i)?.line(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_as_kubectl_sends_them() {
        let doc = |yaml: &str| documents(yaml).expect("YAML").remove(0);
        // YAML 1.1 booleans, octal, and integral floats as integers.
        assert_eq!(
            doc("a: yes\nb: on\nc: off\nd: No\ne: true\n"),
            serde_json::json!({"a": true, "b": true, "c": false, "d": false, "e": true})
        );
        assert_eq!(doc("a: 0100\n")["a"], 64);
        assert_eq!(
            doc("a: 64.0\nb: -2.0\nc: 1e3\n"),
            serde_json::json!({"a": 64, "b": -2, "c": 1000})
        );
        assert_eq!(
            doc("a: 0x40\nb: 1_000\n"),
            serde_json::json!({"a": 64, "b": 1000})
        );
        // What stays: fractions, quoted strings, nulls, and nested values are read alike.
        assert_eq!(doc("a: 0.5\n")["a"], 0.5);
        assert_eq!(
            doc("a: \"yes\"\nb: '64.0'\n"),
            serde_json::json!({"a": "yes", "b": "64.0"})
        );
        assert_eq!(
            doc("a: ~\nb: null\nc:\n"),
            serde_json::json!({"a": null, "b": null, "c": null})
        );
        assert_eq!(
            doc("a: [1.0, {b: 2.0}]\n"),
            serde_json::json!({"a": [1, {"b": 2}]})
        );
    }

    #[test]
    fn secrets_are_kept_with_data_decoded() {
        let objs = parse(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: keys}\ndata: {a: aGVsbG8=}\nstringData: {b: world}\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
        )
        .expect("parses");
        assert_eq!(objs.secrets.len(), 1);
        let s = &objs.secrets[0];
        assert_eq!(s.metadata.name.as_deref(), Some("keys"));
        assert_eq!(s.data.as_ref().expect("data")["a"].0, b"hello");
        assert_eq!(s.string_data.as_ref().expect("stringData")["b"], "world");
        let err = parse("apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata: {a: '!!'}\n")
            .expect_err("bad base64");
        assert!(err.to_string().contains("bad"), "{err}");
    }

    #[test]
    fn schema_problems_name_the_document_the_line_and_the_field_meant() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n---\n\
                    apiVersion: switchyard.dev/v1alpha1\nkind: Manager\nmetadata: {name: m}\nspec:\n  \
                    routerRef: {name: edge}\n  events: [noop]\n  app: {port: 8000}\n  \
                    template: {spec: {containers: [{name: app, image: x}]}}\n  workers:\n    maxInflight: 64\n";
        let err = parse(text).expect_err("refused").to_string();
        assert!(
            err.contains(
                "document 2 (Manager m), line 14: spec.workers.maxInflight: unknown field, did you mean maxInFlight?"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_misspelled_kind_or_version_of_this_api_group_is_refused_not_skipped() {
        let err = parse("apiVersion: switchyard.dev/v1alpha1\nkind: Manger\nmetadata: {name: m}\n")
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("document 1 (Manger m), line 2: kind: no kind \"Manger\" in switchyard.dev/v1alpha1 (Router, Manager), did you mean Manager?"),
            "{err}"
        );
        let err = parse("apiVersion: switchyard.dev/v1\nkind: Router\nmetadata: {name: r}\n")
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("document 1 (Router r), line 1: apiVersion: switchyard.dev serves version v1alpha1 only, not \"v1\""),
            "{err}"
        );
        // Another group's kinds are not this file's business.
        let objs = parse("apiVersion: example.com/v1\nkind: Manger\nmetadata: {name: m}\n")
            .expect("skipped");
        assert!(objs.managers.is_empty());
    }

    #[test]
    fn objects_are_found_by_kind_and_name() {
        let text = "\
kind: Manager
metadata:
  name: m
spec:
  workers:
    maxInflight: 64
---
kind: Router
spec:
  listeners: {}
";
        let lines = Lines::of(text).expect("YAML");
        assert_eq!(
            lines.line("Manager", "m", "spec.workers.maxInflight"),
            Some(6)
        );
        assert_eq!(lines.line("Router", "", "spec.listeners"), Some(10));
        assert_eq!(lines.line("Router", "other", "spec"), None);
    }
}
