//! Tracing end to end: real router and manager sidecars export spans over OTLP to a receiver in this
//! process; requests come from real HTTP and gRPC clients, and the app records the traceparent it got.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::otlp::{CLIENT, GotSpan, INTERNAL, Receiver, SERVER, STATUS_ERROR};
use common::*;
use http_body_util::Full;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_protocol::gateway::v1::CallRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tonic::transport::Endpoint;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn tracing_block(rx: &Receiver, ratio: f64) -> Value {
    json!({"otlpEndpoint": rx.endpoint(), "samplingRatio": ratio})
}

async fn traced_mesh(rx: &Receiver, ratio: f64) -> (Mesh, u16) {
    traced_mesh_env(rx, ratio, Vec::new()).await
}

async fn traced_mesh_env(
    rx: &Receiver,
    ratio: f64,
    env: Vec<(&'static str, &'static str)>,
) -> (Mesh, u16) {
    let opts = Opts {
        tracing: Some(tracing_block(rx, ratio)),
        env,
        ..Opts::default()
    };
    let mesh = Mesh::start_with(opts, |cfg| {
        cfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
        cfg["spec"]["routes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"event": "echo", "grpc": {"method": "echo"}}));
    })
    .await;
    let grpc_port = mesh.grpc();
    (mesh, grpc_port)
}

async fn post_echo(mesh: &Mesh, traceparent: Option<&str>) -> Reply {
    let mut req =
        hyper::Request::post(mesh.url("/echo")).header("content-type", "application/json");
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
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
    r
}

/// The `trace;desc=` entry of a Server-Timing value.
fn timing_trace(value: &str) -> String {
    value
        .split(", ")
        .find_map(|e| e.strip_prefix("trace;desc="))
        .unwrap_or_else(|| panic!("no trace entry in Server-Timing {value:?}"))
        .to_owned()
}

/// The traceparent the app got with the last `echo` event, split into (trace id, span id).
fn app_traceparent(mesh: &Mesh) -> (String, String) {
    let tp = mesh
        .app
        .state
        .headers
        .lock()
        .unwrap()
        .get("traceparent")
        .cloned();
    let tp = tp.expect("the app got a traceparent");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn one<'a>(spans: &'a [GotSpan], name: &str) -> &'a GotSpan {
    let found: Vec<&GotSpan> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name:?} in {spans:#?}");
    found[0]
}

