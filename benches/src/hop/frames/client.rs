//! The router side of the streamed frame hop. One multiplexed connection: a writer task
//! fed by a bounded queue, a reader resolving streams by id, request credit from the manager, and per
//! stream a send window (a semaphore of bytes) and a receive window (bytes the peer may still send).

use super::super::Settings;
use super::super::wire::{FLAG_MORE, Frame, code};
use super::{Event, LastRead, WRITE_QUEUE, decoder, write_loop};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Body;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use switchyard_protocol::frame::{Frame as Base, Request, Response};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

/// Why a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The connection is closed or draining: nothing was sent.
    #[error("the connection is closed")]
    Closed,
    /// The connection ended while the stream was open.
    #[error("the connection was lost")]
    Lost,
    /// The manager reset the stream.
    #[error("the manager reset the stream (code {0})")]
    Reset(u32),
}

type Head = (Response, Option<mpsc::UnboundedReceiver<Event>>);

struct Stream {
    head: Option<oneshot::Sender<Result<Head, CallError>>>,
    /// Set once a head with MORE arrived.
    body: Option<mpsc::UnboundedSender<Event>>,
    /// Bytes the manager may still send before a WINDOW; below zero it broke the protocol.
    recv_left: Arc<AtomicI64>,
    /// Bytes this side may still send on the request body.
    window: Arc<Semaphore>,
}

#[derive(Default)]
struct State {
    streams: HashMap<u64, Stream>,
    closed: bool,
}

/// A live connection to a manager.
pub struct Conn {
    tx: mpsc::Sender<Frame>,
    state: Mutex<State>,
    credits: Semaphore,
    next_id: AtomicU64,
    usable: AtomicBool,
    dead: CancellationToken,
    last_read: Arc<LastRead>,
    settings: Settings,
}

/// An answer: its head, and its body when one streams.
pub struct Reply {
    /// Status, timing, content type and the inline part of the body.
    pub head: Response,
    /// The rest of the body.
    pub body: Option<RecvBody>,
}

/// The event to send; `B` is the streamed part of its body.
pub struct Call<B> {
    /// Event type.
    pub event: String,
    /// CloudEvents id.
    pub ce_id: String,
    /// W3C traceparent.
    pub traceparent: String,
    /// Media type of the body.
    pub content_type: String,
    /// Deadline, ms.
    pub deadline_ms: u32,
    /// A body small enough to go in the head.
    pub inline: Bytes,
    /// The rest of the body, streamed in DATA frames.
    pub stream: Option<B>,
}

impl Conn {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether new calls may use this connection.
    pub fn is_usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    fn grant(&self, n: u32) {
        self.credits.add_permits(n as usize);
    }

    /// Sends one event and waits for the head of its answer; the request body streams meanwhile.
    /// Dropping the future (deadline, client gone) resets the stream.
    pub async fn call<B>(self: &Arc<Self>, call: Call<B>) -> Result<Reply, CallError>
    where
        B: Body<Data = Bytes> + Unpin,
    {
        self.credits
            .acquire()
            .await
            .map_err(|_| CallError::Closed)?
            .forget();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let window = Arc::new(Semaphore::new(self.settings.window as usize));
        let recv_left = Arc::new(AtomicI64::new(i64::from(self.settings.window)));
        let (head_tx, head_rx) = oneshot::channel();
        {
            let mut st = self.state();
            if st.closed {
                return Err(CallError::Closed);
            }
            st.streams.insert(
                id,
                Stream {
                    head: Some(head_tx),
                    body: None,
                    recv_left: recv_left.clone(),
                    window: window.clone(),
                },
            );
        }
        let mut guard = ResetOnDrop {
            conn: self,
            id,
            armed: true,
        };
        let more = call.stream.is_some();
        let head = Frame::Base {
            frame: Base::Request(Request {
                headers: Vec::new(),
                id,
                flags: if more { FLAG_MORE } else { 0 },
                deadline_ms: call.deadline_ms,
                event: call.event,
                ce_id: call.ce_id,
                traceparent: call.traceparent,
                tracestate: String::new(),
                content_type: call.content_type,
                payload: call.inline,
            }),
            more,
        };
        self.tx.send(head).await.map_err(|_| CallError::Closed)?;
        let pump = self.pump(id, &window, call.stream);
        let ((), head) = tokio::join!(pump, head_rx);
        let (head, body) = head.map_err(|_| CallError::Lost)??;
        guard.armed = false;
        Ok(Reply {
            head,
            body: body.map(|rx| RecvBody {
                conn: self.clone(),
                id,
                rx,
                recv_left,
                consumed: 0,
                done: false,
                trailers: Vec::new(),
            }),
        })
    }

