//! `relay`: the app as a client of its manager sidecar's local API. It requests `echo` through
//! `SWITCHYARD_LOCAL_API` and answers with the reply, so one event fans into another Manager's.

use crate::handler::Answer;
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
}

impl Relay {
    /// A relay to the local API at `base` (`http://host:port`); `None` when it is not a URL.
    pub fn new(base: &str) -> Option<Relay> {
        let echo = format!("{}/v1/request/echo?timeout=10s", base.trim_end_matches('/'))
            .parse()
            .ok()?;
        let client = Client::builder(TokioExecutor::new()).build_http();
        Some(Relay { client, echo })
    }

    /// Requests `echo` with `body`, carrying the trace, and answers with its reply.
    pub async fn relay(&self, body: Bytes, trace: &Trace) -> Answer {
        let mut req = Request::post(self.echo.clone()).body(Full::new(body));
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
