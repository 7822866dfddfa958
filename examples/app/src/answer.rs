//! A handler's answer, as the HTTP handlers and the relay to the local API make it and the HTTP
//! and gRPC servers send it.

use crate::problem;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

const JSON: &str = "application/json";

/// A handler's answer: status, media type (none when unknown) and body.
pub struct Answer {
    /// HTTP status (the gRPC Handler reply carries it as a number).
    pub status: StatusCode,
    /// Media type of the body.
    pub content_type: Option<String>,
    /// Body.
    pub body: Bytes,
}

impl Answer {
    pub(crate) fn json(status: StatusCode, body: &str) -> Answer {
        Answer {
            status,
            content_type: Some(JSON.to_owned()),
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    pub(crate) fn problem(status: StatusCode, title: &str, detail: &str) -> Answer {
        Answer {
            status,
            content_type: Some(problem::PROBLEM_JSON.to_owned()),
            body: problem::body(status, title, detail),
        }
    }

    pub(crate) fn into_response(self) -> Response<Full<Bytes>> {
        let mut resp = Response::new(Full::new(self.body));
        *resp.status_mut() = self.status;
        if let Some(ct) = self
            .content_type
            .and_then(|c| HeaderValue::from_str(&c).ok())
        {
            resp.headers_mut().insert(CONTENT_TYPE, ct);
        }
        resp
    }
}
