//! What the server sends on a WebSocket: replies (the app's answer, or a refusal) and pushes.
//!
//! Pure. Every message is one JSON text with a `type` member (`reply` or `push`), so a client can
//! dispatch on it before anything else:
//! ```text
//! {"type":"reply","id":1,"status":200,"contentType":"application/json","data":{..},"timing":"listener;dur=.., total;dur=.."}
//! {"type":"reply","id":2,"status":400,"error":{"title":"Bad Request","detail":"field `/value` is required"},"timing":".."}
//! {"type":"reply","id":3,"status":503,"error":{..},"retryAfter":1,"timing":".."}
//! {"type":"reply","id":4,"status":200,"subscription":1,"timing":".."}
//! {"type":"reply","id":5,"status":200,"expires":1767225600,"unsubscribed":[2],"timing":".."}
//! {"type":"push","subscription":1,"event":"prices.tick","data":{..},"dropped":3}
//! ```

use crate::answer::Answer;
use base64::Engine as _;
use serde_json::{Map, Value};
use std::io::Write as _;

/// Payload data in a message: JSON as JSON, other UTF-8 as a string, anything else base64.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Data {
    /// A JSON payload (JSON media type, or none, and valid JSON).
    Json(Value),
    /// UTF-8 that is not JSON.
    Text(String),
    /// Bytes that are not UTF-8, base64 (standard alphabet, padded).
    Base64(String),
}

impl Data {
    /// Classifies a payload by its media type and content.
    pub(super) fn of(content_type: &str, payload: &[u8]) -> Data {
        if json_media(content_type)
            && let Ok(v) = serde_json::from_slice::<Value>(payload)
        {
            return Data::Json(v);
        }
        match std::str::from_utf8(payload) {
            Ok(s) => Data::Text(s.to_owned()),
            Err(_) => Data::Base64(base64::engine::general_purpose::STANDARD.encode(payload)),
        }
    }

    /// The JSON value, when the payload is JSON.
    pub(super) fn json(&self) -> Option<&Value> {
        match self {
            Data::Json(v) => Some(v),
            _ => None,
        }
    }

    /// The member this data becomes, rendered: `"data":..` or `"dataBase64":".."`.
    pub(super) fn member(&self) -> String {
        match self {
            Data::Json(v) => format!("\"data\":{v}"),
            Data::Text(s) => format!("\"data\":{}", Value::from(s.as_str())),
            Data::Base64(s) => format!("\"dataBase64\":{}", Value::from(s.as_str())),
        }
    }
}

/// Whether a payload of this media type is carried as JSON when it is JSON: a JSON media type, or
/// none (replies and pushes decide alike).
fn json_media(content_type: &str) -> bool {
    content_type.is_empty() || crate::edge::is_json_media_type(content_type)
}

/// The start of every reply, in the documented order: `type`, `id`, `status`.
fn reply_head(id: &Value, status: u16, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity + 64);
    out.extend_from_slice(b"{\"type\":\"reply\",\"id\":");
    // Writing JSON values and strings into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, id);
    let _ = write!(out, ",\"status\":{status}");
    out
}

/// The end of every reply: `timing` last.
fn reply_end(mut out: Vec<u8>, timing: &str) -> String {
    out.extend_from_slice(b",\"timing\":");
    let _ = serde_json::to_writer(&mut out, timing);
    out.push(b'}');
    // Every piece is UTF-8: JSON text, escaped strings, payloads checked as UTF-8, base64.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A reply whose other members are `members`, after the head and before `timing`.
fn reply_with(id: &Value, status: u16, members: &Map<String, Value>, timing: &str) -> String {
    let mut out = reply_head(id, status, timing.len());
    for (name, value) in members {
        out.push(b',');
        let _ = serde_json::to_writer(&mut out, name);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, value);
    }
    reply_end(out, timing)
}

