//! Where the app listens: TCP on localhost, or a Unix domain socket the two containers share
//! (`app.transport: unix`), and the one connect both deliveries use.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

/// The app's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AppAddr {
    /// TCP, normally `127.0.0.1:<app.port>`.
    Tcp(SocketAddr),
    /// A Unix domain socket.
    Unix(PathBuf),
}

/// A connection to the app over either transport.
pub(crate) type AppStream = Either<TcpStream, UnixStream>;

impl AppAddr {
    /// The authority requests to the app carry (`Host`, a gRPC channel's URI): the socket address,
    /// or `localhost` for a Unix socket, which has none.
    pub(crate) fn authority(&self) -> String {
        match self {
            AppAddr::Tcp(addr) => addr.to_string(),
            AppAddr::Unix(_) => "localhost".to_owned(),
        }
    }

    /// A new connection. TCP gets no Nagle: answers are small and latency is what counts.
    pub(crate) async fn connect(&self) -> std::io::Result<AppStream> {
        match self {
            AppAddr::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await?;
                let _ = stream.set_nodelay(true);
                Ok(Either::Left(stream))
            }
            AppAddr::Unix(path) => Ok(Either::Right(UnixStream::connect(path).await?)),
        }
    }
}

impl fmt::Display for AppAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppAddr::Tcp(addr) => write!(f, "{addr}"),
            AppAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
