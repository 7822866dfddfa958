//! The manager's local API with real processes: the test plays the app of Manager `handlers` and
//! publishes, requests and pushes through its sidecar; Manager `graveyard` has its own app.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use hyper::Request;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_protocol::gateway::v1::LocalEvent;
use switchyard_protocol::gateway::v1::local_api_client::LocalApiClient;
use tonic::transport::{Channel, Endpoint};

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn trace_id(tp: &str) -> &str {
    tp.split('-').nth(1).unwrap_or("")
}

async fn post(mesh: &LocalMesh, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut req = Request::post(mesh.local(path)).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    mesh.client
        .send(
            req.body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_owned(),
            )))
            .unwrap(),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reaches_the_other_managers_app_with_id_and_trace() {
    let mesh = LocalMesh::start().await;
    let r = post(
        &mesh,
        "/v1/publish/audit",
        &[("ce-id", "order-42"), ("traceparent", TRACE)],
        r#"{"order":42}"#,
    )
    .await;
    assert_eq!(r.status, 202, "{:?}", r.body);
    assert_eq!(r.json()["id"], "order-42");
    let seen = poll(
        Duration::from_secs(10),
        "audit event at graveyard",
        || async {
            mesh.other_app
                .state
                .seen("audit")
                .into_iter()
                .find(|e| e.header("ce-id") == "order-42")
        },
    )
    .await;
    assert_eq!(&seen.body[..], br#"{"order":42}"#);
    // Delivered by graveyard's sidecar (the frame carries no source of its own yet).
    assert_eq!(seen.header("ce-source"), "/switchyard/default/graveyard");
    assert_eq!(trace_id(seen.header("traceparent")), trace_id(TRACE));

    // Without ce-id, one is generated and reported.
    let r = post(&mesh, "/v1/publish/audit", &[], r#"{"order":43}"#).await;
    assert_eq!(r.status, 202);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    assert_eq!(r.header("ce-id"), Some(id.as_str()));
    poll(Duration::from_secs(10), "generated id arrives", || async {
        mesh.other_app
            .state
            .seen("audit")
            .into_iter()
            .find(|e| e.header("ce-id") == id)
    })
    .await;
    let m = mesh.handlers_metrics().await;
    assert!(
        metric(
            &m,
            r#"switchyard_local_api_requests_total{op="publish",status="202"}"#
        ) >= 2.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_returns_the_reply_and_honours_the_timeout() {
    let mesh = LocalMesh::start().await;
    let r = post(&mesh, "/v1/request/audit", &[], r#"{"value":5}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), json!({"value": 5}));

    // The query's timeout is honoured when it suffices.
    let r = post(&mesh, "/v1/request/echo?timeout=5s", &[], r#"{"value":6}"#).await;
    assert_eq!(r.json(), json!({"value": 6}));

    let r = post(&mesh, "/v1/request/slow?timeout=300ms", &[], "{}").await;
    assert_eq!(r.status, 504, "{:?}", r.body);
    let r = post(&mesh, "/v1/request/slow", &[("timeout", "300ms")], "{}").await;
    assert_eq!(r.status, 504);
    let r = post(&mesh, "/v1/request/echo?timeout=soon", &[], "{}").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["detail"].as_str().unwrap().contains("timeout"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_and_missing_managers_get_problems() {
    let mesh = LocalMesh::start().await;
    // No Manager handles the type: 503 + Retry-After, as at the router's edge (the routing table may
    // not have arrived yet, and nothing was sent, so a retry is safe).
    let r = post(&mesh, "/v1/publish/nobody", &[], "{}").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.json()["detail"].as_str().unwrap().contains("nobody"));
    let r = post(&mesh, "/v1/request/nobody", &[], "{}").await;
    assert_eq!(r.status, 503);

    // `haunt` is routed to a Manager whose sidecar never runs.
    let r = post(&mesh, "/v1/publish/haunt", &[], "{}").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    let r = post(&mesh, "/v1/request/haunt", &[], "{}").await;
    assert_eq!(r.status, 503);

    let r = post(&mesh, "/v1/publish/audit", &[], "{nope").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["detail"].as_str().unwrap().contains("line 1"));
    let r = mesh
        .client
        .post(&mesh.local("/v1/publish/audit"), "text/plain", "hi")
        .await
        .unwrap();
    assert_eq!(r.status, 415);
    let r = post(&mesh, "/v1/publish/Not.Valid", &[], "{}").await;
    assert_eq!(r.status, 400);
    let r = post(&mesh, "/v1/publish/audit", &[("ce-id", "has space")], "{}").await;
    assert_eq!(r.status, 400);
    let r = post(&mesh, "/v2/anything", &[], "{}").await;
    assert_eq!(r.status, 404);
    let r = mesh
        .client
        .get(&mesh.local("/v1/publish/audit"))
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    // Refused while the app is still sending: the sidecar reads on and drops the rest, so the app
    // reads its 413 rather than a reset connection, every time.
    let big = format!("[{}1]", "1,".repeat(4_000_000));
    for _ in 0..10 {
        let r = post(&mesh, "/v1/publish/audit", &[], &big).await;
        assert_eq!(r.status, 413);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_reaches_the_dead_letter_managers_app_after_retries() {
    let mesh = LocalMesh::start().await;
    let req = Request::get(mesh.url("/fail"))
        .header("traceparent", TRACE)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let r = mesh.client.send(req).await.unwrap();
    assert_eq!(r.status, 502);
    assert_eq!(
        mesh.app
            .state
            .fail_attempts
            .load(std::sync::atomic::Ordering::SeqCst),
        3
    );
    let dead = poll(
        Duration::from_secs(10),
        "dead letter at graveyard",
        || async { mesh.other_app.state.seen("dead").into_iter().next() },
    )
    .await;
    assert_eq!(&dead.body[..], b"{}");
    assert_eq!(trace_id(dead.header("traceparent")), trace_id(TRACE));
    assert_eq!(dead.header("ce-source"), "/switchyard/default/graveyard");
    let m = mesh.handlers_metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"switchyard_dead_letter_published_total{event="fail"}"#
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, r#"switchyard_dead_letter_unrouted_total{event="fail"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_key_keeps_order_per_key_and_runs_keys_in_parallel() {
    let mesh = LocalMesh::start().await;
    let keys = ["a", "b", "c"];
    for seq in 0..8u64 {
        for key in keys {
            let body = json!({"key": key, "seq": seq}).to_string();
            let r = post(&mesh, "/v1/publish/ordered", &[], &body).await;
            assert_eq!(r.status, 202);
        }
    }
    poll(
        Duration::from_secs(20),
        "24 ordered events handled",
        || async { (mesh.app.state.order.lock().unwrap().len() == 24).then_some(()) },
    )
    .await;
    let order = mesh.app.state.order.lock().unwrap().clone();
    for key in keys {
        let seqs: Vec<u64> = order
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(seqs, (0..8).collect::<Vec<_>>(), "key {key}: {order:?}");
    }
    let state = &mesh.app.state;
    assert_eq!(
        state.overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "two events of one key ran at once"
    );
    assert!(
        state.max_parallel.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "different keys never ran in parallel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_reports_the_routers_reached() {
    let mesh = LocalMesh::start().await;
    let r = post(&mesh, "/v1/push/tick", &[], r#"{"n":1}"#).await;
    assert_eq!(r.status, 202, "{:?}", r.body);
    // Two frame connections reach `handlers`: the router's, and its own outbound path's (the whole
    // table includes its own event types). Only the router's HELLO says it takes pushes.
    assert_eq!(r.json(), json!({"routers": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_of_a_type_the_manager_neither_handles_nor_lists_is_refused() {
    let mesh = LocalMesh::start().await;
    // A type it handles may be pushed, as may `tick` (its `push` list).
    let own = post(&mesh, "/v1/push/noop", &[], r#"{"n":1}"#).await;
    assert_eq!(own.status, 202, "{:?}", own.body);
    // `audit` is another Manager's (graveyard's): not this app's to push to WebSocket clients.
    let r = post(&mesh, "/v1/push/audit", &[], r#"{"fake":true}"#).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    let said = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        said.contains("`audit` is neither") && said.contains("spec.push"),
        "{said}"
    );
    let metrics = metrics_text(&mesh.client, mesh.handlers_admin).await;
    assert!(
        metrics.contains(r#"op="push",status="403""#),
        "refusal not counted:\n{metrics}"
    );
    // gRPC takes the same rule.
    let mut c = grpc_client(mesh.local_api).await;
    let e = c.push(event("audit", "{}")).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
}

async fn grpc_client(port: u16) -> LocalApiClient<Channel> {
    let ch = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    LocalApiClient::new(ch)
}

fn event(name: &str, payload: &str) -> LocalEvent {
    LocalEvent {
        event: name.into(),
        payload: payload.as_bytes().to_vec(),
        ce_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_variant_on_the_same_port() {
    let mesh = LocalMesh::start().await;
    let mut c = grpc_client(mesh.local_api).await;
    let reply = c
        .request(event("audit", r#"{"via":"grpc"}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/json");
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(v, json!({"via": "grpc"}));

    let mut ev = event("audit", r#"{"published":"grpc"}"#);
    ev.ce_id = "grpc-1".into();
    let mut req = tonic::Request::new(ev);
    req.metadata_mut()
        .insert("traceparent", TRACE.parse().unwrap());
    let published = c.publish(req).await.unwrap().into_inner();
    assert_eq!(published.ce_id, "grpc-1");
    let seen = poll(Duration::from_secs(10), "gRPC publish arrives", || async {
        mesh.other_app
            .state
            .seen("audit")
            .into_iter()
            .find(|e| e.header("ce-id") == "grpc-1")
    })
    .await;
    assert_eq!(trace_id(seen.header("traceparent")), trace_id(TRACE));

    let pushed = c.push(event("tick", "")).await.unwrap().into_inner();
    assert_eq!(
        pushed.routers, 1,
        "the router, not handlers' own outbound path"
    );

    // No Manager handles the type: not sent, safe to retry (UNAVAILABLE with retry-after).
    let err = c.publish(event("nobody", "{}")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(
        err.metadata()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let err = c.publish(event("haunt", "{}")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    let err = c.request(event("audit", "{nope")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("payload"), "{}", err.message());
}
