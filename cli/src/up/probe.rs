//! Readiness checks. A bare HTTP/1.1 GET over a TCP stream is enough to read a status line from a local
//! `/readyz` or `/healthz`, and keeps an HTTP client stack out of the CLI.

use super::plan::Probe;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one check may take; a local process that needs longer is not ready.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Does the process answer as ready right now?
pub async fn ready(probe: &Probe) -> bool {
    let check = async {
        match probe {
            Probe::Tcp(addr) => TcpStream::connect(addr).await.is_ok(),
            Probe::Unix(path) => tokio::net::UnixStream::connect(path).await.is_ok(),
            Probe::Http { addr, path } => http_ok(*addr, path).await.unwrap_or(false),
        }
    };
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or(false)
}

async fn http_ok(addr: SocketAddr, path: &str) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // The status line fits in the first read of any sane server; more is not needed.
    let mut buf = [0u8; 64];
    let mut len = 0;
    while len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].contains(&b'\n') {
            break;
        }
    }
    Ok(status_is_ok(&buf[..len]))
}

/// Is this the start of an HTTP response with a 2xx status?
fn status_is_ok(head: &[u8]) -> bool {
    let mut parts = head.split(|&b| b == b' ');
    let version_ok = parts.next().is_some_and(|v| v.starts_with(b"HTTP/1."));
    let status_ok = parts.next().is_some_and(|s| s.len() == 3 && s[0] == b'2');
    version_ok && status_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_lines() {
        assert!(status_is_ok(b"HTTP/1.1 200 OK\r\n"));
        assert!(status_is_ok(b"HTTP/1.0 204 No Content\r\n"));
        assert!(!status_is_ok(b"HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(!status_is_ok(b"SSH-2.0-OpenSSH\r\n"));
        assert!(!status_is_ok(b""));
    }
}
