//! Inbound frame connections from router sidecars: grant credit out of the pod's credit bank,
//! admit requests to the workers in arrival order (acknowledging a publish once admitted), send
//! answers back, return credit as work completes, and drain with GOAWAY.

use super::credit::{ConnId, CreditBank, Grants};
use super::routers::Routers;
use super::worker::Worker;
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_protocol::frame::{FLAG_ACK, FLAG_NO_REPLY, Frame, FrameCodec, Response};
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pod's workers, its credit bank and each connection's write queue (to send grants).
pub struct Inbound {
    worker: Arc<Worker>,
    bank: CreditBank,
    outlets: Mutex<HashMap<ConnId, mpsc::Sender<Frame>>>,
}

impl Inbound {
    /// The inbound side of `worker`: its capacity is the credit shared by every sender.
    pub fn new(worker: Arc<Worker>) -> Arc<Inbound> {
        let total = u32::try_from(worker.capacity()).unwrap_or(u32::MAX);
        Arc::new(Inbound {
            worker,
            bank: CreditBank::new(total),
            outlets: Mutex::default(),
        })
    }

    fn join(&self, tx: mpsc::Sender<Frame>) -> ConnId {
        let mut outlets = lock(&self.outlets);
        let (id, grants) = self.bank.join();
        outlets.insert(id, tx);
        self.send(&outlets, grants);
        id
    }

    fn leave(&self, id: ConnId) {
        let mut outlets = lock(&self.outlets);
        outlets.remove(&id);
        let grants = self.bank.leave(id);
        self.send(&outlets, grants);
    }

    /// An event spent on `id` is done: sends others' grants, says whether `id` keeps the credit.
    fn finished(&self, id: ConnId) -> bool {
        let returned = self.bank.finished(id);
        if !returned.others.is_empty() {
            self.send(&lock(&self.outlets), returned.others);
        }
        returned.own
    }

    fn send(&self, outlets: &HashMap<ConnId, mpsc::Sender<Frame>>, grants: Grants) {
        for (id, credits) in grants {
            // A queue sized for every credit's answer and grant is full only when its connection is
            // stuck or gone: the credits go back to the bank rather than vanish.
            let sent = outlets
                .get(&id)
                .is_some_and(|tx| tx.try_send(Frame::Credit { credits }).is_ok());
            if !sent {
                self.bank.undeliverable(id, credits);
            }
        }
    }
}

/// Accepts router connections until `drain` fires; each connection then drains on its own.
pub async fn serve(
    listener: TcpListener,
    inbound: Arc<Inbound>,
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
            inbound.clone(),
            routers.clone(),
            drain.clone(),
        ));
    }
    tracing::info!("frame listener closed");
}

/// The acknowledgement of a publish: admitted to the queue. Its credit comes with the outcome.
fn accepted(id: u64) -> Response {
    Response {
        id,
        status: 202,
        queue_us: 0,
        app_us: 0,
        content_type: String::new(),
        payload: bytes::Bytes::new(),
        returns_credit: false,
        from_mesh: true,
    }
}

/// Sends the answer (or only the credit) of a finished event on its connection.
async fn answer(tx: &mpsc::Sender<Frame>, resp: Option<Response>, own: bool, implicit: bool) {
    let mut credit_sent = false;
    if let Some(mut r) = resp {
        r.returns_credit = own && implicit;
        credit_sent = r.returns_credit;
        let _ = tx.send(Frame::Response(r)).await;
    }
    if own && !credit_sent {
        let _ = tx.send(Frame::Credit { credits: 1 }).await;
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    inbound: Arc<Inbound>,
    routers: Arc<Routers>,
    drain: CancellationToken,
) {
    let total = inbound.bank.total();
    // Owned halves, not `Framed::split`: reader and writer never contend on a shared lock.
    let (read, write) = stream.into_split();
    let mut frames = FramedRead::new(read, FrameCodec::default());
    let sink = FramedWrite::new(write, FrameCodec::default());
    // Credits bound the requests on this connection, so acknowledgements, answers and credit frames
    // fit without waiting.
    let (tx, rx) = mpsc::channel::<Frame>(
        (total as usize)
            .saturating_mul(3)
            .saturating_add(64)
            .min(1 << 20),
    );
    let writer = tokio::spawn(write_loop(sink, rx));
    let conn_id = inbound.join(tx.clone());
    // Registered for pushes once its HELLO says it is a router (a manager's outbound path is not).
    let mut registered = None;
    // Set by the router's HELLO: answers then carry their credit, and no CREDIT frame follows them.
    // The HELLO precedes the router's requests on the connection, so every answer sees it.
    let mut implicit_credit = false;
    tracing::info!(%peer, total, "router connected");
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
                let ack = req.flags & FLAG_ACK != 0;
                inbound.bank.spent(conn_id);
                // Admitted or refused here, in arrival order, before any delivery task runs: an
                // acknowledgement then means the event is in this pod's queue.
                let admission = match inbound.worker.admit(&req) {
                    Ok(a) => a,
                    Err(refusal) => {
                        let own = inbound.finished(conn_id);
                        if no_reply && !ack {
                            tracing::warn!(event = %req.event, ce_id = %req.ce_id, status = refusal.status, "published event refused");
                            answer(&tx, None, own, implicit_credit).await;
                        } else {
                            answer(&tx, Some(refusal), own, implicit_credit).await;
                        }
                        continue;
                    }
                };
                if ack {
                    let _ = tx.send(Frame::Response(accepted(id))).await;
                }
                let cancel = CancellationToken::new();
                // A published event belongs to this pod once admitted: it is delivered even if its
                // sender's connection ends, so it is not among the cancellable requests.
                if !no_reply && lock(&active).insert(id, cancel.clone()).is_some() {
                    tracing::warn!(%peer, id, "request id reused while in flight; closing the connection");
                    break;
                }
                let (inbound, tx, active) = (inbound.clone(), tx.clone(), active.clone());
                // Only a published event needs these after the delivery: nobody reads its answer.
                let published = no_reply.then(|| (req.event.clone(), req.ce_id.clone()));
                deliveries.spawn(async move {
                    let resp = inbound.worker.handle(req, admission, cancel).await;
                    let own = inbound.finished(conn_id);
                    let Some((event, ce_id)) = published else {
                        lock(&active).remove(&id);
                        answer(&tx, resp, own, implicit_credit).await;
                        return;
                    };
                    if let Some(r) = resp.as_ref().filter(|r| r.status >= 500) {
                        // Failed for good (dead-lettered when configured): never silent.
                        tracing::warn!(%event, %ce_id, status = r.status, "published event not handled");
                    }
                    // The publisher wants only the outcome, without the app's body.
                    let outcome = ack.then(|| Response {
                        payload: bytes::Bytes::new(),
                        content_type: String::new(),
                        ..resp.unwrap_or_else(|| cancelled(id))
                    });
                    answer(&tx, outcome, own, implicit_credit).await;
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
    // Its unused credits go to the other senders now; its busy ones as their events finish.
    inbound.leave(conn_id);
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

/// The outcome of a published event whose delivery was cancelled (the pod drains past its limit).
fn cancelled(id: u64) -> Response {
    Response {
        status: 499,
        ..accepted(id)
    }
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
