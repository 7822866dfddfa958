//! A tap's JSON lines as the terminal shows them (pure): one line per event, like `linkerd viz
//! tap`, with the payload on a second line when asked for, and the drop and skip counts in words.

use serde_json::Value;

/// The text for `line` (one JSON object from sidecar `from`), or `None` for lines that say nothing
/// new (a heartbeat with no losses); an event's headers on a line of their own with `headers`.
pub fn text(from: &str, line: &Value, headers: bool) -> Option<String> {
    match line["kind"].as_str() {
        Some("event") => Some(event(from, line, headers)),
        Some("counts") => counts(from, line),
        Some("tapping") => Some(format!(
            "[{from}] tapping the {} (at most {} events/s)",
            line["role"].as_str().unwrap_or("sidecar"),
            line["max_rps"]
        )),
        _ => Some(format!("[{from}] {line}")),
    }
}

fn event(from: &str, v: &Value, headers: bool) -> String {
    let s = |k: &str| clean(v[k].as_str().unwrap_or(""));
    let mut out = format!("[{from}] {} type={}", v["status"], s("type"));
    if !s("ce_id").is_empty() {
        out.push_str(&format!(" id={}", s("ce_id")));
    }
    if !s("source").is_empty() {
        out.push_str(&format!(" source={}", s("source")));
    }
    if !s("path").is_empty() {
        out.push_str(&format!(" {} {}", s("method"), s("path")));
    }
    if let Some(ms) = v["latency_ms"].as_f64() {
        out.push_str(&format!(" latency={ms:.3}ms"));
    }
    if !s("trace_id").is_empty() {
        out.push_str(&format!(" trace={}", s("trace_id")));
    }
    if !s("server_timing").is_empty() {
        out.push_str(&format!(" server-timing=\"{}\"", s("server_timing")));
    }
    if headers && let Some(h) = v["headers"].as_object().filter(|h| !h.is_empty()) {
        let fields: Vec<String> = h
            .iter()
            .map(|(k, v)| format!("{}: {}", clean(k), clean(v.as_str().unwrap_or_default())))
            .collect();
        out.push_str(&format!("\n    headers: {}", fields.join("; ")));
    }
    if let Some(p) = v["payload"].as_str() {
        out.push_str(&format!("\n    payload: {}", clean(p)));
    } else if let Some(p) = v["payload_base64"].as_str() {
        out.push_str(&format!("\n    payload (base64): {p}"));
    }
    if v["payload_cut"] == true {
        out.push_str(&format!(" ... ({} bytes in all)", v["payload_bytes"]));
    }
    out
}

/// `s` with control characters escaped (`\n`, `\u{1b}`): a client's headers and payload must not
/// break the one-line-per-event layout or drive the terminal.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c.is_control() {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

fn counts(from: &str, v: &Value) -> Option<String> {
    let dropped = v["dropped"].as_u64().unwrap_or(0);
    let skipped = v["skipped"].as_u64().unwrap_or(0);
    (dropped + skipped > 0).then(|| {
        format!(
            "[{from}] so far: {dropped} events dropped (this tap read too slowly), {skipped} skipped over --max-rps"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_is_one_line_with_its_fields() {
        let v = json!({"kind": "event", "type": "orders.create", "ce_id": "x1", "status": 201,
            "method": "POST", "path": "/orders", "latency_ms": 1.5, "trace_id": "abc",
            "server_timing": "total;dur=1.500", "payload": "{}", "payload_bytes": 2});
        assert_eq!(
            text("router edge", &v, false).as_deref(),
            Some(
                "[router edge] 201 type=orders.create id=x1 POST /orders latency=1.500ms trace=abc server-timing=\"total;dur=1.500\"\n    payload: {}"
            )
        );
    }

    #[test]
    fn headers_are_shown_when_asked_as_the_sidecar_sent_them() {
        let v = json!({"kind": "event", "type": "noop", "status": 200,
            "headers": {"accept": "a, b", "authorization": "(hidden)"}});
        assert_eq!(text("r", &v, false).as_deref(), Some("[r] 200 type=noop"));
        assert_eq!(
            text("r", &v, true).as_deref(),
            Some("[r] 200 type=noop\n    headers: accept: a, b; authorization: (hidden)")
        );
    }

    #[test]
    fn a_cut_or_binary_payload_says_so() {
        let v = json!({"kind": "event", "type": "echo", "status": 200, "source": "s",
            "payload": "{\"va", "payload_cut": true, "payload_bytes": 14});
        assert_eq!(
            text("m", &v, false).as_deref(),
            Some("[m] 200 type=echo source=s\n    payload: {\"va ... (14 bytes in all)")
        );
        let v = json!({"kind": "event", "type": "echo", "status": 200, "payload_base64": "//4="});
        assert_eq!(
            text("m", &v, false).as_deref(),
            Some("[m] 200 type=echo\n    payload (base64): //4=")
        );
    }

    #[test]
    fn control_characters_from_clients_are_escaped() {
        let v = json!({"kind": "event", "type": "e", "status": 200, "path": "/a\u{1b}[2J",
            "method": "GET", "payload": "x\ny", "headers": {"x-a": "b\rc"}});
        assert_eq!(
            text("r", &v, true).as_deref(),
            Some("[r] 200 type=e GET /a\\u{1b}[2J\n    headers: x-a: b\\rc\n    payload: x\\ny")
        );
    }

    #[test]
    fn the_first_line_names_the_role_and_rate() {
        let v = json!({"kind": "tapping", "role": "manager", "max_rps": 100});
        assert_eq!(
            text("manager handlers", &v, false).as_deref(),
            Some("[manager handlers] tapping the manager (at most 100 events/s)")
        );
    }

    #[test]
    fn counts_are_shown_only_when_something_was_lost() {
        let quiet = json!({"kind": "counts", "dropped": 0, "skipped": 0});
        assert_eq!(text("m", &quiet, false), None);
        let lost = json!({"kind": "counts", "dropped": 3, "skipped": 1});
        assert!(text("m", &lost, false).is_some_and(|t| t.contains("3 events dropped")));
    }
}
