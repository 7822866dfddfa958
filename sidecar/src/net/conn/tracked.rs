//! The request path's side of a connection's timers: a service wrapper that counts each request in
//! flight from its arrival until its answer's body is sent or dropped (so a streaming gRPC answer
//! or a slow download is never idle), and the handle a WebSocket session keeps its slot with.

use super::limits::Slot;
use super::timers::Activity;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::UPGRADE;
use hyper::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// One accepted connection: its activity, and its place under the caps (freed when the last
/// holder drops: the connection's task, its answers in flight, a WebSocket session it became).
#[derive(Debug)]
pub(crate) struct Conn {
    /// What its requests did.
    pub activity: Activity,
    _slot: Option<Slot>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl Conn {
    /// A connection accepted at `started`, holding `slot`.
    pub(crate) fn new(started: Instant, slot: Option<Slot>) -> Arc<Conn> {
        Arc::new(Conn {
            activity: Activity::new(started),
            _slot: slot,
        })
    }
}

/// In request extensions of upgrade requests: the connection, for a WebSocket session to keep
/// once hyper has handed the socket over (the session then holds the connection's slot).
#[derive(Clone, Debug)]
pub(crate) struct Held {
    _conn: Arc<Conn>,
}

/// Counts one request in flight until dropped.
struct InFlight(Arc<Conn>);

impl InFlight {
    fn new(conn: &Arc<Conn>) -> InFlight {
        conn.activity.begin();
        InFlight(conn.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.activity.end_at(Instant::now());
    }
}

/// `inner` with each request counted in `conn`'s activity.
pub(crate) fn track<S>(conn: Arc<Conn>, inner: S) -> Tracked<S> {
    Tracked { inner, conn }
}

/// See [`track`].
#[derive(Clone, Debug)]
pub(crate) struct Tracked<S> {
    inner: S,
    conn: Arc<Conn>,
}

impl<S, ReqBody, ResBody> hyper::service::Service<Request<ReqBody>> for Tracked<S>
where
    S: hyper::service::Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<TrackedBody<ResBody>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, mut req: Request<ReqBody>) -> Self::Future {
        let held = InFlight::new(&self.conn);
        if req.headers().contains_key(UPGRADE) {
            req.extensions_mut().insert(Held {
                _conn: self.conn.clone(),
            });
        }
        TrackedFuture {
            inner: self.inner.call(req),
            held: Some(held),
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a tracked request, still counted.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        held: Option<InFlight>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        let held = this.held.take();
        Poll::Ready(out.map(|resp| resp.map(|inner| TrackedBody { inner, held })))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body; the request stays in flight until it is sent or dropped.
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        held: Option<InFlight>,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            // Sent in full: idle from now, not from whenever hyper drops the body.
            this.held.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
