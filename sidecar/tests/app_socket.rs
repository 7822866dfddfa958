//! `app.transport: unix`: the manager sidecar reaches its app over the Unix socket named by
//! `SWITCHYARD_APP_SOCKET`, for both app protocols. HTTP client -> router sidecar -> manager
//! sidecar -> an app in this test process listening on the socket only.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_protocol::gateway::v1::handler_server::{Handler, HandlerServer};
use switchyard_protocol::gateway::v1::{CloudEvent, HandleReply};
use tokio::net::UnixListener;

/// What the HTTP app saw: `(ce-type, Host, body)` of each event.
type Seen = Arc<Mutex<Vec<(String, String, Bytes)>>>;

/// An HTTP app on the socket at `path` echoing each event's body, recording what it saw.
fn http_app(path: &Path) -> (Seen, tokio::task::JoinHandle<()>) {
    let listener = UnixListener::bind(path).unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let s = s.clone();
                    async move {
                        let header = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned()
                        };
                        let (ce_type, host) = (header("ce-type"), header("host"));
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        s.lock().unwrap().push((ce_type, host, body.clone()));
                        let mut resp = Response::new(Full::new(body));
                        resp.headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (seen, task)
}

/// A router and a manager whose app is at `socket`, speaking `protocol`. The manager is given the
/// path the way the operator gives it, in `SWITCHYARD_APP_SOCKET`; its `app.port` names a port
/// nothing listens on, so only the socket can answer.
async fn mesh(dir: &Path, socket: &Path, protocol: &str) -> (Proc, Proc, u16) {
    let unused = ClosedPort::new();
    let mut mcfg = manager_config(unused.port, &Opts::default());
    mcfg["app"]["transport"] = json!("unix");
    mcfg["app"]["protocol"] = json!(protocol);
    let mcfg = write_json(dir, "manager.json", &mcfg);
    let socket = socket.to_str().unwrap();
    let (manager, ports) = start_manager(dir, &mcfg, &[("SWITCHYARD_APP_SOCKET", socket)]).await;
    let rcfg = write_json(dir, "router.json", &router_config(ports.listen, "3s"));
    let (router, rports) = start_router(dir, &rcfg, &[], &[]).await;
    (manager, router, rports.http)
}

fn echo(port: u16, value: i64) -> Request<Full<Bytes>> {
    Request::post(format!("http://127.0.0.1:{port}/echo"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(format!("{{\"value\":{value}}}"))))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_events_reach_an_app_on_a_unix_socket_once_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("app.sock");
    let (manager, router, http) = mesh(dir.path(), &socket, "http").await;
    let client = Http::new();

    // Nothing listens yet: the delivery fails (and says so), nothing hangs.
    let r = client.send(echo(http, 1)).await.unwrap();
    assert!(
        r.status >= 500,
        "{} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );

    // The app comes up on the socket; the manager connects there, with no restart.
    let (seen, app) = http_app(&socket);
    let r = poll(
        Duration::from_secs(10),
        "an answer from the app",
        || async {
            let r = client.send(echo(http, 2)).await.ok()?;
            (r.status == 200).then_some(r)
        },
    )
    .await;
    assert_eq!(&r.body[..], b"{\"value\":2}");
    let names: Vec<String> = r.timing().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "app"), "{names:?}");
    // Kept-alive connections carry the next ones.
    for v in 3..6 {
        let r = client.send(echo(http, v)).await.unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let seen = seen.lock().unwrap().clone();
    let echoes: Vec<_> = seen.iter().filter(|(t, _, _)| t == "echo").collect();
    assert_eq!(echoes.len(), 4, "{seen:?}");
    // A Unix socket has no address to put in Host.
    assert!(
        echoes.iter().all(|(_, host, _)| host == "localhost"),
        "{seen:?}"
    );
    app.abort();
    drop((manager, router));
}

struct GrpcApp;

#[tonic::async_trait]
impl Handler for GrpcApp {
    async fn handle(
        &self,
        req: tonic::Request<CloudEvent>,
    ) -> Result<tonic::Response<HandleReply>, tonic::Status> {
        let ev = req.into_inner();
        Ok(tonic::Response::new(HandleReply {
            status: 200,
            data: format!(
                "{{\"type\":\"{}\",\"data\":{}}}",
                ev.r#type,
                String::from_utf8_lossy(&ev.data)
            )
            .into_bytes(),
            content_type: "application/json".into(),
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_events_reach_an_app_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("grpc.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let app = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HandlerServer::new(GrpcApp))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let (manager, router, http) = mesh(dir.path(), &socket, "grpc").await;
    let client = Http::new();
    let r = poll(
        Duration::from_secs(10),
        "an answer from the app",
        || async {
            let r = client.send(echo(http, 7)).await.ok()?;
            (r.status == 200).then_some(r)
        },
    )
    .await;
    assert_eq!(r.json(), json!({"type": "echo", "data": {"value": 7}}));
    app.abort();
    drop((manager, router));
}
