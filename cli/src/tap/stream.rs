//! One sidecar's tap, read: `GET /tap?...` over a connection (a local TCP one or a port-forward's
//! stream) as HTTP/1.0, so the body is the raw lines until the sidecar closes it. Each line is
//! handed on as JSON; a refusal comes back as the sidecar's problem detail.

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::io::{
    AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufReader,
};
use tokio::sync::mpsc;

/// Longest head, and longest line read (an event's headers and payload are bounded well below).
const MAX_HEAD: u64 = 16 * 1024;
const MAX_LINE: u64 = 1024 * 1024;

/// What a sidecar's reader reports.
pub enum Msg {
    /// A line from sidecar `0`.
    Line(String, Value),
    /// Sidecar `0`'s tap ended: closed by the sidecar, or failed.
    Ended(String, anyhow::Result<()>),
}

/// Reads the tap `path_and_query` of sidecar `from` over `io` into `tx` until it ends; a closed
/// `tx` (the command is done) ends it too.
pub async fn follow<S>(
    io: S,
    path_and_query: &str,
    from: &str,
    tx: &mpsc::Sender<Msg>,
) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut r = BufReader::new(io);
    r.get_mut()
        .write_all(
            format!("GET {path_and_query} HTTP/1.0\r\nHost: switchyard-tap\r\n\r\n").as_bytes(),
        )
        .await
        .context("sending the tap request")?;
    let status = head(&mut r).await?;
    if status != 200 {
        let mut body = Vec::new();
        (&mut r).take(MAX_HEAD).read_to_end(&mut body).await?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let detail = v["detail"].as_str().map_or_else(
            || String::from_utf8_lossy(&body).trim().to_owned(),
            str::to_owned,
        );
        bail!("the sidecar answered {status}: {detail}");
    }
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut r).take(MAX_LINE).read_until(b'\n', &mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        if buf.last() != Some(&b'\n') {
            bail!("a line of more than {MAX_LINE} bytes, or cut short");
        }
        let v: Value = serde_json::from_slice(&buf)
            .with_context(|| format!("not a JSON line: {}", String::from_utf8_lossy(&buf)))?;
        if tx.send(Msg::Line(from.to_owned(), v)).await.is_err() {
            return Ok(());
        }
    }
}

/// Reads the response head; its status.
async fn head<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> anyhow::Result<u16> {
    let mut head = Vec::new();
    loop {
        let n = r.take(MAX_HEAD).read_until(b'\n', &mut head).await?;
        if n == 0 {
            bail!("the connection closed before an answer");
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        if head.len() as u64 >= MAX_HEAD {
            bail!("an answer head of more than {MAX_HEAD} bytes");
        }
    }
    let text = String::from_utf8_lossy(&head);
    let first = text.lines().next().unwrap_or_default();
    first
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP answer: {first:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::DuplexStream;

    /// A sidecar that reads one request head and answers `answer`, then closes; the head it read.
    fn sidecar(answer: &'static str) -> (DuplexStream, tokio::task::JoinHandle<String>) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let task = tokio::spawn(async move {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && server.read(&mut byte).await.unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = server.write_all(answer.as_bytes()).await;
            String::from_utf8_lossy(&head).into_owned()
        });
        (client, task)
    }

    async fn run(answer: &'static str) -> (anyhow::Result<()>, Vec<Value>, String) {
        let (io, task) = sidecar(answer);
        let (tx, mut rx) = mpsc::channel(16);
        let result = follow(io, "/tap?type=a", "router edge", &tx).await;
        drop(tx);
        let mut lines = Vec::new();
        while let Some(Msg::Line(from, v)) = rx.recv().await {
            assert_eq!(from, "router edge");
            lines.push(v);
        }
        (result, lines, task.await.unwrap_or_default())
    }

    #[tokio::test]
    async fn lines_are_read_until_the_sidecar_closes() {
        let (result, lines, head) = run(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\r\n{\"kind\":\"tapping\"}\n{\"kind\":\"event\",\"type\":\"a\"}\n",
        )
        .await;
        assert!(result.is_ok(), "{result:?}");
        assert!(head.starts_with("GET /tap?type=a HTTP/1.0\r\n"), "{head}");
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["type"], "a");
    }

    #[tokio::test]
    async fn a_refusal_is_told_with_the_sidecars_detail() {
        let (result, lines, _) = run(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\n\r\n{\"status\":400,\"detail\":\"payload=\\\"9999\\\": a whole number from 0 to 4096\"}",
        )
        .await;
        let e = format!("{:#}", result.expect_err("refused"));
        assert!(
            e.contains("answered 400") && e.contains("a whole number from 0 to 4096"),
            "{e}"
        );
        assert!(lines.is_empty());
    }

    #[tokio::test]
    async fn broken_answers_are_errors_not_panics() {
        for (answer, says) in [
            ("", "closed before an answer"),
            ("SSH-2.0-x\r\n\r\n", "not an HTTP answer"),
            ("HTTP/1.1 200 OK\r\n\r\nnot json\n", "not a JSON line"),
            ("HTTP/1.1 200 OK\r\n\r\n{\"kind\":\"ev", "cut short"),
        ] {
            let (result, _, _) = run(answer).await;
            let e = format!("{:#}", result.expect_err(answer));
            assert!(e.contains(says), "{answer:?}: {e}");
        }
    }
}
