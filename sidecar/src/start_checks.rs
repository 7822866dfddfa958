//! What a sidecar refuses in its config at start, found without I/O: the config's own fields and the
//! route tables it compiles. The roles run these at start; `switchyard check` runs [`router`] and
//! [`manager`] on the configs `switchyard up` and the operator render, so a spec a sidecar would
//! refuse is refused before anything starts, with the same field and message. Checks that read
//! files (Secrets, certificates), the machine (descriptor limit, env variables) or the network stay
//! in the roles.

use crate::config::{self, ConfigError};
use crate::routes::RouteError;
use crate::routes::grpc::GrpcRoutes;
use crate::routes::http::RouteTable;
use crate::routes::ws::WsRoutes;
use std::fmt;
use std::path::Path;
use switchyard_protocol::config::{FILE_NAME, ManagerConfig, RouterConfig};

/// The first field of a config that a sidecar refuses at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartProblem {
    /// Field path in the config (`spec.broker.bodyBudgetBytes` for a router, `events` for a manager).
    pub field: String,
    /// What is wrong, as the sidecar says it.
    pub message: String,
}

impl fmt::Display for StartProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl From<RouteError> for StartProblem {
    fn from(e: RouteError) -> Self {
        StartProblem {
            field: e.field,
            message: e.message,
        }
    }
}

fn from_config(e: ConfigError) -> StartProblem {
    match e {
        ConfigError::Field { field, message, .. } => StartProblem { field, message },
        other => StartProblem {
            field: "(root)".into(),
            message: other.to_string(),
        },
    }
}

/// The first thing a router-role sidecar would refuse in `config` at start.
pub fn router(config: &RouterConfig) -> Result<(), StartProblem> {
    let settings =
        config::settle_router(Path::new(FILE_NAME), config.clone()).map_err(from_config)?;
    let table = RouteTable::build(&config.spec)?;
    body_budget(settings.body_budget, &table)?;
    GrpcRoutes::build(&config.spec)?;
    if let Some(g) = &config.spec.listeners.grpc {
        grpc_port(g.port, settings.http_port)?;
    }
    WsRoutes::build(&config.spec)?;
    middleware(&config.spec)?;
    // The descriptor limit is the machine's, not the config's: only the config's own bounds here.
    crate::listener::connections::resolve(
        &config.spec.listeners.connections,
        None,
        Path::new(FILE_NAME),
    )
    .map_err(from_config)?;
    // The endpoint env variable is the pod's, not the config's.
    crate::otel::settings::resolve(config.spec.tracing.as_ref(), "spec.tracing", |_| None)
        .map_err(|e| StartProblem {
            field: e.field.into(),
            message: e.message,
        })?;
    Ok(())
}

/// What the router refuses in `spec.middleware` without reading a Secret: CORS policies, rate
/// limits and the first timing middleware's `allowOrigins` (as the role and `middleware::Stack`
/// name them; the auth gates read their keys and are left to the role).
fn middleware(spec: &switchyard_crds::router::RouterSpec) -> Result<(), StartProblem> {
    for (i, m) in spec.middleware.iter().enumerate() {
        let field = format!("spec.middleware[{i}]");
        if let Some(c) = &m.cors {
            crate::middleware::cors::Policy::build(c, spec).map_err(|e| StartProblem {
                field: format!("{field}.cors"),
                message: e.to_string(),
            })?;
        }
        if let Some(r) = &m.rate_limit {
            crate::middleware::rate_limit::Limiter::build(r).map_err(|(sub, message)| {
                StartProblem {
                    field: format!("{field}.rateLimit{sub}"),
                    message,
                }
            })?;
        }
    }
    if let Some((i, t)) = spec
        .middleware
        .iter()
        .enumerate()
        .find_map(|(i, m)| Some((i, m.timing.as_ref()?)))
    {
        crate::answer::http::timing_allow_origin(&t.allow_origins).map_err(|_| StartProblem {
            field: format!("spec.middleware[{i}].timing.allowOrigins"),
            message: format!(
                "{:?} is not a valid header value",
                t.allow_origins.join(", ")
            ),
        })?;
    }
    Ok(())
}

/// The first thing a manager-role sidecar would refuse in `config` at start (serving every event
/// type of the config, as a pod without `SWITCHYARD_EVENT_TYPES` does).
pub fn manager(config: &ManagerConfig) -> Result<(), StartProblem> {
    config::settle_manager(Path::new(FILE_NAME), config.clone(), None)
        .map(drop)
        .map_err(from_config)
}

