//! The same handlers behind the `switchyard.v1.Handler` gRPC service, for Managers with `app.protocol: grpc`.

use crate::handler::Handlers;
use crate::listener::Listener;
use crate::trace::Trace;
use bytes::Bytes;
use std::future::Future;
use switchyard_protocol::gateway::v1::handler_server::{Handler, HandlerServer};
use switchyard_protocol::gateway::v1::{CloudEvent, HandleReply};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};

struct Service {
    handlers: Handlers,
}

#[tonic::async_trait]
impl Handler for Service {
    async fn handle(&self, req: Request<CloudEvent>) -> Result<Response<HandleReply>, Status> {
        let ev = req.into_inner();
        if ev.r#type.is_empty() {
            return Err(Status::invalid_argument("the CloudEvent has no type"));
        }
        let content_type = Some(ev.data_content_type.as_str()).filter(|c| !c.is_empty());
        let trace = Trace::from_lookup(|name| ev.extensions.get(name).map(String::as_str));
        let answer = self
            .handlers
            .answer(&ev.r#type, content_type, &trace, Bytes::from(ev.data))
            .await;
        Ok(Response::new(HandleReply {
            status: i32::from(answer.status.as_u16()),
            data: answer.body.to_vec(),
            content_type: answer.content_type.unwrap_or_default(),
        }))
    }
}

/// Serves the Handler service on `listener` until `shutdown` completes; open calls finish first.
pub async fn serve(
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    serve_with(listener, shutdown, None).await
}

/// As [`serve`], each event in a span exported by `tracing`.
pub async fn serve_with(
    listener: impl Into<Listener>,
    shutdown: impl Future<Output = ()>,
    tracing: Option<crate::otel::Tracing>,
) -> Result<(), tonic::transport::Error> {
    let handlers = Handlers::new(std::env::var(crate::relay::LOCAL_API_ENV).ok().as_deref())
        .with_tracing(tracing);
    let svc =
        HandlerServer::new(Service { handlers }).max_decoding_message_size(crate::MAX_BODY_BYTES);
    let server = tonic::transport::Server::builder().add_service(svc);
    match listener.into() {
        Listener::Tcp(l) => {
            // Answers are small and latency is what is measured: no Nagle.
            let incoming = TcpListenerStream::new(l).map(|s| {
                s.inspect(|s| {
                    let _ = s.set_nodelay(true);
                })
            });
            server
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        Listener::Unix(l, _file) => {
            server
                .serve_with_incoming_shutdown(UnixListenerStream::new(l), shutdown)
                .await
        }
    }
}
