//! What a client sends on a WebSocket: one JSON object per text message,
//! `{"command": "...", "id": <scalar>, ...fields}`, checked into a [`Command`].
//!
//! Pure. The fields other than `command` and `id` are the event payload (routed commands, checked
//! against the route's schema like an HTTP body) or the built-in command's arguments. Every
//! rejection names the problem and keeps the `id` when the message had a usable one.

use super::push::filter::Filter;
use crate::routes::ws::{REFRESH, WsRoute, WsRoutes};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Longest event type a subscription may name (the PUSH frame's limit).
pub(super) const MAX_EVENT_LEN: usize = 255;
/// Longest token a `refresh` may carry (what an `Authorization` header would take).
pub(super) const MAX_TOKEN_LEN: usize = 8192;
/// Metric label of messages that named no usable command.
pub(super) const INVALID: &str = "invalid";

/// A checked message.
#[derive(Debug)]
pub(super) enum Command {
    /// A routed command: an event for a manager.
    Call {
        /// The route.
        route: Arc<WsRoute>,
        /// The event payload (the message without `command` and `id`), as JSON.
        payload: Bytes,
    },
    /// Start receiving pushes of `event` that match `filter`.
    Subscribe {
        /// Event type.
        event: String,
        /// Checked filter.
        filter: Filter,
    },
    /// Stop subscription `subscription`.
    Unsubscribe {
        /// Subscription id from the subscribe reply.
        subscription: u64,
    },
    /// Carry on with a new token (JWT auth): the session then lapses at its expiry.
    Refresh {
        /// The new JWT.
        token: String,
    },
}

impl std::fmt::Debug for WsRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsRoute")
            .field("command", &self.command)
            .finish()
    }
}

/// A message refused before it became a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bad {
    /// HTTP-style status (400, 404).
    pub status: u16,
    /// What is wrong.
    pub detail: String,
}

fn bad(status: u16, detail: impl Into<String>) -> Bad {
    Bad {
        status,
        detail: detail.into(),
    }
}

/// A parsed message: its id (null when absent or unusable), the command label for metrics, and the
/// command or why it was refused.
#[derive(Debug)]
pub(super) struct Parsed<'a> {
    /// The message's `id`, echoed in the reply.
    pub id: Value,
    /// `command` for metrics: a configured or built-in command, else [`INVALID`].
    pub label: &'a str,
    /// The command, or the refusal.
    pub command: Result<Command, Bad>,
}

/// Checks one text message against the routes.
pub(super) fn parse<'a>(text: &str, routes: &'a WsRoutes) -> Parsed<'a> {
    let mut parsed = Parsed {
        id: Value::Null,
        label: INVALID,
        command: Err(bad(400, "")),
    };
    let mut obj = match crate::edge::parse_json(text.as_bytes()) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => {
            parsed.command = Err(bad(
                400,
                "a message must be a JSON object like {\"command\": \"...\", \"id\": 1}",
            ));
            return parsed;
        }
        Err(r) => {
            parsed.command = Err(bad(400, said_of_message(&r.detail)));
            return parsed;
        }
    };
    match obj.remove("id") {
        None => {}
        Some(v @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_))) => {
            parsed.id = v
        }
        Some(_) => {
            parsed.command = Err(bad(400, "`id` must be a string, number, boolean or null"));
            return parsed;
        }
    }
    let command = match obj.remove("command") {
        Some(Value::String(c)) => c,
        Some(_) => {
            parsed.command = Err(bad(400, "`command` must be a string"));
            return parsed;
        }
        None => {
            parsed.command = Err(bad(
                400,
                format!("the message has no `command`; one of: {}", routes.known()),
            ));
            return parsed;
        }
    };
    match command.as_str() {
        "subscribe" => {
            parsed.label = "subscribe";
            parsed.command = subscribe(obj);
        }
        "unsubscribe" => {
            parsed.label = "unsubscribe";
            parsed.command = unsubscribe(obj);
        }
        REFRESH if routes.refresh => {
            parsed.label = REFRESH;
            parsed.command = refresh(obj);
        }
        _ => match routes.get(&command) {
            None => {
                parsed.command = Err(bad(
                    404,
                    format!("unknown command {command:?}; one of: {}", routes.known()),
                ));
            }
            Some(route) => {
                parsed.label = &route.command;
                parsed.command = call(route.clone(), obj);
            }
        },
    }
    parsed
}

/// `edge` says "body"; on a WebSocket it is the message or its payload.
fn said_of_message(detail: &str) -> String {
    match detail.strip_prefix("body") {
        Some(rest) => format!("message{rest}"),
        None => detail.to_owned(),
    }
}

