//! Inbound frame connections from router sidecars: grant credit out of the pod's credit bank,
//! admit requests to the workers in arrival order (acknowledging a publish once admitted), send
//! answers back, return credit as work completes, and drain with GOAWAY.
//!
//! With mesh TLS each connection is mTLS: a client without a certificate of the mesh's CA fails the
//! handshake, and one whose identity `access` does not allow gets a GOAWAY saying so and is closed.
//! A hostile peer cannot make this sidecar hold more than it granted: a request beyond the credit
//! it holds closes the connection, and an answer the peer does not read within [`WRITE_TIMEOUT`]
//! closes it too.

use super::access::Access;
use super::credit::{ConnId, CreditBank, Orders};
use super::delivery::app_body::AppBody;
use super::routers::{Registered, Routers};
use super::streamed;
use super::worker::{Admission, Handled, Worker};
use crate::metrics::Metrics;
use crate::net::frame_writer::FrameWriter;
use crate::net::io::SplitIo;
use crate::net::mesh::MeshTls;
use crate::net::silence::{self, Silence};
use crate::net::stream::body::StreamBody;
use crate::net::stream::inbox::{End, Inbox};
use crate::net::stream::{self, Peer as StreamPeer, window::SendWindow};
use crate::problem;
use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_identity::{Kind, Peer};
use switchyard_protocol::frame::{
    self, DEFAULT_MAX_FRAME, FLAG_ACK, FLAG_NO_REPLY, Frame, FrameCodec, Response,
};
use tokio::io::AsyncWrite;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A router that sent no frame for this long (it pings every 5 s) is gone; told within a third more.
const DEAD_AFTER: Duration = Duration::from_secs(15);
/// Most router connections at once.
const MAX_CONNECTIONS: usize = 4096;
/// Frames written before a flush.
const WRITE_BATCH: usize = 64;
/// How long a new connection's first frame is awaited before credit is granted. The connecting side
/// sends its HELLO as it connects, so it is normally there at once; a peer from before HELLO sends
/// nothing until it holds credit, and is granted it after this.
const HELLO_WAIT: Duration = Duration::from_secs(1);
/// A write (or flush) to a router that takes longer than this closes the connection: a peer that
/// stops reading cannot hold this sidecar's answers, and the memory behind them, for ever.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

type Active = Arc<Mutex<HashMap<u64, CancellationToken>>>;
/// The send windows of the answers streaming on a connection, by request id.
type Windows = Arc<Mutex<HashMap<u64, Arc<SendWindow>>>>;
/// The request bodies streaming in on a connection, by request id.
type Uploads = Arc<Mutex<HashMap<u64, Arc<Inbox>>>>;

/// A connection's writer, as streamed request bodies tell the router to send more or to stop.
/// Weak: a body still held somewhere (an app connection's task) never keeps the writer open.
struct ToRouter {
    tx: mpsc::WeakSender<Frame>,
    uploads: Uploads,
}

impl ToRouter {
    /// Queues a frame from where nothing may wait (a body's poll): at once when there is room,
    /// else from a task; such frames are bounded by the open streams.
    fn send(&self, frame: Frame) {
        let Some(tx) = self.tx.upgrade() else { return };
        if let Err(mpsc::error::TrySendError::Full(f)) = tx.try_send(frame) {
            tokio::spawn(async move {
                let _ = tx.send(f).await;
            });
        }
    }
}

impl StreamPeer for ToRouter {
    fn window(&self, id: u64, increment: u32) {
        self.send(Frame::Window { id, increment });
    }