/// The body budget holds one body of the largest size read whole (a streamed body holds one
/// window of it).
pub(crate) fn body_budget(budget: usize, table: &RouteTable) -> Result<(), StartProblem> {
    if budget < table.whole_limit {
        return Err(StartProblem {
            field: "spec.broker.bodyBudgetBytes".into(),
            message: format!(
                "{budget} is less than one body of the largest size read whole ({} bytes: bodyLimit.maxBytes, at most 16 MiB): no such body could ever be read",
                table.whole_limit
            ),
        });
    }
    Ok(())
}

/// The gRPC listener's port: 0 binds any free port, as for HTTP; two fixed ports must differ.
pub(crate) fn grpc_port(port: i32, http_port: u16) -> Result<u16, StartProblem> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p == 0 || *p != http_port)
        .ok_or_else(|| StartProblem {
            field: "spec.listeners.grpc.port".into(),
            message: format!(
                "{port} is not a TCP port (1 to 65535, or 0 for any free port) other than the HTTP port"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn router_config(spec: serde_json::Value) -> RouterConfig {
        serde_json::from_value(
            json!({"name": "edge", "namespace": "d", "destinations": {}, "spec": spec}),
        )
        .expect("router config")
    }

    fn manager_config(events: serde_json::Value) -> ManagerConfig {
        serde_json::from_value(json!({
            "name": "m", "namespace": "d", "router": "edge", "events": events,
            "app": {"port": 8000, "protocol": "http", "path": "/"}, "workers": {}, "split": "shared"
        }))
        .expect("manager config")
    }

    fn route(extra: serde_json::Value) -> serde_json::Value {
        let mut r = json!({"event": "echo", "http": {"method": "POST", "path": "/echo"}});
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(extra.clone());
        }
        r
    }

    #[test]
    fn a_runnable_router_config_passes() {
        let config = router_config(json!({
            "listeners": {"http": {"port": 8080}}, "routes": [route(json!({}))]
        }));
        assert_eq!(router(&config), Ok(()));
    }

    #[test]
    fn a_route_schema_that_is_not_a_json_schema_is_refused_naming_the_route() {
        let config = router_config(json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [route(json!({})), route(json!({"event": "e2", "http": {"method": "POST", "path": "/e2"}, "schema": {"type": 12}}))]
        }));
        let p = router(&config).expect_err("refused");
        assert_eq!(p.field, "spec.routes[1].schema");
        assert!(p.message.starts_with("not a valid JSON Schema"), "{p}");
    }

    #[test]
    fn a_body_budget_below_one_whole_body_is_refused() {
        let config = router_config(json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [route(json!({}))],
            "middleware": [{"bodyLimit": {"maxBytes": 4096}}],
            "broker": {"bodyBudgetBytes": 1024}
        }));
        let p = router(&config).expect_err("refused");
        assert_eq!(p.field, "spec.broker.bodyBudgetBytes");
        assert!(p.message.starts_with("1024 is less than one body"), "{p}");
    }

    #[test]
    fn a_grpc_port_equal_to_the_http_port_is_refused_and_zero_is_any() {
        assert!(grpc_port(8080, 8080).is_err());
        assert!(grpc_port(70000, 8080).is_err());
        assert_eq!(grpc_port(0, 0), Ok(0));
        assert_eq!(grpc_port(9090, 8080), Ok(9090));
    }

    #[test]
    fn middleware_and_connection_limits_are_checked_as_the_role_checks_them() {
        let with = |extra: serde_json::Value| {
            let mut spec =
                json!({"listeners": {"http": {"port": 8080}}, "routes": [route(json!({}))]});
            if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                s.extend(extra.clone());
            }
            router(&router_config(spec)).err().map(|p| p.field)
        };
        assert_eq!(
            with(json!({"middleware": [{"timing": {"allowOrigins": ["https://a.example\n"]}}]})),
            Some("spec.middleware[0].timing.allowOrigins".into())
        );
        assert_eq!(
            with(
                json!({"listeners": {"http": {"port": 8080}, "connections": {"maxConnections": 2, "maxConnectionsPerClient": 3}}})
            ),
            Some("spec.listeners.connections.maxConnectionsPerClient".into())
        );
        assert_eq!(
            with(json!({"tracing": {"otlpEndpoint": "collector:4317"}})),
            Some("spec.tracing".into())
        );
    }

    #[test]
    fn a_manager_without_event_types_is_refused() {
        assert_eq!(manager(&manager_config(json!(["echo"]))), Ok(()));
        assert_eq!(
            manager(&manager_config(json!([]))),
            Err(StartProblem {
                field: "events".into(),
                message: "no event types to handle".into()
            })
        );
    }
}