fn call(route: Arc<WsRoute>, payload: Map<String, Value>) -> Result<Command, Bad> {
    let payload = Value::Object(payload);
    if let Some(schema) = &route.schema {
        crate::edge::check_schema(schema, &payload).map_err(|r| {
            let detail = match r.detail.strip_prefix("body") {
                Some(rest) => format!("payload{rest}"),
                None => r.detail,
            };
            bad(r.status, detail)
        })?;
    }
    let bytes =
        serde_json::to_vec(&payload).map_err(|_| bad(400, "the payload could not be encoded"))?;
    Ok(Command::Call {
        route,
        payload: Bytes::from(bytes),
    })
}

fn no_other_members(obj: &Map<String, Value>, command: &str, allowed: &str) -> Result<(), Bad> {
    match obj.keys().next() {
        None => Ok(()),
        Some(k) => Err(bad(
            400,
            format!("unknown member `{k}` in {command}; it takes {allowed}"),
        )),
    }
}

fn subscribe(mut obj: Map<String, Value>) -> Result<Command, Bad> {
    let event = match obj.remove("event") {
        Some(Value::String(e)) if !e.is_empty() && e.len() <= MAX_EVENT_LEN => e,
        Some(Value::String(_)) => {
            return Err(bad(
                400,
                format!("`event` must be 1 to {MAX_EVENT_LEN} bytes long"),
            ));
        }
        Some(_) => return Err(bad(400, "`event` must be a string (an event type)")),
        None => {
            return Err(bad(
                400,
                "subscribe needs `event` (the event type to receive)",
            ));
        }
    };
    let filter =
        Filter::parse(obj.remove("filters").as_ref()).map_err(|e| bad(400, e.to_string()))?;
    no_other_members(&obj, "subscribe", "`event` and `filters`")?;
    Ok(Command::Subscribe { event, filter })
}

fn unsubscribe(mut obj: Map<String, Value>) -> Result<Command, Bad> {
    let subscription = match obj.remove("subscription") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| bad(400, "`subscription` must be the id a subscribe reply gave"))?,
        Some(_) => {
            return Err(bad(
                400,
                "`subscription` must be the id (a number) a subscribe reply gave",
            ));
        }
        None => return Err(bad(400, "unsubscribe needs `subscription`")),
    };
    no_other_members(&obj, "unsubscribe", "`subscription`")?;
    Ok(Command::Unsubscribe { subscription })
}