/// Checks the hops below the listener span and returns the delivery span's id.
fn assert_hops(spans: &[GotSpan], listener: &GotSpan, event: &str) -> String {
    let broker = one(spans, &format!("broker {event}"));
    let send = one(spans, &format!("send {event}"));
    let process = one(spans, &format!("process {event}"));
    let queue = one(spans, &format!("queue {event}"));
    let deliver = one(spans, &format!("deliver {event}"));
    for (s, service, kind) in [
        (listener, "edge", SERVER),
        (broker, "edge", INTERNAL),
        (send, "edge", CLIENT),
        (process, "handlers", SERVER),
        (queue, "handlers", INTERNAL),
        (deliver, "handlers", CLIENT),
    ] {
        assert_eq!(s.service, service, "{s:#?}");
        assert_eq!(s.kind, kind, "{s:#?}");
    }
    assert_eq!(broker.parent, listener.span_id, "broker under the listener");
    assert_eq!(send.parent, broker.span_id, "send under the broker");
    assert_eq!(
        process.parent, send.span_id,
        "manager inbound under the router's send"
    );
    assert_eq!(
        queue.parent, process.span_id,
        "queue wait under the inbound span"
    );
    assert_eq!(
        deliver.parent, process.span_id,
        "delivery under the inbound span"
    );
    for s in [broker, send, process, deliver] {
        assert_eq!(s.attr("messaging.system"), "switchyard", "{s:#?}");
        assert_eq!(s.attr("messaging.destination.name"), event, "{s:#?}");
    }
    let id = send.attr("messaging.message.id");
    assert_eq!(id.len(), 32, "{send:#?}");
    assert_eq!(process.attr("messaging.message.id"), id);
    assert_eq!(deliver.attr("messaging.message.id"), id);
    assert_eq!(send.attr("messaging.operation.type"), "send");
    assert_eq!(process.attr("messaging.operation.type"), "process");
    assert_eq!(deliver.attr("url.path"), "/events");
    deliver.span_id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_request_is_one_trace_across_every_hop() {
    let rx = Receiver::start().await;
    let (mesh, _) = traced_mesh(&rx, 1.0).await;

    // With the client's traceparent: its trace id end to end, the listener span its child.
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let r = post_echo(&mesh, Some(&tp)).await;
    assert_eq!(
        timing_trace(r.header("server-timing").unwrap()),
        CLIENT_TRACE
    );
    let (app_trace, app_parent) = app_traceparent(&mesh);
    assert_eq!(app_trace, CLIENT_TRACE);
    let spans = rx.trace(CLIENT_TRACE, 6).await;
    let listener = one(&spans, "POST /echo");
    assert_eq!(listener.parent, CLIENT_SPAN);
    assert_eq!(listener.attr("http.request.method"), "POST");
    assert_eq!(listener.attr("url.path"), "/echo");
    assert_eq!(listener.attr("http.route"), "/echo");
    assert_eq!(listener.attr("http.response.status_code"), "200");
    assert_eq!(listener.attr("messaging.destination.name"), "echo");
    let deliver = assert_hops(&spans, listener, "echo");
    assert_eq!(app_parent, deliver, "the app's parent is the delivery span");
    // The resource, per the semantic conventions: the Router or Manager name, its namespace, and
    // an instance id per process (no pod here, so a random UUID).
    let process = one(&spans, "process echo");
    for (span, role) in [(listener, "router"), (process, "manager")] {
        assert_eq!(span.resource["k8s.namespace.name"], "default", "{span:#?}");
        assert_eq!(span.resource["switchyard.role"], role, "{span:#?}");
        assert_eq!(span.resource["service.instance.id"].len(), 36, "{span:#?}");
        assert!(!span.resource.contains_key("k8s.pod.name"), "{span:#?}");
    }
    assert_ne!(
        listener.resource["service.instance.id"],
        process.resource["service.instance.id"]
    );

    // Without one: a root span at the listener, and the Server-Timing trace id is that trace.
    let r = post_echo(&mesh, None).await;
    let root = timing_trace(r.header("server-timing").unwrap());
    assert_ne!(root, CLIENT_TRACE);
    let (app_trace, app_parent) = app_traceparent(&mesh);
    assert_eq!(app_trace, root);
    let spans = rx.trace(&root, 6).await;
    let listener = one(&spans, "POST /echo");
    assert_eq!(listener.parent, "", "a root span");
    assert_eq!(assert_hops(&spans, listener, "echo"), app_parent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_is_one_trace_and_errors_set_span_status() {
    let rx = Receiver::start().await;
    let (mesh, grpc_port) = traced_mesh(&rx, 1.0).await;
    let ch = poll(Duration::from_secs(10), "gRPC listener", || async {
        Endpoint::from_shared(format!("http://127.0.0.1:{grpc_port}"))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    let mut client = GatewayClient::new(ch);
    let mut req = tonic::Request::new(CallRequest {
        method: "echo".into(),
        payload: b"{\"value\":2}".to_vec(),
        metadata: Default::default(),
    });
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    let resp = client.call(req).await.unwrap();
    assert_eq!(resp.get_ref().status, 200);
    let timing = resp
        .metadata()
        .get("server-timing")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(timing_trace(timing), CLIENT_TRACE);
    let (app_trace, app_parent) = app_traceparent(&mesh);
    assert_eq!(app_trace, CLIENT_TRACE);
    let spans = rx.trace(CLIENT_TRACE, 6).await;
    let listener = one(&spans, "switchyard.v1.Gateway/Call");
    assert_eq!(listener.parent, CLIENT_SPAN);
    assert_eq!(listener.attr("rpc.system.name"), "grpc");
    assert_eq!(listener.attr("rpc.method"), "switchyard.v1.Gateway/Call");
    assert_eq!(listener.attr("rpc.response.status_code"), "OK");
    assert_eq!(assert_hops(&spans, listener, "echo"), app_parent);

    // The app fails every attempt: retries are events on the delivery span, and 5xx marks the spans.
    let fail_trace = "0af7651916cd43dd8448eb211c80319c";
    let req = hyper::Request::get(mesh.url("/fail"))
        .header(
            "traceparent",
            format!("00-{fail_trace}-b7ad6b7169203331-01"),
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    let r = mesh.client.send(req).await.unwrap();
    assert_eq!(r.status, 500);
    let spans = rx.trace(fail_trace, 6).await;
    let deliver = one(&spans, "deliver fail");
    assert_eq!(deliver.status, STATUS_ERROR, "{deliver:#?}");
    assert_eq!(deliver.events, vec!["retry", "retry"], "3 attempts");
    assert_eq!(deliver.attr("switchyard.delivery.attempts"), "3");
    assert_eq!(one(&spans, "GET /fail").status, STATUS_ERROR);
    assert_eq!(one(&spans, "process fail").status, STATUS_ERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_ratio_zero_exports_nothing_but_sampled_parents_are_followed() {
    let rx = Receiver::start().await;
    // No scheduled export within the test: what arrives was flushed at exit.
    let (mut mesh, _) =
        traced_mesh_env(&rx, 0.0, vec![("OTEL_BSP_SCHEDULE_DELAY", "600000")]).await;
    let mut roots = Vec::new();
    for _ in 0..5 {
        let r = post_echo(&mesh, None).await;
        roots.push(timing_trace(r.header("server-timing").unwrap()));
    }
    // Each request began its own trace, and the app was told it is not sampled (flags 00), so an
    // app exporting its own spans would drop them too.
    let distinct: std::collections::BTreeSet<&String> = roots.iter().collect();
    assert_eq!(distinct.len(), 5, "one new trace per request: {roots:?}");
    let got: Vec<String> = mesh
        .app
        .state
        .seen("echo")
        .iter()
        .map(|e| e.header("traceparent").to_owned())
        .collect();
    assert_eq!(got.len(), 5, "{got:?}");
    for (root, tp) in roots.iter().zip(&got) {
        assert_eq!(root.len(), 32, "{root}");
        assert_ne!(root, CLIENT_TRACE);
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!((parts[1], parts[3]), (root.as_str(), "00"), "{tp}");
    }
    // A client that sampled its trace is followed (ParentBased), which also shows export works here.
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    post_echo(&mesh, Some(&tp)).await;
    let (app_trace, app_parent) = app_traceparent(&mesh);
    assert_eq!(app_trace, CLIENT_TRACE);
    // This sleep is the behaviour under test, not a wait: with the export schedule at 10 minutes,
    // nothing may arrive in this window (a mesh on the 100 ms schedule of the other tests would have
    // exported within it), so whatever arrives later was flushed at exit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rx.spans().is_empty(),
        "nothing exported before the exit flush"
    );
    // SIGTERM: both sidecars drain and flush their exporters before they exit.
    mesh.router.sigterm();
    mesh.manager.as_ref().unwrap().sigterm();
    assert_eq!(
        mesh.router.wait_exit(Duration::from_secs(30)).await,
        Some(0)
    );
    assert_eq!(
        mesh.manager
            .as_mut()
            .unwrap()
            .wait_exit(Duration::from_secs(30))
            .await,
        Some(0)
    );
    let spans = rx.spans();
    let sampled: Vec<GotSpan> = spans
        .iter()
        .filter(|s| s.trace_id == CLIENT_TRACE)
        .cloned()
        .collect();
    assert_eq!(sampled.len(), 6, "{spans:#?}");
    // The flushed trace is whole: every hop under the client's span, the app's parent the delivery.
    let listener = one(&sampled, "POST /echo");
    assert_eq!(listener.parent, CLIENT_SPAN);
    assert_eq!(assert_hops(&sampled, listener, "echo"), app_parent);
    let others: Vec<&GotSpan> = spans
        .iter()
        .filter(|s| s.trace_id != CLIENT_TRACE)
        .collect();
    assert!(
        others.is_empty(),
        "unsampled roots were exported: {others:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_env_names_the_pod_in_the_resource() {
    let rx = Receiver::start().await;
    let env = vec![("POD_NAME", "edge-7f9-abc"), ("POD_NAMESPACE", "shop")];
    let (mesh, _) = traced_mesh_env(&rx, 1.0, env).await;
    let r = post_echo(&mesh, None).await;
    let spans = rx
        .trace(&timing_trace(r.header("server-timing").unwrap()), 6)
        .await;
    let listener = one(&spans, "POST /echo");
    assert_eq!(listener.resource["k8s.pod.name"], "edge-7f9-abc");
    assert_eq!(listener.resource["k8s.namespace.name"], "shop");
    assert_eq!(
        listener.resource["service.instance.id"],
        "shop.edge-7f9-abc.switchyard-sidecar"
    );
}

/// A collector that accepts connections and never answers: every export hangs until its timeout.
async fn silent_collector() -> (u16, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (port, task)
}

/// `switchyard_trace_spans_dropped_total` of the sidecar whose admin port is `admin`.
async fn dropped_spans(mesh: &Mesh, admin: u16) -> u64 {
    let r = mesh
        .client
        .get(&format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("switchyard_trace_spans_dropped_total "))
        .unwrap_or_else(|| panic!("no dropped-spans counter in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_dropped_at_a_full_export_queue_are_counted() {
    // A queue of one span and an exporter stuck on a silent collector (5 s export timeout): of the
    // router's three spans per request, at most two get a place (one being exported, one waiting)
    // while the requests run; every other span is dropped and counted.
    let (port, task) = silent_collector().await;
    let opts = Opts {
        tracing: Some(
            json!({"otlpEndpoint": format!("http://127.0.0.1:{port}"), "samplingRatio": 1.0}),
        ),
        env: vec![("OTEL_BSP_MAX_QUEUE_SIZE", "1")],
        ..Opts::default()
    };
    let mesh = Mesh::start_with(opts, |_| {}).await;
    // Start-up's readiness requests may have filled the queue already.
    let before = dropped_spans(&mesh, mesh.router_admin).await;
    let requests = 5;
    let started = std::time::Instant::now();
    for _ in 0..requests {
        post_echo(&mesh, None).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the requests took {:?}: the export timeout may have freed the queue meanwhile",
        started.elapsed()
    );
    let dropped = dropped_spans(&mesh, mesh.router_admin).await - before;
    assert!(dropped >= 3 * requests - 2, "dropped {dropped}");
    assert!(dropped <= 3 * requests, "dropped {dropped}");
    task.abort();
}