    /// Streams a request body in DATA frames of at most `max_frame`, each waiting for window; the
    /// body's last chunk carries END (an empty DATA does when the body learns its end late). Stops
    /// when the stream ends early (the window closes); a failing body resets the stream.
    async fn pump<B>(&self, id: u64, window: &Semaphore, body: Option<B>)
    where
        B: Body<Data = Bytes> + Unpin,
    {
        let Some(mut body) = body else { return };
        let max = self.settings.max_frame as usize;
        loop {
            let mut chunk = match body.frame().await {
                None => {
                    let end = Frame::Data {
                        id,
                        end: true,
                        data: Bytes::new(),
                    };
                    let _ = self.tx.send(end).await;
                    return;
                }
                Some(Err(_)) => return self.forget(id),
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    // Request trailers are not carried by the prototype.
                    Err(_) => continue,
                },
            };
            let end = body.is_end_stream();
            if chunk.is_empty() && !end {
                continue;
            }
            loop {
                let piece = chunk.split_to(chunk.len().min(max));
                let last = chunk.is_empty() && end;
                if !piece.is_empty() {
                    match window.acquire_many(piece.len() as u32).await {
                        Ok(p) => p.forget(),
                        Err(_) => return,
                    }
                }
                let data = Frame::Data {
                    id,
                    end: last,
                    data: piece,
                };
                if self.tx.send(data).await.is_err() {
                    return;
                }
                if chunk.is_empty() {
                    break;
                }
            }
            if end {
                return;
            }
        }
    }

    fn forget(&self, id: u64) {
        let gone = self.state().streams.remove(&id);
        if let Some(s) = gone {
            s.window.close();
            if self
                .tx
                .try_send(Frame::Reset {
                    id,
                    code: code::CANCEL,
                })
                .is_err()
            {
                tracing::debug!(id, "reset not sent: write queue full or closed");
            }
        }
    }

    /// A frame from the manager.
    fn on_frame(&self, frame: Frame) {
        match frame {
            Frame::Base {
                frame: Base::Response(r),
                more,
            } => {
                if more {
                    let mut st = self.state();
                    if let Some(s) = st.streams.get_mut(&r.id)
                        && let Some(head) = s.head.take()
                    {
                        let (btx, brx) = mpsc::unbounded_channel();
                        s.body = Some(btx);
                        let _ = head.send(Ok((r, Some(brx))));
                    }
                } else {
                    let s = self.state().streams.remove(&r.id);
                    self.grant(1);
                    if let Some(s) = s {
                        s.window.close();
                        if let Some(head) = s.head {
                            let _ = head.send(Ok((r, None)));
                        }
                    }
                }
            }
            Frame::Data { id, end, data } => {
                let mut st = self.state();
                let Some(s) = st.streams.get(&id) else {
                    drop(st);
                    if end {
                        self.grant(1);
                    }
                    return;
                };
                let len = data.len() as i64;
                if s.recv_left.fetch_sub(len, Ordering::Relaxed) < len {
                    // The manager overran the window it was given: this stream is void.
                    let s = st.streams.remove(&id);
                    drop(st);
                    if let Some(s) = s {
                        s.window.close();
                        if let Some(b) = s.body {
                            let _ = b.send(Event::Reset(code::FLOW_CONTROL));
                        }
                    }
                    let _ = self.tx.try_send(Frame::Reset {
                        id,
                        code: code::FLOW_CONTROL,
                    });
                    return;
                }
                if let Some(b) = &s.body {
                    let _ = b.send(Event::Data { data, last: end });
                }
                if end {
                    let s = st.streams.remove(&id);
                    drop(st);
                    self.grant(1);
                    if let Some(s) = s {
                        s.window.close();
                    }
                }
            }
            Frame::Trailers { id, fields } => {
                let s = self.state().streams.remove(&id);
                self.grant(1);
                if let Some(s) = s {
                    s.window.close();
                    if let Some(b) = s.body {
                        let _ = b.send(Event::Trailers(fields));
                    }
                }
            }
            Frame::Reset { id, code } => {
                let s = self.state().streams.remove(&id);
                self.grant(1);
                if let Some(s) = s {
                    s.window.close();
                    if let Some(head) = s.head {
                        let _ = head.send(Err(CallError::Reset(code)));
                    } else if let Some(b) = s.body {
                        let _ = b.send(Event::Reset(code));
                    }
                }
            }
            Frame::Window { id, increment } => {
                if let Some(s) = self.state().streams.get(&id) {
                    s.window.add_permits(increment as usize);
                }
            }
            Frame::Base {
                frame: Base::Credit { credits },
                ..
            } => self.grant(credits),
            Frame::Base {
                frame: Base::Ping { nonce },
                ..
            } => {
                let _ = self.tx.try_send(Frame::Base {
                    frame: Base::Pong { nonce },
                    more: false,
                });
            }
            Frame::Base {
                frame: Base::GoAway { .. },
                ..
            } => self.usable.store(false, Ordering::Release),
            Frame::Base { .. } => {}
        }
    }

    fn close(&self) {
        self.usable.store(false, Ordering::Release);
        self.credits.close();
        self.dead.cancel();
        let streams = {
            let mut st = self.state();
            st.closed = true;
            std::mem::take(&mut st.streams)
        };
        for (_, s) in streams {
            s.window.close();
            if let Some(head) = s.head {
                let _ = head.send(Err(CallError::Lost));
            }
            // A body's sender dropped here ends its receiver with `Lost`.
        }
    }
}

