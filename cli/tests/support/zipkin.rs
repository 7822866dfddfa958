//! Zipkin's query API (`/api/v2/...`) and checks on the trees it returns.

use super::http;
use serde_json::Value;
use std::collections::HashMap;

/// One span as Zipkin stores it (names are lowercased by Zipkin).
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: String,
    pub id: String,
    /// Empty for a root.
    pub parent: String,
    pub name: String,
    /// `SERVER`, `CLIENT`, ... or empty (INTERNAL).
    pub kind: String,
    pub service: String,
    pub tags: HashMap<String, String>,
}

impl Span {
    fn from_json(v: &Value) -> Span {
        let s = |k: &str| v[k].as_str().unwrap_or("").to_owned();
        Span {
            trace_id: s("traceId"),
            id: s("id"),
            parent: s("parentId"),
            name: s("name"),
            kind: s("kind"),
            service: v["localEndpoint"]["serviceName"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            tags: v["tags"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// A tag's value, "" when absent.
    pub fn tag(&self, key: &str) -> &str {
        self.tags.get(key).map(String::as_str).unwrap_or("")
    }
}

fn json(port: u16, path: &str) -> Result<Value, String> {
    let a = http::get(port, path)?;
    if a.status != 200 {
        return Err(format!("GET {path}: {} {}", a.status, a.body));
    }
    serde_json::from_str(&a.body).map_err(|e| format!("GET {path}: {e}: {}", a.body))
}

/// The spans of one trace (empty while Zipkin has none).
pub fn trace(port: u16, trace_id: &str) -> Result<Vec<Span>, String> {
    let a = http::get(port, &format!("/api/v2/trace/{trace_id}"))?;
    if a.status == 404 {
        return Ok(Vec::new());
    }
    let v: Value = serde_json::from_str(&a.body).map_err(|e| format!("{e}: {}", a.body))?;
    Ok(v.as_array()
        .map(|a| a.iter().map(Span::from_json).collect())
        .unwrap_or_default())
}

/// Every trace Zipkin holds that has a span of `service` (at most 1000).
pub fn traces_of(port: u16, service: &str) -> Result<Vec<Vec<Span>>, String> {
    let v = json(
        port,
        &format!("/api/v2/traces?serviceName={service}&limit=1000"),
    )?;
    Ok(v.as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    t.as_array()
                        .map(|a| a.iter().map(Span::from_json).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The services Zipkin has seen.
pub fn services(port: u16) -> Result<Vec<String>, String> {
    let v = json(port, "/api/v2/services")?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// The one span called `name` in `spans`.
pub fn one<'a>(spans: &'a [Span], name: &str) -> Result<&'a Span, String> {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    match found.as_slice() {
        [s] => Ok(s),
        _ => Err(format!(
            "{} spans named {name:?} in {}",
            found.len(),
            names(spans)
        )),
    }
}

/// `name (service)` of every span, for messages.
pub fn names(spans: &[Span]) -> String {
    let v: Vec<String> = spans
        .iter()
        .map(|s| format!("{} ({}) id={} parent={}", s.name, s.service, s.id, s.parent))
        .collect();
    format!("[{}]", v.join(", "))
}

/// Checks `spans` form one tree: one trace id, every parent link pointing at a span of the trace
/// except the root's, which points at `root_parent` ("" for a root span, else the client's span).
/// Returns the root.
pub fn one_tree<'a>(spans: &'a [Span], root_parent: &str) -> Result<&'a Span, String> {
    let ids: HashMap<&str, &Span> = spans.iter().map(|s| (s.id.as_str(), s)).collect();
    let traces: std::collections::BTreeSet<&str> =
        spans.iter().map(|s| s.trace_id.as_str()).collect();
    if traces.len() != 1 {
        return Err(format!("spans of {traces:?}: {}", names(spans)));
    }
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| !ids.contains_key(s.parent.as_str()))
        .collect();
    match roots.as_slice() {
        [root] if root.parent == root_parent => Ok(root),
        _ => Err(format!(
            "want one root whose parent is {root_parent:?}, got {}; all: {}",
            names(&roots.into_iter().cloned().collect::<Vec<_>>()),
            names(spans)
        )),
    }
}

/// Is `ancestor` on the parent chain of `span`?
pub fn descends(spans: &[Span], span: &Span, ancestor: &Span) -> bool {
    let ids: HashMap<&str, &Span> = spans.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut at = span;
    for _ in 0..spans.len() {
        if at.parent == ancestor.id {
            return true;
        }
        match ids.get(at.parent.as_str()) {
            Some(p) => at = p,
            None => return false,
        }
    }
    false
}
