//! Plain HTTP/1.0 on loopback, enough for the tests' JSON APIs: no chunked bodies, the server closes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// An answer: status, header lines (lowercase names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request with `headers` (`Name: value` lines) and reads the answer to the end.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!(":{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no header end in {text:?}"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no status line in {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// `GET path`.
pub fn get(port: u16, path: &str) -> Result<Answer, String> {
    request(port, "GET", path, &[], "")
}

/// `POST path` with a JSON body.
pub fn post_json(port: u16, path: &str, body: &str) -> Result<Answer, String> {
    request(
        port,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    )
}
