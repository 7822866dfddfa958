//! A `Connect` stream: many messages on one HTTP/2 stream, answered as they complete.

use super::message::{Message, Outcome, handle};
use crate::answer::grpc::code_name;
use crate::listener::Edge;
use crate::middleware::{Denial, Grant};
use crate::routes::grpc::GrpcRoutes;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::gateway::v1::{ConnectReply, ConnectRequest};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

/// Requests of one `Connect` stream dispatched at once; past it the stream is not read (backpressure).
pub(super) const CONNECT_IN_FLIGHT: usize = 64;

/// Reads a `Connect` stream: each message is dispatched on its own task, at most
/// [`CONNECT_IN_FLIGHT`] at once; at the bound the stream is not read until
/// one finishes, so HTTP/2 flow control holds the client back (nothing is dropped). Replies go out as
/// they complete. The stream ends (OK) after the client half-closes, or a drain starts, and every
/// reply is out.
/// What a stream's messages need: the edge, the routes, and the drain that stops reading.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) edge: Arc<Edge>,
    pub(super) routes: Arc<GrpcRoutes>,
    pub(super) drain: CancellationToken,
}

pub(super) async fn read_stream(
    gw: Shared,
    mut inbound: Streaming<ConnectRequest>,
    tx: mpsc::Sender<Result<ConnectReply, Status>>,
    (traceparent, tracestate): (Option<Arc<[u8]>>, Arc<str>),
    stream_deadline: Option<Instant>,
    grant: Option<Grant>,
) {
    let slots = Arc::new(Semaphore::new(CONNECT_IN_FLIGHT));
    let past_deadline = async {
        match stream_deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(past_deadline);
    // The stream was admitted with a credential: it ends when that lapses (the token expires, or
    // a key reload no longer admits it).
    let lapsed = async {
        match &grant {
            Some(g) => g.lapsed().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lapsed);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = tx.closed() => return,
            _ = gw.drain.cancelled() => break,
            _ = &mut past_deadline => break,
            d = &mut lapsed => return end_unauthenticated(&gw, &tx, d).await,
        };
        let next = tokio::select! {
            m = inbound.message() => m,
            _ = tx.closed() => return,
            _ = gw.drain.cancelled() => break,
            _ = &mut past_deadline => break,
            d = &mut lapsed => return end_unauthenticated(&gw, &tx, d).await,
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                // The stream itself is broken (undecodable message, reset): end it with that status.
                let _ = tx.send(Err(status)).await;
                return;
            }
        };
        let start = Instant::now();
        let gw = gw.clone();
        let tx = tx.clone();
        let tp = traceparent.clone();
        let ts = tracestate.clone();
        tokio::spawn(async move {
            let work = handle(
                &gw.edge,
                &gw.routes,
                Message {
                    rpc: "Connect",
                    method: &msg.method,
                    payload: Bytes::from(msg.payload),
                    traceparent: tp.as_deref(),
                    tracestate: &ts,
                    start,
                    client_deadline: stream_deadline,
                    streams: false,
                },
            );
            // A client gone away cancels the work (the router sends CANCEL to the manager).
            let outcome = tokio::select! {
                o = work => o,
                _ = tx.closed() => return,
            };
            let _ = tx.send(Ok(connect_reply(msg.id, outcome))).await;
            drop(permit);
        });
    }
}

/// Ends the stream with UNAUTHENTICATED naming why (its replies still in flight are dropped, and
/// their requests cancelled as the stream goes).
async fn end_unauthenticated(
    gw: &Shared,
    tx: &mpsc::Sender<Result<ConnectReply, Status>>,
    d: Denial,
) {
    gw.edge.metrics.sessions.lapse("grpc", d.reason);
    let detail = if d.reason == "expired" {
        format!("{}; open a new stream with a fresh token", d.detail)
    } else {
        format!("no longer authorized: {}", d.detail)
    };
    tracing::debug!(
        reason = d.reason,
        "Connect stream ended: its credential lapsed"
    );
    tokio::select! {
        _ = tx.send(Err(Status::unauthenticated(detail))) => {}
        _ = tx.closed() => {}
    }
}

/// A message's reply on the stream: the app's answer, or the mesh's refusal in `error` (with the
/// HTTP status of the same case, so both read alike).
fn connect_reply(id: u64, outcome: Outcome) -> ConnectReply {
    match outcome.result {
        Ok(a) => ConnectReply {
            id,
            status: a.status.into(),
            payload: a.payload.to_vec(),
            content_type: a.content_type,
            error: String::new(),
        },
        Err(r) => ConnectReply {
            id,
            status: r.status.into(),
            payload: Vec::new(),
            content_type: String::new(),
            error: format!("{}: {}", code_name(r.code), r.detail),
        },
    }
}
