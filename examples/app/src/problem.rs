//! RFC 9457 problem+json responses, so a caller (or the sidecar relaying the answer) sees a cause, not a bare
//! status.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

/// Media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem+json document.
pub fn body(status: StatusCode, title: &str, detail: &str) -> Bytes {
    let doc = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    Bytes::from(doc.to_string())
}

/// A problem+json response with the given status, title and detail.
pub fn response(status: StatusCode, title: &str, detail: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body(status, title, detail)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    resp
}
