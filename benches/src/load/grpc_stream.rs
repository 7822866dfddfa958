//! gRPC streaming load: each worker opens one `switchyard.v1.Gateway/Connect` stream on its own channel
//! and keeps one request in flight on it (send, wait for the reply with that id, repeat).

use super::{RETRY_PAUSE, Tally, Window};
use switchyard_protocol::gateway::v1::ConnectRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

/// One open stream: where requests go and where replies come from.
struct Stream {
    tx: mpsc::Sender<ConnectRequest>,
    replies: tonic::Streaming<switchyard_protocol::gateway::v1::ConnectReply>,
}

async fn open(addr: &str) -> Option<Stream> {
    let ep = Endpoint::from_shared(addr.to_owned())
        .ok()?
        .tcp_nodelay(true);
    let mut client = GatewayClient::new(ep.connect().await.ok()?);
    // One request in flight per stream, so a queue of one is enough.
    let (tx, rx) = mpsc::channel(1);
    let replies = client
        .connect(ReceiverStream::new(rx))
        .await
        .ok()?
        .into_inner();
    Some(Stream { tx, replies })
}

/// A closed-loop worker on one `Connect` stream, calling route `method` with an empty JSON object.
pub async fn worker(addr: String, method: String, w: Window) -> Tally {
    let mut tally = Tally::new();
    let mut stream: Option<Stream> = None;
    let mut id = 0u64;
    while Instant::now() < w.end {
        let Some(s) = stream.as_mut() else {
            stream = open(&addr).await;
            if stream.is_none() {
                tally.count(&w, Instant::now(), false);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            continue;
        };
        id += 1;
        let sent = Instant::now();
        let req = ConnectRequest {
            id,
            method: method.clone(),
            payload: b"{}".to_vec(),
        };
        let ok = if s.tx.send(req).await.is_err() {
            false
        } else {
            match s.replies.message().await {
                Ok(Some(r)) => r.id == id && (200..300).contains(&r.status) && r.error.is_empty(),
                _ => false,
            }
        };
        tally.count(&w, sent, ok);
        if !ok {
            stream = None;
        }
    }
    tally
}