    fn reset(&self, id: u64, code: u32) {
        if lock(&self.uploads).remove(&id).is_some() {
            self.send(Frame::Reset(switchyard_protocol::stream::Reset {
                id,
                code,
                returns_credit: false,
            }));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pod's workers, its credit bank, each connection's write queue (to send grants), and who
/// may connect.
pub(crate) struct Inbound {
    worker: Arc<Worker>,
    bank: CreditBank,
    outlets: Mutex<HashMap<ConnId, mpsc::Sender<Frame>>>,
    /// Mesh TLS; `None`: plain TCP.
    mesh: Option<Arc<MeshTls>>,
    /// Who may connect (with mesh TLS).
    access: Access,
    /// Refusals are counted here.
    metrics: Arc<Metrics>,
}

impl Inbound {
    /// The inbound side of `worker`: its capacity is the credit shared by every sender. With `mesh`
    /// every connection is mTLS and its identity must be one `access` allows.
    pub(crate) fn new(
        worker: Arc<Worker>,
        mesh: Option<Arc<MeshTls>>,
        access: Access,
        metrics: Arc<Metrics>,
    ) -> Arc<Inbound> {
        let total = u32::try_from(worker.capacity()).unwrap_or(u32::MAX);
        Arc::new(Inbound {
            worker,
            bank: CreditBank::new(total),
            outlets: Mutex::default(),
            mesh,
            access,
            metrics,
        })
    }

    fn join(&self, tx: mpsc::Sender<Frame>) -> ConnId {
        let mut outlets = lock(&self.outlets);
        let (id, orders) = self.bank.join();
        outlets.insert(id, tx);
        self.send(&outlets, orders);
        id
    }

    fn leave(&self, id: ConnId) {
        let mut outlets = lock(&self.outlets);
        outlets.remove(&id);
        let orders = self.bank.leave(id);
        self.send(&outlets, orders);
    }

    /// `id`'s HELLO said it answers RECLAIM.
    fn releases(&self, id: ConnId) {
        let orders = self.bank.releases(id);
        self.send(&lock(&self.outlets), orders);
    }

    /// `id` gave back `credits` it held unused.
    fn released(&self, id: ConnId, credits: u32) {
        let orders = self.bank.released(id, credits);
        self.send(&lock(&self.outlets), orders);
    }

    /// An event spent on `id` is done: sends others' grants, says whether `id` keeps the credit.
    fn finished(&self, id: ConnId) -> bool {
        let returned = self.bank.finished(id);
        if !returned.others.is_empty() {
            self.send(&lock(&self.outlets), returned.others);
        }
        returned.own
    }

    fn send(&self, outlets: &HashMap<ConnId, mpsc::Sender<Frame>>, orders: Orders) {
        for (id, credits) in orders.reclaims {
            let sent = outlets
                .get(&id)
                .is_some_and(|tx| tx.try_send(Frame::Reclaim { credits }).is_ok());
            if !sent {
                self.bank.unasked(id);
            }
        }
        for (id, credits) in orders.grants {
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
pub(crate) async fn serve(
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
        tracker.spawn(admit(
            stream,
            peer,
            inbound.clone(),
            routers.clone(),
            drain.clone(),
        ));
    }
    tracing::info!("frame listener closed");
}

/// Runs the handshake (with mesh TLS) and the authorization, then the connection.
async fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    inbound: Arc<Inbound>,
    routers: Arc<Routers>,
    drain: CancellationToken,
) {
    let Some(mesh) = &inbound.mesh else {
        connection(stream, peer, inbound.clone(), routers, drain, None).await;
        return;
    };
    let (tls, who) = match mesh.accept(stream).await {
        Ok(s) => s,
        Err(e) => {
            // Plain frames, a certificate of another CA, or none: no TLS session, nothing read.
            tracing::debug!(%peer, error = %e, "mTLS handshake failed; connection refused");
            return;
        }
    };
    let mine = mesh.identity();
    let allowed = match (&who, &mine) {
        (Some(w), Some(me)) => inbound.access.allows(&w.id, &me.trust_domain),
        _ => false,
    };
    if !allowed {
        let shown = who.as_ref().map_or_else(
            || "a certificate with no mesh identity".to_owned(),
            |w| w.id.uri(),
        );
        tracing::warn!(%peer, identity = %shown, "frame connection refused: identity not allowed");
        inbound.metrics.mesh.refuse("identity");
        let reason = format!("{shown} may not send events to this Manager");
        refuse(tls, reason).await;
        return;
    }
    connection(tls, peer, inbound.clone(), routers, drain, who).await;
}

/// Tells a refused peer why, then closes.
async fn refuse<S: SplitIo>(stream: S, reason: String) {
    let (_read, write) = stream.split_io();
    let mut sink = FramedWrite::new(write, FrameCodec::default());
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        let _ = sink.send(Frame::GoAway { reason }).await;
        let _ = sink.close().await;
    })
    .await;
}

/// An answer the frame cannot carry (content type over 255 bytes, payload over the frame limit)
/// becomes the mesh's 502 for that one request, instead of a write error that would close the
/// connection under every other request on it.
fn carriable(r: Response) -> Response {
    let Err(e) = r.check(DEFAULT_MAX_FRAME) else {
        return r;
    };
    let what = match e {
        frame::FrameError::FieldTooLong(_) => format!(
            "the app's answer has a Content-Type of {} bytes; the mesh carries at most 255",
            r.content_type.len()
        ),
        _ => format!(
            "the app's answer of {} bytes is larger than the mesh carries ({} bytes)",
            r.payload.len(),
            frame::MAX_PAYLOAD
        ),
    };
    tracing::warn!(id = r.id, status = r.status, "{what}; answered 502");
    Response {
        headers: Vec::new(),
        id: r.id,
        status: 502,
        queue_us: r.queue_us,
        app_us: r.app_us,
        content_type: problem::CONTENT_TYPE.to_owned(),
        payload: problem::body(502, problem::title(502), &what),
        returns_credit: r.returns_credit,
        from_mesh: true,
        more: false,
    }
}

/// The acknowledgement of a publish: admitted to the queue. Its credit comes with the outcome.
fn accepted(id: u64) -> Response {
    Response {
        headers: Vec::new(),
        id,
        status: 202,
        queue_us: 0,
        app_us: 0,
        content_type: String::new(),
        payload: bytes::Bytes::new(),
        returns_credit: false,
        from_mesh: true,
        more: false,
    }
}

/// Sends the answer (or only the credit) of a finished event on its connection.
async fn answer(tx: &mpsc::Sender<Frame>, resp: Option<Response>, own: bool, implicit: bool) {
    let mut credit_sent = false;
    if let Some(mut r) = resp {
        r.returns_credit = own && implicit;
        credit_sent = r.returns_credit;
        let _ = tx.send(Frame::Response(carriable(r))).await;
    }
    if own && !credit_sent {
        let _ = tx.send(Frame::Credit { credits: 1 }).await;
    }
}

/// One router connection: hello → join the credit bank → loop { read frame → handle it } → leave.
async fn connection<S: SplitIo>(
    stream: S,
    peer: SocketAddr,
    inbound: Arc<Inbound>,
    routers: Arc<Routers>,
    drain: CancellationToken,
    who: Option<Peer>,
) {
    let total = inbound.bank.total();
    // Separate halves, not `Framed::split`: reader and writer never contend on a shared lock.
    let (read, write) = stream.split_io();
    let mut frames = FramedRead::new(read, FrameCodec::default());
    let (tx, rx) = mpsc::channel::<Frame>(write_queue_len(total));
    let dead = CancellationToken::new();
    let writer = tokio::spawn(write_loop(FrameWriter::new(write), rx, dead.clone()));
    // The router's HELLO (its first frame) is read before the first CREDIT (sent on joining), so
    // this side's one HELLO, its answer, precedes that CREDIT: the router knows before its first
    // request that a tracestate may come with it, and the window its streamed bodies get.
    let mut pending = tokio::time::timeout(HELLO_WAIT, frames.next()).await.ok();
    let hello = HelloState::answer_first(&tx, &pending).await;
    let conn_id = inbound.join(tx.clone());
    let mut conn = Conn::new(peer, inbound, &routers, conn_id, tx, hello, who.as_ref());
    tracing::info!(%peer, identity = %conn.shown, total, "router connected");
    // The connection's deliveries are polled in this task, beside the frame reader, rather than
    // each spawned: a spawned delivery cost a copy of its future into the task's cell and another
    // as it ended, and the scheduler's bookkeeping, the manager's largest user-space costs per
    // request under load. Whatever a delivery waits on (the app, a retry's backoff) wakes only
    // its own future. Streamed answer bodies run in tasks of their own (`bodies`).
    let mut deliveries = FuturesUnordered::new();
    let mut goaway_sent = false;
    // Made once, not per frame: each of these registers with its token while pending.
    let draining = drain.cancelled();
    let unread = dead.cancelled();
    tokio::pin!(draining, unread);
    let mut silence = Silence::default();
    let mut ticker = silence::ticker(DEAD_AFTER);
    loop {
        // The first frame, read before joining, is handled here like any other.
        let next = match pending.take() {
            Some(first) => first,
            None => tokio::select! {
                Some(()) = deliveries.next(), if !deliveries.is_empty() => continue,
                () = &mut draining, if !goaway_sent => {
                    goaway_sent = true;
                    let _ = conn.tx.send(Frame::GoAway { reason: "manager draining".into() }).await;
                    continue;
                }
                () = &mut unread => {
                    tracing::warn!(%peer, "answers not read for {}s; closing", WRITE_TIMEOUT.as_secs());
                    break;
                }
                _ = ticker.tick() => {
                    if silence.tick() {
                        tracing::warn!(%peer, "no frame from router for {}s or more; closing", DEAD_AFTER.as_secs());
                        break;
                    }
                    continue;
                }
                r = frames.next() => r,
            },
        };
        silence.heard();
        let Some(frame) = frame_or_end(next, peer) else {
            break;
        };
        match conn.on_frame(frame).await {
            Ok(None) => {}
            Ok(Some(delivery)) => deliveries.push(delivery.run()),
            Err(Close) => break,
        }
    }
    conn.leave();
    // Admitted events are delivered (and published ones kept) though their router is gone.
    while deliveries.next().await.is_some() {}
    conn.close(writer).await;
}

/// The frame read, or `None` when the connection ended (or failed, logged here).
fn frame_or_end(next: Option<Result<Frame, std::io::Error>>, peer: SocketAddr) -> Option<Frame> {
    match next {
        None => None,
        Some(Err(e)) => {
            tracing::warn!(%peer, error = %e, "frame connection failed");
            None
        }
        Some(Ok(f)) => Some(f),
    }
}

/// The write queue's length. Credits bound the requests on a connection, and windows the DATA
/// frames of each, so acknowledgements, answers, credit frames and every stream's window of DATA
/// fit without waiting.
fn write_queue_len(total: u32) -> usize {
    (total as usize)
        .saturating_mul(3 + stream::FRAMES_PER_STREAM)
        .saturating_add(64)
        .min(1 << 22)
}

/// What the router's HELLO said, and whether this side answered it.
#[derive(Default)]
struct HelloState {
    /// This side's HELLO was sent (it is sent once).
    answered: bool,
    /// Set by the router's HELLO when it takes streams: its per-stream window for streamed answers.
    peer_window: Option<u32>,
    /// Set by the router's HELLO: answers then carry their credit, and no CREDIT frame follows
    /// them. The HELLO precedes the router's requests on the connection, so every answer sees it.
    implicit_credit: bool,
    /// Whether the router reads the app's header fields on an answer (`headers`, HELLO bit 5).
    reads_headers: bool,
}

impl HelloState {
    /// Answers the router's HELLO when it was the first frame, before joining.
    async fn answer_first(
        tx: &mpsc::Sender<Frame>,
        first: &Option<Option<Result<Frame, std::io::Error>>>,
    ) -> HelloState {
        let mut hello = HelloState::default();
        if let Some(Some(Ok(Frame::Hello {
            streams,
            reads_tracestate,
            ..
        }))) = first
        {
            hello.answered = true;
            hello.peer_window = answer_hello(tx, *streams, *reads_tracestate).await;
        }
        hello
    }
}

/// A frame that closes the connection (its reason is logged where it is found).
struct Close;

/// One router connection's state, as the frames it reads change it.
struct Conn<'r> {
    peer: SocketAddr,
    /// The peer's mesh identity, for logs ("" without mesh TLS).
    shown: String,
    inbound: Arc<Inbound>,
    routers: &'r Routers,
    conn_id: ConnId,
    tx: mpsc::Sender<Frame>,
    to_router: Arc<ToRouter>,
    hello: HelloState,
    /// With mesh TLS only a Router's identity may take pushes; without, the HELLO is believed.
    may_take_pushes: bool,
    /// Registered for pushes once its HELLO says it is a router (a manager's outbound path is not).
    registered: Option<Registered<'r>>,
    active: Active,
    windows: Windows,
    uploads: Uploads,
    bodies: TaskTracker,
}

impl<'r> Conn<'r> {
    fn new(
        peer: SocketAddr,
        inbound: Arc<Inbound>,
        routers: &'r Routers,
        conn_id: ConnId,
        tx: mpsc::Sender<Frame>,
        hello: HelloState,
        who: Option<&Peer>,
    ) -> Self {
        let uploads: Uploads = Arc::default();
        let to_router = Arc::new(ToRouter {
            tx: tx.downgrade(),
            uploads: uploads.clone(),
        });
        Conn {
            peer,
            shown: who.map(|w| w.id.uri()).unwrap_or_default(),
            inbound,
            routers,
            conn_id,
            tx,
            to_router,
            hello,
            may_take_pushes: who.is_none_or(|w| w.id.kind == Kind::Router),
            registered: None,
            active: Arc::default(),
            windows: Arc::default(),
            uploads,
            bodies: TaskTracker::new(),
        }
    }

