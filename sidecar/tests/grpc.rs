//! The gRPC path end to end: a generated tonic client -> router sidecar's gRPC listener -> manager
//! sidecar -> app.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use switchyard_protocol::gateway::v1::{CallRequest, ConnectReply, ConnectRequest};
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// Adds the gRPC listener on `port` and gRPC routes beside the HTTP ones.
fn with_grpc(cfg: &mut Value, port: u16) {
    cfg["spec"]["listeners"]["grpc"] = json!({"port": port});
    let routes = cfg["spec"]["routes"].as_array_mut().unwrap();
    routes.extend([
        json!({"event": "noop", "grpc": {"method": "noop"}}),
        json!({"event": "echo", "grpc": {"method": "echo"},
               "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}}),
        json!({"event": "slow", "grpc": {"method": "slow"}, "timeout": "1s"}),
        json!({"event": "fail", "grpc": {"method": "fail"}}),
        json!({"event": "slowish", "grpc": {"method": "slowish"}}),
        // No Manager handles this one.
        json!({"event": "orphan", "grpc": {"method": "orphan"}}),
    ]);
}

async fn mesh(opts: Opts) -> (Mesh, u16) {
    let mesh = Mesh::start_with(opts, |cfg| with_grpc(cfg, 0)).await;
    let port = mesh.grpc();
    (mesh, port)
}

async fn client(port: u16) -> GatewayClient<Channel> {
    let ch = poll(Duration::from_secs(10), "gRPC listener", || async {
        Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    GatewayClient::new(ch)
}

fn call(method: &str, payload: &[u8]) -> CallRequest {
    CallRequest {
        method: method.to_owned(),
        payload: payload.to_vec(),
        metadata: Default::default(),
    }
}

fn timing_names(meta: &tonic::metadata::MetadataMap) -> Vec<String> {
    meta.get("server-timing")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(", ")
        .filter_map(|e| e.split_once(";dur=").map(|(n, _)| n.to_owned()))
        .collect()
}

fn assert_status(s: &Status, code: Code, has: &str) {
    assert_eq!(s.code(), code, "status: {s:?}");
    assert!(
        s.message().contains(has),
        "message {:?} should contain {has:?}",
        s.message()
    );
    assert!(
        timing_names(s.metadata()).contains(&"total".to_owned()),
        "errors carry server-timing: {:?}",
        s.metadata()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_answers_and_edge_checks() {
    let (mesh, port) = mesh(Opts::default()).await;
    let mut c = client(port).await;

    // noop: OK with the same Server-Timing stages as HTTP.
    let r = c.call(call("noop", b"")).await.unwrap();
    assert_eq!(
        timing_names(r.metadata()),
        [
            "listener", "broker", "router", "net", "queue", "app", "total"
        ]
    );
    let reply = r.into_inner();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.payload, b"{}");
    assert_eq!(reply.content_type, "application/json");

    // echo: the payload comes back byte for byte.
    let body = br#"{"value": 42, "note":"x"}"#;
    let reply = c.call(call("echo", body)).await.unwrap().into_inner();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.payload, body);
    assert_eq!(
        mesh.app
            .state
            .headers
            .lock()
            .unwrap()
            .get("ce-type")
            .map(String::as_str),
        Some("echo")
    );

    // The client's traceparent reaches the app.
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut req = tonic::Request::new(call("echo", br#"{"value":1}"#));
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    c.call(req).await.unwrap();
    assert_eq!(
        mesh.app
            .state
            .headers
            .lock()
            .unwrap()
            .get("traceparent")
            .map(String::as_str),
        Some(tp)
    );

    // Over the 4 MiB message limit: refused by tonic's decoder.
    let big = format!("{{\"value\":1,\"pad\":\"{}\"}}", "x".repeat(5 << 20));
    let s = c.call(call("echo", big.as_bytes())).await.unwrap_err();
    assert_eq!(s.code(), Code::OutOfRange, "{s:?}");

    // Bad JSON: INVALID_ARGUMENT naming line and column.
    let s = c
        .call(call("echo", b"{\n  \"value\": ,}"))
        .await
        .unwrap_err();
    assert_status(&s, Code::InvalidArgument, "line 2 column");
    let s = c.call(call("noop", b"not json")).await.unwrap_err();
    assert_status(&s, Code::InvalidArgument, "not valid JSON at line 1 column");

    // Schema: INVALID_ARGUMENT naming the field.
    let s = c.call(call("echo", br#"{"value":"x"}"#)).await.unwrap_err();
    assert_status(&s, Code::InvalidArgument, "field `/value`");
    let s = c.call(call("echo", b"{}")).await.unwrap_err();
    assert_status(&s, Code::InvalidArgument, "field `/value` is required");

    // Unknown method: NOT_FOUND.
    let s = c.call(call("nope", b"{}")).await.unwrap_err();
    assert_status(&s, Code::NotFound, "no gRPC route for method nope");

    // The app's 5xx is its answer, not a gRPC error.
    let reply = c.call(call("fail", b"{}")).await.unwrap().into_inner();
    assert_eq!(reply.status, 500);
    assert_eq!(reply.payload, br#"{"error":"boom"}"#);

    // A Manager-less event type: UNAVAILABLE, retry later.
    let s = c.call(call("orphan", b"{}")).await.unwrap_err();
    assert_status(
        &s,
        Code::Unavailable,
        "no Manager handles event type orphan",
    );
    assert_eq!(
        s.metadata()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_route_and_client() {
    let (_mesh, port) = mesh(Opts::default()).await;
    let mut c = client(port).await;

    // The route's 1 s timeout.
    let t0 = Instant::now();
    let s = c.call(call("slow", b"{}")).await.unwrap_err();
    let took = t0.elapsed();
    assert_status(&s, Code::DeadlineExceeded, "no reply within 1s");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1800),
        "took {took:?}"
    );

    // The client's shorter grpc-timeout wins; the server answers before the client's own timer.
    let mut req = tonic::Request::new(call("slow", b"{}"));
    req.set_timeout(Duration::from_millis(600));
    let t0 = Instant::now();
    let s = c.call(req).await.unwrap_err();
    let took = t0.elapsed();
    assert_status(&s, Code::DeadlineExceeded, "no reply within");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(600),
        "took {took:?}"
    );

    // A longer client timeout than the route's: the route's wins.
    let mut req = tonic::Request::new(call("slow", b"{}"));
    req.set_timeout(Duration::from_secs(10));
    let t0 = Instant::now();
    let s = c.call(req).await.unwrap_err();
    assert_status(&s, Code::DeadlineExceeded, "no reply within 1s");
    assert!(t0.elapsed() < Duration::from_millis(1800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_manager_is_unavailable_with_retry_after() {
    let (_mesh, port) = mesh(Opts {
        start_manager: false,
        ..Opts::default()
    })
    .await;
    let mut c = client(port).await;
    let s = c.call(call("noop", b"{}")).await.unwrap_err();
    assert!(
        matches!(s.code(), Code::Unavailable | Code::ResourceExhausted),
        "{s:?}"
    );
    assert_eq!(
        s.metadata()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert!(timing_names(s.metadata()).contains(&"total".to_owned()));
}

fn connect_req(id: u64, method: &str, payload: &[u8]) -> ConnectRequest {
    ConnectRequest {
        id,
        method: method.to_owned(),
        payload: payload.to_vec(),
    }
}

async fn collect(
    mut replies: tonic::codec::Streaming<ConnectReply>,
    n: usize,
) -> Vec<ConnectReply> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), replies.next()).await {
            Ok(Some(Ok(r))) => out.push(r),
            other => panic!("after {} replies: {other:?}", out.len()),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_streams_many_requests_and_survives_bad_ones() {
    let (_mesh, port) = mesh(Opts::default()).await;
    let mut c = client(port).await;

    // 100 requests (more than the 64 in flight per stream): 100 replies, ids matching.
    let reqs: Vec<ConnectRequest> = (0..100u64)
        .map(|i| {
            if i % 10 == 0 {
                connect_req(i, "noop", b"{}")
            } else {
                connect_req(i, "echo", format!("{{\"value\":{i}}}").as_bytes())
            }
        })
        .collect();
    let replies = c
        .connect(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let got = collect(replies, 100).await;
    let ids: BTreeSet<u64> = got.iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..100).collect::<BTreeSet<u64>>());
    for r in &got {
        assert_eq!(r.error, "", "reply {r:?}");
        assert_eq!(r.status, 200);
        if r.id % 10 != 0 {
            assert_eq!(r.payload, format!("{{\"value\":{}}}", r.id).into_bytes());
        }
    }

    // Bad messages get error replies; the stream stays open for later ones.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut replies = c
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(connect_req(1, "echo", b"{oops")).await.unwrap();
    tx.send(connect_req(2, "nope", b"{}")).await.unwrap();
    tx.send(connect_req(3, "echo", br#"{"value":"x"}"#))
        .await
        .unwrap();
    let mut bad: Vec<ConnectReply> = Vec::new();
    for _ in 0..3 {
        bad.push(
            tokio::time::timeout(Duration::from_secs(10), replies.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    bad.sort_by_key(|r| r.id);
    assert!(
        bad[0].error.starts_with("INVALID_ARGUMENT: "),
        "{:?}",
        bad[0]
    );
    assert!(bad[0].error.contains("line 1 column 2"), "{:?}", bad[0]);
    assert_eq!(bad[0].status, 400);
    assert!(
        bad[1]
            .error
            .starts_with("NOT_FOUND: no gRPC route for method nope"),
        "{:?}",
        bad[1]
    );
    assert!(bad[2].error.contains("field `/value`"), "{:?}", bad[2]);
    tx.send(connect_req(4, "echo", br#"{"value":4}"#))
        .await
        .unwrap();
    let ok = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((ok.id, ok.status, ok.error.as_str()), (4, 200, ""));
    assert_eq!(ok.payload, br#"{"value":4}"#);
    // Half-close: the stream ends cleanly once every reply is out.
    drop(tx);
    let end = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .unwrap();
    assert!(end.is_none(), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_gateway_and_sigterm_drains() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let (mut mesh, port) = mesh(Opts::default()).await;
    let ch = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut refl = ServerReflectionClient::new(ch);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut resp = refl
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let first = resp.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("{first:?}");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"switchyard.v1.Gateway"), "{names:?}");

    // SIGTERM with a Connect stream open: its pending reply still arrives, the stream ends, exit 0.
    let mut c = client(port).await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut replies = c
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(connect_req(7, "noop", b"{}")).await.unwrap();
    let r = replies.next().await.unwrap().unwrap();
    assert_eq!((r.id, r.status), (7, 200));
    mesh.router.sigterm();
    let end = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .unwrap();
    assert!(
        matches!(end, None | Some(Err(_))),
        "the stream ends at the drain: {end:?}"
    );
    drop(tx);
    assert_eq!(
        mesh.router.wait_exit(Duration::from_secs(15)).await,
        Some(0),
        "log: {}",
        mesh.router.log_text()
    );
}

/// `switchyard_in_flight` of the router.
async fn router_in_flight(mesh: &Mesh) -> Option<i64> {
    let r = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.router_admin))
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("switchyard_in_flight "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_holds_at_most_64_in_flight_and_drops_nothing() {
    let (mesh, port) = mesh(Opts::default()).await;
    let mut c = client(port).await;
    // 200 requests of 200 ms on one stream; the manager would take 64 at once (its credits) and the
    // broker 1024, so only the stream's own bound keeps the router at 64.
    let reqs: Vec<ConnectRequest> = (0..200u64)
        .map(|i| connect_req(i, "slowish", b"{}"))
        .collect();
    let replies = c
        .connect(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let done = tokio::spawn(collect(replies, 200));
    let mut max = 0;
    while !done.is_finished() {
        if let Some(n) = router_in_flight(&mesh).await {
            max = max.max(n);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let got = done.await.unwrap();
    let ids: BTreeSet<u64> = got.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 200);
    assert!(got.iter().all(|r| r.status == 200 && r.error.is_empty()));
    assert!(max <= 64, "in flight reached {max}");
    assert!(
        max >= 32,
        "the stream should keep many in flight; saw at most {max}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_client_that_goes_away_cancels_its_calls() {
    let (mesh, port) = mesh(Opts::default()).await;
    let mut c = client(port).await;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(connect_req(1, "slow", b"{}")).await.unwrap();
    let replies = c
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    poll(Duration::from_secs(5), "slow event in flight", || async {
        let m = mesh.manager_metrics().await;
        (metric(&m, "switchyard_in_flight") == 1.0).then_some(())
    })
    .await;
    let gone = Instant::now();
    drop((replies, tx, c));
    // The route's deadline is 1 s and the app sleeps 3 s: a cancel well before 1 s comes from the
    // client going away.
    poll(Duration::from_secs(5), "cancelled delivery", || async {
        let m = mesh.manager_metrics().await;
        let cancelled = r#"switchyard_requests_total{role="manager",event="slow",status="499"}"#;
        (metric(&m, cancelled) == 1.0).then_some(())
    })
    .await;
    assert!(
        gone.elapsed() < Duration::from_millis(800),
        "cancel took {:?}",
        gone.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_overload_is_resource_exhausted_with_retry_after() {
    let mesh = Mesh::start_with(Opts::default(), |cfg| {
        with_grpc(cfg, 0);
        cfg["spec"]["broker"]["queueCapacity"] = json!(2);
    })
    .await;
    let port = mesh.grpc();
    let c = client(port).await;
    let calls = (0..6).map(|_| {
        let mut c = c.clone();
        tokio::spawn(async move { c.call(call("slowish", b"{}")).await })
    });
    let results = futures::future::join_all(calls).await;
    let (mut ok, mut shed) = (0, 0);
    for r in results {
        match r.unwrap() {
            Ok(reply) => {
                assert_eq!(reply.into_inner().status, 200);
                ok += 1;
            }
            Err(s) => {
                assert_status(&s, Code::ResourceExhausted, "too many requests pending");
                assert_eq!(
                    s.metadata()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()),
                    Some("1")
                );
                shed += 1;
            }
        }
    }
    assert!(ok >= 2 && shed >= 1, "ok {ok}, shed {shed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_port_equal_to_http_port_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    // Fixed ports: the config is refused before anything binds.
    let http = 8080;
    let mut cfg = router_config(1, "3s");
    cfg["spec"]["listeners"]["http"]["port"] = json!(http);
    with_grpc(&mut cfg, http);
    let path = write_json(dir.path(), "router.json", &cfg);
    let out = std::process::Command::new(BIN)
        .args([
            "router",
            "--config",
            path.to_str().unwrap(),
            "--bind",
            "127.0.0.1",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("router.json") && err.contains("spec.listeners.grpc.port"),
        "{err}"
    );
}
