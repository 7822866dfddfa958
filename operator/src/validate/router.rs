//! Checks of a Router spec beyond its schema.

use super::{FieldError, check_name};
use std::collections::HashMap;
use switchyard_crds::RouterSpec;
use switchyard_crds::router::{HttpMethod, whole_body_limit};
use switchyard_protocol::path_template;

/// Every problem of `spec`, in field order; empty when valid.
pub fn validate(name: &str, spec: &RouterSpec) -> Vec<FieldError> {
    let mut out = Vec::new();
    check_name(name, &mut out);
    let mut http_seen: HashMap<(&str, String), usize> = HashMap::new();
    let mut ws_seen: HashMap<&str, usize> = HashMap::new();
    let mut grpc_seen: HashMap<&str, usize> = HashMap::new();
    for (i, route) in spec.routes.iter().enumerate() {
        let at = format!("spec.routes[{i}]");
        // The router sidecar compiles it at start with the same function; refused here, it is a
        // status condition instead of a crash loop.
        if let Some(Err(e)) = route
            .schema
            .as_ref()
            .map(|s| switchyard_crds::route_schema::compile(i, s))
        {
            out.push(FieldError::new(e.field, e.message));
        }
        if let Some(http) = &route.http {
            match path_template::parse(&http.path) {
                Err(e) => out.push(FieldError::new(format!("{at}.http.path"), e.to_string())),
                Ok(t) => {
                    let key = (http.method.as_str(), t.shape());
                    if let Some(first) = http_seen.get(&key) {
                        out.push(FieldError::new(
                            format!("{at}.http"),
                            format!(
                                "{} {} is already routed by spec.routes[{first}]",
                                key.0, http.path
                            ),
                        ));
                    } else {
                        http_seen.insert(key, i);
                    }
                    // GET and DELETE carry no body: a declared parameter that is not in the path types
                    // a query parameter there, as the router sidecar reads it.
                    let query_ok = matches!(http.method, HttpMethod::Get | HttpMethod::Delete);
                    for p in route.params.iter().flat_map(|m| m.keys()) {
                        if !query_ok && !t.params().any(|n| n == p) {
                            out.push(FieldError::new(
                                format!("{at}.params.{p}"),
                                format!("no {{{p}}} in path {}", http.path),
                            ));
                        }
                    }
                }
            }
        }
        if let Some(ws) = &route.websocket
            && let Some(first) = ws_seen.insert(ws.command.as_str(), i)
        {
            out.push(FieldError::new(
                format!("{at}.websocket.command"),
                format!(
                    "command {:?} is already routed by spec.routes[{first}]",
                    ws.command
                ),
            ));
        }
        if let Some(grpc) = &route.grpc
            && let Some(first) = grpc_seen.insert(grpc.method.as_str(), i)
        {
            out.push(FieldError::new(
                format!("{at}.grpc.method"),
                format!(
                    "method {:?} is already routed by spec.routes[{first}]",
                    grpc.method
                ),
            ));
        }
    }
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for (i, m) in spec.middleware.iter().enumerate() {
        let kind = [
            (m.timing.is_some(), "timing"),
            (m.cors.is_some(), "cors"),
            (m.auth.is_some(), "auth"),
            (m.rate_limit.is_some(), "rateLimit"),
            (m.body_limit.is_some(), "bodyLimit"),
        ]
        .into_iter()
        .find_map(|(set, k)| set.then_some(k));
        if let Some(kind) = kind
            && let Some(first) = kinds.insert(kind, i)
        {
            out.push(FieldError::new(
                format!("spec.middleware[{i}].{kind}"),
                format!("{kind} is already configured at spec.middleware[{first}]"),
            ));
        }
    }
    // The sidecar refuses this at start too; here it is a status condition instead of a crash loop.
    // A streamed body holds one window of the budget, so only the largest body read whole counts.
    let largest = spec
        .middleware
        .iter()
        .find_map(|m| m.body_limit.as_ref())
        .map_or(DEFAULT_BODY_LIMIT, |b| whole_body_limit(b.max_bytes));
    if spec.broker.body_budget_bytes < largest {
        out.push(FieldError::new(
            "spec.broker.bodyBudgetBytes",
            format!(
                "{} is less than one body of the largest size read whole ({largest} bytes: bodyLimit.maxBytes, at most 16 MiB): no such body could ever be read",
                spec.broker.body_budget_bytes
            ),
        ));
    }
    super::memory::router(spec, largest, &mut out);
    out
}

/// The sidecar's body limit when no `bodyLimit` middleware sets one.
const DEFAULT_BODY_LIMIT: i64 = 1 << 20;