    /// Handles one frame from the router: a request admitted comes back as its delivery, to be
    /// polled beside the reader.
    async fn on_frame(&mut self, frame: Frame) -> Result<Option<Delivery>, Close> {
        match frame {
            Frame::Request(req) => return self.on_request(req).await,
            Frame::Cancel { id } => {
                if let Some(t) = lock(&self.active).get(&id) {
                    t.cancel();
                }
            }
            Frame::Reset(r) => self.on_reset(r),
            Frame::Window { id, increment } => {
                if let Some(w) = lock(&self.windows).get(&id) {
                    w.add(increment);
                }
            }
            Frame::Ping { nonce } => {
                let _ = self.tx.send(Frame::Pong { nonce }).await;
            }
            Frame::Release { credits } => self.inbound.released(self.conn_id, credits),
            Frame::Pong { .. }
            | Frame::GoAway { .. }
            | Frame::Credit { .. }
            | Frame::Reclaim { .. }
            | Frame::Response(_) => {}
            Frame::Hello {
                takes_pushes,
                implicit_credit,
                releases_credit,
                streams,
                reads_tracestate,
                reads_headers,
            } => {
                self.hello.implicit_credit = implicit_credit;
                self.hello.reads_headers = reads_headers;
                self.on_hello(takes_pushes, releases_credit, streams, reads_tracestate)
                    .await;
            }
            Frame::Push(_) => {
                tracing::warn!(peer = %self.peer, "PUSH goes from managers to routers; ignored");
            }
            Frame::Data(d) => self.on_data(d),
            Frame::Trailers(t) => {
                if let Some(inbox) = lock(&self.uploads).remove(&t.id) {
                    inbox.finish(End::Done(Some(t)));
                }
            }
        }
        Ok(None)
    }

