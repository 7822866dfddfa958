//! Where the app listens: TCP, or the Unix socket its Manager's `app.transport: unix` gives it in
//! `SWITCHYARD_APP_SOCKET` (the sidecar beside it connects there).

use std::io;
use std::path::{Path, PathBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::either::Either;

/// A bound listener of either kind.
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A Unix socket; its file is removed when the listener is dropped.
    Unix(UnixListener, SocketFile),
}

/// An accepted connection of either kind.
pub type Conn = Either<TcpStream, UnixStream>;

/// The socket's file, removed on drop, so a restarted app (or the next `switchyard up`) binds again.
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Listener {
    /// Listens on the Unix socket at `path`, replacing a socket a previous run left there (but no
    /// other kind of file: a mistyped path must not delete one). The socket is made writable by
    /// everyone: the sidecar may run as another user, and the directory it lives in (the pod's own
    /// `emptyDir`) is what keeps others out.
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "the path exists and is not a socket",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        let file = SocketFile(path.to_owned());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Listener::Unix(listener, file))
    }

    /// What to print as the listening address.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("tcp ({e})"), |a| a.to_string()),
            Listener::Unix(_, file) => format!("unix:{}", file.0.display()),
        }
    }

    /// The next connection. TCP gets no Nagle: answers are small and latency is what is measured.
    pub async fn accept(&self) -> io::Result<Conn> {
        match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok(Either::Left(stream))
            }
            Listener::Unix(l, _) => Ok(Either::Right(l.accept().await?.0)),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Listener {
        Listener::Tcp(l)
    }
}
