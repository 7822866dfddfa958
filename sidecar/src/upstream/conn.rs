//! One multiplexed frame connection to a manager sidecar: a writer task fed by a bounded channel,
//! a reader resolving pending requests by id, credit-based flow control and heartbeats.
//!
//! A publish (`FLAG_NO_REPLY | FLAG_ACK`) is answered twice: its sender is released by the first
//! RESPONSE (202 admitted, or the manager's refusal); an admitted one stays pending until the second
//! (done) arrives. Admitted events still pending when the connection dies are what a killed pod lost,
//! or may have lost: [`run`] returns them.

use super::pushes::Pushes;
use crate::net::frame_writer::FrameWriter;
use crate::net::io::SplitIo;
use crate::net::silence::{self, Silence};
use crate::net::stream::body::StreamBody;
use crate::net::stream::inbox::{End, Inbox};
use crate::net::stream::window::SendWindow;
use crate::net::stream::{self, Peer};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use switchyard_protocol::frame::{Frame, FrameCodec, Response};
use switchyard_protocol::stream::{Reset, code};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

/// Heartbeat period.
pub(super) const PING_EVERY: Duration = Duration::from_secs(5);
/// A connection with no frame for this long is dead (told within a third more).
pub(super) const DEAD_AFTER: Duration = Duration::from_secs(15);
/// Frames waiting for the writer; credits bound the requests among them, so this only absorbs bursts.
const WRITE_QUEUE: usize = 1024;
/// Most credits held at once; a manager granting more is capped rather than trusted.
const MAX_CREDITS: usize = 1 << 20;
/// Frames written before a flush, so one slow batch cannot starve heartbeats.
const WRITE_BATCH: usize = 64;

/// The connection ended before the request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lost {
    /// Whether the request frame reached the socket (then it may have been handled).
    pub written: bool,
}

/// A manager's answer: its head, and its body when it streams (a head flagged MORE).
pub(crate) struct Answered {
    /// The RESPONSE (for a stream: its head; the payload is the body's first chunk).
    pub head: Response,
    /// The rest of a streamed answer.
    pub(crate) body: Option<StreamBody>,
}

impl Answered {
    /// The whole answer as one response: a streamed body is read to its end, at most `limit` bytes.
    pub(crate) async fn whole(self, limit: usize) -> Result<Response, Collect> {
        let Some(body) = self.body else {
            return Ok(self.head);
        };
        let (payload, trailers) = body.read_whole(limit).await?;
        let mut head = self.head;
        if let Some(t) = trailers {
            head.app_us = t.app_us.max(head.app_us);
        }
        head.payload = payload;
        head.more = false;
        Ok(head)
    }
}

pub(crate) use crate::net::stream::body::Collect;

struct Pending {
    /// Taken when the sender is answered; an accepted publish stays pending without it.
    reply: Option<oneshot::Sender<Result<Answered, Lost>>>,
    written: bool,
    kind: Kind,
}

/// What a pending request waits for.
enum Kind {
    /// The answer.
    Answer,
    /// A publish: the manager's acknowledgement (admitted or refused).
    Ack(Published),
    /// A publish the manager admitted: its outcome (the event left the manager's memory).
    Accepted(Published),
}

/// A published event whose fate the connection tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// Event type.
    pub event: Arc<str>,
    /// CloudEvents id.
    pub ce_id: String,
}

#[derive(Default)]
struct State {
    pending: HashMap<u64, Pending>,
    /// Streamed answers being received, by request id.
    streams: HashMap<u64, Arc<Inbox>>,
    /// Request bodies being sent, by request id: their windows.
    uploads: HashMap<u64, Arc<SendWindow>>,
    closed: bool,
    draining: bool,
}

/// The connection is closed: the frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the frame connection is closed")]
pub(crate) struct Closed;

/// A live connection.
pub(crate) struct Conn {
    tx: mpsc::Sender<Frame>,
    state: Mutex<State>,
    /// Requests the manager currently allows.
    pub credits: Semaphore,
    next_id: AtomicU64,
    usable: AtomicBool,
    /// The manager's HELLO said it reads a tracestate; until then (and for an older manager that
    /// sends none) requests go without theirs, in the encoding it reads.
    reads_tracestate: AtomicBool,
    /// The manager's HELLO said it reads a head's headers list; until then requests go without.
    reads_headers: AtomicBool,
    dead: CancellationToken,
    /// The manager's per-stream window from its HELLO; 0 while it said none (it speaks no streams).
    peer_window: AtomicU32,
}

