//! `relay`: the app as a client of its manager sidecar's local API. It requests `echo` through
//! `SWITCHYARD_LOCAL_API` and answers with the reply, so one event fans into another Manager's.
//! `publish`: it publishes `data` as an event of type `event` (the body `{"event", "data"}`) and
//! answers with the local API's answer (202 once every subscriber admitted it).

use crate::answer::Answer;
use crate::trace::Trace;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Where the manager sidecar's local API is, e.g. `http://127.0.0.1:7071`.
pub use switchyard_protocol::env::LOCAL_API as LOCAL_API_ENV;
/// The relay waits this long for the echo.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply taken from the local API.
const MAX_REPLY: usize = 4 * 1024 * 1024;

/// A client of the local API.
pub struct Relay {
    client: Client<HttpConnector, Full<Bytes>>,
    echo: Uri,
    base: String,
}

impl Relay {
    /// A relay to the local API at `base` (`http://host:port`); `None` when it is not a URL.
    pub fn new(base: &str) -> Option<Relay> {
        let echo = format!("{}/v1/request/echo?timeout=10s", base.trim_end_matches('/'))
            .parse()
            .ok()?;
        let client = Client::builder(TokioExecutor::new()).build_http();
        Some(Relay {
            client,
            echo,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// Requests `echo` with `body`, carrying the trace, and answers with its reply.
    pub async fn relay(&self, body: Bytes, trace: &Trace) -> Answer {
        self.call(self.echo.clone(), body, trace).await
    }

    /// Publishes the `data` of `body` (`{"event": "<type>", "data": <any JSON>}`) as an event of
    /// type `event`, and answers with the local API's answer.
    pub async fn publish(&self, body: Bytes, trace: &Trace) -> Answer {
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&body);
        let event = parsed
            .as_ref()
            .ok()
            .and_then(|v| v.get("event")?.as_str().map(str::to_owned));
        let Some(event) = event else {
            return Answer::problem(
                StatusCode::BAD_REQUEST,
                "Invalid publish",
                "publish takes a JSON body {\"event\": \"<type>\", \"data\": ...}",
            );
        };
        let data = parsed
            .ok()
            .and_then(|mut v| v.get_mut("data").map(serde_json::Value::take))
            .unwrap_or(serde_json::Value::Null);
        let uri = format!("{}/v1/publish/{event}", self.base);
        let (Ok(uri), Ok(data)) = (uri.parse::<Uri>(), serde_json::to_vec(&data)) else {
            return Answer::problem(
                StatusCode::BAD_REQUEST,
                "Invalid publish",
                "the event type does not make a local API path",
            );
        };
        self.call(uri, Bytes::from(data), trace).await
    }

    async fn call(&self, uri: Uri, body: Bytes, trace: &Trace) -> Answer {
        let mut req = Request::post(uri).body(Full::new(body));
        if let Ok(r) = req.as_mut() {
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (name, value) in trace.headers() {
                if let Ok(v) = HeaderValue::from_str(value) {
                    r.headers_mut().insert(name, v);
                }
            }
        }
        let Ok(req) = req else {
            return unreachable_api("the request could not be built");
        };
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let ct = resp.headers().get(CONTENT_TYPE).cloned();
            let body = Limited::new(resp.into_body(), MAX_REPLY)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, ct, body))
        };
        match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(Ok((status, ct, body))) => Answer {
                status,
                content_type: ct.and_then(|c| c.to_str().ok().map(str::to_owned)),
                body,
            },
            Ok(Err(e)) => unreachable_api(&e),
            Err(_) => Answer::problem(
                StatusCode::GATEWAY_TIMEOUT,
                "Relay timed out",
                "the local API gave no reply within 10 s",
            ),
        }
    }
}

fn unreachable_api(detail: &str) -> Answer {
    Answer::problem(
        StatusCode::BAD_GATEWAY,
        "Local API unreachable",
        &format!("the manager sidecar's local API failed: {detail}"),
    )
}
