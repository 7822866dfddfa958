//! HTTP/1.1 load: closed loop (each worker sends its next request when the last one answered) and
//! open loop (requests at a fixed rate, latency counted from when each was due, so a stall is not hidden).

use super::{RETRY_PAUSE, Tally, Window};
use anyhow::{Context, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Where to send: the socket address and the request target.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port` to connect to.
    pub authority: String,
    /// Path and query.
    pub path: String,
    /// Request method (GET unless told).
    pub method: Method,
    /// Extra request headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Request body (empty unless told).
    pub body: Bytes,
}

impl Target {
    /// Parses an `http://host:port/path` URL.
    pub fn parse(url: &str) -> anyhow::Result<Target> {
        let uri: Uri = url.parse().with_context(|| format!("bad URL {url:?}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(anyhow!("only http:// URLs are supported, got {url:?}"));
        }
        let auth = uri
            .authority()
            .ok_or_else(|| anyhow!("URL {url:?} has no host"))?;
        let port = auth.port_u16().unwrap_or(80);
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".to_owned());
        Ok(Target {
            authority: format!("{}:{port}", auth.host()),
            path,
            method: Method::GET,
            headers: Vec::new(),
            body: Bytes::new(),
        })
    }

    /// The same target asked with `method` and `headers` (each `Name: value`, as curl and wrk take them).
    pub fn with(mut self, method: &str, headers: &[String]) -> anyhow::Result<Target> {
        self.method = Method::from_bytes(method.as_bytes())
            .map_err(|_| anyhow!("bad HTTP method {method:?}"))?;
        for h in headers {
            self.headers.push(parse_header(h)?);
        }
        Ok(self)
    }

    /// The same target sending `body` with each request.
    pub fn with_body(mut self, body: Option<&str>) -> Target {
        self.body = Bytes::from(body.unwrap_or_default().to_owned());
        self
    }
}

/// `Name: value` into a header; the error names the line and what is wrong with it.
pub fn parse_header(line: &str) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| anyhow!("header {line:?} is not `Name: value`"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| anyhow!("header {line:?} has a bad name"))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| anyhow!("header {line:?} has a bad value"))?;
    Ok((name, value))
}

async fn connect(t: &Target) -> Option<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(&t.authority).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// One request (a GET unless the target says otherwise, with its body) on a kept-alive connection; `false` on any failure or
/// non-2xx status.
async fn get(sender: &mut SendRequest<Full<Bytes>>, t: &Target) -> bool {
    if sender.ready().await.is_err() {
        return false;
    }
    let mut builder = Request::builder()
        .method(t.method.clone())
        .uri(t.path.as_str())
        .header(hyper::header::HOST, t.authority.as_str());
    for (name, value) in &t.headers {
        builder = builder.header(name, value);
    }
    let Ok(req) = builder.body(Full::new(t.body.clone())) else {
        return false;
    };
    match sender.send_request(req).await {
        Ok(resp) => {
            let ok = resp.status().is_success();
            ok && resp.into_body().collect().await.is_ok()
        }
        Err(_) => false,
    }
}

/// A closed-loop worker: as many requests as the target answers until the window ends. With `churn`
/// every request has a connection of its own (connect, one GET, close), as many short-lived clients do.
pub async fn closed_worker(t: Target, w: Window, churn: bool) -> Tally {
    let mut tally = Tally::new();
    let mut sender = None;
    while Instant::now() < w.end {
        let Some(s) = sender.as_mut() else {
            sender = connect(&t).await;
            if sender.is_none() {
                tally.count(&w, Instant::now(), false);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            continue;
        };
        let sent = Instant::now();
        let ok = get(s, &t).await;
        tally.count(&w, sent, ok);
        if !ok || churn {
            sender = None;
        }
    }
    tally
}

/// An open-loop worker `i` of `n`: sends at `rate / n` per second, its slots offset from the others'.
pub async fn open_worker(t: Target, w: Window, rate: f64, i: usize, n: usize) -> Tally {
    let mut tally = Tally::new();
    let mut sender = None;
    let period = Duration::from_secs_f64(n as f64 / rate);
    let mut due = w.begin + Duration::from_secs_f64(i as f64 / rate);
    while due < w.end {
        tokio::time::sleep_until(due).await;
        if sender.is_none() {
            sender = connect(&t).await;
        }
        let ok = match sender.as_mut() {
            Some(s) => get(s, &t).await,
            None => false,
        };
        if !ok {
            sender = None;
        }
        // Latency from when the request was due, not when it went out (no coordinated omission).
        if due >= w.start {
            tally.count(&w, due, ok);
        }
        due += period;
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_refuses_what_it_cannot_drive() {
        let t = Target::parse("http://127.0.0.1:8080/noop?x=1").expect("parses");
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path, "/noop?x=1");
        assert_eq!(
            Target::parse("http://localhost").expect("parses").authority,
            "localhost:80"
        );
        assert!(Target::parse("https://x/").is_err());
        assert!(Target::parse("not a url").is_err());
    }

    #[test]
    fn takes_a_method_and_headers_and_names_a_bad_one() {
        let t = Target::parse("http://127.0.0.1:1/x")
            .and_then(|t| t.with("POST", &["ce-type: noop".to_owned()]))
            .expect("valid");
        assert_eq!(t.method, Method::POST);
        assert_eq!(t.headers[0].0.as_str(), "ce-type");
        assert_eq!(t.headers[0].1, "noop");
        let bad = Target::parse("http://127.0.0.1:1/x")
            .and_then(|t| t.with("GET", &["no colon".to_owned()]))
            .map(|_| ())
            .expect_err("refused");
        assert!(bad.to_string().contains("no colon"), "{bad}");
        assert!(
            Target::parse("http://127.0.0.1:1/x")
                .and_then(|t| t.with("GE T", &[]))
                .is_err()
        );
    }
}
