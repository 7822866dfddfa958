//! Delivery to the app in CloudEvents HTTP binary mode over keep-alive connections.

use super::app_addr::AppAddr;
use super::app_conns::{self, AppConns, AppError};
use super::outcome::Outcome;
use crate::net::stream::body::StreamBody;
use crate::net::stream::out_body::OutBody;
use http_body_util::Full;
use hyper::Uri;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use std::time::Duration;
use switchyard_protocol::frame::{MAX_PAYLOAD, Request};

/// Largest reply body taken from the app: what fits in one frame.
const MAX_REPLY: usize = MAX_PAYLOAD;

static CE_ID: HeaderName = HeaderName::from_static("ce-id");
static CE_TYPE: HeaderName = HeaderName::from_static("ce-type");
static CE_SOURCE: HeaderName = HeaderName::from_static("ce-source");
static CE_SPECVERSION: HeaderName = HeaderName::from_static("ce-specversion");
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The app's address and path do not make a delivery target.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetError {
    /// `http://<app><path>` is not a URI.
    #[error("app URL: {0}")]
    Url(#[from] hyper::http::uri::InvalidUri),
    /// The CloudEvents source is not a header value.
    #[error("ce-source: {0}")]
    Source(#[from] hyper::header::InvalidHeaderValue),
    /// The connection pool could not be set up.
    #[error(transparent)]
    App(#[from] AppError),
}

/// An HTTP client bound to the app's event endpoint.
pub(crate) struct HttpDelivery {
    conns: AppConns,
    /// The event path in origin form, as an HTTP/1 request carries it.
    uri: Uri,
    source: HeaderValue,
}

impl HttpDelivery {
    /// A client for `http://<app>/<path>`, keeping up to `idle` connections open.
    pub(crate) fn new(
        app: AppAddr,
        path: &str,
        source: &str,
        idle: usize,
    ) -> Result<HttpDelivery, TargetError> {
        let uri: Uri = format!("http://{}{path}", app.authority()).parse()?;
        let source = HeaderValue::from_str(source)?;
        Ok(HttpDelivery {
            conns: AppConns::new(app, idle)?,
            uri: app_conns::origin_form(&uri),
            source,
        })
    }

    /// The path events are posted to.
    pub(crate) fn path(&self) -> &str {
        self.uri.path()
    }

    /// One attempt, bounded by `timeout`.
    /// With `upload`, the request body is that stream (the router's client's, as it arrives);
    /// else the event's payload.
    pub(crate) async fn attempt(
        &self,
        ev: &Request,
        timeout: Duration,
        streams: bool,
        upload: Option<StreamBody>,
    ) -> Outcome {
        let header = |v: &str, name: &str| {
            HeaderValue::from_str(v).map_err(|_| format!("{name} is not a legal header value"))
        };
        let built = (|| {
            let mut req = hyper::Request::post(self.uri.clone())
                .body(match upload {
                    Some(s) => OutBody::Stream(s),
                    None => OutBody::Full(Full::new(ev.payload.clone())),
                })
                .map_err(|e| e.to_string())?;
            let h = req.headers_mut();
            h.insert(CE_ID.clone(), header(&ev.ce_id, "ce-id")?);
            h.insert(CE_TYPE.clone(), header(&ev.event, "ce-type")?);
            h.insert(CE_SOURCE.clone(), self.source.clone());
            h.insert(CE_SPECVERSION.clone(), HeaderValue::from_static("1.0"));
            if !ev.traceparent.is_empty() {
                h.insert(TRACEPARENT.clone(), header(&ev.traceparent, "traceparent")?);
            }
            if !ev.tracestate.is_empty() {
                h.insert(TRACESTATE.clone(), header(&ev.tracestate, "tracestate")?);
            }
            if !ev.content_type.is_empty() {
                h.insert(CONTENT_TYPE, header(&ev.content_type, "content-type")?);
            }
            // The client's fields the router passed (a range request): the app answers them. A
            // durable event's `ce-source` (its publisher) replaces this Manager's, inserted above.
            for (name, value) in &ev.headers {
                if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                    h.insert(name, header(value, "a passed header")?);
                }
            }
            Ok::<_, String>(req)
        })();
        let req = match built {
            Ok(r) => r,
            Err(e) => return Outcome::Invalid(e),
        };
        // A timeout drops the exchange and with it its connection, whose answer may still come.
        match tokio::time::timeout(timeout, self.conns.exchange(req, MAX_REPLY, streams)).await {
            Err(_) => Outcome::TimedOut,
            Ok(Ok(a)) => Outcome::Answer {
                status: a.status,
                content_type: a.content_type,
                headers: a.headers,
                body: a.body,
                stream: a.stream,
            },
            Ok(Err(e)) => Outcome::Unreachable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// The characters the Manager CRD's `spec.app.path` pattern admits after the leading `/`
    /// (`^/[A-Za-z0-9._~/-]*$`, pinned by `crds/tests/crds.rs`).
    const CRD_PATH_CHARS: &str =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~/-";

    /// `switchyard check` and the API server refuse a path outside the pattern; every path inside
    /// it must be one this sidecar takes, so its own `app.path` refusal at start never fires first.
    #[tokio::test]
    async fn every_path_the_crd_admits_is_a_delivery_target() {
        let app = AppAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 8000)));
        let chars: Vec<char> = CRD_PATH_CHARS.chars().collect();
        let mut paths = vec!["/".to_owned(), "//".to_owned(), "/./../~".to_owned()];
        paths.extend((0..2000).map(|_| {
            let len = fastrand::usize(0..80);
            std::iter::once('/')
                .chain((0..len).map(|_| chars[fastrand::usize(..chars.len())]))
                .collect()
        }));
        for path in paths {
            let d = HttpDelivery::new(app.clone(), &path, "/switchyard/default/m", 1);
            assert!(d.is_ok(), "{path:?}: {:?}", d.err());
        }
    }
}
