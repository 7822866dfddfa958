//! The HTTP route table: (method, path template) -> event type, built once at start-up.
//!
//! Pure. Routes are checked in the order written and the first full match wins. A path that some
//! template matches with another method gets 405 with `Allow`; a typed parameter that does not parse
//! gets 400 unless a later route matches the path.

use super::{RouteError, body_limit, compile_schema, whole_limit};
use crate::params::{self, BadParam};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use switchyard_crds::router::{HttpMethod, ParamType, RouterSpec};
use switchyard_protocol::path_template;

/// Default largest request body when no `bodyLimit` middleware is set.
pub(crate) const DEFAULT_BODY_LIMIT: usize = 1 << 20;
/// Most path segments a request may have before it is 404 without a table walk: as many as a
/// template may have.
const MAX_SEGMENTS: usize = path_template::MAX_SEGMENTS;
/// Most query parameters taken into a GET event.
pub(crate) const MAX_QUERY_PARAMS: usize = 64;

/// One piece of a path template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Segment {
    /// Must equal the request segment.
    Literal(String),
    /// Captures one non-empty segment, typed.
    Param {
        /// Parameter name.
        name: String,
        /// Declared type (string when undeclared).
        ty: ParamType,
    },
}

/// A compiled HTTP route.
pub struct HttpRoute {
    /// Method matched.
    pub(crate) method: HttpMethod,
    /// Template as written, for logs.
    pub(crate) template: String,
    /// The template split into segments.
    pub(crate) segments: Vec<Segment>,
    /// Event type the request becomes.
    pub event: Arc<str>,
    /// Reply deadline of this route.
    pub(crate) timeout: Duration,
    /// Body schema, compiled.
    pub(crate) schema: Option<Arc<jsonschema::Validator>>,
    /// Declared parameter types, also applied to query parameters.
    pub(crate) param_types: BTreeMap<String, ParamType>,
}

impl HttpRoute {
    /// Whether requests on this route carry a JSON body (POST, PUT, PATCH).
    pub(crate) fn has_body(&self) -> bool {
        matches!(
            self.method,
            HttpMethod::Post | HttpMethod::Put | HttpMethod::Patch
        )
    }

    /// Type of a parameter name, for query parameters.
    pub(crate) fn param_type(&self, name: &str) -> Option<ParamType> {
        self.param_types.get(name).copied()
    }
}

/// The result of looking up a request.
pub enum Lookup<'a> {
    /// A route matched; path parameters are decoded and typed.
    Found {
        /// The route.
        route: &'a HttpRoute,
        /// Path parameters by name.
        params: Map<String, Value>,
    },
    /// No template matches the path.
    NotFound,
    /// Templates match the path, with other methods (the `Allow` value).
    MethodNotAllowed(String),
    /// The path matched a template but a parameter does not fit its type.
    BadParam(BadParam),
}

/// The compiled table.
pub struct RouteTable {
    routes: Vec<HttpRoute>,
    /// Largest accepted body (`bodyLimit.maxBytes`): what a streamed body may reach.
    pub(crate) body_limit: usize,
    /// Largest body read whole (schema or path-parameter routes, JSON bodies, small bodies): the
    /// limit capped at what one event carries. Only these hold their size of the byte budget.
    pub(crate) whole_limit: usize,
}

