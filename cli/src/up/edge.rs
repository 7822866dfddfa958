//! A Router's listeners as `switchyard up` prints them: the URLs to call and a command to try. Ports come from
//! the spec, or, once the router is ready, from the file it writes the addresses it bound to (`--ready-file`):
//! a listener declared with port 0 binds any free port and is known only then. Pure.

use anyhow::Context;
use kube::ResourceExt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use switchyard_crds::Router;
use switchyard_crds::router::HttpRoute;

const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// What is printed about one Router's sidecar.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// `https`/`wss` rather than `http`/`ws`.
    pub tls: bool,
    /// HTTP port (0 in the spec: any free port, until bound).
    pub http: u16,
    /// WebSocket path on the HTTP port, if served.
    pub ws_path: Option<String>,
    /// gRPC port, if served.
    pub grpc: Option<u16>,
    /// Admin port.
    pub admin: u16,
    /// Method and path of the route the try command calls.
    pub try_route: Option<(String, String)>,
    /// Where the router writes the addresses it bound once ready.
    pub ready_file: PathBuf,
}

impl Edge {
    /// The listeners of `r` as its spec declares them.
    pub fn of(r: &Router, admin: u16, ready_file: PathBuf) -> anyhow::Result<Edge> {
        let l = &r.spec.listeners;
        let port = |field: &str, p: i32| {
            u16::try_from(p)
                .with_context(|| format!("Router {}: {field}: {p} is not a TCP port", r.name_any()))
        };
        Ok(Edge {
            tls: l.tls.is_some(),
            http: port("spec.listeners.http.port", l.http.port)?,
            ws_path: l.websocket.as_ref().map(|w| w.path.clone()),
            grpc: l
                .grpc
                .as_ref()
                .map(|g| port("spec.listeners.grpc.port", g.port))
                .transpose()?,
            admin,
            try_route: try_route(r),
            ready_file,
        })
    }

    /// The same listeners on the ports the router reports having bound: the text of its ready file, JSON with
    /// `http`, `grpc` (or null) and `admin` addresses.
    pub fn bound(&self, ready_file: &str) -> anyhow::Result<Edge> {
        let v: serde_json::Value = serde_json::from_str(ready_file).context("not JSON")?;
        let port = |field: &str| -> anyhow::Result<Option<u16>> {
            match &v[field] {
                serde_json::Value::Null => Ok(None),
                a => {
                    let a = a
                        .as_str()
                        .with_context(|| format!("{field}: {a} is not an address"))?;
                    let a: SocketAddr = a.parse().with_context(|| format!("{field}: {a:?}"))?;
                    Ok(Some(a.port()))
                }
            }
        };
        Ok(Edge {
            http: port("http")?.context("no http address")?,
            grpc: port("grpc")?,
            admin: port("admin")?.context("no admin address")?,
            ..self.clone()
        })
    }

    /// `http://127.0.0.1:8080  ws://127.0.0.1:8080/ws  grpc 127.0.0.1:50051 (admin :9901)`.
    pub fn listening(&self) -> String {
        let (http, ws) = if self.tls {
            ("https", "wss")
        } else {
            ("http", "ws")
        };
        let mut out = format!("{http}://{LOCALHOST}:{}", self.http);
        if let Some(path) = &self.ws_path {
            out.push_str(&format!("  {ws}://{LOCALHOST}:{}{path}", self.http));
        }
        if let Some(g) = self.grpc {
            out.push_str(&format!("  grpc {LOCALHOST}:{g}"));
        }
        out.push_str(&format!(" (admin :{})", self.admin));
        out
    }

    /// A curl command for the Router's first HTTP route without path parameters (GET routes first).
    pub fn try_command(&self) -> Option<String> {
        let (method, path) = self.try_route.as_ref()?;
        let scheme = if self.tls { "https" } else { "http" };
        let url = format!("{scheme}://{LOCALHOST}:{}{path}", self.http);
        Some(match method.as_str() {
            "GET" => format!("curl -i {url}"),
            m => format!("curl -i -X {m} -H 'content-type: application/json' -d '{{}}' {url}"),
        })
    }
}

/// Method and path of the first HTTP route without path parameters, GET routes first.
fn try_route(r: &Router) -> Option<(String, String)> {
    let http: Vec<&HttpRoute> = r
        .spec
        .routes
        .iter()
        .filter_map(|route| route.http.as_ref())
        .filter(|h| !h.path.contains('{'))
        .collect();
    let method = |h: &HttpRoute| {
        serde_json::to_value(h.method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let route = http
        .iter()
        .find(|h| method(h) == "GET")
        .or_else(|| http.first())?;
    Some((method(route), route.path.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge {
            tls: false,
            http: 0,
            ws_path: Some("/ws".into()),
            grpc: Some(0),
            admin: 9,
            try_route: Some(("GET".into(), "/noop".into())),
            ready_file: PathBuf::from("/state/router-edge.ready.json"),
        }
    }

    #[test]
    fn bound_ports_replace_declared_ones() -> anyhow::Result<()> {
        let e = edge().bound(
            r#"{"http":"127.0.0.1:4101","grpc":"127.0.0.1:4102","admin":"127.0.0.1:4103"}"#,
        )?;
        assert_eq!(
            e.listening(),
            "http://127.0.0.1:4101  ws://127.0.0.1:4101/ws  grpc 127.0.0.1:4102 (admin :4103)"
        );
        assert_eq!(
            e.try_command().as_deref(),
            Some("curl -i http://127.0.0.1:4101/noop")
        );
        let e =
            edge().bound(r#"{"http":"127.0.0.1:4101","grpc":null,"admin":"127.0.0.1:4103"}"#)?;
        assert_eq!(e.grpc, None);
        Ok(())
    }

    #[test]
    fn a_bad_ready_file_is_an_error() {
        assert!(edge().bound("nope").is_err());
        assert!(
            edge()
                .bound(r#"{"grpc":null,"admin":"127.0.0.1:1"}"#)
                .is_err()
        );
        assert!(
            edge()
                .bound(r#"{"http":"x","admin":"127.0.0.1:1"}"#)
                .is_err()
        );
    }
}