    /// Spends a credit on a request and admits it to the workers, in arrival order, before any
    /// delivery runs: an acknowledgement then means the event is in this pod's queue.
    async fn on_request(&mut self, req: frame::Request) -> Result<Option<Delivery>, Close> {
        let id = req.id;
        // A head flagged MORE: its body follows in DATA frames, into this inbox (at most a
        // window of it held here at once), read by the delivery as the app takes it.
        let upload = req.more().then(|| {
            let inbox = Inbox::new(stream::WINDOW);
            lock(&self.uploads).insert(id, inbox.clone());
            let peer: Arc<dyn StreamPeer> = self.to_router.clone();
            StreamBody::new(id, inbox, peer, req.payload.clone())
        });
        let no_reply = req.flags & FLAG_NO_REPLY != 0;
        let ack = req.flags & FLAG_ACK != 0;
        if !self.inbound.bank.spent(self.conn_id) {
            tracing::warn!(peer = %self.peer, identity = %self.shown, "router sent a request beyond the credit it holds; closing the connection");
            self.inbound.metrics.mesh.refuse("credit");
            return Err(Close);
        }
        let admission = match self.inbound.worker.admit(&req, upload.is_some()) {
            Ok(a) => a,
            Err(refusal) => {
                let own = self.inbound.finished(self.conn_id);
                let implicit = self.hello.implicit_credit;
                if no_reply && !ack {
                    tracing::warn!(event = %req.event, ce_id = %req.ce_id, status = refusal.status, "published event refused");
                    answer(&self.tx, None, own, implicit).await;
                } else {
                    answer(&self.tx, Some(refusal), own, implicit).await;
                }
                return Ok(None);
            }
        };
        if ack {
            let _ = self.tx.send(Frame::Response(accepted(id))).await;
        }
        let cancel = CancellationToken::new();
        // A published event belongs to this pod once admitted: it is delivered even if its
        // sender's connection ends, so it is not among the cancellable requests.
        if !no_reply && lock(&self.active).insert(id, cancel.clone()).is_some() {
            tracing::warn!(peer = %self.peer, id, "request id reused while in flight; closing the connection");
            return Err(Close);
        }
        let reply = Reply {
            // Only a published event needs these after the delivery: nobody reads its answer.
            published: no_reply.then(|| (req.event.clone(), req.ce_id.clone())),
            // A publish's answer is never read: it never streams.
            streams: self.hello.peer_window.filter(|_| !no_reply),
            id,
            cancel,
            ack,
            reads_headers: self.hello.reads_headers,
            implicit_credit: self.hello.implicit_credit,
            conn_id: self.conn_id,
            inbound: self.inbound.clone(),
            tx: self.tx.clone(),
            active: self.active.clone(),
            windows: self.windows.clone(),
            bodies: self.bodies.clone(),
        };
        Ok(Some(Delivery {
            req,
            admission,
            upload,
            reply,
        }))
    }