fn refresh(mut obj: Map<String, Value>) -> Result<Command, Bad> {
    let token = match obj.remove("token") {
        Some(Value::String(t)) if !t.is_empty() && t.len() <= MAX_TOKEN_LEN => t,
        Some(Value::String(_)) => {
            return Err(bad(
                400,
                format!("`token` must be 1 to {MAX_TOKEN_LEN} bytes long"),
            ));
        }
        Some(_) => return Err(bad(400, "`token` must be a string (a JWT)")),
        None => return Err(bad(400, "refresh needs `token` (the new JWT)")),
    };
    no_other_members(&obj, "refresh", "`token`")?;
    Ok(Command::Refresh { token })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routes() -> WsRoutes {
        let spec = serde_json::from_value(json!({
            "listeners": {"http": {"port": 8080}, "websocket": {}},
            "routes": [
                {"event": "noop", "websocket": {"command": "noop"}},
                {"event": "echo", "websocket": {"command": "echo"},
                 "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}},
            ],
        }))
        .expect("spec");
        WsRoutes::build(&spec).expect("routes").expect("listener")
    }

    fn refused(text: &str) -> (Value, Bad) {
        let t = routes();
        let p = parse(text, &t);
        let id = p.id.clone();
        (id, p.command.expect_err("refused"))
    }

    #[test]
    fn routed_commands_become_payloads_without_command_and_id() {
        let t = routes();
        let p = parse(r#"{"command":"echo","id":"a","value":3,"x":[1]}"#, &t);
        assert_eq!(p.id, json!("a"));
        assert_eq!(p.label, "echo");
        let Ok(Command::Call { route, payload }) = p.command else {
            panic!("call")
        };
        assert_eq!(&*route.event, "echo");
        assert_eq!(
            serde_json::from_slice::<Value>(&payload).expect("json"),
            json!({"value": 3, "x": [1]})
        );
        let p = parse(r#"{"command":"noop"}"#, &t);
        assert_eq!(p.id, Value::Null);
        let Ok(Command::Call { payload, .. }) = p.command else {
            panic!("call")
        };
        assert_eq!(&payload[..], b"{}");
    }

    #[test]
    fn bad_messages_say_why() {
        let (id, b) = refused("{\"command\": ");
        assert_eq!((id, b.status), (Value::Null, 400));
        assert!(
            b.detail
                .starts_with("message is not valid JSON at line 1 column 12"),
            "{}",
            b.detail
        );
        assert!(refused("[1]").1.detail.contains("must be a JSON object"));
        assert!(
            refused("\"noop\"")
                .1
                .detail
                .contains("must be a JSON object")
        );
        let (id, b) = refused(r#"{"id": 5}"#);
        assert_eq!(id, json!(5));
        assert_eq!(
            b.detail,
            "the message has no `command`; one of: echo, noop, subscribe, unsubscribe"
        );
        assert_eq!(
            refused(r#"{"id": 5, "command": 3}"#).1.detail,
            "`command` must be a string"
        );
        let (id, b) = refused(r#"{"id": {"a": 1}, "command": "noop"}"#);
        assert_eq!(id, Value::Null);
        assert!(b.detail.contains("`id` must be"));
        let (id, b) = refused(r#"{"id": true, "command": "nope"}"#);
        assert_eq!((id, b.status), (json!(true), 404));
        assert!(
            b.detail
                .starts_with("unknown command \"nope\"; one of: echo"),
            "{}",
            b.detail
        );
        let (_, b) = refused(r#"{"id": 1, "command": "echo", "value": "x"}"#);
        assert_eq!(b.status, 400);
        assert!(b.detail.starts_with("field `/value`"), "{}", b.detail);
        let (_, b) = refused(r#"{"id": 1, "command": "echo"}"#);
        assert_eq!(b.detail, "field `/value` is required");
        let t = routes();
        assert_eq!(parse(r#"{"command":"nope"}"#, &t).label, INVALID);
        assert_eq!(parse(r#"{"command":"echo"}"#, &t).label, "echo");
    }

    #[test]
    fn subscribe_and_unsubscribe_arguments_are_checked() {
        let t = routes();
        let p = parse(
            r#"{"command":"subscribe","id":1,"event":"tick","filters":[{"field":"p","op":"gt","value":1}]}"#,
            &t,
        );
        assert_eq!(p.label, "subscribe");
        let Ok(Command::Subscribe { event, filter }) = p.command else {
            panic!("subscribe")
        };
        assert_eq!(event, "tick");
        assert!(filter.matches(&json!({"p": 2})));
        let Ok(Command::Subscribe { filter, .. }) =
            parse(r#"{"command":"subscribe","event":"tick"}"#, &t).command
        else {
            panic!("subscribe")
        };
        assert!(filter.is_empty());
        assert!(
            refused(r#"{"command":"subscribe"}"#)
                .1
                .detail
                .contains("needs `event`")
        );
        assert!(
            refused(r#"{"command":"subscribe","event":""}"#)
                .1
                .detail
                .contains("1 to 255")
        );
        assert!(
            refused(r#"{"command":"subscribe","event":3}"#)
                .1
                .detail
                .contains("must be a string")
        );
        assert_eq!(
            refused(r#"{"command":"subscribe","event":"t","filters":[{"field":"p","op":"like","value":1}]}"#)
                .1
                .detail,
            "filters[0].op: unknown op \"like\"; use one of eq, ne, in, gt, gte, lt, lte"
        );
        assert!(
            refused(r#"{"command":"subscribe","event":"t","filter":[]}"#)
                .1
                .detail
                .contains("unknown member `filter` in subscribe")
        );
        let Ok(Command::Unsubscribe { subscription }) =
            parse(r#"{"command":"unsubscribe","subscription":4}"#, &t).command
        else {
            panic!("unsubscribe")
        };
        assert_eq!(subscription, 4);
        assert!(
            refused(r#"{"command":"unsubscribe"}"#)
                .1
                .detail
                .contains("needs `subscription`")
        );
        assert!(
            refused(r#"{"command":"unsubscribe","subscription":"4"}"#)
                .1
                .detail
                .contains("a number")
        );
        assert!(
            refused(r#"{"command":"unsubscribe","subscription":-1}"#)
                .1
                .detail
                .contains("subscribe reply")
        );
    }

    #[test]
    fn refresh_is_a_command_only_when_built_in() {
        let mut t = routes();
        let p = parse(r#"{"command":"refresh","token":"a.b.c"}"#, &t);
        assert_eq!(p.command.expect_err("unknown").status, 404);
        assert!(t.enable_refresh());
        let p = parse(r#"{"command":"refresh","id":3,"token":"a.b.c"}"#, &t);
        assert_eq!(p.label, "refresh");
        let Ok(Command::Refresh { token }) = p.command else {
            panic!("refresh")
        };
        assert_eq!(token, "a.b.c");
        let no = |text: &str| parse(text, &t).command.expect_err("refused").detail;
        assert!(no(r#"{"command":"refresh"}"#).contains("needs `token`"));
        assert!(no(r#"{"command":"refresh","token":""}"#).contains("1 to 8192"));
        assert!(no(r#"{"command":"refresh","token":5}"#).contains("a string"));
        assert!(
            no(r#"{"command":"refresh","token":"x","sub":"y"}"#).contains("unknown member `sub`")
        );
    }
}