impl RouteTable {
    /// Compiles the HTTP routes of a Router spec; non-HTTP routes are skipped (their listeners come later).
    pub fn build(spec: &RouterSpec) -> Result<RouteTable, RouteError> {
        let default_timeout: Duration = spec.broker.response_timeout.into();
        let mut routes = Vec::new();
        for (i, r) in spec.routes.iter().enumerate() {
            let Some(http) = &r.http else { continue };
            let param_types = r.params.clone().unwrap_or_default();
            let segments = parse_template(&http.path, &param_types).map_err(|e| RouteError {
                field: format!("spec.routes[{i}].http.path"),
                message: format!("{:?}: {e}", http.path),
            })?;
            for name in param_types.keys() {
                let in_path = segments
                    .iter()
                    .any(|s| matches!(s, Segment::Param { name: n, .. } if n == name));
                if !in_path && !matches!(http.method, HttpMethod::Get | HttpMethod::Delete) {
                    return Err(RouteError {
                        field: format!("spec.routes[{i}].params.{name}"),
                        message: format!(
                            "parameter {name:?} is not a `{{{name}}}` segment of {:?}",
                            http.path
                        ),
                    });
                }
            }
            let schema = compile_schema(i, r.schema.as_ref())?;
            routes.push(HttpRoute {
                method: http.method,
                template: http.path.clone(),
                segments,
                event: Arc::from(r.event.as_str()),
                timeout: r.timeout.map(Into::into).unwrap_or(default_timeout),
                schema,
                param_types,
            });
        }
        let body_limit = body_limit(spec, DEFAULT_BODY_LIMIT);
        Ok(RouteTable {
            routes,
            body_limit,
            whole_limit: whole_limit(body_limit),
        })
    }

    /// The routes, in order.
    pub(crate) fn routes(&self) -> &[HttpRoute] {
        &self.routes
    }

    /// Looks up a request by method and raw (still percent-encoded) path.
    pub fn lookup(&self, method: &str, path: &str) -> Lookup<'_> {
        let Some(rest) = path.strip_prefix('/') else {
            return Lookup::NotFound;
        };
        let mut segs: [&str; MAX_SEGMENTS] = [""; MAX_SEGMENTS];
        let mut n = 0;
        for s in rest.split('/') {
            if n == MAX_SEGMENTS {
                return Lookup::NotFound;
            }
            segs[n] = s;
            n += 1;
        }
        let segs = &segs[..n];
        let mut allow: Vec<&'static str> = Vec::new();
        let mut first_bad: Option<BadParam> = None;
        for route in &self.routes {
            if !shape_matches(&route.segments, segs) {
                continue;
            }
            if route.method.as_str() != method {
                if !allow.contains(&route.method.as_str()) {
                    allow.push(route.method.as_str());
                }
                continue;
            }
            match capture(&route.segments, segs) {
                Ok(params) => return Lookup::Found { route, params },
                Err(bad) => {
                    first_bad.get_or_insert(bad);
                }
            }
        }
        if let Some(bad) = first_bad {
            return Lookup::BadParam(bad);
        }
        if allow.is_empty() {
            Lookup::NotFound
        } else {
            Lookup::MethodNotAllowed(allow.join(", "))
        }
    }
}

/// The protocol's template, each parameter typed by `params` (string when undeclared).
fn parse_template(
    path: &str,
    types: &BTreeMap<String, ParamType>,
) -> Result<Vec<Segment>, path_template::TemplateError> {
    let template = path_template::parse(path)?;
    Ok(template
        .segments
        .into_iter()
        .map(|s| match s {
            path_template::Segment::Literal(l) => Segment::Literal(l),
            path_template::Segment::Param(name) => {
                let ty = types.get(&name).copied().unwrap_or(ParamType::String);
                Segment::Param { name, ty }
            }
        })
        .collect())
}

fn shape_matches(template: &[Segment], segs: &[&str]) -> bool {
    template.len() == segs.len()
        && template.iter().zip(segs).all(|(t, s)| match t {
            Segment::Literal(l) => l == s,
            Segment::Param { .. } => !s.is_empty(),
        })
}

