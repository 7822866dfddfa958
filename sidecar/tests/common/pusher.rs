//! A stand-in manager sidecar that sends PUSH frames: a frame server in the test process (real TCP,
//! the real `FrameCodec`) that a router config lists as a static endpoint. It exists because the
//! manager's local API (which will publish pushes from the app) is not built yet; it grants credit,
//! answers pings, answers any request 200 `{}`, and sends whatever `push` is given.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use switchyard_protocol::frame::{Frame, FrameCodec, Push, Response};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;

pub struct Pusher {
    pub port: u16,
    tx: mpsc::UnboundedSender<Frame>,
    connected: Arc<AtomicBool>,
}

impl Pusher {
    pub async fn start() -> Pusher {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::unbounded_channel::<Frame>();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let connected = Arc::new(AtomicBool::new(false));
        let flag = connected.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let rx = rx.clone();
                let flag = flag.clone();
                tokio::spawn(async move {
                    // One router connection at a time takes the pushes.
                    let mut rx = rx.lock().await;
                    let mut framed = Framed::new(stream, FrameCodec::default());
                    if framed.send(Frame::Credit { credits: 64 }).await.is_err() {
                        return;
                    }
                    flag.store(true, Ordering::SeqCst);
                    loop {
                        tokio::select! {
                            f = framed.next() => match f {
                                Some(Ok(Frame::Ping { nonce })) => {
                                    let _ = framed.send(Frame::Pong { nonce }).await;
                                }
                                Some(Ok(Frame::Request(r))) => {
                                    let resp = Frame::Response(Response {
                                        headers: Vec::new(),
                                        id: r.id,
                                        status: 200,
                                        queue_us: 0,
                                        app_us: 0,
                                        content_type: "application/json".into(),
                                        payload: Bytes::from_static(b"{}"),
                                        // Like a manager from before implicit credit: the CREDIT frame follows.
                                        returns_credit: false,
                                        from_mesh: false,
                                        more: false,
                                    });
                                    let _ = framed.send(resp).await;
                                    let _ = framed.send(Frame::Credit { credits: 1 }).await;
                                }
                                Some(Ok(_)) => {}
                                _ => break,
                            },
                            p = rx.recv() => match p {
                                Some(frame) => {
                                    if framed.send(frame).await.is_err() {
                                        break;
                                    }
                                }
                                None => break,
                            },
                        }
                    }
                    flag.store(false, Ordering::SeqCst);
                });
            }
        });
        Pusher {
            port,
            tx,
            connected,
        }
    }

    /// Waits until a router is connected.
    pub async fn wait_connected(&self) {
        let c = self.connected.clone();
        super::poll(
            Duration::from_secs(10),
            "router connected to the pusher",
            || {
                let c = c.clone();
                async move { c.load(Ordering::SeqCst).then_some(()) }
            },
        )
        .await;
    }

    /// Sends a JSON PUSH of `event`.
    pub fn push(&self, event: &str, payload: impl Into<Bytes>) {
        self.push_typed(event, "application/json", payload);
    }

    /// Sends a PUSH with the given media type.
    pub fn push_typed(&self, event: &str, content_type: &str, payload: impl Into<Bytes>) {
        self.tx
            .send(Frame::Push(Push {
                event: event.into(),
                traceparent: String::new(),
                tracestate: String::new(),
                content_type: content_type.into(),
                payload: payload.into(),
            }))
            .unwrap();
    }
}
