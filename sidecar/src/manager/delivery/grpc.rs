//! Delivery to the app through the `switchyard.v1.Handler` gRPC service (`app.protocol: grpc`), over one
//! HTTP/2 connection that multiplexes every concurrent delivery.

use super::app_addr::AppAddr;
use super::outcome::Outcome;
use bytes::Bytes;
use hyper::Uri;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::time::Duration;
use switchyard_protocol::frame::Request;
use switchyard_protocol::gateway::v1::CloudEvent;
use switchyard_protocol::gateway::v1::handler_client::HandlerClient;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// Largest reply taken from the app: what fits in one frame.
const MAX_REPLY: usize = switchyard_protocol::frame::MAX_PAYLOAD;

/// A Handler client bound to the app.
pub(crate) struct GrpcDelivery {
    client: HandlerClient<Channel>,
    source: String,
}

impl GrpcDelivery {
    /// A client for the app's Handler service at `app`; connects lazily and reconnects by itself.
    pub(crate) fn new(app: AppAddr, source: &str) -> Result<GrpcDelivery, tonic::transport::Error> {
        let endpoint = Endpoint::from_shared(format!("http://{}", app.authority()))?
            .connect_timeout(Duration::from_secs(2))
            // The app is on localhost: a dead peer shows up as a reset, but keep-alive also catches a hung one.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        // The same connect as HTTP delivery's, so both transports (and no Nagle on TCP) hold for gRPC too.
        let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let app = app.clone();
            async move { app.connect().await.map(TokioIo::new) }
        }));
        let client = HandlerClient::new(channel)
            .max_decoding_message_size(MAX_REPLY)
            .max_encoding_message_size(usize::MAX);
        Ok(GrpcDelivery {
            client,
            source: source.to_owned(),
        })
    }

    /// One attempt, bounded by `timeout` (sent as the gRPC deadline too, so the app can see it).
    pub(crate) async fn attempt(&self, ev: &Request, timeout: Duration) -> Outcome {
        let mut extensions = HashMap::new();
        if !ev.traceparent.is_empty() {
            extensions.insert("traceparent".to_owned(), ev.traceparent.clone());
        }
        // The CloudEvents distributed-tracing extension has both attributes.
        if !ev.tracestate.is_empty() {
            extensions.insert("tracestate".to_owned(), ev.tracestate.clone());
        }
        let mut req = tonic::Request::new(CloudEvent {
            id: ev.ce_id.clone(),
            // A durable event names its publisher (`ce-source` among its fields); else this Manager.
            source: ev
                .headers
                .iter()
                .find(|(n, _)| n == "ce-source")
                .map_or_else(|| self.source.clone(), |(_, v)| v.clone()),
            spec_version: "1.0".to_owned(),
            r#type: ev.event.clone(),
            data_content_type: ev.content_type.clone(),
            data: ev.payload.to_vec(),
            extensions,
        });
        req.set_timeout(timeout);
        if !ev.traceparent.is_empty() {
            match MetadataValue::try_from(ev.traceparent.as_str()) {
                Ok(v) => {
                    req.metadata_mut().insert("traceparent", v);
                }
                Err(_) => return Outcome::Invalid("traceparent is not legal metadata".to_owned()),
            }
        }
        // A carried tracestate is printable ASCII, so always legal metadata.
        if let Ok(v) = MetadataValue::try_from(ev.tracestate.as_str())
            && !ev.tracestate.is_empty()
        {
            req.metadata_mut().insert("tracestate", v);
        }
        let mut client = self.client.clone();
        match tokio::time::timeout(timeout, client.handle(req)).await {
            Err(_) => Outcome::TimedOut,
            Ok(Ok(reply)) => {
                let reply = reply.into_inner();
                Outcome::Answer {
                    status: reply_status(reply.status),
                    content_type: if reply.content_type.is_empty() {
                        crate::edge::JSON.to_owned()
                    } else {
                        reply.content_type
                    },
                    headers: Vec::new(),
                    body: Bytes::from(reply.data),
                    stream: None,
                }
            }
            Ok(Err(status)) => status_outcome(&status),
        }
    }
}

/// The app's status field: 0 (unset) is 200; anything outside 100..=599 is the app's bug, answered 502.
fn reply_status(status: i32) -> u16 {
    match status {
        0 => 200,
        s => u16::try_from(s)
            .ok()
            .filter(|s| (100..=599).contains(s))
            .unwrap_or(502),
    }
}

/// What a gRPC error from the app means for the delivery. Transport failures are `Unreachable` (retried);
/// the app's own errors become the HTTP status of the same meaning, 5xx being retried by the worker.
fn status_outcome(status: &tonic::Status) -> Outcome {
    let http = match status.code() {
        Code::Unavailable => return Outcome::Unreachable(format!("app: {}", status.message())),
        Code::DeadlineExceeded => return Outcome::TimedOut,
        Code::Ok => 200,
        Code::InvalidArgument | Code::OutOfRange => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::FailedPrecondition => 412,
        Code::ResourceExhausted => 429,
        Code::Cancelled => 499,
        Code::Unimplemented => 501,
        Code::Internal | Code::Unknown | Code::DataLoss => 500,
    };
    Outcome::Answer {
        status: http,
        content_type: crate::problem::CONTENT_TYPE.to_owned(),
        headers: Vec::new(),
        body: crate::problem::body(
            http,
            crate::problem::title(http),
            &format!(
                "the app answered gRPC {:?}: {}",
                status.code(),
                status.message()
            ),
        ),
        stream: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_status(code: Code) -> Option<u16> {
        match status_outcome(&tonic::Status::new(code, "x")) {
            Outcome::Answer { status, .. } => Some(status),
            _ => None,
        }
    }

    #[test]
    fn app_errors_map_to_http_statuses() {
        assert_eq!(http_status(Code::InvalidArgument), Some(400));
        assert_eq!(http_status(Code::NotFound), Some(404));
        assert_eq!(http_status(Code::Unimplemented), Some(501));
        assert_eq!(http_status(Code::Internal), Some(500));
        assert_eq!(http_status(Code::ResourceExhausted), Some(429));
        assert!(matches!(
            status_outcome(&tonic::Status::unavailable("down")),
            Outcome::Unreachable(_)
        ));
        assert!(matches!(
            status_outcome(&tonic::Status::deadline_exceeded("slow")),
            Outcome::TimedOut
        ));
    }

    #[test]
    fn reply_status_defaults_and_bounds() {
        assert_eq!(reply_status(0), 200);
        assert_eq!(reply_status(201), 201);
        assert_eq!(reply_status(42), 502);
        assert_eq!(reply_status(-1), 502);
        assert_eq!(reply_status(70_000), 502);
    }
}
