//! W3C `tracestate` end to end, with real router and manager sidecars: the client's value reaches
//! the app over HTTP, WebSocket and gRPC (and each exported span carries it in its context), an
//! invalid one is dropped, and what the app sends through the local API (publish over HTTP and
//! gRPC, a dead letter) reaches the next Manager's app over the Manager-to-Manager hop.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::otlp::Receiver;
use common::*;
use futures::SinkExt;
use http_body_util::Full;
use serde_json::json;
use std::time::Duration;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use switchyard_protocol::gateway::v1::local_api_client::LocalApiClient;
use switchyard_protocol::gateway::v1::{CallRequest, LocalEvent};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tonic::transport::Endpoint;

const SPAN: &str = "00f067aa0ba902b7";
/// What the client sends, as two header lines with optional spaces ...
const LINES: [&str; 2] = [
    "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7",
    "tenant@vendor=opaque value",
];
/// ... and the one list the mesh carries for it.
const CARRIED: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,tenant@vendor=opaque value";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{SPAN}-01")
}

/// The `tracestate` the app got with the last `echo` event, `None` without one.
fn app_tracestate(mesh: &Mesh) -> Option<String> {
    mesh.app
        .state
        .headers
        .lock()
        .unwrap()
        .get("tracestate")
        .cloned()
}

/// The app's last `echo` trace id (its `traceparent`'s), to tell one request's from another's.
fn app_trace(mesh: &Mesh) -> String {
    let h = mesh.app.state.headers.lock().unwrap();
    let tp = h.get("traceparent").cloned().unwrap_or_default();
    tp.split('-').nth(1).unwrap_or("").to_owned()
}

