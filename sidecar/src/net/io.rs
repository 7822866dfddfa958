//! Frame connections over any stream: plain TCP or TLS over it. The frame code reads and writes
//! from two tasks, so a stream splits into a read and a write half: TCP into owned halves (no lock
//! between them), TLS through `tokio::io::split` (one rustls session, so one lock; uncontended on
//! the sidecar's single-threaded runtime).

use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A connection that splits into halves the reader and the writer own.
pub(crate) trait SplitIo: Send + 'static {
    /// The read half.
    type Read: AsyncRead + Send + Unpin + 'static;
    /// The write half.
    type Write: AsyncWrite + Send + Unpin + 'static;
    /// Splits the connection.
    fn split_io(self) -> (Self::Read, Self::Write);
}

impl SplitIo for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;

    fn split_io(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl SplitIo for tokio_rustls::client::TlsStream<TcpStream> {
    type Read = ReadHalf<Self>;
    type Write = WriteHalf<Self>;

    fn split_io(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

impl SplitIo for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = ReadHalf<Self>;
    type Write = WriteHalf<Self>;

    fn split_io(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}
