//! Inbound frame connections from router sidecars: grant credit, hand requests to the workers,
//! send answers back, re-grant credit as work completes, and drain with GOAWAY.

use super::routers::Routers;
use super::worker::Worker;
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_protocol::frame::{FLAG_NO_REPLY, Frame, FrameCodec};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A router that sent no frame for this long (it pings every 5 s) is gone.
const DEAD_AFTER: Duration = Duration::from_secs(15);
/// Most router connections at once.
const MAX_CONNECTIONS: usize = 4096;
/// Frames written before a flush.
const WRITE_BATCH: usize = 64;

type Active = Arc<Mutex<HashMap<u64, CancellationToken>>>;

fn lock(active: &Active) -> std::sync::MutexGuard<'_, HashMap<u64, CancellationToken>> {
    active.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accepts router connections until `drain` fires; each connection then drains on its own.
pub async fn serve(
    listener: TcpListener,
    worker: Arc<Worker>,
    routers: Arc<Routers>,
    drain: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = drain.cancelled() => break,
        };
        if tracker.len() >= MAX_CONNECTIONS {
            tracing::warn!(%peer, "too many router connections; refused");
            continue;
        }
        let _ = stream.set_nodelay(true);
        tracker.spawn(connection(
            stream,
            peer,
            worker.clone(),
            routers.clone(),
            drain.clone(),
        ));
    }
    tracing::info!("frame listener closed");
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    worker: Arc<Worker>,
    routers: Arc<Routers>,
    drain: CancellationToken,
) {
    let credits = worker.credits();
    // Owned halves, not `Framed::split`: reader and writer never contend on a shared lock.
    let (read, write) = stream.into_split();
    let mut frames = FramedRead::new(read, FrameCodec::default());
    let sink = FramedWrite::new(write, FrameCodec::default());
    // Credits bound the requests on this connection, so answers plus credit frames fit without waiting.
    let (tx, rx) = mpsc::channel::<Frame>(
        (credits as usize)
            .saturating_mul(2)
            .saturating_add(64)
            .min(1 << 20),
    );
    let writer = tokio::spawn(write_loop(sink, rx));
    let _ = tx.send(Frame::Credit { credits }).await;
    // Registered for pushes once its HELLO says it is a router (a manager's outbound path is not).
    let mut registered = None;
    // Set by the router's HELLO: answers then carry their credit, and no CREDIT frame follows them.
    // The HELLO precedes the router's requests on the connection, so every answer sees it.
    let mut implicit_credit = false;
    tracing::info!(%peer, credits, "router connected");
    let active: Active = Arc::default();
    let deliveries = TaskTracker::new();
    let mut goaway_sent = false;
    loop {
        let next = tokio::select! {
            _ = drain.cancelled(), if !goaway_sent => {
                goaway_sent = true;
                let _ = tx.send(Frame::GoAway { reason: "manager draining".into() }).await;
                continue;
            }
            r = tokio::time::timeout(DEAD_AFTER, frames.next()) => r,
        };
        let frame = match next {
            Err(_) => {
                tracing::warn!(%peer, "no frame from router for {}s; closing", DEAD_AFTER.as_secs());
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                tracing::warn!(%peer, error = %e, "frame connection failed");
                break;
            }
            Ok(Some(Ok(f))) => f,
        };
        match frame {
            Frame::Request(req) => {
                let id = req.id;
                let no_reply = req.flags & FLAG_NO_REPLY != 0;
                let cancel = CancellationToken::new();
                // A published event was accepted when written: it is delivered even if its sender's
                // connection ends, so it is not among the cancellable requests.
                if !no_reply && lock(&active).insert(id, cancel.clone()).is_some() {
                    tracing::warn!(%peer, id, "request id reused while in flight; closing the connection");
                    break;
                }
                // Taken here, in arrival order, before the delivery tasks race each other.
                let place = worker.place(&req);
                let (worker, tx, active) = (worker.clone(), tx.clone(), active.clone());
                // Only a published event needs these after the delivery: nobody reads its answer.
                let published = no_reply.then(|| (req.event.clone(), req.ce_id.clone()));
                deliveries.spawn(async move {
                    let mut resp = worker.handle_placed(req, place, cancel).await;
                    if let Some((event, ce_id)) = published {
                        if let Some(r) = resp.filter(|r| r.status >= 500) {
                            // Shed, or failed for good (dead-lettered when configured): never silent.
                            tracing::warn!(%event, %ce_id, status = r.status, "published event not handled");
                        }
                        // No RESPONSE for a published event, only its credit back.
                        let _ = tx.send(Frame::Credit { credits: 1 }).await;
                        return;
                    }
                    lock(&active).remove(&id);
                    if let Some(r) = resp.as_mut() {
                        r.returns_credit = implicit_credit;
                    }
                    let credit_sent = resp.as_ref().is_some_and(|r| r.returns_credit);
                    if let Some(resp) = resp {
                        let _ = tx.send(Frame::Response(resp)).await;
                    }
                    // A cancelled request has no answer to carry its credit: it comes back alone.
                    if !credit_sent {
                        let _ = tx.send(Frame::Credit { credits: 1 }).await;
                    }
                });
            }
            Frame::Cancel { id } => {
                if let Some(t) = lock(&active).get(&id) {
                    t.cancel();
                }
            }
            Frame::Ping { nonce } => {
                let _ = tx.send(Frame::Pong { nonce }).await;
            }
            Frame::Pong { .. }
            | Frame::GoAway { .. }
            | Frame::Credit { .. }
            | Frame::Response(_) => {}
            Frame::Hello {
                takes_pushes,
                implicit_credit: implicit,
            } => {
                implicit_credit = implicit;
                if takes_pushes && registered.is_none() {
                    registered = Some(routers.register(tx.clone()));
                }
            }
            Frame::Push(_) => {
                tracing::warn!(%peer, "PUSH goes from managers to routers; ignored");
            }
        }
    }
    drop(registered);
    // The router is gone (or closed after our GOAWAY with nothing pending): answers cannot reach it.
    for t in lock(&active).values() {
        t.cancel();
    }
    deliveries.close();
    deliveries.wait().await;
    drop(tx);
    let _ = writer.await;
    tracing::info!(%peer, "router connection closed");
}

async fn write_loop(
    mut sink: FramedWrite<OwnedWriteHalf, FrameCodec>,
    mut rx: mpsc::Receiver<Frame>,
) {
    while let Some(first) = rx.recv().await {
        let mut ok = sink.feed(first).await.is_ok();
        let mut n = 1;
        while ok && n < WRITE_BATCH {
            let Ok(f) = rx.try_recv() else { break };
            ok = sink.feed(f).await.is_ok();
            n += 1;
        }
        if !ok || sink.flush().await.is_err() {
            // Keep draining the channel so senders never wait on a dead socket.
            while rx.recv().await.is_some() {}
            return;
        }
    }
    let _ = sink.close().await;
}