/// The app's answer to a command, whatever its status. Written straight into the message, members
/// in the documented order: a JSON payload is checked (UTF-8, then JSON syntax, neither allocating)
/// and copied as the app wrote it, not parsed into a tree (sorting its keys) and printed again.
pub(super) fn answer(
    id: &Value,
    status: u16,
    content_type: &str,
    payload: &[u8],
    timing: &str,
) -> String {
    let mut out = reply_head(
        id,
        status,
        payload.len() + content_type.len() + timing.len(),
    );
    if !content_type.is_empty() {
        out.extend_from_slice(b",\"contentType\":");
        let _ = serde_json::to_writer(&mut out, content_type);
    }
    match std::str::from_utf8(payload) {
        Ok(text)
            if json_media(content_type)
                && serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok() =>
        {
            out.extend_from_slice(b",\"data\":");
            out.extend_from_slice(text.as_bytes());
        }
        Ok(text) => {
            out.extend_from_slice(b",\"data\":");
            let _ = serde_json::to_writer(&mut out, text);
        }
        Err(_) => {
            out.extend_from_slice(b",\"dataBase64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(payload)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
    reply_end(out, timing)
}

/// A command refused at the edge or by the mesh (it never reached the app, or got no answer): the
/// answer's `error` and, when a retry is safe, `retryAfter`.
pub(super) fn refusal(id: &Value, answer: &Answer, timing: &str) -> String {
    let mut members = Map::new();
    crate::answer::ws::error_members(answer, &mut members);
    reply_with(id, answer.status, &members, timing)
}

/// A built-in command's success: `subscribe` and `unsubscribe` name the subscription.
pub(super) fn subscription(id: &Value, subscription: u64, timing: &str) -> String {
    let mut members = Map::new();
    members.insert("subscription".into(), Value::from(subscription));
    reply_with(id, 200, &members, timing)
}

/// A `refresh` accepted: when the new token expires (seconds since the Unix epoch, its `exp`
/// plus the leeway), and the subscriptions the new token no longer allows, which ended.
pub(super) fn refreshed(id: &Value, expires: u64, ended: &[u64], timing: &str) -> String {
    let mut members = Map::new();
    members.insert("expires".into(), Value::from(expires));
    if !ended.is_empty() {
        members.insert("unsubscribed".into(), Value::from(ended.to_vec()));
    }
    reply_with(id, 200, &members, timing)
}

/// A pushed event for subscription `sub`; `data` is [`Data::member`]; `dropped` counts the pushes
/// of this subscription dropped (outbox full) since the last one delivered, shown when not zero.
pub(super) fn push(sub: u64, event: &str, data: &str, dropped: u64) -> String {
    let event = Value::from(event);
    if dropped == 0 {
        format!("{{\"type\":\"push\",\"subscription\":{sub},\"event\":{event},{data}}}")
    } else {
        format!(
            "{{\"type\":\"push\",\"subscription\":{sub},\"event\":{event},{data},\"dropped\":{dropped}}}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).expect("valid JSON")
    }

    #[test]
    fn answers_carry_json_as_json_and_the_rest_as_text_or_base64() {
        let v = parse(&answer(
            &json!("a1"),
            200,
            "application/json",
            b"{\"x\":1}",
            "total;dur=1.000",
        ));
        assert_eq!(
            v,
            json!({"type": "reply", "id": "a1", "status": 200, "contentType": "application/json",
                   "data": {"x": 1}, "timing": "total;dur=1.000"})
        );
        let v = parse(&answer(&json!(2), 500, "text/plain", b"boom", "t"));
        assert_eq!(v["data"], "boom");
        assert_eq!(v["status"], 500);
        let v = parse(&answer(
            &Value::Null,
            200,
            "application/json",
            b"not json",
            "t",
        ));
        assert_eq!(v["data"], "not json");
        assert_eq!(v["id"], Value::Null);
        let v = parse(&answer(
            &json!(true),
            200,
            "application/octet-stream",
            &[0xff, 0x00],
            "t",
        ));
        assert_eq!(v["dataBase64"], "/wA=");
        assert!(v.get("data").is_none());
        let v = parse(&answer(&json!(1.5), 204, "", b"", "t"));
        assert_eq!(v["data"], "");
        assert!(v.get("contentType").is_none());
        // JSON that is not one value, or not closed, is text.
        let v = parse(&answer(&json!(3), 200, "", b"{\"a\":1} {}", "t"));
        assert_eq!(v["data"], "{\"a\":1} {}");
        let v = parse(&answer(&json!(3), 200, "", b"[1,", "t"));
        assert_eq!(v["data"], "[1,");
        // Escapes in the id, the media type and the timing stay escaped.
        let v = parse(&answer(&json!("q\"\n"), 200, "text/x\"y", b"z", "a\\b"));
        assert_eq!(
            (&v["id"], &v["contentType"], &v["timing"]),
            (&json!("q\"\n"), &json!("text/x\"y"), &json!("a\\b"))
        );
    }

    #[test]
    fn an_answer_keeps_the_documented_order_and_the_apps_json_as_written() {
        let text = answer(
            &json!(1),
            200,
            "application/json",
            b"{\"z\": 1, \"a\": [true]}",
            "t",
        );
        assert_eq!(
            text,
            r#"{"type":"reply","id":1,"status":200,"contentType":"application/json","data":{"z": 1, "a": [true]},"timing":"t"}"#
        );
    }

    #[test]
    fn refusals_have_title_detail_and_retry_after_for_503() {
        let v = parse(&refusal(
            &json!(7),
            &Answer::refusal(400, "field `/value` is required"),
            "t",
        ));
        assert_eq!(
            v,
            json!({"type": "reply", "id": 7, "status": 400, "timing": "t",
                   "error": {"title": "Bad Request", "detail": "field `/value` is required"}})
        );
        let text = refusal(&json!(8), &Answer::refusal(503, "busy"), "t");
        assert!(
            text.starts_with(r#"{"type":"reply","id":8,"status":503,"error":"#)
                && text.ends_with(r#","retryAfter":1,"timing":"t"}"#),
            "{text}"
        );
        let v = parse(&text);
        assert_eq!(v["retryAfter"], 1);
        assert_eq!(v["error"]["title"], "Service Unavailable");
    }

    #[test]
    fn mesh_failures_read_like_http() {
        use crate::answer::Failure;
        use std::time::Duration;
        let t = Duration::from_millis(1500);
        let reply = |f: Failure| parse(&refusal(&json!(1), &Answer::of(&f, "e", t), "t"));
        assert_eq!(reply(Failure::Shed)["status"], 503);
        assert_eq!(
            reply(Failure::NoManager)["error"]["detail"],
            "no Manager handles event type e"
        );
        assert_eq!(reply(Failure::NoEndpoint)["status"], 503);
        assert_eq!(reply(Failure::NoCredit)["retryAfter"], 1);
        let v = reply(Failure::Timeout);
        assert_eq!(v["status"], 504);
        assert_eq!(v["error"]["detail"], "no reply within 1500ms");
        assert!(v.get("retryAfter").is_none());
        assert!(
            v.get("data").is_none(),
            "the mesh's refusals are errors, never data"
        );
        assert_eq!(reply(Failure::Lost)["status"], 502);
    }

    #[test]
    fn pushes_and_subscription_replies() {
        let data = Data::of("application/json", b"{\"p\":1}");
        assert_eq!(
            parse(&push(3, "tick", &data.member(), 0)),
            json!({"type": "push", "subscription": 3, "event": "tick", "data": {"p": 1}})
        );
        let data = Data::of("application/octet-stream", &[0xfe]);
        let v = parse(&push(3, "a\"b", &data.member(), 5));
        assert_eq!(v["event"], "a\"b");
        assert_eq!(v["dataBase64"], "/g==");
        assert_eq!(v["dropped"], 5);
        assert_eq!(
            parse(&subscription(&json!("s"), 4, "t")),
            json!({"type": "reply", "id": "s", "status": 200, "subscription": 4, "timing": "t"})
        );
    }
}
