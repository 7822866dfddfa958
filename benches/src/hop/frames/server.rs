//! The manager side of the streamed frame hop: grants credit, starts one task per request stream, feeds
//! request bodies to it within the stream's window, and answers as a manager sidecar with no app behind
//! would ([`crate::hop::answer`]). A stream's last frame returns its credit; a stream the router reset
//! returns it in a CREDIT frame.

use super::super::wire::{Frame, code};
use super::super::{NOOP_ANSWER, Scenario, Settings, answer, body};
use super::{Event, LastRead, WRITE_QUEUE, decoder, write_loop};
use bytes::Bytes;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use switchyard_protocol::frame::{Frame as Base, Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

struct InStream {
    body: Option<mpsc::UnboundedSender<Event>>,
    recv_left: Arc<AtomicI64>,
    window: Arc<Semaphore>,
    cancel: CancellationToken,
}

#[derive(Clone, Default)]
struct Streams(Arc<Mutex<HashMap<u64, InStream>>>);

impl Streams {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, InStream>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Accepts router connections until the process ends.
pub async fn serve(listener: TcpListener, settings: Settings) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, settings));
    }
}

async fn connection(stream: TcpStream, settings: Settings) {
    let (read, write) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Frame>(WRITE_QUEUE);
    let dead = CancellationToken::new();
    let last_read = Arc::new(LastRead::default());
    tokio::spawn(write_loop(write, rx, dead.clone(), last_read.clone()));
    let _ = tx
        .send(Frame::Base {
            frame: Base::Credit {
                credits: settings.credits,
            },
            more: false,
        })
        .await;
    let streams = Streams::default();
    let mut frames = FramedRead::new(read, decoder(settings.max_frame));
    loop {
        let next = tokio::select! {
            f = frames.next() => f,
            _ = dead.cancelled() => break,
        };
        let frame = match next {
            Some(Ok(f)) => f,
            _ => break,
        };
        last_read.touch();
        match frame {
            Frame::Base {
                frame: Base::Request(req),
                more,
            } => {
                let window = Arc::new(Semaphore::new(settings.window as usize));
                let recv_left = Arc::new(AtomicI64::new(i64::from(settings.window)));
                let cancel = CancellationToken::new();
                let (btx, brx) = if more {
                    let (t, r) = mpsc::unbounded_channel();
                    (Some(t), Some(r))
                } else {
                    (None, None)
                };
                let id = req.id;
                let stream = InStream {
                    body: btx,
                    recv_left: recv_left.clone(),
                    window: window.clone(),
                    cancel: cancel.clone(),
                };
                if streams.lock().insert(id, stream).is_some() {
                    tracing::warn!(id, "stream id reused while open; closing");
                    break;
                }
                let task = Task {
                    id,
                    tx: tx.clone(),
                    streams: streams.clone(),
                    window,
                    cancel,
                    settings,
                };
                let body = brx.map(|rx| InBody {
                    rx,
                    tx: tx.clone(),
                    id,
                    recv_left,
                    consumed: 0,
                    half: settings.window / 2,
                });
                tokio::spawn(task.local(req, body));
            }
            Frame::Data { id, end, data } => {
                let mut st = streams.lock();
                let Some(s) = st.get_mut(&id) else { continue };
                let len = data.len() as i64;
                if s.recv_left.fetch_sub(len, Ordering::Relaxed) < len {
                    if let Some(s) = st.remove(&id) {
                        s.cancel.cancel();
                        s.window.close();
                    }
                    drop(st);
                    let _ = tx.try_send(Frame::Reset {
                        id,
                        code: code::FLOW_CONTROL,
                    });
                    continue;
                }
                if let Some(b) = &s.body {
                    let _ = b.send(Event::Data { data, last: end });
                }
                if end {
                    s.body = None;
                }
            }
            Frame::Trailers { id, fields } => {
                if let Some(s) = streams.lock().get_mut(&id)
                    && let Some(b) = s.body.take()
                {
                    let _ = b.send(Event::Trailers(fields));
                }
            }
            Frame::Reset { id, code } => {
                if let Some(s) = streams.lock().remove(&id) {
                    s.cancel.cancel();
                    s.window.close();
                    if let Some(b) = s.body {
                        let _ = b.send(Event::Reset(code));
                    }
                }
            }
            Frame::Window { id, increment } => {
                if let Some(s) = streams.lock().get(&id) {
                    s.window.add_permits(increment as usize);
                }
            }
            Frame::Base {
                frame: Base::Ping { nonce },
                ..
            } => {
                let _ = tx.try_send(Frame::Base {
                    frame: Base::Pong { nonce },
                    more: false,
                });
            }
            Frame::Base { .. } => {}
        }
    }
    dead.cancel();
    for s in streams.lock().values() {
        s.cancel.cancel();
        s.window.close();
    }
}

/// A request body arriving on a stream; reading it returns window to the router.
pub struct InBody {
    rx: mpsc::UnboundedReceiver<Event>,
    tx: mpsc::Sender<Frame>,
    id: u64,
    recv_left: Arc<AtomicI64>,
    consumed: u32,
    half: u32,
}

