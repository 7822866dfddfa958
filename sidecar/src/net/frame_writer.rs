//! The write side of a frame connection: frames are gathered into one buffer and written out
//! together, a stream's DATA by reference. tokio-util's `FramedWrite` copied every DATA chunk into
//! its buffer and wrote once 8 KiB were queued, so each 16 KiB chunk cost a copy and a write (and a
//! TLS flush) of its own; over TLS, rustls copies the bytes into its records anyway, so that first
//! copy bought nothing. Here DATA bytes stay the `Bytes` they arrived as until one vectored write
//! takes them with the heads around them.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use switchyard_protocol::frame::{self, Frame};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes gathered before they are written out without waiting for the caller's flush.
const GATHER: usize = 64 * 1024;
/// DATA shorter than this is copied next to its head: a slice of its own costs more than the copy.
const BY_REFERENCE: usize = 4 * 1024;
/// Slices handed to one vectored write (Linux takes up to 1024; rustls seals each in records).
const SLICES: usize = 64;

/// Writes frames to `W`, gathering them until [`flush`](FrameWriter::flush) or [`GATHER`] bytes.
pub(crate) struct FrameWriter<W> {
    io: W,
    max_frame: usize,
    /// Written out in order: sealed chunks (heads gathered so far, DATA bytes), then `open`.
    sealed: VecDeque<Bytes>,
    /// Heads and small frames not yet sealed into a chunk.
    open: BytesMut,
    queued: usize,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// A writer of frames of at most the protocol's default size.
    pub(crate) fn new(io: W) -> FrameWriter<W> {
        FrameWriter {
            io,
            max_frame: frame::DEFAULT_MAX_FRAME,
            sealed: VecDeque::new(),
            open: BytesMut::with_capacity(8 * 1024),
            queued: 0,
        }
    }

    /// Queues `frame`, writing out what is gathered once it reaches [`GATHER`]. A frame over the
    /// limit is refused here, so the peer never gets one it must refuse.
    pub(crate) async fn feed(&mut self, frame: Frame) -> io::Result<()> {
        frame::check(&frame, self.max_frame).map_err(io::Error::other)?;
        let before = self.open.len();
        match frame::encode_head(frame, &mut self.open).map_err(io::Error::other)? {
            None => {}
            Some(data) if data.len() < BY_REFERENCE => self.open.extend_from_slice(&data),
            Some(data) => {
                self.sealed.push_back(self.open.split().freeze());
                self.queued += data.len();
                self.sealed.push_back(data);
            }
        }
        self.queued += self.open.len().saturating_sub(before);
        if self.queued >= GATHER {
            self.write_out().await?;
        }
        Ok(())
    }

    /// Writes out everything queued and flushes the connection.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        self.write_out().await?;
        self.io.flush().await
    }

    /// Flushes, then shuts the write side down.
    pub(crate) async fn close(&mut self) -> io::Result<()> {
        self.flush().await?;
        self.io.shutdown().await
    }

    async fn write_out(&mut self) -> io::Result<()> {
        if !self.open.is_empty() {
            self.sealed.push_back(self.open.split().freeze());
        }
        while !self.sealed.is_empty() {
            let n = {
                let slices: Vec<IoSlice<'_>> = self
                    .sealed
                    .iter()
                    .take(SLICES)
                    .map(|b| IoSlice::new(b))
                    .collect();
                self.io.write_vectored(&slices).await?
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        self.queued = 0;
        Ok(())
    }

    /// Drops the first `n` bytes written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.sealed.front_mut() else {
                return;
            };
            if front.len() > n {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.sealed.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use switchyard_protocol::frame::FrameCodec;
    use switchyard_protocol::stream::Data;
    use tokio_util::codec::Decoder;

    /// Takes at most `per_write` bytes per write (vectored or not), recording them and the writes.
    struct Trickle {
        got: Vec<u8>,
        writes: usize,
        per_write: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.per_write);
            self.got.extend_from_slice(&buf[..n]);
            self.writes += 1;
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut left = self.per_write;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(left);
                self.got.extend_from_slice(&b[..k]);
                left -= k;
                n += k;
                if left == 0 {
                    break;
                }
            }
            self.writes += 1;
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn frames() -> Vec<Frame> {
        let mut out = vec![Frame::Credit { credits: 3 }];
        for (i, len) in [10usize, 16 * 1024, 5000, 1, 16 * 1024]
            .into_iter()
            .enumerate()
        {
            out.push(Frame::Data(Data {
                id: 7,
                end: i == 4,
                returns_credit: false,
                data: Bytes::from(vec![u8::try_from(i).unwrap_or(0); len]),
            }));
            out.push(Frame::Window {
                id: 7,
                increment: 99,
            });
        }
        out
    }

    async fn written(per_write: usize) -> (Vec<Frame>, usize) {
        let mut w = FrameWriter::new(Trickle {
            got: Vec::new(),
            writes: 0,
            per_write,
        });
        for f in frames() {
            w.feed(f).await.expect("fed");
        }
        w.flush().await.expect("flushed");
        let mut got = BytesMut::from(&w.io.got[..]);
        let mut codec = FrameCodec::default();
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut got).expect("decodes") {
            out.push(f);
        }
        assert!(got.is_empty(), "nothing left over");
        (out, w.io.writes)
    }

    #[tokio::test]
    async fn frames_arrive_whole_and_in_order_however_the_writes_are_cut() {
        for per_write in [usize::MAX, 16 * 1024 + 3, 1000, 1] {
            let (got, _) = written(per_write).await;
            assert_eq!(got, frames(), "per write {per_write}");
        }
    }

    #[tokio::test]
    async fn a_batch_of_data_goes_out_in_one_write() {
        // 38 KiB of frames, below the gather size: the flush writes them at once.
        let (_, writes) = written(usize::MAX).await;
        assert_eq!(writes, 1);
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_and_nothing_is_queued() {
        let mut w = FrameWriter::new(Trickle {
            got: Vec::new(),
            writes: 0,
            per_write: usize::MAX,
        });
        w.max_frame = 100;
        let big = Frame::Data(Data {
            id: 1,
            end: false,
            returns_credit: false,
            data: Bytes::from(vec![0; 200]),
        });
        assert!(w.feed(big).await.is_err());
        w.flush().await.expect("flushed");
        assert!(w.io.got.is_empty());
    }
}
