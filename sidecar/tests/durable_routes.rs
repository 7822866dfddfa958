//! Durable routes learned from the control plane, as in a cluster: a publishing manager sidecar
//! whose config has no destinations (only the JetStream servers) follows a fake control plane in
//! this process. While the route of `orders` says it is durable, the app's publish through the
//! local API is kept in Manager `queue`'s stream on a real nats-server (read back here) and is
//! answered 202 only once stored; the next table turns the type direct, and the publish goes over
//! a frame connection to `queue`'s real manager sidecar and app instead; another brings it back
//! durable with an ordering key, a 5 s duplicate window and a 64 MiB byte limit, and the publish
//! lands on that key's partition subject of a stream that now remembers ce-ids for 5 s and holds
//! at most 64 MiB. A dead letter
//! takes the same path: `queue`'s failed `fail` event goes to its dead-letter type, which `queue`'s
//! table marks durable, so it is kept in Manager `graveyard`'s stream (which never runs). With the
//! server gone, a durable publish is a 503, never a 202.

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::control_plane::FakeControlPlane;
use common::*;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_protocol::control::v1::{DurableRoute, Endpoint, Route, RoutingTable};
use switchyard_protocol::durable::{self as plan, Lane};

const NAMESPACE: &str = "default";

/// The table of Router `edge`: `orders` handled by `queue` at `endpoint` (if any), durable or not,
/// and `fail`, handled there directly.
fn table(version: u64, endpoint: Option<u16>, durable: Option<DurableRoute>) -> RoutingTable {
    let route = |event: &str, durable| Route {
        event_type: event.into(),
        manager: "queue".into(),
        pool: "queue-manager".into(),
        endpoints: endpoint
            .map(|p| Endpoint {
                address: format!("127.0.0.1:{p}"),
                pod: "queue-0".into(),
            })
            .into_iter()
            .collect(),
        durable,
        subscription: None,
        push: Vec::new(),
    };
    RoutingTable {
        version,
        router: "edge".into(),
        namespace: NAMESPACE.into(),
        routes: vec![route("fail", None), route("orders", durable)],
        ..RoutingTable::default()
    }
}

/// The publisher's `/routes` entry of `orders`, once the table of `version` is in place.
async fn route_at(client: &Http, admin: u16, version: u64) -> Value {
    poll(Duration::from_secs(10), "the table in place", || async {
        let r = client
            .get(&format!("http://127.0.0.1:{admin}/routes"))
            .await
            .ok()?;
        let v = r.json();
        let orders = v["routes"]
            .as_array()?
            .iter()
            .find(|r| r["eventType"] == "orders");
        (v["version"] == version).then(|| orders.cloned()).flatten()
    })
    .await
}

/// Messages in `queue`'s stream now.
async fn stored(js: &jetstream::Context) -> u64 {
    let mut s = js
        .get_stream(plan::stream_name(NAMESPACE, "queue"))
        .await
        .unwrap();
    s.info().await.unwrap().state.messages
}

/// The duplicate window of `manager`'s stream, as the server holds it.
async fn window_of(js: &jetstream::Context, manager: &str) -> Duration {
    config_of(js, manager).await.duplicate_window
}

