//! A `Connect` stream: many messages on one HTTP/2 stream, answered as they complete.

use super::message::{Message, Outcome, handle};
use crate::answer::grpc::code_name;
use crate::listener::Edge;
use crate::middleware::{Denial, Grant};
use crate::routes::grpc::GrpcRoutes;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::gateway::v1::{ConnectReply, ConnectRequest};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

/// Requests of one `Connect` stream dispatched at once; past it the stream is not read (backpressure).
pub(super) const CONNECT_IN_FLIGHT: usize = 64;

/// What a stream's messages need: the edge, the routes, and the drain that stops reading.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) edge: Arc<Edge>,
    pub(super) routes: Arc<GrpcRoutes>,
    pub(super) drain: CancellationToken,
}

/// Reads a `Connect` stream: each message is dispatched as it arrives, at most
/// [`CONNECT_IN_FLIGHT`] at once; at the bound the stream is not read until one finishes, so
/// HTTP/2 flow control holds the client back (nothing is dropped). Replies go out as they
/// complete. The stream ends (OK) after the client half-closes, or a drain starts, and every
/// reply is out; a client that goes away (the reply stream closed) cancels what is in flight.
///
/// The messages in flight are polled in this task (a `FuturesUnordered` beside the reader), not
/// spawned: a task each copied the large dispatch future at its spawn and again at its end
/// (`memmove` was 5 % of the router's samples on Connect streams, tokio's spawn 3 % more).
pub(super) async fn read_stream(
    gw: Shared,
    mut inbound: Streaming<ConnectRequest>,
    tx: mpsc::Sender<Result<ConnectReply, Status>>,
    (traceparent, tracestate): (Option<Arc<[u8]>>, Arc<str>),
    stream_deadline: Option<Instant>,
    grant: Option<Grant>,
) {
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
    // Made once for the stream, not once per message: each registers with its token or channel.
    let closed = tx.closed();
    tokio::pin!(closed);
    let drained = gw.drain.cancelled();
    tokio::pin!(drained);
    let mut calls = FuturesUnordered::new();
    loop {
        let next = tokio::select! {
            biased;
            _ = &mut closed => return,
            _ = &mut drained => break,
            _ = &mut past_deadline => break,
            d = &mut lapsed => return end_unauthenticated(&gw, &tx, d).await,
            Some(()) = calls.next(), if !calls.is_empty() => continue,
            m = inbound.message(), if calls.len() < CONNECT_IN_FLIGHT => m,
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
        let (gw, tx, tp, ts) = (&gw, &tx, traceparent.as_deref(), &*tracestate);
        calls.push(async move {
            let outcome = handle(
                &gw.edge,
                &gw.routes,
                Message {
                    rpc: "Connect",
                    method: &msg.method,
                    payload: Bytes::from(msg.payload),
                    traceparent: tp,
                    tracestate: ts,
                    start,
                    client_deadline: stream_deadline,
                    streams: false,
                },
            )
            .await;
            let _ = tx.send(Ok(connect_reply(msg.id, outcome))).await;
        });
    }
    // No more messages are read; the ones in flight still answer, unless the client goes away
    // (dropping them cancels their work: the router sends CANCEL to the manager).
    loop {
        tokio::select! {
            biased;
            _ = &mut closed => return,
            d = &mut lapsed => return end_unauthenticated(&gw, &tx, d).await,
            n = calls.next() => if n.is_none() { return },
        }
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
