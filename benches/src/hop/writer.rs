//! The frame writer both ends of the streamed frame hop use: frames are encoded into one
//! staging buffer, bodies above a small size are kept as their own `Bytes` (never copied), and a batch
//! goes out in vectored writes, as h2's writer does.

use super::wire::{self, Frame};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bodies shorter than this are copied next to their header: one slice beats two for small ones.
const COPY_BELOW: usize = 1024;
/// Most slices handed to one `writev`.
const MAX_SLICES: usize = 64;

/// Frames waiting to be written.
#[derive(Default)]
pub struct Out {
    staging: BytesMut,
    segments: VecDeque<Bytes>,
}

impl Out {
    /// Adds a frame to the batch.
    pub fn push(&mut self, frame: &Frame) -> std::io::Result<()> {
        if let Some(payload) = wire::encode(frame, &mut self.staging)? {
            if payload.len() < COPY_BELOW {
                self.staging.extend_from_slice(&payload);
            } else {
                self.segments.push_back(self.staging.split().freeze());
                self.segments.push_back(payload);
            }
        }
        Ok(())
    }

    /// Writes everything batched.
    pub async fn flush<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> std::io::Result<()> {
        if !self.staging.is_empty() {
            self.segments.push_back(self.staging.split().freeze());
        }
        while !self.segments.is_empty() {
            let n = {
                let slices: Vec<IoSlice<'_>> = self
                    .segments
                    .iter()
                    .take(MAX_SLICES)
                    .map(|b| IoSlice::new(b))
                    .collect();
                w.write_vectored(&slices).await?
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(n);
        }
        Ok(())
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.segments.front_mut() else {
                return;
            };
            if front.len() <= n {
                n -= front.len();
                self.segments.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
}

/// `tokio_util` decoder for the streamed frames.
#[derive(Clone, Copy, Debug)]
pub struct Decoder {
    /// Largest frame accepted.
    pub max: usize,
}

impl tokio_util::codec::Decoder for Decoder {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        wire::decode(src, self.max).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::codec::Decoder as _;

    #[tokio::test]
    async fn a_batch_of_small_and_large_frames_arrives_whole_and_in_order() {
        let mut out = Out::default();
        let big = Bytes::from(vec![7u8; 100_000]);
        let frames = vec![
            Frame::Window {
                id: 1,
                increment: 5,
            },
            Frame::Data {
                id: 1,
                end: false,
                data: big.clone(),
            },
            Frame::Data {
                id: 2,
                end: true,
                data: Bytes::from_static(b"small"),
            },
            Frame::Reset { id: 3, code: 0 },
        ];
        for f in &frames {
            out.push(f).expect("encodes");
        }
        let mut sink = Vec::new();
        out.flush(&mut sink).await.expect("writes");
        let mut buf = BytesMut::from(&sink[..]);
        let mut dec = Decoder { max: 1 << 20 };
        for f in frames {
            assert_eq!(dec.decode(&mut buf).expect("decodes"), Some(f));
        }
        assert!(buf.is_empty());
    }
}
