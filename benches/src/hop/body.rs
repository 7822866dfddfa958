//! Bodies for the hop's tests: `n` bytes handed over in `chunk`-sized pieces, each a slice of one shared
//! buffer (an app's writes or a client's reads, without the cost or the memory of making them), and the
//! `http_body::Body` that yields them and an optional trailer block (what the router side streams).

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::HeaderMap;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

/// Largest body the prototype makes.
pub const MAX_BODY: usize = 1 << 30;
/// Largest chunk.
pub const MAX_CHUNK: usize = 1 << 20;

fn source() -> &'static Bytes {
    static SOURCE: OnceLock<Bytes> = OnceLock::new();
    SOURCE.get_or_init(|| Bytes::from(vec![b'x'; MAX_CHUNK]))
}

/// `n` bytes (at most [`MAX_BODY`]) in pieces of `chunk` bytes (at most [`MAX_CHUNK`]).
pub fn chunks(n: usize, chunk: usize) -> VecDeque<Bytes> {
    let src = source();
    let n = n.min(MAX_BODY);
    let chunk = chunk.clamp(1, MAX_CHUNK);
    (0..n)
        .step_by(chunk)
        .map(|at| src.slice(..chunk.min(n - at)))
        .collect()
}

/// An HTTP body of known chunks, then trailers if any.
pub struct Chunks {
    chunks: VecDeque<Bytes>,
    left: u64,
    trailers: Option<HeaderMap>,
}

impl Chunks {
    /// A body of these chunks, ending with `trailers`.
    pub fn new(chunks: VecDeque<Bytes>, trailers: Option<HeaderMap>) -> Chunks {
        let left = chunks.iter().map(|c| c.len() as u64).sum();
        Chunks {
            chunks,
            left,
            trailers,
        }
    }

    /// One inline buffer.
    pub fn full(b: Bytes) -> Chunks {
        let chunks = if b.is_empty() {
            VecDeque::new()
        } else {
            VecDeque::from([b])
        };
        Chunks::new(chunks, None)
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(c) = self.chunks.pop_front() {
            self.left -= c.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(c))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_exactly_n_bytes() {
        let c = chunks(100_000, 65_536);
        assert_eq!(c.len(), 2);
        assert_eq!(c.iter().map(Bytes::len).sum::<usize>(), 100_000);
        assert!(chunks(0, 10).is_empty());
    }
}
