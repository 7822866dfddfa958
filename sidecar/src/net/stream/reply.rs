//! The body of an HTTP response a front door writes: whole (every answer made here, and the app's
//! small ones) or the app's stream as it arrives.

use super::body::{StreamBody, StreamReset};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A response body, whole or streamed.
pub enum ReplyBody {
    /// All of it, known now.
    Full(Full<Bytes>),
    /// The app's streamed answer.
    Stream(StreamBody),
}

impl From<Full<Bytes>> for ReplyBody {
    fn from(b: Full<Bytes>) -> ReplyBody {
        ReplyBody::Full(b)
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = StreamReset;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamReset>>> {
        match self.get_mut() {
            ReplyBody::Full(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| match never {}))),
            ReplyBody::Stream(s) => Pin::new(s).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReplyBody::Full(b) => b.is_end_stream(),
            ReplyBody::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReplyBody::Full(b) => b.size_hint(),
            ReplyBody::Stream(s) => s.size_hint(),
        }
    }
}