impl InBody {
    /// The next chunk, `Ok(None)` at the end, `Err` when the router reset the stream.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ()> {
        match self.rx.recv().await {
            Some(Event::Data { data, last }) => {
                if !last {
                    self.consumed += data.len() as u32;
                    if self.consumed >= self.half {
                        let increment = std::mem::take(&mut self.consumed);
                        self.recv_left
                            .fetch_add(i64::from(increment), Ordering::Relaxed);
                        let _ = self
                            .tx
                            .send(Frame::Window {
                                id: self.id,
                                increment,
                            })
                            .await;
                    }
                } else {
                    // The next read ends the body.
                    self.rx.close();
                }
                Ok(Some(data))
            }
            Some(Event::Trailers(_)) | None => Ok(None),
            Some(Event::Reset(_)) => Err(()),
        }
    }
}

/// One request stream being answered: the head, DATA within the window, and the last frame.
pub struct Task {
    id: u64,
    tx: mpsc::Sender<Frame>,
    streams: Streams,
    window: Arc<Semaphore>,
    cancel: CancellationToken,
    settings: Settings,
}

/// A RESPONSE head.
pub fn response(id: u64, status: u16, app_us: u32, content_type: &str, payload: Bytes) -> Response {
    Response {
        headers: Vec::new(),
        id,
        status,
        queue_us: 0,
        app_us,
        content_type: content_type.to_owned(),
        payload,
        returns_credit: true,
        from_mesh: false,
        more: false,
    }
}

impl Task {
    /// This stream's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the router reset the stream.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }

    async fn local(self, req: Request, body: Option<InBody>) {
        let start = Instant::now();
        let app_us = || start.elapsed().as_micros() as u32;
        match answer::scenario(&req.event) {
            Some(Scenario::Noop) => {
                let r = response(
                    self.id,
                    200,
                    app_us(),
                    "application/json",
                    NOOP_ANSWER.into(),
                );
                self.finish(Some(head(r, false))).await;
            }
            Some(Scenario::Upload) => {
                let mut n = req.payload.len();
                if let Some(mut body) = body {
                    loop {
                        let next = tokio::select! {
                            c = body.chunk() => c,
                            _ = self.cancel.cancelled() => Err(()),
                        };
                        match next {
                            Ok(Some(c)) => n += c.len(),
                            Ok(None) => break,
                            Err(()) => return self.finish(None).await,
                        }
                    }
                }
                let answer = Bytes::from(format!("{{\"bytes\":{n}}}"));
                let r = response(self.id, 200, app_us(), "application/json", answer);
                self.finish(Some(head(r, false))).await;
            }
            Some(Scenario::Download) => {
                let n = answer::download_size(&req.payload);
                let r = response(self.id, 200, 0, "application/octet-stream", Bytes::new());
                let mut ok = self.send_head(r).await;
                for chunk in body::chunks(n, self.settings.chunk) {
                    ok = ok && self.send_data(chunk).await;
                }
                if ok {
                    let fields = vec![(
                        "server-timing".to_owned(),
                        answer::timing_trailer(0, app_us()),
                    )];
                    self.finish(Some(Frame::Trailers {
                        id: self.id,
                        fields,
                    }))
                    .await;
                } else {
                    self.finish(None).await;
                }
            }
            None => {
                let r = response(self.id, 404, 0, "text/plain", Bytes::new());
                self.finish(Some(head(r, false))).await;
            }
        }
    }

    /// Sends a head whose body follows in DATA frames; `false` when the stream is gone.
    pub async fn send_head(&self, r: Response) -> bool {
        self.send(head(r, true)).await
    }

    /// Sends a chunk in DATA frames of at most `max_frame`, each within the window; `false` when the
    /// stream was reset.
    pub async fn send_data(&self, mut chunk: Bytes) -> bool {
        let max = self.settings.max_frame as usize;
        while !chunk.is_empty() {
            let piece = chunk.split_to(chunk.len().min(max));
            let permit = tokio::select! {
                p = self.window.acquire_many(piece.len() as u32) => p,
                _ = self.cancel.cancelled() => return false,
            };
            match permit {
                Ok(p) => p.forget(),
                Err(_) => return false,
            }
            let data = Frame::Data {
                id: self.id,
                end: false,
                data: piece,
            };
            if !self.send(data).await {
                return false;
            }
        }
        true
    }

    async fn send(&self, frame: Frame) -> bool {
        !self.cancel.is_cancelled() && self.tx.send(frame).await.is_ok()
    }

    /// Ends the stream: its last frame carries the credit back (a RESET when the answer could not be
    /// made), unless the router reset it first, in which case a CREDIT frame does.
    pub async fn finish(&self, last: Option<Frame>) {
        let open = self.streams.lock().remove(&self.id).is_some();
        let frame = match last {
            Some(f) if open => f,
            None if open => Frame::Reset {
                id: self.id,
                code: code::INTERNAL,
            },
            _ => Frame::Base {
                frame: Base::Credit { credits: 1 },
                more: false,
            },
        };
        let _ = self.tx.send(frame).await;
    }
}

/// A RESPONSE frame; only one without `more` returns the credit.
pub fn head(mut r: Response, more: bool) -> Frame {
    if more {
        r.returns_credit = false;
    }
    Frame::Base {
        frame: Base::Response(r),
        more,
    }
}
