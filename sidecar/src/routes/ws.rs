//! The WebSocket routes of a Router spec: a message's `command` -> event type, compiled once.
//!
//! Pure. `subscribe` and `unsubscribe` are built in, so a route may not claim them. `refresh` (a
//! new token for a session opened with a JWT) is built in when the Router has JWT auth, unless a
//! route already names it: that route keeps it, as it did before the built-in existed.

use super::subscribe::SubscribePolicy;
use super::{RouteError, compile_schema};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use switchyard_crds::router::RouterSpec;

/// Commands the listener answers itself.
pub(crate) const BUILT_IN: [&str; 2] = ["subscribe", "unsubscribe"];
/// The built-in command that gives a session a new token (with JWT auth).
pub(crate) const REFRESH: &str = "refresh";

/// A compiled WebSocket route.
pub(crate) struct WsRoute {
    /// The `command` of messages.
    pub command: String,
    /// Event type the message becomes.
    pub event: Arc<str>,
    /// Reply deadline of this route.
    pub timeout: Duration,
    /// Payload schema, compiled.
    pub schema: Option<Arc<jsonschema::Validator>>,
}

/// The WebSocket endpoint: path, size limit and routes by command.
pub(crate) struct WsRoutes {
    /// Path of the upgrade request.
    pub path: String,
    /// Largest accepted message.
    pub max_message: usize,
    by_command: HashMap<String, Arc<WsRoute>>,
    /// Every command a client may send, sorted, for the unknown-command error.
    known: String,
    /// Who may subscribe to which event type; `None`: anyone to any.
    pub subscribe: Option<SubscribePolicy>,
    /// Whether `refresh` is the built-in command.
    pub refresh: bool,
}

