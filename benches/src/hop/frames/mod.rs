//! The streamed frame hop, router side ([`client`]) and manager side ([`server`]), sharing
//! the product's codec for heads and the connection-level frames, and [`Event`] for a body's arrival.

pub mod client;
pub mod server;

use super::writer::{Decoder, Out};
use super::{DEAD_AFTER, PING_EVERY};
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use switchyard_protocol::frame::Frame as Base;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Frames waiting for a connection's writer; credits and windows bound what is among them.
pub const WRITE_QUEUE: usize = 1024;
/// Frames written before a flush, so one batch cannot starve heartbeats.
const WRITE_BATCH: usize = 64;
/// Room for a head's fields next to its inline payload, on top of the largest DATA frame.
const HEAD_ROOM: u32 = 2048;

/// What arrives of a body.
#[derive(Debug)]
pub enum Event {
    /// A chunk; `last` ends the body.
    Data { data: Bytes, last: bool },
    /// The body ended with trailer fields.
    Trailers(Vec<(String, String)>),
    /// The peer reset the stream.
    Reset(u32),
}

/// The decoder for a connection whose DATA frames are at most `max_frame` bytes.
pub fn decoder(max_frame: u32) -> Decoder {
    Decoder {
        max: (max_frame + HEAD_ROOM) as usize,
    }
}

/// When a connection last read a frame, for the heartbeat's liveness check.
pub struct LastRead {
    origin: Instant,
    ms: AtomicU64,
}

impl Default for LastRead {
    fn default() -> Self {
        LastRead {
            origin: Instant::now(),
            ms: AtomicU64::new(0),
        }
    }
}

impl LastRead {
    /// A frame arrived.
    pub fn touch(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        // One store per frame; a relaxed ordering is enough for a liveness check.
        if self.ms.load(Ordering::Relaxed) != ms {
            self.ms.store(ms, Ordering::Relaxed);
        }
    }

    fn silent_for(&self) -> std::time::Duration {
        let last = self.origin + std::time::Duration::from_millis(self.ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

/// Writes queued frames in batches with vectored writes, pings every [`PING_EVERY`], and declares the
/// connection dead when nothing was read for [`DEAD_AFTER`].
pub async fn write_loop(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::Receiver<super::wire::Frame>,
    dead: CancellationToken,
    last_read: std::sync::Arc<LastRead>,
) {
    use super::wire::Frame;
    let mut out = Out::default();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut nonce = 0u64;
    loop {
        let first = tokio::select! {
            biased;
            _ = dead.cancelled() => break,
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            _ = ping.tick() => {
                if last_read.silent_for() > DEAD_AFTER {
                    tracing::warn!("no frame for {}s; connection considered dead", DEAD_AFTER.as_secs());
                    break;
                }
                nonce = nonce.wrapping_add(1);
                Frame::Base { frame: Base::Ping { nonce }, more: false }
            }
        };
        let mut ok = out.push(&first).is_ok();
        let mut n = 1;
        while ok && n < WRITE_BATCH {
            let Ok(f) = rx.try_recv() else { break };
            ok = out.push(&f).is_ok();
            n += 1;
        }
        if !ok || out.flush(&mut w).await.is_err() {
            break;
        }
    }
    dead.cancel();
}