    /// The router's client went away from a streamed answer (or it refused the stream).
    fn on_reset(&self, r: switchyard_protocol::stream::Reset) {
        tracing::debug!(peer = %self.peer, id = r.id, code = stream_code(r.code), "stream reset by the router");
        if let Some(inbox) = lock(&self.uploads).remove(&r.id) {
            inbox.finish(End::Reset(r.code));
        }
        if let Some(t) = lock(&self.active).get(&r.id) {
            t.cancel();
        }
        if let Some(w) = lock(&self.windows).get(&r.id) {
            w.close();
        }
    }

    /// The router's HELLO, after its flags for answers and credit are taken.
    async fn on_hello(
        &mut self,
        takes_pushes: bool,
        releases_credit: bool,
        streams: Option<u32>,
        reads_tracestate: bool,
    ) {
        // Answered once: normally before joining, as the first frame; a HELLO that came
        // later (after HELLO_WAIT) is answered after the grant, and until then the router
        // sends no tracestate and no streamed body.
        if !self.hello.answered {
            self.hello.answered = true;
            self.hello.peer_window = answer_hello(&self.tx, streams, reads_tracestate).await;
        }
        if releases_credit {
            self.inbound.releases(self.conn_id);
        }
        if takes_pushes && self.may_take_pushes && self.registered.is_none() {
            self.registered = Some(self.routers.register(self.tx.clone(), reads_tracestate));
        }
    }

