//! Edge checks on a request before it becomes an event: media type, JSON syntax, body schema,
//! and building the event payload.
//!
//! Pure. Every rejection says what to fix and names the field; nothing internal leaks.

use crate::routes::http::HttpRoute;
use bytes::Bytes;
use serde_json::{Map, Value};

/// A request rejected at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// HTTP status.
    pub(crate) status: u16,
    /// Problem detail.
    pub(crate) detail: String,
}

impl Rejection {
    fn new(status: u16, detail: impl Into<String>) -> Rejection {
        Rejection {
            status,
            detail: detail.into(),
        }
    }
}

/// The client's retry key: an `Idempotency-Key` header becomes the event's CloudEvents id, so a
/// client's retries of one request carry one ce-id and are deduplicated where events are kept
/// (durable delivery) and by apps that deduplicate by ce-id.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header's value as a ce-id: 1 to 255 visible ASCII characters (the bounds
/// of a frame's ce-id field and of the local API's `ce-id`). Absent is `None`.
pub(crate) fn idempotency_key(value: Option<&[u8]>) -> Result<Option<String>, Rejection> {
    match value {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.len() <= 255 && v.iter().all(u8::is_ascii_graphic) => {
            Ok(Some(String::from_utf8_lossy(v).into_owned()))
        }
        Some(_) => Err(Rejection::new(
            400,
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )),
    }
}

/// Media type of every event payload built here.
pub(crate) const JSON: &str = "application/json";

/// `application/json` or `application/<something>+json`, parameters allowed.
pub(crate) fn is_json_media_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Whether a body route passes any body as it came (binary, `text/*`, multipart, ...): one with no
/// schema to check and no path parameters to merge into a JSON object. Its JSON bodies are still
/// checked for syntax (a JSON media type promises JSON).
pub(crate) fn takes_any_body(route: &HttpRoute, path_params: &Map<String, Value>) -> bool {
    route.schema.is_none() && path_params.is_empty()
}

/// Checks the `content-type` of a body route: missing or JSON is fine for an empty body, JSON otherwise.
pub(crate) fn check_content_type(
    content_type: Option<&str>,
    body_len_hint: Option<u64>,
) -> Result<(), Rejection> {
    match content_type {
        Some(ct) if is_json_media_type(ct) => Ok(()),
        None if body_len_hint == Some(0) => Ok(()),
        Some(ct) => Err(Rejection::new(
            415,
            format!("content-type {ct:?} is not supported; send application/json"),
        )),
        None => Err(Rejection::new(
            415,
            "the body needs content-type: application/json",
        )),
    }
}

/// Parses the body as JSON; a syntax error names the line and column.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|e| {
        Rejection::new(
            400,
            format!(
                "body is not valid JSON at line {} column {}: {}",
                e.line(),
                e.column(),
                strip_position(&e)
            ),
        )
    })
}

/// Checks JSON syntax without building a value: the path of body routes with no schema and no path
/// parameters, whose body is forwarded byte for byte.
pub(crate) fn check_syntax(body: &[u8]) -> Result<(), Rejection> {
    serde_json::from_slice::<serde::de::IgnoredAny>(body)
        .map(|_| ())
        .map_err(|e| {
            Rejection::new(
                400,
                format!(
                    "body is not valid JSON at line {} column {}: {}",
                    e.line(),
                    e.column(),
                    strip_position(&e)
                ),
            )
        })
}

/// serde_json appends " at line X column Y" to its messages; the detail says it once.
fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// Checks the body against the route's schema; the first violation is reported with its field path.
pub(crate) fn check_schema(
    validator: &jsonschema::Validator,
    body: &Value,
) -> Result<(), Rejection> {
    let Some(err) = validator.iter_errors(body).next() else {
        return Ok(());
    };
    let path = err.instance_path.as_str();
    let detail = match &err.kind {
        jsonschema::error::ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| property.to_string());
            format!("field `{path}/{name}` is required")
        }
        _ if path.is_empty() => format!("body: {err}"),
        _ => format!("field `{path}`: {err}"),
    };
    Err(Rejection::new(400, detail))
}

/// The event payload of a body route: the body bytes as sent when the route has no path parameters
/// (no re-serialization); otherwise the body object with the path parameters set on it (they win).
pub(crate) fn body_payload(
    route: &HttpRoute,
    raw: Bytes,
    parsed: Option<Value>,
    path_params: Map<String, Value>,
) -> Result<Bytes, Rejection> {
    if path_params.is_empty() {
        return Ok(raw);
    }
    let mut value = match parsed {
        Some(v) => v,
        None => parse_json(&raw)?,
    };
    let Value::Object(obj) = &mut value else {
        return Err(Rejection::new(
            400,
            format!(
                "body must be a JSON object on {} (it carries path parameters)",
                route.template
            ),
        ));
    };
    obj.extend(path_params);
    serde_json::to_vec(&value)
        .map(Bytes::from)
        .map_err(|_| Rejection::new(400, "body could not be re-encoded"))
}

/// The event payload of a body route from the body as received: syntax, then the schema when the
/// route has one, then the path parameters merged in.
pub fn body_event(
    route: &HttpRoute,
    raw: Bytes,
    path_params: Map<String, Value>,
) -> Result<Bytes, Rejection> {
    if route.schema.is_none() && path_params.is_empty() {
        // Nothing needs the parsed value: check the syntax and forward the bytes as received.
        check_syntax(&raw)?;
        return Ok(raw);
    }
    let parsed = parse_json(&raw)?;
    if let Some(schema) = &route.schema {
        check_schema(schema, &parsed)?;
    }
    body_payload(route, raw, Some(parsed), path_params)
}

