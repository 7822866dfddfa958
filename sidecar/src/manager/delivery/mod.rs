//! How events reach the app: CloudEvents over HTTP (`http.rs`, on the connections of
//! `app_conns.rs`) or the gRPC Handler service (`grpc.rs`), behind one `attempt` and one [`Outcome`].

pub(crate) mod app_addr;
pub(crate) mod app_body;
pub(crate) mod app_conns;
pub(crate) mod grpc;
pub(crate) mod http;
mod outcome;

pub(crate) use outcome::Outcome;

use crate::net::stream::body::StreamBody;
use crate::otel::inbound::AppTarget;
use grpc::GrpcDelivery;
use http::HttpDelivery;
use std::time::Duration;
use switchyard_protocol::frame::{MAX_PAYLOAD, Request};

/// The app's protocol, with its client.
pub(crate) enum Delivery {
    /// CloudEvents HTTP binary mode.
    Http(Box<HttpDelivery>),
    /// The `switchyard.v1.Handler` gRPC service.
    Grpc(Box<GrpcDelivery>),
}

impl Delivery {
    /// What a delivery targets, for the delivery span's attributes.
    pub(crate) fn target(&self) -> AppTarget<'_> {
        match self {
            Delivery::Http(h) => AppTarget::Http(h.path()),
            Delivery::Grpc(_) => AppTarget::Grpc,
        }
    }

    /// One delivery attempt bounded by `timeout` (up to the answer's head, when it streams). The
    /// app's answer may stream only when `streams` (its router takes streamed answers).
    /// `upload` is the event's streamed body, when it streams (taken by this attempt).
    pub(crate) async fn attempt(
        &self,
        ev: &Request,
        timeout: Duration,
        streams: bool,
        upload: Option<StreamBody>,
    ) -> Outcome {
        match self {
            Delivery::Http(h) => h.attempt(ev, timeout, streams, upload).await,
            // Boxed: a tonic call's future is many times an HTTP attempt's, and unboxed it would size
            // every delivery future, copied at each await and at each delivery's spawn.
            Delivery::Grpc(g) => Box::pin(Self::grpc(g, ev, timeout, upload)).await,
        }
    }

    /// One attempt to the gRPC Handler service, which takes a message whole.
    async fn grpc(
        g: &GrpcDelivery,
        ev: &Request,
        timeout: Duration,
        upload: Option<StreamBody>,
    ) -> Outcome {
        match upload {
            None => g.attempt(ev, timeout).await,
            // Read what a frame carries.
            Some(body) => match body.read_whole(MAX_PAYLOAD).await {
                Ok((payload, _)) => {
                    let whole = Request {
                        payload,
                        ..ev.clone()
                    };
                    g.attempt(&whole, timeout).await
                }
                Err(_) => Outcome::Invalid(format!(
                    "the streamed body did not arrive whole within {MAX_PAYLOAD} bytes, the most a gRPC app is sent"
                )),
            },
        }
    }
}