    /// A piece of a streamed request body, into its inbox.
    fn on_data(&self, d: switchyard_protocol::stream::Data) {
        let inbox = if d.end {
            lock(&self.uploads).remove(&d.id)
        } else {
            lock(&self.uploads).get(&d.id).cloned()
        };
        // A body nobody reads any more (its delivery ended) is dropped as it comes.
        let Some(inbox) = inbox else { return };
        if inbox.push(d.data).is_err() {
            tracing::warn!(peer = %self.peer, id = d.id, "router overran a request body's window; stream reset");
            lock(&self.uploads).remove(&d.id);
            inbox.finish(End::Reset(switchyard_protocol::stream::code::FLOW_CONTROL));
            self.to_router
                .send(Frame::Reset(switchyard_protocol::stream::Reset {
                    id: d.id,
                    code: switchyard_protocol::stream::code::FLOW_CONTROL,
                    returns_credit: false,
                }));
        } else if d.end {
            inbox.finish(End::Done(None));
        }
    }

    /// The router is gone (or closed after our GOAWAY with nothing pending): stops pushes to it,
    /// gives its credit back and ends what only it could read.
    fn leave(&mut self) {
        self.registered = None;
        // Its unused credits go to the other senders now; its busy ones as their events finish.
        self.inbound.leave(self.conn_id);
        // Answers cannot reach it.
        for t in lock(&self.active).values() {
            t.cancel();
        }
        // Bodies still streaming in end cut: their deliveries see an error, never a whole body.
        for (_, inbox) in lock(&self.uploads).drain() {
            inbox.finish(End::Reset(switchyard_protocol::stream::code::INTERNAL));
        }
    }