/// The event payload of a GET or DELETE route: path and query parameters as one JSON object.
pub fn params_payload(
    route: &HttpRoute,
    query: Option<&str>,
    mut params: Map<String, Value>,
) -> Result<Bytes, Rejection> {
    if let Some(q) = query {
        crate::params::add_query(
            q,
            &|n| route.param_type(n),
            &mut params,
            crate::routes::http::MAX_QUERY_PARAMS,
        )
        .map_err(|bad| {
            Rejection::new(
                400,
                format!("parameter `{}` must be {}", bad.name, bad.expected),
            )
        })?;
    }
    if params.is_empty() {
        return Ok(Bytes::from_static(b"{}"));
    }
    serde_json::to_vec(&params)
        .map(Bytes::from)
        .map_err(|_| Rejection::new(400, "parameters could not be encoded"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::http::{Lookup, RouteTable};

    #[test]
    fn an_idempotency_key_is_a_ce_id_of_visible_ascii() {
        assert_eq!(idempotency_key(None), Ok(None));
        assert_eq!(
            idempotency_key(Some(b"order-42/try")),
            Ok(Some("order-42/try".to_owned()))
        );
        for bad in [&b""[..], b"has space", "é".as_bytes(), &[b'a'; 256]] {
            let r = idempotency_key(Some(bad)).expect_err("refused");
            assert_eq!(r.status, 400);
            assert!(r.detail.contains("Idempotency-Key"), "{}", r.detail);
        }
    }

    fn table() -> RouteTable {
        let spec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [
                {"event": "echo", "http": {"method": "POST", "path": "/echo"},
                 "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}},
                {"event": "upd", "http": {"method": "PUT", "path": "/o/{id}"}, "params": {"id": "integer"}},
                {"event": "get", "http": {"method": "GET", "path": "/o/{id}"}, "params": {"id": "integer", "n": "integer"}},
            ],
        }))
        .expect("spec");
        RouteTable::build(&spec).expect("table")
    }

    #[test]
    fn media_types() {
        assert!(check_content_type(Some("application/json"), None).is_ok());
        assert!(check_content_type(Some("Application/JSON; charset=utf-8"), None).is_ok());
        assert!(check_content_type(Some("application/cloudevents+json"), None).is_ok());
        assert!(check_content_type(None, Some(0)).is_ok());
        assert_eq!(
            check_content_type(Some("text/plain"), None)
                .err()
                .map(|r| r.status),
            Some(415)
        );
        assert_eq!(
            check_content_type(None, Some(3)).err().map(|r| r.status),
            Some(415)
        );
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        let r = parse_json(b"{\n  \"value\": }").expect_err("bad");
        assert_eq!(r.status, 400);
        assert!(r.detail.contains("line 2 column 12"), "{}", r.detail);
        assert_eq!(r.detail.matches("line").count(), 1, "{}", r.detail);
        assert_eq!(check_syntax(b"{\n  \"value\": }").err(), Some(r));
        assert!(check_syntax(b"{\"a\":[1,2,{\"b\":null}]}").is_ok());
        assert!(check_syntax(b"{} x").is_err());
    }

    #[test]
    fn schema_errors_name_the_field() {
        let t = table();
        let v = t.routes()[0].schema.clone().expect("schema");
        assert!(check_schema(&v, &serde_json::json!({"value": 1})).is_ok());
        let r = check_schema(&v, &serde_json::json!({"value": "x"})).expect_err("type");
        assert!(r.detail.contains("`/value`"), "{}", r.detail);
        let r = check_schema(&v, &serde_json::json!({})).expect_err("required");
        assert_eq!(r.detail, "field `/value` is required");
        let r = check_schema(&v, &serde_json::json!([1])).expect_err("root");
        assert!(r.detail.starts_with("body: "), "{}", r.detail);
    }

    #[test]
    fn payloads() {
        let t = table();
        let Lookup::Found { route, params } = t.lookup("PUT", "/o/5") else {
            panic!()
        };
        let raw = Bytes::from_static(b"{\"id\":1,\"a\":2}");
        let out = body_payload(route, raw, None, params).expect("payload");
        assert_eq!(
            serde_json::from_slice::<Value>(&out).expect("json"),
            serde_json::json!({"id": 5, "a": 2})
        );
        let Lookup::Found { route, params } = t.lookup("PUT", "/o/5") else {
            panic!()
        };
        assert_eq!(
            body_payload(route, Bytes::from_static(b"[1]"), None, params)
                .err()
                .map(|r| r.status),
            Some(400)
        );
        let Lookup::Found { route, params } = t.lookup("GET", "/o/5") else {
            panic!()
        };
        let out = params_payload(route, Some("n=3&s=x%21"), params).expect("payload");
        assert_eq!(
            serde_json::from_slice::<Value>(&out).expect("json"),
            serde_json::json!({"id": 5, "n": 3, "s": "x!"})
        );
        let Lookup::Found { route, params } = t.lookup("GET", "/o/5") else {
            panic!()
        };
        let r = params_payload(route, Some("n=x"), params).expect_err("typed");
        assert_eq!(r.detail, "parameter `n` must be an integer");
    }
}