/// A request slot on a connection.
pub(crate) struct Slot {
    /// Request id on this connection.
    pub id: u64,
    /// Resolves with the answer or the loss.
    pub reply: oneshot::Receiver<Result<Answered, Lost>>,
}

impl Conn {
    fn new() -> (Arc<Conn>, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let conn = Conn {
            tx,
            state: Mutex::new(State::default()),
            credits: Semaphore::new(0),
            next_id: AtomicU64::new(1),
            usable: AtomicBool::new(true),
            reads_tracestate: AtomicBool::new(false),
            reads_headers: AtomicBool::new(false),
            dead: CancellationToken::new(),
            peer_window: AtomicU32::new(0),
        };
        (Arc::new(conn), rx)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the map half-updated in a way that matters:
        // continue with the data rather than poison every later request.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether new requests may use this connection.
    pub(crate) fn is_usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    /// Reserves an id and a reply slot; `None` when the connection is closing. For a publish the
    /// slot resolves with the manager's acknowledgement.
    pub(crate) fn register(&self, publish: Option<Published>) -> Option<Slot> {
        let mut st = self.state();
        if st.closed || st.draining {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, reply) = oneshot::channel();
        st.pending.insert(
            id,
            Pending {
                reply: Some(reply_tx),
                written: false,
                kind: publish.map_or(Kind::Answer, Kind::Ack),
            },
        );
        Some(Slot { id, reply })
    }

    /// Queues a frame for the writer, waiting for room.
    pub(crate) async fn send(&self, frame: Frame) -> Result<(), Closed> {
        self.tx.send(frame).await.map_err(|_| Closed)
    }

    /// Gives up on request `id` (deadline passed or client gone) and tells the manager to stop.
    pub(crate) fn cancel(&self, id: u64) {
        let was_pending = {
            let mut st = self.state();
            // A publish is never cancelled: the manager owns it once written.
            let answer = st
                .pending
                .get(&id)
                .is_some_and(|p| matches!(p.kind, Kind::Answer));
            answer && st.pending.remove(&id).is_some()
        };
        if was_pending && self.tx.try_send(Frame::Cancel { id }).is_err() {
            tracing::debug!(
                id,
                "cancel not sent: write queue full or closed; the reply will be ignored"
            );
        }
        self.close_if_drained();
    }

    /// Stops new requests; the connection closes once the pending ones are answered.
    pub(crate) fn begin_drain(&self) {
        self.usable.store(false, Ordering::Release);
        self.state().draining = true;
        self.close_if_drained();
    }

    /// The manager's per-stream window, when it speaks streams (its HELLO said so).
    pub(crate) fn peer_window(&self) -> Option<u32> {
        Some(self.peer_window.load(Ordering::Acquire)).filter(|w| *w > 0)
    }

    /// Opens the send window of request `id`'s body, `window` bytes.
    pub(crate) fn open_upload(&self, id: u64, window: u32) -> Arc<SendWindow> {
        let w = Arc::new(SendWindow::new(window));
        self.state().uploads.insert(id, w.clone());
        w
    }

    /// Request `id`'s body is done with (sent, refused or abandoned); `reset` tells the manager
    /// to drop what it has of it.
    pub(crate) fn close_upload(&self, id: u64, reset: Option<u32>) {
        if let Some(w) = self.state().uploads.remove(&id) {
            w.close();
        }
        if let Some(code) = reset {
            self.send_reset(id, code);
        }
    }

    fn close_if_drained(&self) {
        let st = self.state();
        if st.draining && st.pending.is_empty() && st.streams.is_empty() {
            self.dead.cancel();
        }
    }

    fn mark_written(&self, id: u64) {
        if let Some(p) = self.state().pending.get_mut(&id) {
            p.written = true;
        }
    }

    fn resolve(self: &Arc<Self>, resp: Response) {
        let reply = {
            let mut st = self.state();
            match st.pending.remove(&resp.id) {
                None => None,
                Some(Pending {
                    reply,
                    written,
                    kind: Kind::Ack(published),
                }) => {
                    // The acknowledgement: admitted (then the outcome is awaited) or refused.
                    if resp.status == 202 && resp.from_mesh {
                        st.pending.insert(
                            resp.id,
                            Pending {
                                reply: None,
                                written,
                                kind: Kind::Accepted(published),
                            },
                        );
                    }
                    reply
                }
                // The outcome of an accepted publish: nobody waits for it any more.
                Some(Pending {
                    kind: Kind::Accepted(_),
                    ..
                }) => None,
                Some(p) => p.reply,
            }
        };
        match reply {
            Some(r) => {
                let id = resp.id;
                let more = resp.more;
                let body = more.then(|| {
                    let inbox = Inbox::new(stream::WINDOW);
                    self.state().streams.insert(id, inbox.clone());
                    let first = resp.payload.clone();
                    let peer: Arc<dyn Peer> = self.clone();
                    StreamBody::new(id, inbox, peer, first)
                });
                let head = Response {
                    payload: if more {
                        bytes::Bytes::new()
                    } else {
                        resp.payload
                    },
                    ..resp
                };
                // A caller gone meanwhile drops the answer, and with it the body: its stream is reset.
                let _ = r.send(Ok(Answered { head, body }));
            }
            None if resp.more => {
                // Nobody reads this stream: stop it.
                self.send_reset(resp.id, code::CANCEL);
            }
            None => tracing::trace!(
                id = resp.id,
                "reply for a request already answered or given up"
            ),
        }
        self.close_if_drained();
    }

    fn grant(&self, credits: u32) {
        let room = MAX_CREDITS.saturating_sub(self.credits.available_permits());
        self.credits.add_permits((credits as usize).min(room));
    }

    /// The manager asks for up to `asked` credits back: gives up what is unused (none may be, when
    /// they are on their way as requests) and tells it how many. A RELEASE that cannot be queued
    /// keeps the credits here, so the two sides never disagree on what this connection holds.
    fn release(&self, asked: u32) {
        let unused = u32::try_from(self.credits.available_permits()).unwrap_or(u32::MAX);
        let credits = match self.credits.try_acquire_many(asked.min(unused)) {
            Ok(permits) => {
                permits.forget();
                asked.min(unused)
            }
            // Taken meanwhile by a request, or the connection closed.
            Err(_) => 0,
        };
        if self.tx.try_send(Frame::Release { credits }).is_err() && credits > 0 {
            self.credits.add_permits(credits as usize);
        }
    }

    /// A frame of stream `id` arrived: its inbox takes it, never waiting. A manager that overruns
    /// the window gets the stream reset; a stream nobody holds any more is ignored.
    fn stream_frame(&self, frame: Frame) {
        let (id, end) = match &frame {
            Frame::Data(d) => (d.id, d.end),
            Frame::Trailers(t) => (t.id, true),
            Frame::Reset(r) => {
                // The manager stopped taking request `id`'s body (its delivery ended, or it refused it).
                if let Some(w) = self.state().uploads.remove(&r.id) {
                    w.close();
                }
                (r.id, true)
            }
            _ => return,
        };
        let inbox = {
            let mut st = self.state();
            if end {
                st.streams.remove(&id)
            } else {
                st.streams.get(&id).cloned()
            }
        };
        let Some(inbox) = inbox else { return };
        match frame {
            Frame::Data(d) => {
                if inbox.push(d.data).is_err() {
                    tracing::warn!(id, "manager overran a stream's window; stream reset");
                    inbox.finish(End::Reset(code::FLOW_CONTROL));
                    self.state().streams.remove(&id);
                    self.send_reset(id, code::FLOW_CONTROL);
                } else if d.end {
                    inbox.finish(End::Done(None));
                }
            }
            Frame::Trailers(t) => inbox.finish(End::Done(Some(t))),
            Frame::Reset(r) => inbox.finish(End::Reset(r.code)),
            _ => {}
        }
        if end {
            self.close_if_drained();
        }
    }

    fn send_reset(&self, id: u64, code: u32) {
        self.send_control(Frame::Reset(Reset {
            id,
            code,
            returns_credit: false,
        }));
    }

    /// Queues a frame from a place that cannot wait (a body's poll, the reader): at once when
    /// there is room, else from a task. Such frames are bounded by the open streams.
    fn send_control(&self, frame: Frame) {
        match self.tx.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(f)) => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(f).await;
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Fails every pending request; returns the accepted publishes whose outcome never came.
    fn close(&self) -> Vec<Published> {
        self.usable.store(false, Ordering::Release);
        self.credits.close();
        self.dead.cancel();
        let (pending, streams) = {
            let mut st = self.state();
            st.closed = true;
            for w in st.uploads.values() {
                w.close();
            }
            st.uploads.clear();
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.streams),
            )
        };
        // A streamed answer cut by the connection ends in an error, never as a whole body.
        for inbox in streams.values() {
            inbox.finish(End::Reset(code::INTERNAL));
        }
        let mut unconfirmed = Vec::new();
        for (_, p) in pending {
            if let Some(r) = p.reply {
                let _ = r.send(Err(Lost { written: p.written }));
            }
            if let Kind::Accepted(published) = p.kind {
                unconfirmed.push(published);
            }
        }
        unconfirmed
    }
}