fn capture(template: &[Segment], segs: &[&str]) -> Result<Map<String, Value>, BadParam> {
    let mut out = Map::new();
    for (t, raw) in template.iter().zip(segs) {
        if let Segment::Param { name, ty } = t {
            let decoded = params::percent_decode(raw, false).ok_or_else(|| BadParam {
                name: name.clone(),
                expected: "valid percent-encoded UTF-8",
            })?;
            out.insert(name.clone(), params::typed(name, &decoded, *ty)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(yaml_routes: serde_json::Value) -> RouteTable {
        let spec: RouterSpec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": yaml_routes,
        }))
        .expect("spec");
        RouteTable::build(&spec).expect("table")
    }

    fn quick() -> RouteTable {
        table(serde_json::json!([
            {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
            {"event": "echo", "http": {"method": "POST", "path": "/echo"}},
            {"event": "orders.get", "http": {"method": "GET", "path": "/orders/{id}"}, "params": {"id": "integer"}},
            {"event": "orders.search", "http": {"method": "GET", "path": "/orders/search"}},
            {"event": "orders.update", "http": {"method": "PUT", "path": "/orders/{id}"}, "timeout": "2s"},
            {"event": "ws.only", "websocket": {"command": "x"}},
        ]))
    }

    #[test]
    fn matches_method_and_literal_path() {
        let t = quick();
        let Lookup::Found { route, params } = t.lookup("GET", "/noop") else {
            panic!("found")
        };
        assert_eq!(&*route.event, "noop");
        assert!(params.is_empty());
        assert!(!route.has_body());
        assert_eq!(route.timeout, Duration::from_secs(30));
    }

    #[test]
    fn typed_path_parameters() {
        let t = quick();
        let Lookup::Found { route, params } = t.lookup("GET", "/orders/42") else {
            panic!("found")
        };
        assert_eq!(&*route.event, "orders.get");
        assert_eq!(params.get("id"), Some(&Value::from(42)));
        // A literal route after a typed one still matches when the type does not fit.
        let Lookup::Found { route, .. } = t.lookup("GET", "/orders/search") else {
            panic!("found")
        };
        assert_eq!(&*route.event, "orders.search");
        let Lookup::BadParam(bad) = t.lookup("GET", "/orders/abc") else {
            panic!("bad param")
        };
        assert_eq!(bad.name, "id");
        // Untyped parameters are strings, percent-decoded.
        let Lookup::Found { route, params } = t.lookup("PUT", "/orders/a%20b") else {
            panic!("found")
        };
        assert_eq!(route.timeout, Duration::from_secs(2));
        assert_eq!(params.get("id"), Some(&Value::from("a b")));
    }

    #[test]
    fn unknown_path_is_not_found_and_wrong_method_lists_allow() {
        let t = quick();
        assert!(matches!(t.lookup("GET", "/nope"), Lookup::NotFound));
        assert!(matches!(t.lookup("GET", "/noop/"), Lookup::NotFound));
        assert!(matches!(t.lookup("GET", "/orders/"), Lookup::NotFound));
        assert!(matches!(t.lookup("GET", "noop"), Lookup::NotFound));
        let Lookup::MethodNotAllowed(allow) = t.lookup("GET", "/echo") else {
            panic!("405")
        };
        assert_eq!(allow, "POST");
        let Lookup::MethodNotAllowed(allow) = t.lookup("DELETE", "/orders/1") else {
            panic!("405")
        };
        assert_eq!(allow, "GET, PUT");
        let long = "/a".repeat(100);
        assert!(matches!(t.lookup("GET", &long), Lookup::NotFound));
    }

    #[test]
    fn bad_templates_name_the_field() {
        let spec: RouterSpec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [
                {"event": "a", "http": {"method": "GET", "path": "/a"}},
                {"event": "b", "http": {"method": "GET", "path": "/b/x{id}"}},
            ],
        }))
        .expect("spec");
        let err = RouteTable::build(&spec).err().expect("error");
        assert_eq!(err.field, "spec.routes[1].http.path");
        let spec: RouterSpec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [{"event": "a", "http": {"method": "POST", "path": "/a"}, "schema": {"type": 12}}],
        }))
        .expect("spec");
        assert_eq!(
            RouteTable::build(&spec).err().expect("error").field,
            "spec.routes[0].schema"
        );
    }

    #[test]
    fn body_limit_comes_from_middleware() {
        let spec: RouterSpec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [{"event": "a", "http": {"method": "POST", "path": "/a"}}],
            "middleware": [{"timing": {}}, {"bodyLimit": {"maxBytes": 10}}],
        }))
        .expect("spec");
        assert_eq!(RouteTable::build(&spec).expect("table").body_limit, 10);
        assert_eq!(quick().body_limit, DEFAULT_BODY_LIMIT);
    }
}
