//! Building HTTP answers: problem bodies, Server-Timing, Retry-After.

use crate::problem;
use crate::timing::StageTimes;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};

/// The `Server-Timing` header.
pub static SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
/// The `Timing-Allow-Origin` header: which other origins' pages may read `Server-Timing`.
pub static TIMING_ALLOW_ORIGIN: HeaderName = HeaderName::from_static("timing-allow-origin");

/// The `Timing-Allow-Origin` value of a timing middleware's `allowOrigins` (`None` when empty).
pub fn timing_allow_origin(origins: &[String]) -> Result<Option<HeaderValue>, String> {
    if origins.is_empty() {
        return Ok(None);
    }
    let joined = origins.join(", ");
    HeaderValue::from_str(&joined)
        .map(Some)
        .map_err(|_| format!("allowOrigins {joined:?} is not a valid header value"))
}

/// An answer before its timing header is added.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Media type.
    pub content_type: HeaderValue,
    /// Body.
    pub body: Bytes,
    /// `Allow` value (405).
    pub allow: Option<String>,
    /// Add `Retry-After: 1` (503: the request was not handled; trying again later is safe).
    pub retry_after: bool,
}

impl Reply {
    /// A problem+json answer.
    pub fn problem(status: u16, detail: &str) -> Reply {
        Reply {
            status,
            content_type: HeaderValue::from_static(problem::CONTENT_TYPE),
            body: problem::body(status, problem::title(status), detail),
            allow: None,
            retry_after: status == 503,
        }
    }

    /// The final response with `Server-Timing`.
    pub fn into_response(self, times: &StageTimes) -> Response<Full<Bytes>> {
        let mut resp = Response::new(Full::new(self.body));
        *resp.status_mut() =
            hyper::StatusCode::from_u16(self.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, self.content_type);
        if let Ok(v) = HeaderValue::from_str(&times.header_value()) {
            h.insert(SERVER_TIMING.clone(), v);
        }
        if let Some(allow) = self.allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
            h.insert(ALLOW, allow);
        }
        if self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        // 413 and 408 leave the request body unread, so the connection cannot carry another
        // request; saying so stops a client from reusing it and failing its next request.
        if matches!(self.status, 408 | 413) {
            h.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}
