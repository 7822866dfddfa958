//! The handler over real loopback HTTP/1.1: the server runs in-process on port 0, a hyper client sends
//! CloudEvents in binary mode over one keep-alive connection.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(switchyard_example_app::serve(listener, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn client(&self) -> SendRequest<Full<Bytes>> {
        let stream = TcpStream::connect(self.addr).await.expect("connect");
        let (send, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        send
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task
            .await
            .expect("server task")
            .expect("server result");
    }
}

struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

async fn send(client: &mut SendRequest<Full<Bytes>>, req: Request<Full<Bytes>>) -> Answer {
    client.ready().await.expect("connection ready");
    let resp = client.send_request(req).await.expect("response");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Answer {
        status,
        content_type,
        body,
    }
}

fn event(
    ce_type: Option<&str>,
    content_type: Option<&str>,
    body: &'static str,
) -> Request<Full<Bytes>> {
    let mut b = Request::post("/events")
        .header("host", "app")
        .header("ce-id", "1")
        .header("ce-source", "/test")
        .header("ce-specversion", "1.0")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
    if let Some(t) = ce_type {
        b = b.header("ce-type", t);
    }
    if let Some(ct) = content_type {
        b = b.header("content-type", ct);
    }
    b.body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("request")
}

#[tokio::test]
async fn answers_each_event_type_on_one_keep_alive_connection() {
    let server = Server::start().await;
    let mut c = server.client().await;

    let a = send(&mut c, event(Some("noop"), None, "")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.content_type.as_deref(), Some("application/json"));
    assert_eq!(a.json(), serde_json::json!({"ok": true}));

    let a = send(
        &mut c,
        event(Some("echo"), Some("text/plain; charset=utf-8"), "hello"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.content_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(&a.body[..], b"hello");

    let a = send(&mut c, event(Some("burn"), None, "")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json(), serde_json::json!({"burned_ms": 2}));

    let a = send(
        &mut c,
        event(Some("burn"), Some("application/json"), r#"{"ms":5}"#),
    )
    .await;
    assert_eq!(a.json(), serde_json::json!({"burned_ms": 5}));

    let a = send(
        &mut c,
        event(Some("bytes"), Some("application/json"), r#"{"n":100000}"#),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.content_type.as_deref(), Some("application/octet-stream"));
    assert_eq!(a.body.len(), 100_000);

    // Still the same connection: HTTP/1.1 keep-alive held across all of the above.
    assert!(!c.is_closed());
    server.stop().await;
}

#[tokio::test]
async fn burn_caps_ms_and_rejects_bad_parameters() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let a = send(&mut c, event(Some("burn"), None, r#"{"ms":-3}"#)).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.content_type.as_deref(), Some("application/problem+json"));
    assert!(
        a.json()["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("ms:"))
    );
    server.stop().await;
}

#[tokio::test]
async fn unknown_type_is_404_problem() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let a = send(&mut c, event(Some("launch"), None, "")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.content_type.as_deref(), Some("application/problem+json"));
    assert_eq!(
        a.json(),
        serde_json::json!({
            "type": "about:blank",
            "title": "Unknown event type",
            "status": 404,
            "detail": "no handler for event type launch",
        })
    );
    server.stop().await;
}

#[tokio::test]
async fn missing_type_is_400_problem() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let a = send(&mut c, event(None, None, "")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.content_type.as_deref(), Some("application/problem+json"));
    assert_eq!(a.json()["status"], 400);
    assert_eq!(a.json()["title"], "Missing ce-type header");
    server.stop().await;
}

#[tokio::test]
async fn healthz_and_wrong_methods() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let get = |path: &str| {
        Request::get(path)
            .header("host", "app")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    assert_eq!(send(&mut c, get("/healthz")).await.status, StatusCode::OK);
    let a = send(&mut c, get("/events")).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.content_type.as_deref(), Some("application/problem+json"));
    server.stop().await;
}

#[tokio::test]
async fn oversize_data_is_413() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let big = vec![b'x'; switchyard_example_app::MAX_BODY_BYTES + 1];
    let req = Request::post("/events")
        .header("host", "app")
        .header("ce-type", "echo")
        .body(Full::new(Bytes::from(big)))
        .expect("request");
    assert_eq!(
        send(&mut c, req).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    server.stop().await;
}

/// Reads from `conn` until a blank line ends a response head; returns the head.
async fn read_head(conn: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = conn.read(&mut byte).await.expect("read");
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_burn_finish() {
    let mut server = Server::start().await;
    let mut conn = TcpStream::connect(server.addr).await.expect("connect");
    let body = r#"{"ms":200}"#;
    // `Expect: 100-continue` makes the request's progress observable: hyper sends `100 Continue`
    // when the handler starts reading the body, so the request is in the handler from then on.
    let head = format!(
        "POST /events HTTP/1.1\r\nhost: app\r\nce-id: 1\r\nce-source: /test\r\nce-specversion: 1.0\r\n\
         ce-type: burn\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         expect: 100-continue\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("write head");
    let interim = read_head(&mut conn).await;
    assert!(interim.starts_with("HTTP/1.1 100 Continue"), "{interim}");
    // Shutdown starts while the request is in flight; its burn runs during the drain.
    if let Some(stop) = server.stop.take() {
        let _ = stop.send(());
    }
    conn.write_all(body.as_bytes()).await.expect("write body");
    let mut answer = String::new();
    conn.read_to_string(&mut answer)
        .await
        .expect("the answer, then the close");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"burned_ms":200}"#), "{answer}");
    server
        .task
        .await
        .expect("server task")
        .expect("server result");
}

#[tokio::test]
async fn relay_without_a_local_api_is_503_problem() {
    // The test process has no SWITCHYARD_LOCAL_API unless a developer exported one.
    if std::env::var_os(switchyard_example_app::LOCAL_API_ENV).is_some() {
        panic!("unset SWITCHYARD_LOCAL_API to run this test");
    }
    let server = Server::start().await;
    let mut c = server.client().await;
    let a = send(
        &mut c,
        event(Some("relay"), Some("application/json"), r#"{"value":1}"#),
    )
    .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        a.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("SWITCHYARD_LOCAL_API")),
        "{:?}",
        a.json()
    );
    server.stop().await;
}