/// Runs a connection on `stream` until it dies or drains; `on_open` receives it once it is usable.
/// PUSH frames go to `pushes` (this router process's WebSocket subscribers), if it takes them.
/// Returns the publishes the manager admitted and never reported done: lost if its pod died.
pub(super) async fn run<S: SplitIo>(
    stream: S,
    peer: &str,
    pushes: &Pushes,
    on_open: impl FnOnce(Arc<Conn>),
) -> Vec<Published> {
    let (conn, rx) = Conn::new();
    // First frame: whether this side delivers pushes, so managers count and feed only routers.
    // It also asks for implicit credit: a manager that knows the flag then returns each answer's
    // credit inside the RESPONSE instead of a CREDIT frame after it (half the frames back); and it
    // offers to give unused credit back on request, so idle connections do not starve new ones.
    let _ = conn.tx.try_send(Frame::Hello {
        reads_headers: true,
        takes_pushes: pushes.is_some(),
        implicit_credit: true,
        releases_credit: true,
        streams: Some(stream::WINDOW),
        reads_tracestate: true,
    });
    // Halves the reader and writer own, not `Framed::split`: on TCP they never share a lock.
    let (read, write) = stream.split_io();
    let mut frames = FramedRead::new(read, FrameCodec::default());
    let sink = FrameWriter::new(write);
    let writer = tokio::spawn(write_loop(sink, rx, conn.clone()));
    on_open(conn.clone());
    // Made once, not per frame: it registers with the token while pending.
    let dead = conn.dead.cancelled();
    tokio::pin!(dead);
    let mut silence = Silence::default();
    let mut ticker = silence::ticker(DEAD_AFTER);
    loop {
        let next = tokio::select! {
            r = frames.next() => r,
            () = &mut dead => break,
            _ = ticker.tick() => {
                if silence.tick() {
                    tracing::warn!(
                        peer,
                        "no frame for {}s or more; connection considered dead",
                        DEAD_AFTER.as_secs()
                    );
                    break;
                }
                continue;
            }
        };
        silence.heard();
        let frame = match next {
            None => {
                tracing::info!(peer, "manager closed the connection");
                break;
            }
            Some(Err(e)) => {
                tracing::warn!(peer, error = %e, "frame connection failed");
                break;
            }
            Some(Ok(f)) => f,
        };
        on_frame(&conn, frame, peer, pushes);
    }
    let unconfirmed = conn.close();
    let _ = writer.await;
    unconfirmed
}

