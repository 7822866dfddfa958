//! A `Connect` stream: many messages on one HTTP/2 stream, answered as they complete.

use super::message::{Message, Outcome, handle};
use crate::answer::grpc::code_name;
use crate::listener::Edge;
use crate::middleware::{Denial, Grant};
use crate::routes::grpc::GrpcRoutes;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use switchyard_protocol::gateway::v1::{ConnectReply, ConnectRequest};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
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

/// A `Connect` stream's replies, as the stream the response body is made of: each message is
/// dispatched as it arrives, at most [`CONNECT_IN_FLIGHT`] at once; at the bound the stream is not
/// read until one finishes, so HTTP/2 flow control holds the client back (nothing is dropped).
/// Replies go out as they complete. The stream ends (OK) after the client half-closes, or a drain
/// starts or its deadline passes, and every reply is out; it ends UNAUTHENTICATED when the
/// credential that admitted it lapses. A client that goes away drops it, and with it the calls in
/// flight (the router sends CANCEL to the manager).
///
/// The response body's own task reads the messages and polls the calls: a reader task beside it
/// and a channel between them cost a wake-up and a hand-over per message, and a task per call
/// copied the large dispatch future at its spawn and again at its end.
pub(super) fn replies(
    gw: Shared,
    inbound: Streaming<ConnectRequest>,
    (traceparent, tracestate): (Option<Arc<[u8]>>, Arc<str>),
    stream_deadline: Option<Instant>,
    grant: Option<Grant>,
) -> impl Stream<Item = Result<ConnectReply, Status>> + Send + use<> {
    let drained = Box::pin(gw.drain.clone().cancelled_owned());
    let past_deadline = stream_deadline.map(|d| Box::pin(tokio::time::sleep_until(d.into())));
    let lapsed: Option<Lapse> = grant.map(|g| Box::pin(async move { g.lapsed().await }) as Lapse);
    let edge = gw.edge.clone();
    let make = move |msg: ConnectRequest, start: Instant| {
        let (gw, tp, ts) = (gw.clone(), traceparent.clone(), tracestate.clone());
        async move {
            let outcome = handle(
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
            )
            .await;
            connect_reply(msg.id, outcome)
        }
    };
    Replies {
        edge,
        inbound,
        calls: FuturesUnordered::new(),
        make,
        reading: true,
        done: false,
        drained,
        past_deadline,
        lapsed,
    }
}

/// Resolves when the stream's credential lapses.
type Lapse = Pin<Box<dyn Future<Output = Denial> + Send>>;

/// The state of [`replies`].
struct Replies<M, F> {
    edge: Arc<Edge>,
    inbound: Streaming<ConnectRequest>,
    calls: FuturesUnordered<F>,
    make: M,
    /// Messages are still read: the client has not half-closed, no drain, deadline not past.
    reading: bool,
    /// The last item was given.
    done: bool,
    drained: Pin<Box<WaitForCancellationFutureOwned>>,
    past_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    lapsed: Option<Lapse>,
}

impl<M, F> Stream for Replies<M, F>
where
    M: FnMut(ConnectRequest, Instant) -> F + Unpin,
    F: Future<Output = ConnectReply>,
{
    type Item = Result<ConnectReply, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(lapsed) = this.lapsed.as_mut()
            && let Poll::Ready(d) = lapsed.as_mut().poll(cx)
        {
            this.done = true;
            return Poll::Ready(Some(Err(unauthenticated(&this.edge, d))));
        }
        if this.reading {
            let past = this
                .past_deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready());
            if past || this.drained.as_mut().poll(cx).is_ready() {
                this.reading = false;
            }
        }
        while this.reading && this.calls.len() < CONNECT_IN_FLIGHT {
            match Pin::new(&mut this.inbound).poll_next(cx) {
                Poll::Ready(Some(Ok(msg))) => {
                    let call = (this.make)(msg, Instant::now());
                    this.calls.push(call);
                }
                // The stream itself is broken (undecodable message, reset): end it with that status.
                Poll::Ready(Some(Err(status))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(status)));
                }
                Poll::Ready(None) => this.reading = false,
                Poll::Pending => break,
            }
        }
        match this.calls.poll_next_unpin(cx) {
            Poll::Ready(Some(reply)) => Poll::Ready(Some(Ok(reply))),
            Poll::Ready(None) if !this.reading => {
                this.done = true;
                Poll::Ready(None)
            }
            // Nothing ready: the calls, the client, the drain, the deadline and the credential were
            // all polled above, so whichever changes first wakes this stream.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

/// UNAUTHENTICATED naming why the stream's credential no longer admits it (its replies still in
/// flight are dropped, and their requests cancelled as the stream goes).
fn unauthenticated(edge: &Edge, d: Denial) -> Status {
    edge.metrics.sessions.lapse("grpc", d.reason);
    let detail = if d.reason == "expired" {
        format!("{}; open a new stream with a fresh token", d.detail)
    } else {
        format!("no longer authorized: {}", d.detail)
    };
    tracing::debug!(
        reason = d.reason,
        "Connect stream ended: its credential lapsed"
    );
    Status::unauthenticated(detail)
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
