//! Delivery to an app that implements the `switchyard.v1.Handler` gRPC service (`app.protocol: grpc`):
//! HTTP client -> router sidecar -> manager sidecar -> gRPC app in this test process.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_protocol::gateway::v1::handler_server::{Handler, HandlerServer};
use switchyard_protocol::gateway::v1::{CloudEvent, HandleReply};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

#[derive(Default)]
struct Seen {
    /// Attempts at `fail`, which fails the first two with INTERNAL (retried like an HTTP 500).
    fail_attempts: AtomicUsize,
    /// The last `echo` event and its `traceparent` metadata.
    last_echo: Mutex<Option<(CloudEvent, Option<String>)>>,
}

struct App(Arc<Seen>);

#[tonic::async_trait]
impl Handler for App {
    async fn handle(&self, req: Request<CloudEvent>) -> Result<Response<HandleReply>, Status> {
        let traceparent = req
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let ev = req.into_inner();
        let reply = |status: i32, data: &[u8]| {
            Ok(Response::new(HandleReply {
                status,
                data: data.to_vec(),
                content_type: String::new(),
            }))
        };
        match ev.r#type.as_str() {
            "noop" => reply(0, b"{}"),
            "echo" => {
                let data = ev.data.clone();
                *self.0.last_echo.lock().unwrap() = Some((ev, traceparent));
                reply(201, &data)
            }
            // Retried by the manager (5xx-like), then answered.
            "fail" => {
                if self.0.fail_attempts.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(Status::internal("not yet"))
                } else {
                    reply(200, b"{\"third\":true}")
                }
            }
            "slowish" => Err(Status::invalid_argument("field `x` is required")),
            _ => Err(Status::not_found("no handler")),
        }
    }
}

/// The app serving on `listener` until the token is cancelled; the task ends once the server has
/// closed its listener and every connection.
fn start_app(
    listener: tokio::net::TcpListener,
    seen: Arc<Seen>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let s = stop.clone();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(HandlerServer::new(App(seen)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                s.cancelled_owned(),
            )
            .await
            .unwrap();
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_app_answers_retries_and_maps_errors() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let (stop, app) = start_app(listener, seen.clone());
    let mesh = Mesh::start(Opts {
        grpc_app_port: Some(port),
        ..Opts::default()
    })
    .await;

    let r = mesh.client.get(&mesh.url("/noop")).await.unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"{}"[..]));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let names: Vec<String> = r.timing().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "app"), "{names:?}");

    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let req = hyper::Request::post(mesh.url("/echo"))
        .header("content-type", "application/json")
        .header("traceparent", tp)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"{\"value\":7}",
        )))
        .unwrap();
    let r = mesh.client.send(req).await.unwrap();
    assert_eq!((r.status, &r.body[..]), (201, &b"{\"value\":7}"[..]));
    let (ev, meta_tp) = seen.last_echo.lock().unwrap().clone().unwrap();
    assert_eq!(ev.r#type, "echo");
    assert_eq!(ev.spec_version, "1.0");
    assert_eq!(ev.source, "/switchyard/default/handlers");
    assert_eq!(ev.data_content_type, "application/json");
    assert_eq!(ev.id.len(), 32, "ce id {:?}", ev.id);
    // The trace continues toward the app: same trace id, in metadata and as an extension.
    let meta_tp = meta_tp.unwrap();
    assert_eq!(meta_tp.split('-').nth(1), tp.split('-').nth(1));
    assert_eq!(ev.extensions.get("traceparent"), Some(&meta_tp));

    let r = mesh.client.get(&mesh.url("/fail")).await.unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        seen.fail_attempts.load(Ordering::SeqCst),
        3,
        "retried twice"
    );

    let r = mesh.client.get(&mesh.url("/slowish")).await.unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let detail = r.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("field `x` is required"), "{detail}");

    // The app goes away: answers fail fast with 502, never hang.
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), app)
        .await
        .expect("the app stops")
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), mesh.client.get(&mesh.url("/noop")))
        .await
        .expect("no hang")
        .unwrap();
    assert_eq!(r.status, 502, "{:?}", r.body);

    // And it comes back, on the port it had until a moment ago.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let _app = start_app(listener, seen.clone());
    poll(Duration::from_secs(15), "app back", || async {
        let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
        (r.status == 200).then_some(())
    })
    .await;
}
