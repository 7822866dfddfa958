//! Inter-sidecar frames on loopback between two processes, with the sidecars' own wire format and codec
//! (`switchyard_protocol::frame`): fire-and-forget REQUESTs (`FLAG_NO_REPLY`) as fast as the socket takes
//! them, and REQUEST/RESPONSE round trips. The receiver is `switchyard-bare --mode frames`.
//!
//! Loss count: after the last fire-and-forget frame the sender sends a PING; the receiver answers with a
//! PONG whose nonce is the number of REQUESTs it decoded on that connection. TCP keeps order, so the PONG
//! comes after every frame sent before the PING: sent minus that count is what was lost.

use super::{Tally, Window};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use switchyard_protocol::frame::{FLAG_NO_REPLY, Frame, FrameCodec, Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::codec::Framed;

/// Frames written before a flush, as the router's connection writer does.
const WRITE_BATCH: usize = 64;

/// What a fire-and-forget run saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fired {
    /// Frames written.
    pub sent: u64,
    /// Frames the receiver counted.
    pub received: u64,
    /// From the first frame to the receiver's count.
    pub secs: f64,
}

impl Fired {
    /// Frames lost between the two processes.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Frames delivered per second.
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.received as f64 / self.secs
        } else {
            0.0
        }
    }
}

fn request(id: u64, flags: u8, payload: &Bytes) -> Frame {
    Frame::Request(Request {
        headers: Vec::new(),
        id,
        flags,
        deadline_ms: 0,
        event: "bench".to_owned(),
        ce_id: String::new(),
        traceparent: String::new(),
        tracestate: String::new(),
        content_type: "application/json".to_owned(),
        payload: payload.clone(),
    })
}

async fn connect(addr: &str) -> anyhow::Result<Framed<TcpStream, FrameCodec>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(Framed::new(stream, FrameCodec::default()))
}

/// Sends fire-and-forget frames of `payload_bytes` until the window ends, then asks the receiver's count.
pub async fn fire(addr: &str, w: Window, payload_bytes: usize) -> anyhow::Result<Fired> {
    let mut conn = connect(addr).await?;
    let payload = Bytes::from(vec![b'x'; payload_bytes]);
    tokio::time::sleep_until(w.start).await;
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < w.end {
        for _ in 0..WRITE_BATCH {
            sent += 1;
            conn.feed(request(sent, FLAG_NO_REPLY, &payload)).await?;
        }
        conn.flush().await?;
    }
    conn.send(Frame::Ping { nonce: sent }).await?;
    let received = loop {
        match conn.next().await {
            Some(Ok(Frame::Pong { nonce })) => break nonce,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("the receiver closed before it counted"),
        }
    };
    Ok(Fired {
        sent,
        received,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// A round-trip worker: one REQUEST at a time, waiting for its RESPONSE.
pub async fn rtt_worker(addr: String, w: Window, payload_bytes: usize) -> Tally {
    let mut tally = Tally::new();
    let payload = Bytes::from(vec![b'x'; payload_bytes]);
    let Ok(mut conn) = connect(&addr).await else {
        tally.count(&w, Instant::now(), false);
        return tally;
    };
    let mut id = 0u64;
    while Instant::now() < w.end {
        id += 1;
        let sent = Instant::now();
        if conn.send(request(id, 0, &payload)).await.is_err() {
            tally.count(&w, sent, false);
            return tally;
        }
        let ok = matches!(conn.next().await, Some(Ok(Frame::Response(r))) if r.id == id);
        tally.count(&w, sent, ok);
        if !ok {
            return tally;
        }
    }
    tally
}

/// The receiving process: counts fire-and-forget REQUESTs, answers other REQUESTs with an empty 200
/// RESPONSE and PINGs with the count so far (see the module doc).
pub async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let mut conn = Framed::new(stream, FrameCodec::default());
            let mut received = 0u64;
            while let Some(Ok(frame)) = conn.next().await {
                let reply = match frame {
                    Frame::Request(r) if r.flags & FLAG_NO_REPLY != 0 => {
                        received += 1;
                        continue;
                    }
                    Frame::Request(r) => Frame::Response(Response {
                        headers: Vec::new(),
                        id: r.id,
                        status: 200,
                        queue_us: 0,
                        app_us: 0,
                        content_type: String::new(),
                        payload: Bytes::new(),
                        // The sender keeps no credit count: it never says HELLO.
                        returns_credit: false,
                        from_mesh: false,
                        more: false,
                    }),
                    Frame::Ping { .. } => Frame::Pong { nonce: received },
                    _ => continue,
                };
                if conn.send(reply).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn loss_and_rate_come_from_the_counts() {
        let f = Fired {
            sent: 1000,
            received: 990,
            secs: 2.0,
        };
        assert_eq!(f.lost(), 10);
        assert!((f.rate() - 495.0).abs() < 1e-9);
        let none = Fired {
            sent: 0,
            received: 0,
            secs: 0.0,
        };
        assert_eq!(none.rate(), 0.0);
    }

    #[tokio::test]
    async fn a_real_receiver_counts_every_frame_and_answers_requests() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(serve(listener));
        let w = Window::new(Duration::ZERO, Duration::from_millis(50));
        let f = fire(&addr, w, 16).await.expect("fires");
        assert!(f.sent > 0);
        assert_eq!(f.lost(), 0, "{f:?}");
        let w = Window::new(Duration::ZERO, Duration::from_millis(50));
        let t = rtt_worker(addr, w, 16).await;
        assert!(!t.hist.is_empty());
        assert_eq!(t.errors, 0);
    }
}
