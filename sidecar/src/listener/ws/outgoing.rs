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

/// Payload data in a message: JSON as JSON, other UTF-8 as a string, anything else base64.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// A JSON payload (JSON media type, or none, and valid JSON).
    Json(Value),
    /// UTF-8 that is not JSON.
    Text(String),
    /// Bytes that are not UTF-8, base64 (standard alphabet, padded).
    Base64(String),
}

impl Data {
    /// Classifies a payload by its media type and content.
    pub fn of(content_type: &str, payload: &[u8]) -> Data {
        let json_type = content_type.is_empty() || crate::edge::is_json_media_type(content_type);
        if json_type && let Ok(v) = serde_json::from_slice::<Value>(payload) {
            return Data::Json(v);
        }
        match std::str::from_utf8(payload) {
            Ok(s) => Data::Text(s.to_owned()),
            Err(_) => Data::Base64(base64::engine::general_purpose::STANDARD.encode(payload)),
        }
    }

    /// The JSON value, when the payload is JSON.
    pub fn json(&self) -> Option<&Value> {
        match self {
            Data::Json(v) => Some(v),
            _ => None,
        }
    }

    /// The member this data becomes, rendered: `"data":..` or `"dataBase64":".."`.
    pub fn member(&self) -> String {
        match self {
            Data::Json(v) => format!("\"data\":{v}"),
            Data::Text(s) => format!("\"data\":{}", Value::from(s.as_str())),
            Data::Base64(s) => format!("\"dataBase64\":{}", Value::from(s.as_str())),
        }
    }

    fn insert_into(self, obj: &mut Map<String, Value>) {
        match self {
            Data::Json(v) => obj.insert("data".into(), v),
            Data::Text(s) => obj.insert("data".into(), Value::String(s)),
            Data::Base64(s) => obj.insert("dataBase64".into(), Value::String(s)),
        };
    }
}

fn reply_head(id: &Value, status: u16) -> Map<String, Value> {
    let mut obj = Map::new();
    obj.insert("type".into(), Value::from("reply"));
    obj.insert("id".into(), id.clone());
    obj.insert("status".into(), Value::from(status));
    obj
}

fn finish(mut obj: Map<String, Value>, timing: &str) -> String {
    obj.insert("timing".into(), Value::from(timing));
    Value::Object(obj).to_string()
}

/// The app's answer to a command, whatever its status.
pub fn answer(id: &Value, status: u16, content_type: &str, payload: &[u8], timing: &str) -> String {
    let mut obj = reply_head(id, status);
    if !content_type.is_empty() {
        obj.insert("contentType".into(), Value::from(content_type));
    }
    Data::of(content_type, payload).insert_into(&mut obj);
    finish(obj, timing)
}

/// A command refused at the edge or by the mesh (it never reached the app, or got no answer): the
/// answer's `error` and, when a retry is safe, `retryAfter`.
pub fn refusal(id: &Value, answer: &Answer, timing: &str) -> String {
    let mut obj = reply_head(id, answer.status);
    crate::answer::ws::error_members(answer, &mut obj);
    finish(obj, timing)
}

/// A built-in command's success: `subscribe` and `unsubscribe` name the subscription.
pub fn subscription(id: &Value, subscription: u64, timing: &str) -> String {
    let mut obj = reply_head(id, 200);
    obj.insert("subscription".into(), Value::from(subscription));
    finish(obj, timing)
}

/// A `refresh` accepted: when the new token expires (seconds since the Unix epoch, its `exp`
/// plus the leeway), and the subscriptions the new token no longer allows, which ended.
pub fn refreshed(id: &Value, expires: u64, ended: &[u64], timing: &str) -> String {
    let mut obj = reply_head(id, 200);
    obj.insert("expires".into(), Value::from(expires));
    if !ended.is_empty() {
        obj.insert("unsubscribed".into(), Value::from(ended.to_vec()));
    }
    finish(obj, timing)
}

/// A pushed event for subscription `sub`; `data` is [`Data::member`]; `dropped` counts the pushes
/// of this subscription dropped (outbox full) since the last one delivered, shown when not zero.
pub fn push(sub: u64, event: &str, data: &str, dropped: u64) -> String {
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
        let v = parse(&refusal(&json!(8), &Answer::refusal(503, "busy"), "t"));
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