/// Handles one frame from a manager.
fn on_frame(conn: &Arc<Conn>, frame: Frame, peer: &str, pushes: &Pushes) {
    // Before the answer is resolved, so a caller woken by it finds the credit back already.
    let returned = frame.credits_returned();
    if returned > 0 {
        conn.grant(returned);
    }
    match frame {
        Frame::Response(r) => conn.resolve(r),
        Frame::Credit { .. } => {}
        Frame::Reclaim { credits } => conn.release(credits),
        Frame::Ping { nonce } => {
            let _ = conn.tx.try_send(Frame::Pong { nonce });
        }
        Frame::Pong { .. } => {}
        Frame::GoAway { reason } => {
            tracing::info!(
                peer,
                reason,
                "manager drains; no new requests on this connection"
            );
            conn.begin_drain();
        }
        Frame::Data(_) | Frame::Trailers(_) | Frame::Reset(_) => conn.stream_frame(frame),
        Frame::Window { id, increment } => {
            let w = conn.state().uploads.get(&id).cloned();
            if let Some(w) = w {
                w.add(increment);
            }
        }
        Frame::Push(p) => match pushes {
            Some(sink) => sink.deliver(&p),
            None => {
                tracing::debug!(peer, event = %p.event, "push from a manager to a connection that takes none; ignored")
            }
        },
        // A manager's one HELLO comes before its first CREDIT, so before any request is sent:
        // whether it reads a tracestate, and its per-stream window if it speaks streams.
        Frame::Hello {
            streams,
            reads_tracestate,
            reads_headers,
            ..
        } => {
            conn.reads_headers.store(reads_headers, Ordering::Release);
            conn.peer_window.store(
                streams.and_then(stream::peer_window).unwrap_or(0),
                Ordering::Release,
            );
            conn.reads_tracestate
                .store(reads_tracestate, Ordering::Release);
        }
        Frame::Request(_) | Frame::Cancel { .. } | Frame::Release { .. } => {
            tracing::warn!(peer, "unexpected frame from a manager; ignored");
        }
    }
}

type Sink<W> = FrameWriter<W>;

