//! Which sidecars `switchyard top` reads and how: admin addresses on this machine (from a running
//! `switchyard up`'s state file, or given), or a cluster's Router and Manager pods through the API
//! server's pod proxy (`/api/v1/namespaces/NS/pods/POD:9901/proxy/metrics`).

use super::prom;
use super::stats::Scrape;
use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Longest wait for one sidecar's `/metrics`.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest `/metrics` body read.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// Pod labels naming a Router's and a Manager's pods (`switchyard_operator::render::meta`).
const ROUTER_LABEL: &str = "switchyard.dev/router";
const MANAGER_LABEL: &str = "switchyard.dev/manager";

/// One local sidecar.
#[derive(Clone, Debug)]
pub struct Local {
    /// `router`, `manager` or `sidecar`.
    pub role: String,
    /// Its name.
    pub name: String,
    /// Admin address.
    pub admin: SocketAddr,
}

/// Where the sidecars are.
pub enum Source {
    /// Admin addresses on this machine.
    Local(Vec<Local>),
    /// Pods of a cluster: every namespace, or one.
    Cluster {
        /// API client from the kubeconfig.
        client: kube::Client,
        /// `None`: every namespace.
        namespace: Option<String>,
        /// A further label selector.
        selector: Option<String>,
    },
}

impl Source {
    /// Reads every sidecar's `/metrics` once.
    pub async fn scrape(&self) -> anyhow::Result<Vec<Scrape>> {
        match self {
            Source::Local(list) => {
                // A handful of sidecars on loopback: one after the other is fast enough, and keeps order.
                let mut out = Vec::with_capacity(list.len());
                for l in list {
                    out.push(Scrape {
                        role: l.role.clone(),
                        name: l.name.clone(),
                        address: l.admin.to_string(),
                        samples: local_metrics(l.admin).await,
                    });
                }
                Ok(out)
            }
            Source::Cluster {
                client,
                namespace,
                selector,
            } => cluster(client, namespace.as_deref(), selector.as_deref()).await,
        }
    }
}

/// `GET /metrics` from an admin server (HTTP/1.0: no chunked body to decode).
async fn local_metrics(addr: SocketAddr) -> Result<Vec<prom::Sample>, String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: switchyard-top\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.take(MAX_BODY as u64)
            .read_to_end(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            return Err(head.lines().next().unwrap_or_default().to_owned());
        }
        prom::parse(body)
    };
    match tokio::time::timeout(SCRAPE_TIMEOUT, get).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {SCRAPE_TIMEOUT:?}")),
    }
}

/// The Running Router and Manager pods and their metrics, through the pod proxy.
async fn cluster(
    client: &kube::Client,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> anyhow::Result<Vec<Scrape>> {
    let pods: kube::Api<Pod> = match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    let mut out = Vec::new();
    for (role, label) in [("router", ROUTER_LABEL), ("manager", MANAGER_LABEL)] {
        let labels = match selector {
            Some(s) => format!("{label},{s}"),
            None => label.to_owned(),
        };
        let list = pods
            .list(&ListParams::default().labels(&labels))
            .await
            .with_context(|| format!("listing pods matching {labels}"))?;
        for pod in list {
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let (Some(name), Some(ns)) =
                (pod.metadata.name.clone(), pod.metadata.namespace.clone())
            else {
                continue;
            };
            if !running {
                continue;
            }
            let path = format!(
                "/api/v1/namespaces/{ns}/pods/{name}:{}/proxy/metrics",
                switchyard_protocol::ports::ADMIN
            );
            let samples = match http_get(client, &path).await {
                Ok(text) => prom::parse(&text),
                Err(e) => Err(e),
            };
            out.push(Scrape {
                role: role.to_owned(),
                name: format!("{ns}/{name}"),
                address: path,
                samples,
            });
        }
    }
    Ok(out)
}

async fn http_get(client: &kube::Client, path: &str) -> Result<String, String> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(SCRAPE_TIMEOUT, client.request_text(req)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {SCRAPE_TIMEOUT:?}")),
    }
}
