//! The gRPC routes of a Router spec: a `Call`/`Connect` message's `method` -> event type, compiled once.
//!
//! Pure. When two routes name the same method, the first one wins.

use super::{RouteError, body_limit, compile_schema, whole_limit};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use switchyard_crds::router::RouterSpec;

/// Largest gRPC message, either way, when no `bodyLimit` middleware is set.
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 4 << 20;

/// A compiled gRPC route.
pub(crate) struct GrpcRoute {
    /// The `method` of `Call`/`Connect` messages.
    pub method: String,
    /// Event type the message becomes.
    pub event: Arc<str>,
    /// Reply deadline of this route.
    pub timeout: Duration,
    /// Payload schema, compiled.
    pub schema: Option<Arc<jsonschema::Validator>>,
}

/// The gRPC routes of a Router spec, by method.
pub(crate) struct GrpcRoutes {
    by_method: HashMap<String, GrpcRoute>,
    /// Largest message accepted or sent.
    pub max_message: usize,
}

impl GrpcRoutes {
    /// Compiles the gRPC routes; when two routes name the same method, the first one wins.
    pub(crate) fn build(spec: &RouterSpec) -> Result<GrpcRoutes, RouteError> {
        let default_timeout: Duration = spec.broker.response_timeout.into();
        let mut by_method = HashMap::new();
        for (i, r) in spec.routes.iter().enumerate() {
            let Some(grpc) = &r.grpc else { continue };
            if by_method.contains_key(&grpc.method) {
                tracing::warn!(method = %grpc.method, "a second gRPC route names this method; the first one wins");
                continue;
            }
            let schema = compile_schema(i, r.schema.as_ref())?;
            by_method.insert(
                grpc.method.clone(),
                GrpcRoute {
                    method: grpc.method.clone(),
                    event: Arc::from(r.event.as_str()),
                    timeout: r.timeout.map(Into::into).unwrap_or(default_timeout),
                    schema,
                },
            );
        }
        // A message is read whole, so a streamed-size bodyLimit still caps it at one event.
        let max_message = whole_limit(body_limit(spec, DEFAULT_MAX_MESSAGE));
        Ok(GrpcRoutes {
            by_method,
            max_message,
        })
    }

    /// The route of `method`.
    pub(crate) fn get(&self, method: &str) -> Option<&GrpcRoute> {
        self.by_method.get(method)
    }

    /// The routes, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &GrpcRoute> {
        self.by_method.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(routes: serde_json::Value, middleware: serde_json::Value) -> RouterSpec {
        serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}, "grpc": {"port": 50051}},
            "routes": routes,
            "middleware": middleware,
            "broker": {"queueCapacity": 10, "responseTimeout": "3s"},
        }))
        .expect("spec")
    }

    #[test]
    fn builds_routes_by_method_first_wins() {
        let s = spec(
            serde_json::json!([
                {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
                {"event": "noop", "grpc": {"method": "noop"}},
                {"event": "echo", "grpc": {"method": "echo"}, "timeout": "1s",
                 "schema": {"type": "object"}},
                {"event": "other", "grpc": {"method": "noop"}},
            ]),
            serde_json::json!([]),
        );
        let t = GrpcRoutes::build(&s).expect("routes");
        assert_eq!(&*t.get("noop").expect("noop").event, "noop");
        assert_eq!(t.get("noop").expect("noop").timeout, Duration::from_secs(3));
        let echo = t.get("echo").expect("echo");
        assert_eq!(echo.timeout, Duration::from_secs(1));
        assert!(echo.schema.is_some());
        assert!(t.get("GET").is_none());
        assert_eq!(t.iter().count(), 2);
        assert_eq!(t.max_message, DEFAULT_MAX_MESSAGE);
    }

    #[test]
    fn body_limit_sets_the_message_size_and_bad_schemas_name_the_field() {
        let s = spec(
            serde_json::json!([{"event": "e", "grpc": {"method": "m"}, "schema": {"type": 12}}]),
            serde_json::json!([{"bodyLimit": {"maxBytes": 1000}}]),
        );
        let err = GrpcRoutes::build(&s).err().expect("bad schema");
        assert_eq!(err.field, "spec.routes[0].schema");
        let s = spec(
            serde_json::json!([{"event": "e", "grpc": {"method": "m"}}]),
            serde_json::json!([{"bodyLimit": {"maxBytes": 1000}}]),
        );
        assert_eq!(GrpcRoutes::build(&s).expect("routes").max_message, 1000);
    }
}
