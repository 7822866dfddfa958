//! TLS connections for a tonic server, each carrying who the client is: the accept loop hands
//! every handshake to its own task (bounded in number and time, so slow or silent clients never hold
//! the loop), and a finished connection reaches the service with its [`PeerInfo`] as the requests'
//! connect info. [`bind`] makes listeners whose queue takes a burst of clients. With
//! [`incoming_limited`] every connection is admitted against the listener's [`Limits`] at accept,
//! before any TLS, and holds its place until it closes.

use crate::limit::{ConnLimiter, ConnPermit, Limits};
use crate::peer::Peer;
use crate::tls;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// Handshakes the kernel queues for a listener before it is accepted (capped by
/// `net.core.somaxconn`, 4096 by default). std's and mio's 128 drop the handshakes of a burst of
/// new clients as soon as accepting lags by a few milliseconds (the client counts its connection as
/// open, then gets a reset): 500 router sidecars resubscribing at once to a busy operator lost 41
/// connections so.
pub const BACKLOG: u32 = 4096;

/// A listener on `addr` with [`BACKLOG`]; it rebinds at once after a restart, as std's and mio's
/// do. Needs a Tokio runtime.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Time a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait in the kernel's backlog.
pub const MAX_HANDSHAKES: usize = 256;

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// The TCP peer.
    pub remote: SocketAddr,
    /// The verified client certificate's identity; `None` when the client sent none.
    pub peer: Option<Peer>,
}

/// A handshaken TLS connection and its peer.
pub struct Authenticated {
    inner: TlsStream<TcpStream>,
    info: PeerInfo,
    /// The connection's place under the listener's caps, given back when it is dropped.
    _permit: Option<ConnPermit>,
}

impl Authenticated {
    /// Who is on the other end (for servers that are not tonic's, which read it as connect info).
    pub fn info(&self) -> &PeerInfo {
        &self.info
    }
}

impl tonic::transport::server::Connected for Authenticated {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for Authenticated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Authenticated {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Accepts on `listener` and yields handshaken connections, until the stream is dropped. Failed
/// handshakes are logged at debug and counted by `on_failed`.
pub fn incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    on_failed: impl Fn() + Send + Sync + 'static,
) -> ReceiverStream<Result<Authenticated, io::Error>> {
    accept_loop(listener, acceptor, None, HANDSHAKE_TIMEOUT, move |_| {
        on_failed();
    })
}

/// As [`incoming`], each connection admitted under `limiter`'s caps first: one over a cap is
/// closed at once, and `on_refused` hears why (`connections`, `peer_connections`, `handshake`).
pub fn incoming_limited(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limiter: Arc<ConnLimiter>,
    on_refused: impl Fn(&'static str) + Send + Sync + 'static,
) -> ReceiverStream<Result<Authenticated, io::Error>> {
    let Limits {
        handshake_timeout, ..
    } = limiter.limits();
    accept_loop(
        listener,
        acceptor,
        Some(limiter),
        handshake_timeout,
        on_refused,
    )
}

fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limiter: Option<Arc<ConnLimiter>>,
    handshake_timeout: Duration,
    on_refused: impl Fn(&'static str) + Send + Sync + 'static,
) -> ReceiverStream<Result<Authenticated, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let on_refused = Arc::new(on_refused);
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (stream, remote) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            // Admitted before any TLS work: a peer over its share costs an accept and a close.
            let permit = match limiter.as_ref().map(|l| l.admit(remote.ip())).transpose() {
                Ok(p) => p,
                Err(refused) => {
                    on_refused(refused.reason());
                    tracing::debug!(%remote, reason = refused.reason(), "connection refused");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (acceptor, tx, on_refused) = (acceptor.clone(), tx.clone(), on_refused.clone());
            tokio::spawn(async move {
                let result = tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await;
                drop(slot);
                match result {
                    Ok(Ok(inner)) => {
                        let peer = tls::peer_of(inner.get_ref().1.peer_certificates());
                        let conn = Authenticated {
                            inner,
                            info: PeerInfo { remote, peer },
                            _permit: permit,
                        };
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => {
                        on_refused("handshake");
                        tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    }
                    Err(_) => {
                        on_refused("handshake");
                        tracing::debug!(%remote, "TLS handshake timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