impl WsRoutes {
    /// Compiles the WebSocket listener and routes; `None` when the spec has no WebSocket listener.
    /// When two routes name the same command, the first one wins.
    pub(crate) fn build(spec: &RouterSpec) -> Result<Option<WsRoutes>, RouteError> {
        let Some(listener) = &spec.listeners.websocket else {
            return Ok(None);
        };
        if !listener.path.starts_with('/') {
            return Err(RouteError {
                field: "spec.listeners.websocket.path".into(),
                message: format!("{:?} must start with `/`", listener.path),
            });
        }
        let max_message = usize::try_from(listener.max_message_bytes)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| RouteError {
                field: "spec.listeners.websocket.maxMessageBytes".into(),
                message: format!("{} is not a positive size", listener.max_message_bytes),
            })?;
        let default_timeout: Duration = spec.broker.response_timeout.into();
        let mut by_command = HashMap::new();
        for (i, r) in spec.routes.iter().enumerate() {
            let Some(ws) = &r.websocket else { continue };
            if BUILT_IN.contains(&ws.command.as_str()) {
                return Err(RouteError {
                    field: format!("spec.routes[{i}].websocket.command"),
                    message: format!(
                        "`{}` is a built-in command (push subscriptions); choose another name",
                        ws.command
                    ),
                });
            }
            if by_command.contains_key(&ws.command) {
                tracing::warn!(command = %ws.command, "a second WebSocket route names this command; the first one wins");
                continue;
            }
            let schema = compile_schema(i, r.schema.as_ref())?;
            by_command.insert(
                ws.command.clone(),
                Arc::new(WsRoute {
                    command: ws.command.clone(),
                    event: Arc::from(r.event.as_str()),
                    timeout: r.timeout.map(Into::into).unwrap_or(default_timeout),
                    schema,
                }),
            );
        }
        let mut names: Vec<&str> = by_command.keys().map(String::as_str).collect();
        names.extend(BUILT_IN);
        names.sort_unstable();
        let known = names.join(", ");
        let subscribe = listener
            .subscribe
            .as_deref()
            .map(SubscribePolicy::build)
            .transpose()?;
        Ok(Some(WsRoutes {
            path: listener.path.clone(),
            max_message,
            by_command,
            known,
            subscribe,
            refresh: false,
        }))
    }

    /// Makes `refresh` the built-in token refresh (the Router has JWT auth); false when a route
    /// names that command, which then stays the route's.
    pub(crate) fn enable_refresh(&mut self) -> bool {
        if self.by_command.contains_key(REFRESH) {
            return false;
        }
        self.refresh = true;
        let mut names: Vec<&str> = self.known.split(", ").collect();
        names.push(REFRESH);
        names.sort_unstable();
        self.known = names.join(", ");
        true
    }

    /// The route of `command`.
    pub(crate) fn get(&self, command: &str) -> Option<&Arc<WsRoute>> {
        self.by_command.get(command)
    }

    /// The routes, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &WsRoute> {
        self.by_command.values().map(|r| &**r)
    }

    /// The commands a client may send, e.g. `echo, noop, subscribe, unsubscribe`.
    pub(crate) fn known(&self) -> &str {
        &self.known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(listeners: serde_json::Value, routes: serde_json::Value) -> RouterSpec {
        serde_json::from_value(serde_json::json!({
            "listeners": listeners,
            "routes": routes,
            "broker": {"queueCapacity": 10, "responseTimeout": "3s"},
        }))
        .expect("spec")
    }

    #[test]
    fn builds_by_command_with_defaults() {
        let s = spec(
            serde_json::json!({"http": {"port": 8080}, "websocket": {}}),
            serde_json::json!([
                {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
                {"event": "noop", "websocket": {"command": "noop"}},
                {"event": "echo", "websocket": {"command": "echo"}, "timeout": "1s",
                 "schema": {"type": "object"}},
                {"event": "other", "websocket": {"command": "noop"}},
            ]),
        );
        let t = WsRoutes::build(&s).expect("routes").expect("listener");
        assert_eq!(t.path, "/ws");
        assert_eq!(t.max_message, 1 << 20);
        assert_eq!(&*t.get("noop").expect("noop").event, "noop");
        assert_eq!(t.get("noop").expect("noop").timeout, Duration::from_secs(3));
        let echo = t.get("echo").expect("echo");
        assert_eq!(echo.timeout, Duration::from_secs(1));
        assert!(echo.schema.is_some());
        assert_eq!(t.iter().count(), 2);
        assert_eq!(t.known(), "echo, noop, subscribe, unsubscribe");
    }

    #[test]
    fn no_listener_no_routes_and_bad_routes_name_the_field() {
        let s = spec(
            serde_json::json!({"http": {"port": 8080}}),
            serde_json::json!([{"event": "noop", "http": {"method": "GET", "path": "/noop"}}]),
        );
        assert!(WsRoutes::build(&s).expect("ok").is_none());
        let s = spec(
            serde_json::json!({"http": {"port": 8080}, "websocket": {"path": "/x", "maxMessageBytes": 10}}),
            serde_json::json!([{"event": "e", "websocket": {"command": "subscribe"}}]),
        );
        let err = WsRoutes::build(&s).err().expect("built-in");
        assert_eq!(err.field, "spec.routes[0].websocket.command");
        let s = spec(
            serde_json::json!({"http": {"port": 8080}, "websocket": {"maxMessageBytes": 0}}),
            serde_json::json!([{"event": "e", "websocket": {"command": "e"}}]),
        );
        let err = WsRoutes::build(&s).err().expect("size");
        assert_eq!(err.field, "spec.listeners.websocket.maxMessageBytes");
        let s = spec(
            serde_json::json!({"http": {"port": 8080}, "websocket": {}}),
            serde_json::json!([{"event": "e", "websocket": {"command": "e"}, "schema": {"type": 1}}]),
        );
        assert_eq!(
            WsRoutes::build(&s).err().expect("schema").field,
            "spec.routes[0].schema"
        );
    }

    #[test]
    fn refresh_is_built_in_unless_a_route_names_it() {
        let listeners = serde_json::json!({"http": {"port": 8080}, "websocket": {}});
        let mut w = WsRoutes::build(&spec(
            listeners.clone(),
            serde_json::json!([{"event": "a", "websocket": {"command": "noop"}}]),
        ))
        .expect("built")
        .expect("ws");
        assert!(!w.refresh);
        assert!(w.enable_refresh());
        assert_eq!(w.known(), "noop, refresh, subscribe, unsubscribe");
        let mut w = WsRoutes::build(&spec(
            listeners,
            serde_json::json!([{"event": "a", "websocket": {"command": "refresh"}}]),
        ))
        .expect("built")
        .expect("ws");
        assert!(!w.enable_refresh());
        assert!(!w.refresh);
        assert!(w.get("refresh").is_some());
    }
}
