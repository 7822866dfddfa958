//! An [`Answer`](super::Answer) as an HTTP response: problem+json, `Server-Timing`, `Retry-After`.
//! Also the response of an app's answer, which passes through with its status and media type.

use super::Answer;
use crate::timing::StageTimes;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};

/// The `Server-Timing` header.
pub(crate) static SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
/// The `Timing-Allow-Origin` header: which other origins' pages may read `Server-Timing`.
pub(crate) static TIMING_ALLOW_ORIGIN: HeaderName = HeaderName::from_static("timing-allow-origin");

/// The `Timing-Allow-Origin` value of a timing middleware's `allowOrigins` (`None` when empty).
pub(crate) fn timing_allow_origin(
    origins: &[String],
) -> Result<Option<HeaderValue>, hyper::header::InvalidHeaderValue> {
    if origins.is_empty() {
        return Ok(None);
    }
    HeaderValue::from_str(&origins.join(", ")).map(Some)
}

/// An HTTP answer before its timing header is added.
pub(crate) struct Reply {
    /// HTTP status.
    pub(crate) status: u16,
    /// Media type.
    pub(crate) content_type: HeaderValue,
    /// Body.
    pub(crate) body: Bytes,
    /// `Allow` value (405).
    pub(crate) allow: Option<HeaderValue>,
    /// `Retry-After` seconds.
    pub(crate) retry_after: Option<u64>,
    /// The app's header fields that pass to the client (`switchyard_protocol::headers`).
    pub(crate) passed: switchyard_protocol::headers::Fields,
}

impl Reply {
    /// The problem+json response of `answer`.
    pub(crate) fn answer(answer: &Answer) -> Reply {
        Reply {
            status: answer.status,
            content_type: HeaderValue::from_static(crate::problem::CONTENT_TYPE),
            body: answer.problem_body(),
            allow: None,
            retry_after: answer.retry_after,
            passed: Vec::new(),
        }
    }

    /// A problem+json refusal with `status` ([`Answer::refusal`]).
    pub(crate) fn problem(status: u16, detail: &str) -> Reply {
        Reply::answer(&Answer::refusal(status, detail))
    }

    /// The app's answer as it gave it; a status outside 100..=599 is the app's bug, answered 502.
    pub(crate) fn app(status: u16, content_type: &str, body: Bytes) -> Reply {
        let content_type = HeaderValue::from_str(content_type)
            .ok()
            .filter(|_| !content_type.is_empty())
            .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"));
        Reply {
            status: app_status(status),
            content_type,
            body,
            allow: None,
            retry_after: None,
            passed: Vec::new(),
        }
    }

    /// With the app's header fields that pass to the client (a range answer, validators, length).
    pub(crate) fn with(mut self, passed: switchyard_protocol::headers::Fields) -> Reply {
        self.passed = passed;
        self
    }

    /// The app's `Content-Length`, for a streamed answer (a whole one is measured by its body).
    pub(crate) fn passed_length(&self) -> Option<HeaderValue> {
        self.passed
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| HeaderValue::from_str(v).ok())
    }

    /// The final response, with `Server-Timing` when `times` is given.
    pub(crate) fn into_response(self, times: Option<&StageTimes>) -> Response<Full<Bytes>> {
        let mut resp = Response::new(Full::new(self.body));
        *resp.status_mut() =
            hyper::StatusCode::from_u16(self.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, self.content_type);
        if let Some(v) = times.and_then(|t| HeaderValue::try_from(t.header_value()).ok()) {
            h.insert(SERVER_TIMING.clone(), v);
        }
        if let Some(allow) = self.allow {
            h.insert(ALLOW, allow);
        }
        if let Some(secs) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        for (name, value) in &self.passed {
            // The body sets the length of a whole answer; a streamed one takes `passed_length`.
            if name == "content-length" {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                h.insert(n, v);
            }
        }
        // 413 and 408 leave the request body unread, so the connection cannot carry another
        // request; saying so stops a client from reusing it and failing its next request.
        if matches!(self.status, 408 | 413) {
            h.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// An app's status as a front door passes it on: outside 100..=599 it is the app's bug, answered 502.
pub(crate) fn app_status(status: u16) -> u16 {
    if (100..=599).contains(&status) {
        status
    } else {
        502
    }
}
