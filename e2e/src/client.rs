//! A client of a Router from outside its pods, as a user's would be: HTTP (hyper), WebSocket
//! (tokio-tungstenite) and gRPC (tonic) to the router pod's IP, and a bounded load generator that
//! records every request's outcome and latency.

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One HTTP answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// `Server-Timing` header, if any.
    pub server_timing: Option<String>,
    /// Body as text.
    pub body: String,
}

/// HTTP client of one router listener, keeping connections alive like a real client.
#[derive(Clone, Debug)]
pub struct RouterClient {
    addr: SocketAddr,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl RouterClient {
    /// A client of `addr` (the router pod's IP and HTTP port; the caller checked the route).
    pub fn new(addr: SocketAddr) -> RouterClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        connector.set_nodelay(true);
        RouterClient {
            addr,
            http: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
        }
    }

    /// Sends one request; fails on a transport error or when no answer comes within `limit`.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        limit: Duration,
    ) -> Result<Answer> {
        self.send_with(method, path, &[], body, limit).await
    }

    /// [`RouterClient::send`] with further request headers (a credential, a `traceparent`).
    pub async fn send_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
        limit: Duration,
    ) -> Result<Answer> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or("").to_owned())))
            .context("building the request")?;
        let exchange = async {
            let resp = self.http.request(req).await?;
            let status = resp.status().as_u16();
            let server_timing = resp
                .headers()
                .get("server-timing")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok(Answer {
                status,
                server_timing,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| anyhow!("{method} {path}: no answer within {limit:?}"))?
            .with_context(|| format!("{method} {path} to {}", self.addr))
    }

    /// `GET path` with a 10 s limit.
    pub async fn get(&self, path: &str) -> Result<Answer> {
        self.send("GET", path, None, Duration::from_secs(10)).await
    }

    /// `POST path` with a JSON body and a 10 s limit.
    pub async fn post(&self, path: &str, json: &str) -> Result<Answer> {
        self.send("POST", path, Some(json), Duration::from_secs(10))
            .await
    }
}

/// Sends one WebSocket command to `ws://addr/path` and returns its reply (JSON).
pub async fn websocket_command(addr: SocketAddr, path: &str, command: Value) -> Result<Value> {
    let url = format!("ws://{addr}{path}");
    let exchange = async {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url)
            .await
            .with_context(|| format!("connecting {url}"))?;
        ws.send(tokio_tungstenite::tungstenite::Message::text(
            command.to_string(),
        ))
        .await?;
        while let Some(msg) = ws.next().await {
            let msg = msg?;
            if let Ok(text) = msg.to_text()
                && !text.is_empty()
            {
                let v: Value = serde_json::from_str(text)
                    .with_context(|| format!("WebSocket message is not JSON: {text}"))?;
                if v["type"] == "reply" {
                    let _ = ws.close(None).await;
                    return Ok(v);
                }
            }
        }
        bail!("{url} closed before a reply")
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| anyhow!("no WebSocket reply from {url} within 10 s"))?
}

/// gRPC `switchyard.v1.Gateway/Call` on `addr`: (status, payload, server-timing metadata).
pub async fn grpc_call(
    addr: SocketAddr,
    method: &str,
    payload: &[u8],
) -> Result<(i32, Vec<u8>, String)> {
    use switchyard_protocol::gateway::v1::CallRequest;
    use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
    let call = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(3))
            .connect()
            .await
            .with_context(|| format!("connecting gRPC {addr}"))?;
        let resp = GatewayClient::new(channel)
            .call(CallRequest {
                method: method.into(),
                payload: payload.to_vec(),
                ..CallRequest::default()
            })
            .await
            .with_context(|| format!("gRPC Call {method}"))?;
        let timing = resp
            .metadata()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let reply = resp.into_inner();
        anyhow::Ok((reply.status, reply.payload, timing))
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .map_err(|_| anyhow!("no gRPC answer from {addr} within 10 s"))?
}

/// What one request of a load run did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// When it was sent, from the start of the run.
    pub at: Duration,
    /// How long until its answer or failure.
    pub latency: Duration,
    /// Status code, or None for a transport failure or a timeout.
    pub status: Option<u16>,
    /// The failure, if any.
    pub error: Option<String>,
}

/// Bounded load: `workers` clients each sending `GET path` back to back (`pause` between requests)
/// until [`Load::stop`] or `max_duration`, each request limited to `limit`.
pub struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Outcome>>>,
}

impl Load {
    /// Starts the load.
    pub fn start(
        client: &RouterClient,
        path: &str,
        workers: usize,
        pause: Duration,
        limit: Duration,
        max_duration: Duration,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let tasks = (0..workers)
            .map(|_| {
                let (client, path, stop) = (client.clone(), path.to_owned(), stop.clone());
                let done = sent.clone();
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) && start.elapsed() < max_duration {
                        let sent = Instant::now();
                        let r = client.send("GET", &path, None, limit).await;
                        out.push(Outcome {
                            at: sent - start,
                            latency: sent.elapsed(),
                            status: r.as_ref().ok().map(|a| a.status),
                            error: r.err().map(|e| format!("{e:#}")),
                        });
                        done.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(pause).await;
                    }
                    out
                })
            })
            .collect();
        Load { stop, sent, tasks }
    }

    /// Requests finished so far.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// Waits until `n` requests have finished (the load is really running), at most `within`.
    pub async fn wait_sent(&self, n: usize, within: Duration) -> Result<()> {
        let start = Instant::now();
        while self.sent() < n {
            if start.elapsed() > within {
                bail!(
                    "only {} of {n} requests finished within {within:?}",
                    self.sent()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Stops the load and returns every outcome, in the order sent.
    pub async fn stop(self) -> Result<Vec<Outcome>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.context("a load worker panicked")?);
        }
        all.sort_by_key(|o| o.at);
        Ok(all)
    }
}

/// Short summary of a run: count, failures by status, the slowest failure.
pub fn summarize(outcomes: &[Outcome]) -> String {
    let ok = outcomes.iter().filter(|o| o.status == Some(200)).count();
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for o in outcomes.iter().filter(|o| o.status != Some(200)) {
        *by.entry(o.status.map_or_else(|| "error".into(), |s| s.to_string()))
            .or_default() += 1;
    }
    format!(
        "{} requests, {ok} answered 200, others {by:?}",
        outcomes.len()
    )
}