/// The configuration of `manager`'s stream, as the server holds it.
async fn config_of(js: &jetstream::Context, manager: &str) -> jetstream::stream::Config {
    let mut s = js
        .get_stream(plan::stream_name(NAMESPACE, manager))
        .await
        .unwrap();
    s.info().await.unwrap().config.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_route_from_the_control_plane_sends_publishes_to_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (mut servers, _relays) = nats::cluster(dir.path(), 1).await;
    let url = nats::urls(&servers);
    let client = Http::new();

    // Manager `queue`: its own sidecar (direct for this test: nothing pulls) and app.
    let app = TestApp::start().await;
    let mut receiver = manager_config(app.port, &Opts::default());
    receiver["name"] = json!("queue");
    receiver["events"] = json!(["orders", "fail"]);
    // Its dead letters go to `graveyard`, durably (the stream keeps them; nothing runs there).
    receiver["workers"]["retries"]["attempts"] = json!(2);
    receiver["workers"]["deadLetter"] = json!("dead");
    let nowhere = ClosedPort::new();
    receiver["destinations"] = json!({"dead": {
        "manager": "graveyard", "service": "graveyard", "port": nowhere.port,
        "podSelector": {}, "durable": {},
    }});
    receiver["staticEndpoints"] = json!({"graveyard": [format!("127.0.0.1:{}", nowhere.port)]});
    receiver["jetstream"] = json!({"url": url, "replicas": 1});
    let cfg = write_json(dir.path(), "queue.json", &receiver);
    let rdir = dir.path().join("queue");
    std::fs::create_dir_all(&rdir).unwrap();
    let (_queue, queue_ports) = start_manager(&rdir, &cfg, &[]).await;

    // The publisher, as the operator renders it in a cluster: no destinations, the servers.
    let cp = FakeControlPlane::start(table(
        1,
        Some(queue_ports.listen),
        Some(DurableRoute::default()),
    ))
    .await;
    let mut publisher = manager_config(app.port, &Opts::default());
    publisher["name"] = json!("shop");
    publisher["events"] = json!(["shop.unused"]);
    publisher["jetstream"] = json!({"url": url, "replicas": 1});
    let cfg = write_json(dir.path(), "shop.json", &publisher);
    let pdir = dir.path().join("shop");
    std::fs::create_dir_all(&pdir).unwrap();
    let cp_url = cp.url();
    let (_shop, ports) = start_manager(
        &pdir,
        &cfg,
        &[
            ("SWITCHYARD_CONTROL_PLANE", &cp_url),
            ("POD_NAME", "shop-0"),
        ],
    )
    .await;
    let publish = format!("http://127.0.0.1:{}/v1/publish/orders", ports.local_api);
    let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());

    // Durable: kept in queue's stream before the 202, with the ce-id as its Nats-Msg-Id.
    let route = route_at(&client, ports.admin, 1).await;
    assert_eq!(route["durable"], json!({}), "{route}");
    let body = r#"{"customerId":"c-1","n":1}"#;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let req = hyper::Request::post(&publish)
        .header("content-type", "application/json")
        .header("ce-id", "durable-1")
        .header("traceparent", format!("00-{trace}-b7ad6b7169203331-01"))
        .header("tracestate", "k=v")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let r = client.send(req).await.unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(stored(&js).await, 1, "stored before the 202");
    let stream = js
        .get_stream(plan::stream_name(NAMESPACE, "queue"))
        .await
        .unwrap();
    let unordered = plan::subject(NAMESPACE, "queue", "orders", Lane::Unordered);
    let m = stream
        .get_last_raw_message_by_subject(&unordered)
        .await
        .unwrap();
    assert_eq!(&m.payload[..], body.as_bytes());
    let headers = m.headers;
    // The stream's dedupe id is the ce-id scoped to (type, publisher); the ce-id travels as is.
    let msg_id = headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned());
    assert!(
        msg_id
            .as_deref()
            .is_some_and(|id| id.starts_with("sy1-") && id.len() == 36),
        "{msg_id:?}"
    );
    assert_eq!(headers.get("ce-id").map(|v| v.as_str()), Some("durable-1"));
    assert_eq!(
        headers.get("ce-source").map(|v| v.as_str()),
        Some("/switchyard/default/shop")
    );
    // The trace context under CloudEvents' names, never the bare W3C ones: a sampled bare
    // `traceparent` sends nats-server down its own message-tracing path for every event.
    let tp = headers.get("ce-traceparent").map(|v| v.as_str().to_owned());
    assert!(
        tp.as_deref().is_some_and(|t| t.contains(trace)),
        "ce-traceparent {tp:?}"
    );
    assert_eq!(
        headers.get("ce-tracestate").map(|v| v.as_str()),
        Some("k=v")
    );
    assert!(headers.get("traceparent").is_none() && headers.get("tracestate").is_none());
    assert!(app.state.seen("orders").is_empty(), "nothing went direct");
    assert_eq!(
        window_of(&js, "queue").await,
        plan::DUPLICATE_WINDOW,
        "a route without a window: the default"
    );
    assert_eq!(
        config_of(&js, "queue").await.max_bytes,
        -1,
        "nor a byte limit: none"
    );

    // The next table says direct: over the frame connection to queue's sidecar, not the stream.
    cp.tables
        .send_replace(table(2, Some(queue_ports.listen), None));
    let route = route_at(&client, ports.admin, 2).await;
    assert!(route.get("durable").is_none(), "{route}");
    let r = client
        .post(&publish, "application/json", r#"{"n":2}"#)
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    poll(
        Duration::from_secs(10),
        "the direct event at the app",
        || async { (app.state.seen("orders").len() == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        stored(&js).await,
        1,
        "the direct publish is not in the stream"
    );

    // Durable again, now ordered by a key: the key's partition subject; and the Manager now
    // sets a 5 s duplicate window and a 64 MiB byte limit, which the publisher gives its stream.
    let keyed = DurableRoute {
        ordering_key: "/customerId".into(),
        duplicate_window_ms: 5_000,
        max_bytes: 64 << 20,
    };
    cp.tables
        .send_replace(table(3, Some(queue_ports.listen), Some(keyed)));
    let route = route_at(&client, ports.admin, 3).await;
    assert_eq!(route["durable"]["orderingKey"], "/customerId", "{route}");
    let r = client
        .post(&publish, "application/json", body)
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let partition = plan::subject(NAMESPACE, "queue", "orders", Lane::of(Some("c-1")));
    let m = stream
        .get_last_raw_message_by_subject(&partition)
        .await
        .unwrap();
    assert_eq!(&m.payload[..], body.as_bytes());
    assert_eq!(stored(&js).await, 2);
    assert_eq!(window_of(&js, "queue").await, Duration::from_secs(5));
    assert_eq!(config_of(&js, "queue").await.max_bytes, 64 << 20);
    assert_eq!(app.state.seen("orders").len(), 1, "still one direct event");
    // Both durable publishes were timed, stage by stage; the direct one is not among them.
    let text = metrics_text(&client, ports.admin).await;
    for stage in ["sent", "stored"] {
        let count = format!("switchyard_durable_publish_seconds_count{{stage=\"{stage}\"}}");
        assert_eq!(metric(&text, &count), 2.0, "{stage}: {text}");
    }

    // A dead letter to a durable type is kept in its stream, with the failed event's ce-id.
    let req = hyper::Request::post(publish.replace("/orders", "/fail"))
        .header("content-type", "application/json")
        .header("ce-id", "doomed-1")
        .body(http_body_util::Full::new(bytes::Bytes::from(r#"{"n":3}"#)))
        .unwrap();
    let r = client.send(req).await.unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let dead = plan::subject(NAMESPACE, "graveyard", "dead", Lane::Unordered);
    let m = poll(
        Duration::from_secs(15),
        "the dead letter in graveyard's stream",
        || async {
            let s = js
                .get_stream(plan::stream_name(NAMESPACE, "graveyard"))
                .await
                .ok()?;
            s.get_last_raw_message_by_subject(&dead).await.ok()
        },
    )
    .await;
    assert_eq!(&m.payload[..], br#"{"n":3}"#);
    // The dead letter keeps the ce-id; its dedupe id is scoped like every durable publish's.
    assert_eq!(m.headers.get("ce-id").map(|v| v.as_str()), Some("doomed-1"));
    assert!(
        m.headers
            .get("Nats-Msg-Id")
            .is_some_and(|v| v.as_str().starts_with("sy1-"))
    );
    assert_eq!(
        app.state.seen("fail").len(),
        2,
        "two attempts, then the dead letter"
    );

    // No server: the store cannot confirm, so no 202.
    servers[0].kill();
    let r = client
        .post(&publish, "application/json", body)
        .await
        .unwrap();
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").is_some());
    assert!(
        String::from_utf8_lossy(&r.body).contains("event store did not confirm"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}