struct ResetOnDrop<'a> {
    conn: &'a Conn,
    id: u64,
    armed: bool,
}

impl Drop for ResetOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.forget(self.id);
        }
    }
}

/// The streamed part of an answer. Reading it returns window to the manager; dropping it before the
/// end resets the stream.
pub struct RecvBody {
    conn: Arc<Conn>,
    id: u64,
    rx: mpsc::UnboundedReceiver<Event>,
    recv_left: Arc<AtomicI64>,
    consumed: u32,
    done: bool,
    trailers: Vec<(String, String)>,
}

impl RecvBody {
    /// The next chunk; `None` at the end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, CallError>> {
        if self.done {
            return None;
        }
        match self.rx.recv().await {
            Some(Event::Data { data, last }) => {
                if last {
                    self.done = true;
                } else {
                    self.consumed += data.len() as u32;
                    if self.consumed >= self.conn.settings.window / 2 {
                        let increment = std::mem::take(&mut self.consumed);
                        self.recv_left
                            .fetch_add(i64::from(increment), Ordering::Relaxed);
                        let _ = self
                            .conn
                            .tx
                            .send(Frame::Window {
                                id: self.id,
                                increment,
                            })
                            .await;
                    }
                }
                Some(Ok(data))
            }
            Some(Event::Trailers(t)) => {
                self.done = true;
                self.trailers = t;
                None
            }
            Some(Event::Reset(c)) => {
                self.done = true;
                Some(Err(CallError::Reset(c)))
            }
            None => {
                self.done = true;
                Some(Err(CallError::Lost))
            }
        }
    }

    /// The trailer fields, once the body has ended.
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        if !self.done {
            self.conn.forget(self.id);
        }
    }
}

/// Connects to a manager and runs the connection in a task until it dies.
pub async fn connect(addr: &str, settings: Settings) -> std::io::Result<Arc<Conn>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (tx, rx) = mpsc::channel(WRITE_QUEUE);
    let conn = Arc::new(Conn {
        tx,
        state: Mutex::new(State::default()),
        credits: Semaphore::new(0),
        next_id: AtomicU64::new(1),
        usable: AtomicBool::new(true),
        dead: CancellationToken::new(),
        last_read: Arc::default(),
        settings,
    });
    let _ = conn.tx.try_send(Frame::Base {
        frame: Base::Hello {
            reads_headers: false,
            takes_pushes: true,
            implicit_credit: true,
            // The prototype's server never reclaims credit.
            releases_credit: false,
            streams: None,
            reads_tracestate: true,
        },
        more: false,
    });
    let (read, write) = stream.into_split();
    tokio::spawn(write_loop(
        write,
        rx,
        conn.dead.clone(),
        conn.last_read.clone(),
    ));
    let reader = conn.clone();
    tokio::spawn(async move {
        let mut frames = FramedRead::new(read, decoder(settings.max_frame));
        loop {
            let next = tokio::select! {
                f = frames.next() => f,
                _ = reader.dead.cancelled() => break,
            };
            match next {
                Some(Ok(f)) => {
                    reader.last_read.touch();
                    reader.on_frame(f);
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "frame connection failed");
                    break;
                }
                None => break,
            }
        }
        reader.close();
    });
    Ok(conn)
}

impl RecvBody {
    /// As an HTTP body (chunks, then the trailers), for a front door to answer with as it arrives.
    pub fn into_http(
        self,
    ) -> http_body_util::StreamBody<
        impl futures::Stream<Item = Result<hyper::body::Frame<Bytes>, CallError>> + Send,
    > {
        http_body_util::StreamBody::new(futures::stream::unfold(Some(self), |state| async move {
            let mut body = state?;
            match body.chunk().await {
                Some(Ok(b)) => Some((Ok(hyper::body::Frame::data(b)), Some(body))),
                Some(Err(e)) => Some((Err(e), None)),
                None if body.trailers.is_empty() => None,
                None => {
                    let mut map = hyper::HeaderMap::new();
                    for (k, v) in &body.trailers {
                        if let (Ok(k), Ok(v)) = (
                            hyper::header::HeaderName::from_bytes(k.as_bytes()),
                            hyper::header::HeaderValue::from_str(v),
                        ) {
                            map.append(k, v);
                        }
                    }
                    Some((Ok(hyper::body::Frame::trailers(map)), None))
                }
            }
        }))
    }
}