    /// After its deliveries: waits for the answers still streaming, then for the writer to send
    /// what is queued.
    async fn close(self, writer: tokio::task::JoinHandle<()>) {
        self.bodies.close();
        self.bodies.wait().await;
        let peer = self.peer;
        drop(self);
        let _ = writer.await;
        tracing::info!(%peer, "router connection closed");
    }
}

/// One admitted request's delivery: the request for the workers, and how it is answered.
struct Delivery {
    req: frame::Request,
    admission: Admission,
    upload: Option<StreamBody>,
    reply: Reply,
}

impl Delivery {
    /// Delivers the request to the app, then sends its answer (or only its credit) back.
    async fn run(self) {
        let Delivery {
            req,
            admission,
            upload,
            reply,
        } = self;
        let handled = reply
            .inbound
            .worker
            .handle(
                req,
                admission,
                reply.cancel.clone(),
                reply.streams.is_some(),
                upload,
            )
            .await
            .map(|(mut head, body)| {
                // A router of an older version would misread them.
                if !reply.reads_headers {
                    head.headers.clear();
                }
                (head, body)
            });
        match &reply.published {
            Some((event, ce_id)) => reply.publish_outcome(handled, event, ce_id).await,
            None => reply.answer(handled).await,
        }
    }
}

/// Where and how one delivery answers on its connection.
struct Reply {
    id: u64,
    cancel: CancellationToken,
    /// The router's per-stream window when this answer may stream.
    streams: Option<u32>,
    /// A published event's type and id: nobody reads its answer.
    published: Option<(String, String)>,
    ack: bool,
    reads_headers: bool,
    implicit_credit: bool,
    conn_id: ConnId,
    inbound: Arc<Inbound>,
    tx: mpsc::Sender<Frame>,
    active: Active,
    windows: Windows,
    bodies: TaskTracker,
}

impl Reply {
    /// A request's answer: whole, or its head now and its body streamed from a task of its own.
    async fn answer(self, handled: Option<Handled>) {
        let resp = match (handled, self.streams) {
            (Some((head, Some(body))), Some(window)) => {
                // A streamed answer's body gets a task of its own: it may run long and move much
                // data. Polled among the connection's deliveries, 1 MB answers ran up to a tenth
                // slower in one A/B (docs/performance-log.md); the spawn is nothing next to the body.
                let bodies = self.bodies.clone();
                bodies.spawn(self.stream(head, body, window));
                return;
            }
            (handled, _) => handled.map(|(r, _)| r),
        };
        let own = self.inbound.finished(self.conn_id);
        lock(&self.active).remove(&self.id);
        answer(&self.tx, resp, own, self.implicit_credit).await;
    }

    /// Streams an answer's body within the router's window, then its last frame and credit.
    async fn stream(self, head: Response, body: AppBody, window: u32) {
        let id = self.id;
        let window = Arc::new(SendWindow::new(window));
        lock(&self.windows).insert(id, window.clone());
        let queue_us = head.queue_us;
        let ended = streamed::pump(&self.tx, head, body, &window, &self.cancel).await;
        lock(&self.windows).remove(&id);
        lock(&self.active).remove(&id);
        let own = self.inbound.finished(self.conn_id);
        let credit = own && self.implicit_credit;
        let _ = self
            .tx
            .send(streamed::last_frame(id, queue_us, ended, credit))
            .await;
        if own && !credit {
            let _ = self.tx.send(Frame::Credit { credits: 1 }).await;
        }
    }