async fn post_echo(mesh: &Mesh, headers: &[(&str, &str)]) {
    let mut req =
        hyper::Request::post(mesh.url("/echo")).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = mesh
        .client
        .send(
            req.body(Full::new(Bytes::from_static(b"{\"value\":1}")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
}

/// Every span of `trace` (all `n` of them) carries `CARRIED` in its context.
async fn assert_spans_carry(rx: &Receiver, trace: &str, n: usize) {
    let spans = rx.trace(trace, n).await;
    assert_eq!(spans.len(), n, "{spans:#?}");
    for s in &spans {
        assert_eq!(s.trace_state, CARRIED, "{} of {}", s.name, s.service);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_tracestate_reaches_the_app_over_http_websocket_and_grpc() {
    let rx = Receiver::start().await;
    let opts = Opts {
        tracing: Some(json!({"otlpEndpoint": rx.endpoint(), "samplingRatio": 1.0})),
        ..Opts::default()
    };
    let mesh = Mesh::start_with(opts, |cfg| {
        cfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
        cfg["spec"]["listeners"]["websocket"] = json!({"path": "/ws"});
        let routes = cfg["spec"]["routes"].as_array_mut().unwrap();
        routes.push(json!({"event": "echo", "grpc": {"method": "echo"}}));
        routes.push(json!({"event": "echo", "websocket": {"command": "echo"}}));
    })
    .await;

    // HTTP: two header lines are one list; the app gets it, and the router's and manager's six
    // spans of the request carry it (OTLP trace_state).
    let http_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let tp = traceparent(http_trace);
    post_echo(
        &mesh,
        &[
            ("traceparent", &tp),
            ("tracestate", LINES[0]),
            ("tracestate", LINES[1]),
        ],
    )
    .await;
    assert_eq!(app_trace(&mesh), http_trace);
    assert_eq!(app_tracestate(&mesh).as_deref(), Some(CARRIED));
    assert_spans_carry(&rx, http_trace, 6).await;

    // Invalid: dropped whole, the request served.
    let bad_trace = "1bf92f3577b34da6a3ce929d0e0e4736";
    let tp = traceparent(bad_trace);
    post_echo(&mesh, &[("traceparent", &tp), ("tracestate", "ok=1,Bad=2")]).await;
    assert_eq!(app_trace(&mesh), bad_trace);
    assert_eq!(app_tracestate(&mesh), None, "an invalid list is dropped");
    // A tracestate without a valid traceparent belongs to no trace the mesh continues.
    post_echo(
        &mesh,
        &[("traceparent", "00-xyz-01"), ("tracestate", CARRIED)],
    )
    .await;
    assert_ne!(app_trace(&mesh), bad_trace, "a new root");
    assert_eq!(app_tracestate(&mesh), None);
    // Longer than 512 characters: cut the W3C way (the member over 128 characters first).
    let long = format!("big={}", "x".repeat(250));
    let members: Vec<String> = (0..20).map(|i| format!("k{i:02}=v{i:014}")).collect();
    let sent = format!("{},{long}", members.join(","));
    assert!(sent.len() > 512);
    post_echo(&mesh, &[("traceparent", &tp), ("tracestate", &sent)]).await;
    assert_eq!(
        app_tracestate(&mesh).as_deref(),
        Some(members.join(",").as_str())
    );

    // gRPC: the metadata's tracestate.
    let grpc_trace = "2bf92f3577b34da6a3ce929d0e0e4736";
    let ch = poll(Duration::from_secs(10), "gRPC listener", || async {
        Endpoint::from_shared(format!("http://127.0.0.1:{}", mesh.grpc()))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    let mut req = tonic::Request::new(CallRequest {
        method: "echo".into(),
        payload: b"{\"value\":2}".to_vec(),
        metadata: Default::default(),
    });
    let meta = req.metadata_mut();
    meta.insert("traceparent", traceparent(grpc_trace).parse().unwrap());
    meta.append("tracestate", LINES[0].parse().unwrap());
    meta.append("tracestate", LINES[1].parse().unwrap());
    let resp = GatewayClient::new(ch).call(req).await.unwrap();
    assert_eq!(resp.get_ref().status, 200);
    assert_eq!(app_trace(&mesh), grpc_trace);
    assert_eq!(app_tracestate(&mesh).as_deref(), Some(CARRIED));
    assert_spans_carry(&rx, grpc_trace, 6).await;

    // WebSocket: the upgrade request's tracestate goes with each message (each message is a trace
    // of its own, linked to the session's span, which carries it).
    let ws_trace = "3bf92f3577b34da6a3ce929d0e0e4736";
    let mut upgrade = format!("ws://127.0.0.1:{}/ws", mesh.http_port)
        .into_client_request()
        .unwrap();
    let h = upgrade.headers_mut();
    h.insert("traceparent", traceparent(ws_trace).parse().unwrap());
    h.append("tracestate", LINES[0].parse().unwrap());
    h.append("tracestate", LINES[1].parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(upgrade).await.unwrap();
    assert_eq!(resp.status(), 101);
    let before = mesh.app.state.seen("echo").len();
    ws.send(Message::text(
        json!({"command": "echo", "id": 1, "value": 3}).to_string(),
    ))
    .await
    .unwrap();
    poll(
        Duration::from_secs(10),
        "the WebSocket echo at the app",
        || async { (mesh.app.state.seen("echo").len() > before).then_some(()) },
    )
    .await;
    assert_eq!(app_tracestate(&mesh).as_deref(), Some(CARRIED));
    ws.close(None).await.unwrap();
    let session = poll(Duration::from_secs(30), "the session span", || async {
        rx.spans()
            .into_iter()
            .find(|s| s.trace_id == ws_trace && s.name == "WebSocket /ws")
    })
    .await;
    assert_eq!(session.parent, SPAN);
    assert_eq!(session.trace_state, CARRIED);
}

/// `handlers`' local API over gRPC.
async fn local_grpc(mesh: &LocalMesh) -> LocalApiClient<tonic::transport::Channel> {
    let ch = poll(Duration::from_secs(10), "local gRPC API", || async {
        Endpoint::from_shared(mesh.local(""))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    LocalApiClient::new(ch)
}

/// The event `ce_id` of type `ce_type` at `graveyard`'s app, once it arrived.
async fn at_graveyard(mesh: &LocalMesh, ce_type: &str, ce_id: Option<&str>) -> Seen {
    poll(Duration::from_secs(10), "event at graveyard", || async {
        mesh.other_app
            .state
            .seen(ce_type)
            .into_iter()
            .find(|e| ce_id.is_none_or(|id| e.header("ce-id") == id))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apps_tracestate_goes_on_through_the_local_api_and_dead_letters() {
    let mesh = LocalMesh::start().await;
    let tp = traceparent("5bf92f3577b34da6a3ce929d0e0e4736");

    // Publish over HTTP: handlers' sidecar -> graveyard's sidecar -> graveyard's app.
    let req = hyper::Request::post(mesh.local("/v1/publish/audit"))
        .header("content-type", "application/json")
        .header("ce-id", "ts-http")
        .header("traceparent", &tp)
        .header("tracestate", LINES[0])
        .header("tracestate", LINES[1])
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    assert_eq!(mesh.client.send(req).await.unwrap().status, 202);
    let seen = at_graveyard(&mesh, "audit", Some("ts-http")).await;
    assert_eq!(seen.header("tracestate"), CARRIED);

    // Publish over gRPC, with the metadata's tracestate.
    let mut c = local_grpc(&mesh).await;
    let mut req = tonic::Request::new(LocalEvent {
        event: "audit".into(),
        ce_id: "ts-grpc".into(),
        payload: b"{}".to_vec(),
    });
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    req.metadata_mut()
        .insert("tracestate", CARRIED.parse().unwrap());
    c.publish(req).await.unwrap();
    let seen = at_graveyard(&mesh, "audit", Some("ts-grpc")).await;
    assert_eq!(seen.header("tracestate"), CARRIED);
    // Without a tracestate, none arrives (nothing is made up on the way).
    let mut req = tonic::Request::new(LocalEvent {
        event: "audit".into(),
        ce_id: "ts-none".into(),
        payload: b"{}".to_vec(),
    });
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    c.publish(req).await.unwrap();
    let seen = at_graveyard(&mesh, "audit", Some("ts-none")).await;
    assert!(!seen.headers.contains_key("tracestate"), "{seen:?}");

    // A dead letter: router -> handlers (its app fails every attempt) -> graveyard's `dead`.
    let req = hyper::Request::get(mesh.url("/fail"))
        .header("traceparent", &tp)
        .header("tracestate", CARRIED)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(mesh.client.send(req).await.unwrap().status, 502);
    let failed = mesh.app.state.seen("fail");
    assert!(!failed.is_empty());
    for attempt in &failed {
        assert_eq!(
            attempt.header("tracestate"),
            CARRIED,
            "each delivery attempt"
        );
    }
    let dead = at_graveyard(&mesh, "dead", None).await;
    assert_eq!(dead.header("tracestate"), CARRIED);
}
