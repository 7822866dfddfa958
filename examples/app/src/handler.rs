//! One request: `/healthz`, or a CloudEvent in HTTP binary mode dispatched by its `ce-type` header.

use crate::answer::Answer;
use crate::burn::{self, Burner};
use crate::problem;
use crate::relay::Relay;
use crate::trace::Trace;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;

/// Largest event data accepted; larger gets 413 rather than unbounded buffering.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Shared, cheap-to-clone state of the handlers.
#[derive(Clone, Default)]
pub struct Handlers {
    burner: Burner,
    relay: Option<Arc<Relay>>,
    tracing: Option<crate::otel::Tracing>,
}

impl Handlers {
    /// Handlers whose `relay` uses the local API at `local_api` (`SWITCHYARD_LOCAL_API`), if given.
    pub fn new(local_api: Option<&str>) -> Handlers {
        let relay = local_api.and_then(|base| {
            let r = Relay::new(base);
            if r.is_none() {
                eprintln!("switchyard-example-app: {base:?} is not a URL; relay is off");
            }
            r
        });
        Handlers {
            burner: Burner::default(),
            relay: relay.map(Arc::new),
            tracing: None,
        }
    }

    /// The same handlers, each event in a span of its own exported by `tracing`.
    pub fn with_tracing(mut self, tracing: Option<crate::otel::Tracing>) -> Handlers {
        self.tracing = tracing;
        self
    }

    /// Answers one request; never fails at the HTTP level (every problem is a response).
    pub async fn handle(
        &self,
        req: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        if req.uri().path() == "/healthz" {
            return Ok(match *req.method() {
                Method::GET | Method::HEAD => json(StatusCode::OK, r#"{"ok":true}"#),
                _ => method_not_allowed("GET, HEAD"),
            });
        }
        // Events come as POSTs to whatever path the Manager's `app.path` names, so the path is not checked.
        if req.method() != Method::POST {
            return Ok(method_not_allowed("POST"));
        }
        let ce_type = match req.headers().get("ce-type").map(HeaderValue::to_str) {
            Some(Ok(t)) if !t.is_empty() => t.to_owned(),
            Some(_) => {
                return Ok(problem::response(
                    StatusCode::BAD_REQUEST,
                    "Invalid ce-type header",
                    "ce-type must be a non-empty visible ASCII string",
                ));
            }
            None => {
                return Ok(problem::response(
                    StatusCode::BAD_REQUEST,
                    "Missing ce-type header",
                    "a CloudEvent in HTTP binary mode carries its type in the ce-type header",
                ));
            }
        };
        let content_type = req.headers().get(CONTENT_TYPE).cloned();
        let trace = Trace::from_lookup(|name| req.headers().get(name)?.to_str().ok());
        let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Ok(problem::response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Event data too large",
                    &format!("event data is limited to {MAX_BODY_BYTES} bytes"),
                ));
            }
            Err(e) => {
                return Ok(problem::response(
                    StatusCode::BAD_REQUEST,
                    "Unreadable event data",
                    &e.to_string(),
                ));
            }
        };
        Ok(self
            .answer(
                &ce_type,
                content_type.as_ref().and_then(|v| v.to_str().ok()),
                &trace,
                body,
            )
            .await
            .into_response())
    }

    /// The answer to one event, whatever protocol brought it; in a span of its own when tracing.
    pub async fn answer(
        &self,
        ce_type: &str,
        content_type: Option<&str>,
        trace: &Trace,
        body: Bytes,
    ) -> Answer {
        let Some(tracing) = &self.tracing else {
            return self.answer_in(ce_type, content_type, trace, body).await;
        };
        let span = tracing.handle(ce_type, trace);
        let onwards = span.trace();
        let answer = self.answer_in(ce_type, content_type, &onwards, body).await;
        span.end(answer.status.as_u16());
        answer
    }

    /// The answer; `trace` is what a call onwards carries.
    async fn answer_in(
        &self,
        ce_type: &str,
        content_type: Option<&str>,
        trace: &Trace,
        body: Bytes,
    ) -> Answer {
        match ce_type {
            "noop" => Answer::json(StatusCode::OK, r#"{"ok":true}"#),
            "echo" => Answer {
                status: StatusCode::OK,
                content_type: content_type.map(str::to_owned),
                body,
            },
            "burn" => match burn::parse_ms(&body) {
                Ok(ms) => {
                    self.burner.burn(ms).await;
                    Answer::json(StatusCode::OK, &format!(r#"{{"burned_ms":{ms}}}"#))
                }
                Err(detail) => {
                    Answer::problem(StatusCode::BAD_REQUEST, "Invalid burn parameters", &detail)
                }
            },
            "bytes" => match crate::sized::parse_n(&body) {
                Ok(n) => Answer {
                    status: StatusCode::OK,
                    content_type: Some("application/octet-stream".to_owned()),
                    body: crate::sized::body(n),
                },
                Err(detail) => {
                    Answer::problem(StatusCode::BAD_REQUEST, "Invalid bytes parameters", &detail)
                }
            },
            "relay" => match &self.relay {
                Some(r) => r.relay(body, trace).await,
                None => Answer::problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "No local API",
                    "relay needs SWITCHYARD_LOCAL_API, the manager sidecar's local API",
                ),
            },
            "publish" => match &self.relay {
                Some(r) => r.publish(body, trace).await,
                None => Answer::problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "No local API",
                    "publish needs SWITCHYARD_LOCAL_API, the manager sidecar's local API",
                ),
            },
            other => Answer::problem(
                StatusCode::NOT_FOUND,
                "Unknown event type",
                &format!("no handler for event type {other}"),
            ),
        }
    }
}

fn json(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    Answer::json(status, body).into_response()
}

fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut resp = problem::response(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        &format!("this path accepts {allow}"),
    );
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    resp
}
