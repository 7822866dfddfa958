//! The tonic service tree: `switchyard.v1.Gateway` (`Call`, `CallStream`, `Connect`) and
//! reflection (v1, v1alpha).

use super::call_stream::{self, CHUNKS_QUEUED};
use super::connect;
use super::message::{Message, Outcome, handle};
use crate::answer::grpc::{status, timing_metadata};
use crate::listener::Edge;
use crate::middleware::Grant;
use crate::routes::grpc::GrpcRoutes;
use crate::traceparent;
use bytes::Bytes;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::gateway::v1::gateway_server::{self, GatewayServer};
use switchyard_protocol::gateway::v1::{
    CallChunk, CallReply, CallRequest, ConnectReply, ConnectRequest, FILE_DESCRIPTOR_SET,
};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::{Status, Streaming};

/// When a gRPC request arrived and the deadline its client set; put in the request's extensions by
/// the connection's service (`serve.rs`), before tonic reads the body.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrival {
    pub(super) at: Instant,
    pub(super) deadline: Option<Instant>,
}

fn arrival_of<T>(req: &tonic::Request<T>) -> Arrival {
    req.extensions()
        .get::<Arrival>()
        .copied()
        .unwrap_or_else(|| Arrival {
            at: Instant::now(),
            deadline: None,
        })
}

/// The Gateway service of one router process.
#[derive(Clone)]
pub(super) struct Gateway {
    pub(super) edge: Arc<Edge>,
    pub(super) routes: Arc<GrpcRoutes>,
    pub(super) drain: CancellationToken,
}

impl Gateway {
    /// One `CallRequest` through the mesh (`Call` and `CallStream`); the answer may stream only
    /// when `streams`.
    async fn unary(
        &self,
        request: tonic::Request<CallRequest>,
        rpc: &'static str,
        streams: bool,
    ) -> Outcome {
        let arrival = arrival_of(&request);
        let (meta, _, req) = request.into_parts();
        let tp = meta.get(traceparent::HEADER).map(|v| v.as_bytes());
        let ts = traceparent::tracestate_in_meta(tp, &meta);
        handle(
            &self.edge,
            &self.routes,
            Message {
                rpc,
                method: &req.method,
                payload: Bytes::from(req.payload),
                traceparent: tp,
                tracestate: &ts,
                start: arrival.at,
                client_deadline: arrival.deadline,
                streams,
            },
        )
        .await
    }
}

#[tonic::codegen::async_trait]
impl gateway_server::Gateway for Gateway {
    async fn call(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, Status> {
        let outcome = self.unary(request, "Call", false).await;
        match outcome.result {
            Ok(a) => {
                let mut resp = tonic::Response::new(CallReply {
                    status: a.status.into(),
                    payload: a.payload.to_vec(),
                    content_type: a.content_type,
                });
                timing_metadata(resp.metadata_mut(), &outcome.times);
                Ok(resp)
            }
            Err(r) => Err(status(&r, Some(&outcome.times))),
        }
    }

    type CallStreamStream = ReceiverStream<Result<CallChunk, Status>>;

    async fn call_stream(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<Self::CallStreamStream>, Status> {
        let outcome = self.unary(request, "CallStream", true).await;
        let a = outcome
            .result
            .map_err(|r| status(&r, Some(&outcome.times)))?;
        let (tx, rx) = mpsc::channel(CHUNKS_QUEUED);
        tokio::spawn(call_stream::relay(a, tx));
        let mut resp = tonic::Response::new(ReceiverStream::new(rx));
        timing_metadata(resp.metadata_mut(), &outcome.times);
        Ok(resp)
    }

    type ConnectStream = Pin<Box<dyn Stream<Item = Result<ConnectReply, Status>> + Send>>;

    async fn connect(
        &self,
        request: tonic::Request<Streaming<ConnectRequest>>,
    ) -> Result<tonic::Response<Self::ConnectStream>, Status> {
        let arrival = arrival_of(&request);
        let grant = request.extensions().get::<Grant>().cloned();
        let (meta, _, inbound) = request.into_parts();
        let tp: Option<Arc<[u8]>> = meta.get(traceparent::HEADER).map(|v| v.as_bytes().into());
        let ts: Arc<str> = traceparent::tracestate_in_meta(tp.as_deref(), &meta).into();
        let shared = connect::Shared {
            edge: self.edge.clone(),
            routes: self.routes.clone(),
            drain: self.drain.clone(),
        };
        let replies = connect::replies(shared, inbound, (tp, ts), arrival.deadline, grant);
        Ok(tonic::Response::new(Box::pin(replies)))
    }
}

/// Reflection could not be built from the embedded descriptors.
#[derive(Debug, thiserror::Error)]
#[error("gRPC reflection: {0}")]
pub(crate) struct ReflectionError(#[from] tonic_reflection::server::Error);

/// The gRPC service tree: Gateway and reflection (v1 and v1alpha).
pub(crate) fn service(
    edge: Arc<Edge>,
    routes: Arc<GrpcRoutes>,
    drain: CancellationToken,
) -> Result<Routes, ReflectionError> {
    let max = routes.max_message;
    let gateway = GatewayServer::new(Gateway {
        edge,
        routes,
        drain,
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    Ok(Routes::new(gateway)
        .add_service(v1)
        .add_service(v1alpha)
        .prepare())
}
