//! A received stream as an HTTP body: chunks as they arrive, window given back as they are read,
//! the sender's trailers as HTTP trailers, and a RESET when the body is dropped unfinished (the
//! client went away, or the app stopped reading).

use super::Peer;
use super::inbox::{End, Inbox, Item};
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use switchyard_protocol::stream::{Trailers, code};

/// The sender reset the stream: the body ends in an error, so its reader never takes a cut body
/// for a whole one.
#[derive(Debug, thiserror::Error)]
#[error("the stream was reset by its sender ({})", code::name(*.0))]
pub(crate) struct StreamReset(pub(crate) u32);

/// Builds extra trailer fields from the stream's trailers (the router's `Server-Timing`).
pub(crate) type TrailerHook = Box<dyn FnOnce(&Trailers, &mut HeaderMap) + Send + Sync>;

/// The body of one received stream.
pub(crate) struct StreamBody {
    id: u64,
    inbox: Arc<Inbox>,
    peer: Arc<dyn Peer>,
    /// Bytes that came inline in the head, read first.
    first: Option<Bytes>,
    done: bool,
    hook: Option<TrailerHook>,
}

impl StreamBody {
    /// Stream `id`'s body, read from `inbox`; window goes back (and a reset on drop) through `peer`.
    pub(crate) fn new(id: u64, inbox: Arc<Inbox>, peer: Arc<dyn Peer>, first: Bytes) -> StreamBody {
        StreamBody {
            id,
            inbox,
            peer,
            first: (!first.is_empty()).then_some(first),
            done: false,
            hook: None,
        }
    }

    /// Adds fields to the trailers, when the stream ends with TRAILERS.
    pub(crate) fn with_trailers(mut self, hook: TrailerHook) -> StreamBody {
        self.hook = Some(hook);
        self
    }

    /// Reads the whole body, refusing one longer than `limit` (the reset on drop stops the sender).
    pub(crate) async fn read_whole(
        mut self,
        limit: usize,
    ) -> Result<(Bytes, Option<Trailers>), Collect> {
        let mut out = bytes::BytesMut::new();
        if let Some(f) = self.first.take() {
            out.extend_from_slice(&f);
        }
        loop {
            if out.len() > limit {
                return Err(Collect::TooLarge);
            }
            match self.inbox.next().await {
                Item::Data(d, give) => {
                    if give > 0 {
                        self.peer.window(self.id, give);
                    }
                    out.extend_from_slice(&d);
                }
                Item::End(End::Done(t)) => {
                    self.done = true;
                    if out.len() > limit {
                        return Err(Collect::TooLarge);
                    }
                    return Ok((out.freeze(), t));
                }
                Item::End(End::Reset(c)) => {
                    self.done = true;
                    return Err(Collect::Reset(c));
                }
            }
        }
    }
}

/// Why a stream was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collect {
    /// Longer than the limit.
    TooLarge,
    /// Reset by its sender.
    Reset(u32),
}

/// HTTP trailers of a stream's trailer fields; fields that are not legal HTTP are left out.
pub(crate) fn header_map(t: &Trailers) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in &t.fields {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            h.append(n, v);
        }
    }
    h
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = StreamReset;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamReset>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        match this.inbox.poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Item::Data(d, give)) => {
                if give > 0 {
                    this.peer.window(this.id, give);
                }
                Poll::Ready(Some(Ok(Frame::data(d))))
            }
            Poll::Ready(Item::End(End::Done(None))) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Item::End(End::Done(Some(t)))) => {
                this.done = true;
                let mut h = header_map(&t);
                if let Some(hook) = this.hook.take() {
                    hook(&t, &mut h);
                }
                if h.is_empty() {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Ok(Frame::trailers(h))))
                }
            }
            Poll::Ready(Item::End(End::Reset(c))) => {
                this.done = true;
                Poll::Ready(Some(Err(StreamReset(c))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        if !self.done {
            self.peer.reset(self.id, code::CANCEL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Told(Mutex<Vec<(&'static str, u64, u32)>>);

    impl Peer for Told {
        fn window(&self, id: u64, increment: u32) {
            self.0.lock().expect("lock").push(("window", id, increment));
        }
        fn reset(&self, id: u64, code: u32) {
            self.0.lock().expect("lock").push(("reset", id, code));
        }
    }

    #[tokio::test]
    async fn chunks_trailers_and_window_reach_the_reader_in_order() {
        let told = Arc::new(Told::default());
        let inbox = Inbox::new(4);
        let body = StreamBody::new(7, inbox.clone(), told.clone(), Bytes::from_static(b"h"))
            .with_trailers(Box::new(|t, h| {
                h.insert("server-timing", HeaderValue::from(t.app_us));
            }));
        inbox.push(Bytes::from_static(b"ab")).expect("fits");
        inbox.push(Bytes::from_static(b"cd")).expect("fits");
        inbox.finish(End::Done(Some(Trailers {
            id: 7,
            queue_us: 0,
            app_us: 42,
            fields: vec![("x-sum".into(), "9".into())],
            returns_credit: false,
        })));
        let got = body.collect().await.expect("whole");
        let trailers = got.trailers().cloned().expect("trailers");
        assert_eq!(&got.to_bytes()[..], b"habcd");
        assert_eq!(
            trailers.get("x-sum").map(HeaderValue::as_bytes),
            Some(&b"9"[..])
        );
        assert_eq!(
            trailers.get("server-timing").map(HeaderValue::as_bytes),
            Some(&b"42"[..])
        );
        // The end had arrived before half the window was read: no window goes back for a stream
        // that is over (the inbox's tests cover the window coming back).
        assert!(told.0.lock().expect("lock").is_empty());
    }

    #[tokio::test]
    async fn a_body_dropped_unfinished_resets_its_stream_and_a_reset_is_an_error() {
        let told = Arc::new(Told::default());
        let inbox = Inbox::new(1024);
        drop(StreamBody::new(
            3,
            inbox.clone(),
            told.clone(),
            Bytes::new(),
        ));
        assert_eq!(
            *told.0.lock().expect("lock"),
            vec![("reset", 3, code::CANCEL)]
        );
        let inbox = Inbox::new(1024);
        let body = StreamBody::new(4, inbox.clone(), told.clone(), Bytes::new());
        inbox.finish(End::Reset(code::INTERNAL));
        assert!(body.read_whole(1024).await.is_err());
        // A stream that ended (even by reset) is not reset again.
        assert_eq!(told.0.lock().expect("lock").len(), 1);
    }

    #[tokio::test]
    async fn collect_refuses_a_body_over_the_limit() {
        let told = Arc::new(Told::default());
        let inbox = Inbox::new(1024);
        let body = StreamBody::new(5, inbox.clone(), told.clone(), Bytes::new());
        inbox.push(Bytes::from(vec![0; 100])).expect("fits");
        inbox.finish(End::Done(None));
        assert_eq!(body.read_whole(10).await.err(), Some(Collect::TooLarge));
    }
}
