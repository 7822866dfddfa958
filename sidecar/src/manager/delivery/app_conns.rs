//! Keep-alive HTTP/1 connections to the app, at most one per busy worker slot, reused last-in first-out.
//!
//! Replaces hyper-util's legacy pooled client on the delivery path: that client spawns a task per HTTP/1
//! answer to hand the connection back to its pool and keys its pool by host on every request; a manager
//! talks to exactly one app address, so a stack of idle senders is all the pooling it needs.

use super::app_addr::AppAddr;
use super::app_body::{AppBody, Idle, Sender};
use crate::net::stream::out_body::OutBody;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as _;
use hyper::client::conn::http1;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle connections older than this are closed rather than reused: the app may have dropped them.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an exchange with the app gave no answer. Every case is a delivery the app did not complete,
/// so the worker may retry it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AppError {
    /// The app's authority cannot be a `Host` header (never for a socket address; kept typed anyway).
    #[error("host {0}: not a header value")]
    Host(AppAddr),
    /// No connection within the connect timeout.
    #[error("connecting to {0} timed out")]
    ConnectTimeout(AppAddr),
    /// The connection was refused or failed.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The app's address.
        addr: AppAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The app closed a fresh connection before the request could go out.
    #[error("the app closed the connection")]
    Closed,
    /// HTTP/1 failed (handshake, writing the request, reading the head): the chain of causes.
    #[error("{0}")]
    Http(String),
    /// The reply body could not be read, or was larger than a frame carries.
    #[error("reading the reply: {0}")]
    Body(String),
}

/// What the app answered.
pub(crate) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Media type of the body, empty when none.
    pub content_type: String,
    /// The fields that pass to the client (`switchyard_protocol::headers::RESPONSE`).
    pub headers: switchyard_protocol::headers::Fields,
    /// Body (empty when it streams).
    pub body: Bytes,
    /// The body, unread, when it streams.
    pub stream: Option<AppBody>,
}

/// Largest answer read whole when the app could stream it: one a known length this small is as
/// good as complete at its head, and one frame carries it with its head (the small-event path).
const INLINE_MAX: u64 = 64 * 1024;

/// Connections to one app address.
pub(crate) struct AppConns {
    addr: AppAddr,
    host: HeaderValue,
    idle: Arc<Idle>,
}

impl AppConns {
    /// Connections to `addr`, keeping at most `max_idle` open between requests.
    pub(crate) fn new(addr: AppAddr, max_idle: usize) -> Result<AppConns, AppError> {
        let host =
            HeaderValue::from_str(&addr.authority()).map_err(|_| AppError::Host(addr.clone()))?;
        Ok(AppConns {
            addr,
            host,
            idle: Arc::new(Idle::new(max_idle)),
        })
    }

    /// The most recently used open connection, if any is fresh enough.
    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.stack();
        while let Some((sender, since)) = idle.pop() {
            if since.elapsed() >= IDLE_TIMEOUT {
                // Everything below is older still.
                idle.clear();
                return None;
            }
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Sender, AppError> {
        let addr = &self.addr;
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, addr.connect())
            .await
            .map_err(|_| AppError::ConnectTimeout(addr.clone()))?
            .map_err(|source| AppError::Connect {
                addr: addr.clone(),
                source,
            })?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| AppError::Http(super::outcome::error_chain(&e)))?;
        tokio::spawn(async move {
            // The app closing an idle connection is normal; the next request opens another.
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Sends `req` (its URI in origin form, `/path`) and reads the answer, taking at most `max_body`
    /// bytes of body. A reused connection that turns out closed before the request went out is
    /// replaced by a new one, once: the app never saw that request. With `stream`, an answer that
    /// is not small and of known length is handed back unread, to be streamed as the app writes
    /// it; its connection is reused only once that body was read to its end, so no request waits
    /// behind a long stream.
    pub(crate) async fn exchange(
        &self,
        mut req: Request<OutBody>,
        max_body: usize,
        stream: bool,
    ) -> Result<Answer, AppError> {
        req.headers_mut().insert(HOST, self.host.clone());
        let (mut sender, mut reused) = match self.take_idle() {
            Some(s) => (s, true),
            None => (self.connect().await?, false),
        };
        let resp = loop {
            if sender.ready().await.is_err() {
                if reused {
                    sender = self.connect().await?;
                    reused = false;
                    continue;
                }
                return Err(AppError::Closed);
            }
            match sender.try_send_request(req).await {
                Ok(r) => break r,
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        req = unsent;
                        sender = self.connect().await?;
                        reused = false;
                    }
                    _ => return Err(AppError::Http(super::outcome::error_chain(e.error()))),
                },
            }
        };
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let headers =
            switchyard_protocol::headers::pick(switchyard_protocol::headers::RESPONSE, |n| {
                resp.headers().get(n).map(HeaderValue::as_bytes)
            });
        let small = {
            let b = resp.body();
            hyper::body::Body::is_end_stream(b)
                || b.size_hint().exact().is_some_and(|n| n <= INLINE_MAX)
        };
        if stream && !small {
            return Ok(Answer {
                status,
                content_type,
                headers,
                body: Bytes::new(),
                stream: Some(AppBody::new(resp.into_body(), sender, self.idle.clone())),
            });
        }
        let body = Limited::new(resp.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| AppError::Body(e.to_string()))?
            .to_bytes();
        // The whole answer was read, so the connection is ready for the next request.
        self.idle.give_back(sender);
        Ok(Answer {
            status,
            content_type,
            headers,
            body,
            stream: None,
        })
    }
}

