//! Raw tonic serving `switchyard.v1.Gateway` with a fixed `{"ok":true}` reply: `Call` answers at once,
//! `Connect` answers each message with its id, `CallStream` with one message. The same client drives
//! this and the router's listener.

use futures::StreamExt;
use switchyard_protocol::gateway::v1::gateway_server::{Gateway, GatewayServer};
use switchyard_protocol::gateway::v1::{
    CallChunk, CallReply, CallRequest, ConnectReply, ConnectRequest,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

const OK: &[u8] = br#"{"ok":true}"#;
/// Replies waiting to be written per stream; a full queue holds the reader back (nothing dropped).
const STREAM_QUEUE: usize = 256;

struct Fixed;

#[tonic::async_trait]
impl Gateway for Fixed {
    async fn call(&self, _req: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        Ok(Response::new(CallReply {
            status: 200,
            payload: OK.to_vec(),
            content_type: "application/json".to_owned(),
        }))
    }

    type CallStreamStream = ReceiverStream<Result<CallChunk, Status>>;

    async fn call_stream(
        &self,
        _req: Request<CallRequest>,
    ) -> Result<Response<Self::CallStreamStream>, Status> {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(Ok(CallChunk {
            status: 200,
            content_type: "application/json".to_owned(),
            data: OK.to_vec(),
        }));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type ConnectStream = ReceiverStream<Result<ConnectReply, Status>>;

    async fn connect(
        &self,
        req: Request<Streaming<ConnectRequest>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        tokio::spawn(async move {
            while let Some(Ok(m)) = inbound.next().await {
                let reply = ConnectReply {
                    id: m.id,
                    status: 200,
                    payload: OK.to_vec(),
                    content_type: "application/json".to_owned(),
                    error: String::new(),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(GatewayServer::new(Fixed))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await?;
    Ok(())
}