async fn write_loop<W: tokio::io::AsyncWrite + Unpin>(
    mut sink: Sink<W>,
    mut rx: mpsc::Receiver<Frame>,
    conn: Arc<Conn>,
) {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut nonce = 0u64;
    // Made once, not per batch: it registers with the token while pending.
    let dead = conn.dead.cancelled();
    tokio::pin!(dead);
    loop {
        let first = tokio::select! {
            biased;
            () = &mut dead => break,
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            _ = ping.tick() => {
                nonce = nonce.wrapping_add(1);
                Frame::Ping { nonce }
            }
        };
        let mut ok = feed(&mut sink, first, &conn).await;
        let mut n = 1;
        while ok && n < WRITE_BATCH {
            let Ok(f) = rx.try_recv() else { break };
            ok = feed(&mut sink, f, &conn).await;
            n += 1;
        }
        if !ok || sink.flush().await.is_err() {
            break;
        }
    }
    // Whatever stopped the writer, the connection is unusable now.
    conn.dead.cancel();
    let _ = sink.close().await;
}

async fn feed<W: tokio::io::AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    mut frame: Frame,
    conn: &Conn,
) -> bool {
    let request_id = match &mut frame {
        Frame::Request(r) => {
            if !conn.reads_tracestate.load(Ordering::Acquire) {
                r.tracestate.clear();
            }
            if !conn.reads_headers.load(Ordering::Acquire) {
                r.headers.clear();
            }
            Some(r.id)
        }
        _ => None,
    };
    if let Err(e) = sink.feed(frame).await {
        tracing::debug!(error = %e, "frame write failed");
        return false;
    }
    if let Some(id) = request_id {
        conn.mark_written(id);
    }
    true
}

impl Peer for Conn {
    fn window(&self, id: u64, increment: u32) {
        self.send_control(Frame::Window { id, increment });
    }

    fn reset(&self, id: u64, code: u32) {
        let held = self.state().streams.remove(&id).is_some();
        if held {
            self.send_reset(id, code);
            self.close_if_drained();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::SinkExt;
    use switchyard_protocol::frame::Request;
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::codec::Framed;

    fn request(id: u64) -> Frame {
        Frame::Request(Request {
            headers: Vec::new(),
            id,
            flags: 0,
            deadline_ms: 1000,
            event: "noop".into(),
            ce_id: "c".into(),
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            tracestate: "congo=t61rcWkgMzE".into(),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{}"),
        })
    }

    /// Plays a manager on loopback (with or without this version's HELLO) and returns the
    /// tracestate of the request the router side sent it.
    async fn sent_to(manager_says_hello: bool) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let (opened_tx, opened) = oneshot::channel();
        let router = tokio::spawn(async move {
            let s = TcpStream::connect(addr).await.expect("connect");
            run(s, "test", &None, move |c| {
                let _ = opened_tx.send(c);
            })
            .await
        });
        let (s, _) = l.accept().await.expect("accept");
        let mut manager = Framed::new(s, FrameCodec::default());
        let Some(Ok(Frame::Hello {
            reads_tracestate,
            streams,
            ..
        })) = manager.next().await
        else {
            panic!("the router's HELLO first");
        };
        assert!(reads_tracestate, "the router says it reads a tracestate");
        assert!(
            streams.is_some(),
            "and, in the same HELLO, that it speaks streams"
        );
        if manager_says_hello {
            manager
                .send(Frame::Hello {
                    reads_headers: false,
                    takes_pushes: false,
                    implicit_credit: false,
                    releases_credit: false,
                    // As a manager of the tracestate version without streams says it.
                    streams: None,
                    reads_tracestate: true,
                })
                .await
                .expect("hello");
        }
        manager
            .send(Frame::Credit { credits: 1 })
            .await
            .expect("credit");
        let conn = opened.await.expect("opened");
        // As the upstream sends: after a credit is taken, which the HELLO (if any) preceded.
        conn.credits.acquire().await.expect("credit").forget();
        conn.send(request(1)).await.expect("queued");
        let got = loop {
            match manager.next().await {
                Some(Ok(Frame::Request(r))) => break r.tracestate,
                Some(Ok(_)) => continue,
                other => panic!("no request: {other:?}"),
            }
        };
        drop(manager);
        let _ = router.await;
        got
    }

    #[tokio::test]
    async fn a_tracestate_goes_only_to_a_manager_whose_hello_reads_one() {
        assert_eq!(sent_to(true).await, "congo=t61rcWkgMzE");
        // An older manager sends no HELLO: the request is in the encoding it reads.
        assert_eq!(sent_to(false).await, "");
    }
}
