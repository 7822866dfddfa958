//! One event as a tap sees it (pure): what the front door or the delivery knew of it, copied only
//! while someone taps, and its rendering as one JSON line with the hidden headers' values left out.

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Header values never copied into a tap record, whoever taps: credentials.
pub(crate) const ALWAYS_HIDDEN: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];
/// What a hidden header's value reads as.
pub(crate) const HIDDEN: &str = "(hidden)";
/// Most header fields copied per event, and the longest value copied (longer ones are cut).
const MAX_HEADERS: usize = 64;
const MAX_VALUE: usize = 512;

/// What a tap is told of one event.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    /// Milliseconds since the Unix epoch when it arrived.
    pub at_ms: u64,
    /// Event type (`unmatched` for a request that matched no route).
    pub event: Arc<str>,
    /// CloudEvents id; empty when the request was refused before it had one.
    pub ce_id: String,
    /// CloudEvents source, where this sidecar knows it (the manager: what its app is given).
    pub source: Option<String>,
    /// The client's method and path (the router's HTTP listener).
    pub method: Option<String>,
    /// See `method`.
    pub path: Option<String>,
    /// The client's address (the router).
    pub client: Option<IpAddr>,
    /// The answer's status.
    pub status: u16,
    /// From arrival to answer.
    pub latency: Duration,
    /// The answer's `Server-Timing` (the router's stages).
    pub server_timing: Option<String>,
    /// W3C traceparent the event travelled with; empty when none.
    pub traceparent: String,
    /// Header fields, lower-case names; [`ALWAYS_HIDDEN`] and the sidecar's hidden ones already
    /// read [`HIDDEN`].
    pub headers: Vec<(String, String)>,
    /// The first bytes of the payload (as many as the hungriest tap asks for).
    pub payload: Bytes,
    /// The payload's whole length.
    pub payload_len: usize,
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The fields of `headers` as a tap record keeps them: at most [`MAX_HEADERS`], values cut at
/// [`MAX_VALUE`], the values of `hidden` (lower-case names) and [`ALWAYS_HIDDEN`] never copied.
pub(crate) fn copy_headers(headers: &http::HeaderMap, hidden: &[String]) -> Vec<(String, String)> {
    headers
        .iter()
        .take(MAX_HEADERS)
        .map(|(name, value)| {
            let name = name.as_str();
            let shown = match (is_hidden(name, hidden), value.to_str()) {
                (true, _) => HIDDEN.to_owned(),
                (false, Ok(v)) => cut(v, MAX_VALUE).to_owned(),
                (false, Err(_)) => "(not text)".to_owned(),
            };
            (name.to_owned(), shown)
        })
        .collect()
}

/// As [`copy_headers`], for the fields an event frame carries.
pub(crate) fn copy_fields(fields: &[(String, String)], hidden: &[String]) -> Vec<(String, String)> {
    fields
        .iter()
        .take(MAX_HEADERS)
        .map(|(name, value)| {
            let shown = match is_hidden(name, hidden) {
                true => HIDDEN.to_owned(),
                false => cut(value, MAX_VALUE).to_owned(),
            };
            (name.clone(), shown)
        })
        .collect()
}