    /// A published event's outcome: only its status, and only when the publisher asked for it.
    async fn publish_outcome(&self, handled: Option<Handled>, event: &str, ce_id: &str) {
        let own = self.inbound.finished(self.conn_id);
        let resp = handled.map(|(r, _)| r);
        if let Some(r) = resp.as_ref().filter(|r| r.status >= 500) {
            // Failed for good (dead-lettered when configured): never silent.
            tracing::warn!(%event, %ce_id, status = r.status, "published event not handled");
        }
        // The publisher wants only the outcome, without the app's body.
        let outcome = self.ack.then(|| Response {
            payload: bytes::Bytes::new(),
            content_type: String::new(),
            ..resp.unwrap_or_else(|| cancelled(self.id))
        });
        answer(&self.tx, outcome, own, self.implicit_credit).await;
    }
}

/// This side's one HELLO, the answer to the router's: it reads a tracestate and a head's headers
/// list, and it speaks streams
/// (with its per-stream window) when the router does. Said only to a router whose HELLO had a flag
/// of this version (streams or tracestate): a previous version would log it as unexpected. Nothing
/// is pushed or released this way: the flags say so. Returns the router's per-stream window when
/// it takes streams (a window of 0 means it takes none).
async fn answer_hello(
    tx: &mpsc::Sender<Frame>,
    streams: Option<u32>,
    reads_tracestate: bool,
) -> Option<u32> {
    let window = streams.and_then(stream::peer_window);
    if streams.is_some() || reads_tracestate {
        let _ = tx
            .send(Frame::Hello {
                reads_headers: true,
                takes_pushes: false,
                implicit_credit: false,
                releases_credit: false,
                streams: window.map(|_| stream::WINDOW),
                reads_tracestate: true,
            })
            .await;
    }
    window
}

fn stream_code(code: u32) -> &'static str {
    switchyard_protocol::stream::code::name(code)
}

/// The outcome of a published event whose delivery was cancelled (the pod drains past its limit).
fn cancelled(id: u64) -> Response {
    Response {
        status: 499,
        ..accepted(id)
    }
}

/// Writes queued frames in batches; a write that does not finish within [`WRITE_TIMEOUT`] (the
/// peer stopped reading) ends it and fires `dead`.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: FrameWriter<W>,
    mut rx: mpsc::Receiver<Frame>,
    dead: CancellationToken,
) {
    while let Some(first) = rx.recv().await {
        let batch = async {
            let mut ok = sink.feed(first).await.is_ok();
            let mut n = 1;
            while ok && n < WRITE_BATCH {
                let Ok(f) = rx.try_recv() else { break };
                ok = sink.feed(f).await.is_ok();
                n += 1;
            }
            ok && sink.flush().await.is_ok()
        };
        let written = tokio::time::timeout(WRITE_TIMEOUT, batch).await;
        if !matches!(written, Ok(true)) {
            dead.cancel();
            // Keep draining the channel so senders never wait on a dead socket.
            while rx.recv().await.is_some() {}
            return;
        }
    }
    let _ = sink.close().await;
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_the_frame_cannot_carry_becomes_the_meshs_502() {
        let ok = Response {
            headers: Vec::new(),
            id: 9,
            status: 201,
            queue_us: 1,
            app_us: 2,
            content_type: "application/json".into(),
            payload: bytes::Bytes::from_static(b"{}"),
            returns_credit: true,
            from_mesh: false,
            more: false,
        };
        assert_eq!(carriable(ok.clone()), ok);
        let long = Response {
            content_type: format!("application/json; x={}", "y".repeat(300)),
            ..ok.clone()
        };
        let r = carriable(long);
        assert_eq!(
            (r.id, r.status, r.from_mesh, r.returns_credit),
            (9, 502, true, true)
        );
        let body = String::from_utf8_lossy(&r.payload).into_owned();
        assert!(body.contains("Content-Type of 320 bytes"), "{body}");
        let big = Response {
            payload: bytes::Bytes::from(vec![b'x'; frame::MAX_PAYLOAD + 4096]),
            ..ok
        };
        let r = carriable(big);
        assert_eq!(r.status, 502);
        assert!(String::from_utf8_lossy(&r.payload).contains("larger than the mesh carries"));
    }
}
