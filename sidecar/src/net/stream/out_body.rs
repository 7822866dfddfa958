//! The body of an HTTP message a sidecar writes: whole (every answer made here, small events) or a
//! stream as it arrives (the app's streamed answer to the client, the client's upload to the app).

use super::body::{StreamBody, StreamReset};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A body, whole or streamed.
pub(crate) enum OutBody {
    /// All of it, known now.
    Full(Full<Bytes>),
    /// A stream received from the other sidecar.
    Stream(StreamBody),
}

impl From<Full<Bytes>> for OutBody {
    fn from(b: Full<Bytes>) -> OutBody {
        OutBody::Full(b)
    }
}

impl Body for OutBody {
    type Data = Bytes;
    type Error = StreamReset;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamReset>>> {
        match self.get_mut() {
            OutBody::Full(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| match never {}))),
            OutBody::Stream(s) => Pin::new(s).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OutBody::Full(b) => b.is_end_stream(),
            OutBody::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OutBody::Full(b) => b.size_hint(),
            OutBody::Stream(s) => s.size_hint(),
        }
    }
}