/// The origin-form request target of `uri` (`/path?query`), which an HTTP/1 connection sends.
pub(crate) fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query()
        .map(|pq| Uri::from(pq.clone()))
        .unwrap_or_else(|| Uri::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::net::TcpListener;

    /// An app on loopback answering `ok`; counts the connections it accepted.
    async fn app(keep_alive: bool) -> (AppAddr, Arc<AtomicUsize>) {
        app_answering(keep_alive, Bytes::from_static(b"ok")).await
    }

    /// An app on loopback answering `body` (with its length); counts the connections it accepted.
    async fn app_answering(keep_alive: bool, body: Bytes) -> (AppAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(stream, keep_alive, body.clone()));
            }
        });
        (AppAddr::Tcp(addr), accepted)
    }

    /// Serves one connection, answering `body` to every request.
    async fn answer<S>(stream: S, keep_alive: bool, body: Bytes)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(keep_alive)
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |_req| {
                    let body = body.clone();
                    async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(body))) }
                }),
            )
            .await;
    }

    fn request() -> Request<OutBody> {
        Request::post("/events")
            .body(OutBody::from(Full::new(Bytes::from_static(b"{}"))))
            .expect("request")
    }

    #[tokio::test]
    async fn a_kept_alive_connection_serves_the_next_request() {
        let (addr, accepted) = app(true).await;
        let conns = AppConns::new(addr, 4).expect("conns");
        for _ in 0..3 {
            let a = conns
                .exchange(request(), 1024, false)
                .await
                .expect("answer");
            assert_eq!((a.status, &a.body[..]), (200, &b"ok"[..]));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_closed_connection_is_replaced_not_reported() {
        let (addr, accepted) = app(false).await;
        let conns = AppConns::new(addr, 4).expect("conns");
        for _ in 0..3 {
            let a = conns
                .exchange(request(), 1024, false)
                .await
                .expect("answer");
            assert_eq!(a.status, 200);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_streamed_answer_read_to_its_end_gives_its_connection_back() {
        let big = Bytes::from(vec![7u8; INLINE_MAX as usize + 1]);
        let (addr, accepted) = app_answering(true, big.clone()).await;
        let conns = AppConns::new(addr, 4).expect("conns");
        for _ in 0..3 {
            let a = conns.exchange(request(), 1024, true).await.expect("answer");
            let body = a.stream.expect("streams: larger than inline");
            let read = body.collect().await.expect("whole").to_bytes();
            assert_eq!(read, big);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_streamed_answer_dropped_unfinished_takes_its_connection_with_it() {
        let big = Bytes::from(vec![7u8; 4 << 20]);
        let (addr, accepted) = app_answering(true, big).await;
        let conns = AppConns::new(addr, 4).expect("conns");
        for _ in 0..2 {
            let a = conns.exchange(request(), 1024, true).await.expect("answer");
            let mut body = a.stream.expect("streams");
            // One chunk of the 4 MiB body, then give up: the app is still writing the rest.
            assert!(body.frame().await.is_some());
            drop(body);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_oversize_answer_is_an_error() {
        let (addr, _) = app(true).await;
        let conns = AppConns::new(addr, 4).expect("conns");
        assert!(conns.exchange(request(), 1, false).await.is_err());
    }

    #[tokio::test]
    async fn a_unix_socket_app_is_reached_and_its_connection_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("app.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(stream, true, Bytes::from_static(b"over unix")));
            }
        });
        let conns = AppConns::new(AppAddr::Unix(path), 4).expect("conns");
        for _ in 0..3 {
            let a = conns
                .exchange(request(), 1024, false)
                .await
                .expect("answer");
            assert_eq!((a.status, &a.body[..]), (200, &b"over unix"[..]));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_missing_socket_names_its_path() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("absent.sock");
        let conns = AppConns::new(AppAddr::Unix(path.clone()), 4).expect("conns");
        let e = conns
            .exchange(request(), 1024, false)
            .await
            .err()
            .expect("no app listens there");
        assert!(
            e.to_string()
                .contains(&format!("connecting to unix:{}", path.display())),
            "{e}"
        );
    }

    #[test]
    fn the_request_target_is_the_path() {
        let uri: Uri = "http://127.0.0.1:8000/events?x=1".parse().expect("uri");
        assert_eq!(origin_form(&uri), "/events?x=1");
    }
}
