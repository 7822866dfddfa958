//! The local API over gRPC: `switchyard.v1.LocalApi` (Publish, Request, Push) on the HTTP port, h2c.

use super::parse::{self, Op};
use super::{Call, Done, LocalApi, MAX_BODY};
use crate::answer::Answer;
use bytes::Bytes;
use hyper::body::Incoming;
use std::convert::Infallible;
use std::sync::Arc;
use switchyard_protocol::gateway::v1::local_api_server::{self, LocalApiServer};
use switchyard_protocol::gateway::v1::{LocalEvent, PublishReply, PushReply, RequestReply};
use tonic::codegen::Service as _;
use tonic::service::Routes;
use tonic::{Request, Response, Status};

/// Whether an HTTP request is a gRPC call.
pub(crate) fn is_grpc<B>(req: &hyper::Request<B>) -> bool {
    req.headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC services of the local API.
pub(crate) fn service(api: Arc<LocalApi>) -> Routes {
    let svc = LocalApiServer::new(Grpc { api })
        .max_decoding_message_size(MAX_BODY + 1024)
        .max_encoding_message_size(switchyard_protocol::frame::DEFAULT_MAX_FRAME);
    Routes::new(svc).prepare()
}

/// Serves one gRPC call.
pub(crate) async fn call(
    mut routes: Routes,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<tonic::body::Body>, Infallible> {
    routes.call(req).await
}

struct Grpc {
    api: Arc<LocalApi>,
}

impl Grpc {
    async fn run(&self, op: Op, req: Request<LocalEvent>) -> Result<Done, Status> {
        let result = self.checked(op, req).await;
        let status = match &result {
            Ok(Done::Reply { status, .. }) => *status,
            Ok(Done::Accepted { .. } | Done::Pushed { .. }) => 202,
            Err(r) => r.status,
        };
        self.api.count(op, status);
        result.map_err(|a| crate::answer::grpc::status(&a, None))
    }

    async fn checked(&self, op: Op, req: Request<LocalEvent>) -> Result<Done, Answer> {
        let timeout = req
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::net::grpc_timeout::parse_grpc_timeout)
            .map_or(parse::DEFAULT_TIMEOUT, |t| t.min(parse::MAX_TIMEOUT));
        let traceparent = req
            .metadata()
            .get(crate::traceparent::HEADER)
            .map(|v| v.as_bytes().to_vec());
        let tracestate =
            crate::traceparent::tracestate_in_meta(traceparent.as_deref(), req.metadata());
        let ev = req.into_inner();
        parse::event_type(&ev.event)?;
        let ce_id = parse::ce_id(Some(&ev.ce_id))?;
        let payload = if ev.payload.is_empty() {
            Bytes::from_static(b"{}")
        } else {
            crate::edge::check_syntax(&ev.payload)
                .map_err(|r| Answer::refusal(r.status, r.detail.replacen("body", "payload", 1)))?;
            Bytes::from(ev.payload)
        };
        self.api
            .call(Call {
                op,
                event: &ev.event,
                ce_id,
                traceparent: traceparent.as_deref(),
                tracestate,
                payload,
                timeout,
            })
            .await
    }
}

#[tonic::async_trait]
impl local_api_server::LocalApi for Grpc {
    async fn publish(&self, req: Request<LocalEvent>) -> Result<Response<PublishReply>, Status> {
        match self.run(Op::Publish, req).await? {
            Done::Accepted { ce_id } => Ok(Response::new(PublishReply { ce_id })),
            _ => Err(Status::internal("unexpected outcome of publish")),
        }
    }

    async fn request(&self, req: Request<LocalEvent>) -> Result<Response<RequestReply>, Status> {
        match self.run(Op::Request, req).await? {
            Done::Reply {
                ce_id,
                status,
                content_type,
                body,
            } => Ok(Response::new(RequestReply {
                status: i32::from(status),
                payload: body.to_vec(),
                content_type,
                ce_id,
            })),
            _ => Err(Status::internal("unexpected outcome of request")),
        }
    }

    async fn push(&self, req: Request<LocalEvent>) -> Result<Response<PushReply>, Status> {
        match self.run(Op::Push, req).await? {
            Done::Pushed { routers } => Ok(Response::new(PushReply {
                routers: u32::try_from(routers).unwrap_or(u32::MAX),
            })),
            _ => Err(Status::internal("unexpected outcome of push")),
        }
    }
}
