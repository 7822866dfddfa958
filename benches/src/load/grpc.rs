//! gRPC unary load: each worker owns one channel (one HTTP/2 connection) and calls
//! `switchyard.v1.Gateway/Call` in a closed loop.

use super::{RETRY_PAUSE, Tally, Window};
use switchyard_protocol::gateway::v1::CallRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

async fn connect(addr: &str) -> Option<GatewayClient<Channel>> {
    let ep = Endpoint::from_shared(addr.to_owned())
        .ok()?
        .tcp_nodelay(true);
    ep.connect().await.ok().map(GatewayClient::new)
}

/// A closed-loop unary gRPC worker calling route `method` with an empty JSON object.
pub async fn worker(addr: String, method: String, w: Window) -> Tally {
    let mut tally = Tally::new();
    let mut client = None;
    while Instant::now() < w.end {
        let Some(c) = client.as_mut() else {
            client = connect(&addr).await;
            if client.is_none() {
                tally.count(&w, Instant::now(), false);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            continue;
        };
        let req = CallRequest {
            method: method.clone(),
            payload: b"{}".to_vec(),
            metadata: Default::default(),
        };
        let sent = Instant::now();
        let ok = match c.call(req).await {
            Ok(r) => (200..300).contains(&r.get_ref().status),
            Err(_) => false,
        };
        tally.count(&w, sent, ok);
    }
    tally
}
