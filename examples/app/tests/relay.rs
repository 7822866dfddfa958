//! `relay` carries the event's whole trace context (traceparent and tracestate) to the local API.
//! The local API here is a stand-in on loopback that records what it was sent; the sidecar's real
//! local API is tested with this app in the sidecar's and the CLI's tests.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use switchyard_example_app::Handlers;
use switchyard_example_app::trace::Trace;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const STATE: &str = "vendor=opaque,other=1";

/// A local API that answers every request with `{"value":1}` and sends its headers to the test.
async fn stand_in() -> (String, mpsc::Receiver<HeaderMap>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(req.headers().clone()).await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                        br#"{"value":1}"#,
                    ))))
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
        }
    });
    (url, rx)
}

#[tokio::test]
async fn relay_carries_traceparent_and_tracestate_as_they_came() {
    let (url, mut seen) = stand_in().await;
    let handlers = Handlers::new(Some(&url));
    let trace = Trace {
        parent: Some(PARENT.to_owned()),
        state: Some(STATE.to_owned()),
    };
    let a = handlers
        .answer(
            "relay",
            Some("application/json"),
            &trace,
            Bytes::from_static(br#"{"value":1}"#),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let headers = seen.recv().await.expect("the local API was called");
    assert_eq!(
        headers.get("traceparent").map(|v| v.as_bytes()),
        Some(PARENT.as_bytes())
    );
    assert_eq!(
        headers.get("tracestate").map(|v| v.as_bytes()),
        Some(STATE.as_bytes())
    );

    // Without a tracestate, none is made up.
    let only_parent = Trace {
        parent: Some(PARENT.to_owned()),
        state: None,
    };
    handlers
        .answer(
            "relay",
            Some("application/json"),
            &only_parent,
            Bytes::new(),
        )
        .await;
    let headers = seen.recv().await.expect("the local API was called");
    assert!(headers.get("tracestate").is_none(), "{headers:?}");
}
