//! RFC 9457 problem details: the only error body a client ever sees (never a stack trace).

use bytes::Bytes;

/// Media type of a problem body.
pub(crate) const CONTENT_TYPE: &str = "application/problem+json";

/// A problem body `{"type":"about:blank","title":..,"status":..,"detail":..}` as bytes.
pub(crate) fn body(status: u16, title: &str, detail: &str) -> Bytes {
    let v = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    });
    // Serializing a map of strings and a number cannot fail; an empty body would still be a valid answer.
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// The standard reason phrase for a status, used as the problem title.
pub(crate) fn title(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_four_members() {
        let b = body(
            400,
            "Bad Request",
            "field `/value`: \"x\" is not of type \"integer\"",
        );
        let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        assert_eq!(v["type"], "about:blank");
        assert_eq!(v["title"], "Bad Request");
        assert_eq!(v["status"], 400);
        assert!(v["detail"].as_str().expect("detail").contains("/value"));
    }

    #[test]
    fn titles_come_from_the_status() {
        assert_eq!(title(404), "Not Found");
        assert_eq!(title(599), "Error");
    }
}