fn is_hidden(name: &str, hidden: &[String]) -> bool {
    ALWAYS_HIDDEN.iter().any(|h| name.eq_ignore_ascii_case(h))
        || hidden.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// `s` cut at a character boundary at most `max` bytes in.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The trace id of a W3C traceparent (`00-<trace id>-<span id>-<flags>`).
fn trace_id(traceparent: &str) -> Option<&str> {
    let id = traceparent.get(3..35)?;
    (traceparent.as_bytes().get(2) == Some(&b'-') && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(id)
}

#[derive(Serialize)]
struct Line<'a> {
    kind: &'static str,
    at_ms: u64,
    role: &'static str,
    #[serde(rename = "type")]
    event: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    ce_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<IpAddr>,
    status: u16,
    latency_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_timing: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    headers: serde_json::Map<String, serde_json::Value>,
    payload_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    payload_cut: bool,
}

impl Seen {
    /// One JSON line (ending in a newline) for a tap that marks `hide` hidden and asks for
    /// `payload` bytes: a prefix that is UTF-8 as text, else in base64.
    pub(crate) fn render(&self, role: &'static str, hide: &[String], payload: usize) -> Bytes {
        let mut headers = serde_json::Map::new();
        for (name, value) in &self.headers {
            let value = match is_hidden(name, hide) {
                true => HIDDEN,
                false => value.as_str(),
            };
            match headers.get_mut(name) {
                Some(serde_json::Value::String(v)) => {
                    v.push_str(", ");
                    v.push_str(value);
                }
                _ => {
                    headers.insert(name.clone(), value.into());
                }
            }
        }
        let prefix = &self.payload[..payload.min(self.payload.len())];
        let (text, b64) = match (prefix.is_empty(), std::str::from_utf8(prefix)) {
            (true, _) => (None, None),
            (false, Ok(t)) => (Some(t.to_owned()), None),
            (false, Err(_)) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(prefix)),
            ),
        };
        let line = Line {
            kind: "event",
            at_ms: self.at_ms,
            role,
            event: &self.event,
            ce_id: &self.ce_id,
            source: self.source.as_deref(),
            method: self.method.as_deref(),
            path: self.path.as_deref(),
            client: self.client,
            status: self.status,
            latency_ms: self.latency.as_secs_f64() * 1000.0,
            server_timing: self.server_timing.as_deref(),
            trace_id: trace_id(&self.traceparent),
            headers,
            payload_bytes: self.payload_len,
            payload_cut: payload > 0 && prefix.len() < self.payload_len,
            payload: text,
            payload_base64: b64,
        };
        let mut out = serde_json::to_vec(&line).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().expect("value"));
        h.insert("cookie", "sid=s3cret".parse().expect("value"));
        h.insert("x-api-key", "s3cret".parse().expect("value"));
        h.insert("x-user", "ada".parse().expect("value"));
        h.append("accept", "a".parse().expect("value"));
        h.append("accept", "b".parse().expect("value"));
        Seen {
            at_ms: 1,
            event: Arc::from("orders.create"),
            ce_id: "id-1".into(),
            method: Some("POST".into()),
            path: Some("/orders".into()),
            status: 201,
            latency: Duration::from_micros(1500),
            server_timing: Some("app;dur=1.000, total;dur=1.500".into()),
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            headers: copy_headers(&h, &["x-api-key".to_owned()]),
            payload: Bytes::from_static(b"{\"n\":1234567}"),
            payload_len: 13,
            ..Seen::default()
        }
    }

    fn json(b: &Bytes) -> serde_json::Value {
        assert!(b.ends_with(b"\n"));
        serde_json::from_slice(b).expect("json")
    }

    #[test]
    fn credentials_and_hidden_headers_never_reach_the_line() {
        let s = seen();
        assert!(
            s.headers.iter().all(|(_, v)| !v.contains("s3cret")),
            "copied: {:?}",
            s.headers
        );
        let line = s.render("router", &["x-user".to_owned()], 0);
        let text = String::from_utf8_lossy(&line);
        assert!(!text.contains("s3cret") && !text.contains("ada"), "{text}");
        let v = json(&line);
        assert_eq!(v["headers"]["authorization"], HIDDEN);
        assert_eq!(v["headers"]["x-user"], HIDDEN);
        assert_eq!(v["headers"]["accept"], "a, b");
    }

    #[test]
    fn a_line_has_the_events_fields() {
        let v = json(&seen().render("router", &[], 0));
        assert_eq!(v["kind"], "event");
        assert_eq!(v["type"], "orders.create");
        assert_eq!(v["ce_id"], "id-1");
        assert_eq!(v["status"], 201);
        assert_eq!(v["latency_ms"], 1.5);
        assert_eq!(v["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(v["server_timing"], "app;dur=1.000, total;dur=1.500");
        assert_eq!(v["payload_bytes"], 13);
        assert!(v.get("payload").is_none(), "no payload unless asked: {v}");
    }

    #[test]
    fn the_payload_is_cut_at_what_the_tap_asks() {
        let v = json(&seen().render("router", &[], 5));
        assert_eq!(v["payload"], "{\"n\":");
        assert_eq!(v["payload_cut"], true);
        let v = json(&seen().render("router", &[], 4096));
        assert_eq!(v["payload"], "{\"n\":1234567}");
        assert!(v.get("payload_cut").is_none());
        let mut s = seen();
        s.payload = Bytes::from_static(&[0xff, 0xfe]);
        s.payload_len = 2;
        assert_eq!(json(&s.render("router", &[], 8))["payload_base64"], "//4=");
    }

    #[test]
    fn long_values_are_cut_on_a_character() {
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(trace_id("junk"), None);
    }
}
