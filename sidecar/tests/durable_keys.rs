//! Scoped dedupe keys and NATS's size limit on durable publishes, with real sidecars and a real
//! nats-server: two publishing Managers (`cart`, `billing`) send `orders` and `refunds` to Manager
//! `handlers`, durably, through their local APIs.
//!
//! - One key under two types, or from two publishers, is two events, both delivered, each with the
//!   key as `ce-id` and its publisher as `ce-source`.
//! - The same key, type and publisher with another payload is 409 naming the key; with the same
//!   payload it is 202 and stored (so delivered) once.
//! - A durable event at the local API's limit (1 MiB) is delivered through a server configured as
//!   `switchyard up` and the chart configure theirs; a server with NATS's default `max_payload`
//!   answers it 413 naming its limit, not 503 forever.
//! - The largest durable event the mesh makes, a dead letter of a request read whole (16 MiB; an
//!   app's own publish is at most 1 MiB), is stored whole through such a server.
//! - A Manager's stream with a byte limit (`durable.maxBytes`), given it by the publisher and by
//!   its own sidecar alike, refuses the publish that would pass it with a 503 naming the limit,
//!   and every event it acknowledged before is still delivered, whole: nothing dropped.

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use switchyard_protocol::durable::{self as plan, Lane};

const NAMESPACE: &str = "default";

/// Manager `handlers`, receiving `orders` and `refunds` durably from the servers at `url`.
fn receiver(app_port: u16, url: &str) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["events"] = json!(["orders", "refunds"]);
    cfg["durableEvents"] = json!(["orders", "refunds"]);
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

/// A publishing Manager `name` whose `orders` and `refunds` go to `handlers` durably.
fn publisher(name: &str, no_app: u16, url: &str) -> Value {
    let mut cfg = manager_config(no_app, &Opts::default());
    cfg["name"] = json!(name);
    cfg["events"] = json!([format!("{name}.unused")]);
    let dest = json!({"manager": "handlers", "service": "handlers", "port": no_app, "podSelector": {}, "durable": {}});
    cfg["destinations"] = json!({"orders": dest, "refunds": dest});
    cfg["staticEndpoints"] = json!({"handlers": [format!("127.0.0.1:{no_app}")]});
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

/// Starts the manager sidecar of `cfg` in `dir/name`.
async fn start(dir: &Path, name: &str, cfg: &Value) -> (Proc, ManagerPorts) {
    let file = write_json(dir, &format!("{name}.json"), cfg);
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    start_manager(&d, &file, &[]).await
}

/// Publishes `body` as `event` with `key` through the local API at `port`.
async fn publish(client: &Http, port: u16, event: &str, key: &str, body: &str) -> Reply {
    let req = hyper::Request::post(format!("http://127.0.0.1:{port}/v1/publish/{event}"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
            body.as_bytes(),
        )))
        .unwrap();
    client.send(req).await.unwrap()
}

/// The last sequence `handlers`' stream has stored (acked events are removed; this never falls).
async fn last_sequence(js: &jetstream::Context) -> u64 {
    let mut s = js
        .get_stream(plan::stream_name(NAMESPACE, "handlers"))
        .await
        .unwrap();
    s.info().await.unwrap().state.last_sequence
}

/// (ce-type, ce-id, ce-source, body) of every event the app received.
fn received(app: &TestApp) -> Vec<(String, String, String, String)> {
    let mut v: Vec<_> = app
        .state
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e.header("ce-type").to_owned(),
                e.header("ce-id").to_owned(),
                e.header("ce-source").to_owned(),
                String::from_utf8_lossy(&e.body).into_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_scoped_to_its_type_and_publisher_and_reused_for_other_content_is_409() {
    let dir = tempfile::tempdir().unwrap();
    let (servers, _relays) = nats::cluster(dir.path(), 1).await;
    let url = nats::urls(&servers);
    let client = Http::new();
    let no_app = ClosedPort::new();
    let (_cart, cart) = start(dir.path(), "cart", &publisher("cart", no_app.port, &url)).await;
    let (_billing, billing) = start(
        dir.path(),
        "billing",
        &publisher("billing", no_app.port, &url),
    )
    .await;
    let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());

    // Nothing consumes yet, so every stored event is still in the stream to compare with.
    let ok = |r: &Reply| {
        assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    };
    ok(&publish(&client, cart.local_api, "orders", "k-1", r#"{"a":1}"#).await);
    ok(&publish(&client, cart.local_api, "refunds", "k-1", r#"{"b":1}"#).await);
    ok(&publish(&client, billing.local_api, "orders", "k-1", r#"{"c":1}"#).await);
    let stored = last_sequence(&js).await;
    assert_eq!(stored, 3, "two types and two publishers: three events");

    // The same scope with another payload: refused, naming the key; nothing stored.
    let r = publish(&client, cart.local_api, "orders", "k-1", r#"{"a":2}"#).await;
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 409, "{body}");
    assert!(body.contains("k-1"), "the key is named: {body}");
    // The same scope and payload: a retry, kept the first time.
    ok(&publish(&client, cart.local_api, "orders", "k-1", r#"{"a":1}"#).await);
    assert_eq!(last_sequence(&js).await, stored, "neither was stored");

    // The stream's ids are scoped; the key travels as ce-id, the publisher as ce-source.
    let stream = js
        .get_stream(plan::stream_name(NAMESPACE, "handlers"))
        .await
        .unwrap();
    let first = stream.get_raw_message(1).await.unwrap();
    let msg_id = first
        .headers
        .get("Nats-Msg-Id")
        .map(|v| v.as_str().to_owned());
    assert!(
        msg_id
            .as_deref()
            .is_some_and(|id| id.starts_with("sy1-") && id.len() == 36),
        "scoped Nats-Msg-Id: {msg_id:?}"
    );
    assert_eq!(first.headers.get("ce-id").map(|v| v.as_str()), Some("k-1"));

    // The consumer: every stored event delivered once.
    let app = TestApp::start().await;
    let (_handlers, _) = start(dir.path(), "handlers", &receiver(app.port, &url)).await;
    let want = vec![
        (
            "orders".to_owned(),
            "k-1".to_owned(),
            "/switchyard/default/billing".to_owned(),
            r#"{"c":1}"#.to_owned(),
        ),
        (
            "orders".to_owned(),
            "k-1".to_owned(),
            "/switchyard/default/cart".to_owned(),
            r#"{"a":1}"#.to_owned(),
        ),
        (
            "refunds".to_owned(),
            "k-1".to_owned(),
            "/switchyard/default/cart".to_owned(),
            r#"{"b":1}"#.to_owned(),
        ),
    ];
    poll(
        Duration::from_secs(30),
        "the three events delivered",
        || {
            let got = received(&app);
            std::future::ready((got.len() >= want.len()).then_some(()))
        },
    )
    .await;
    // Acked events leave the work queue: once it is empty, nothing else can be delivered.
    poll(Duration::from_secs(30), "the stream drained", || async {
        let mut s = js
            .get_stream(plan::stream_name(NAMESPACE, "handlers"))
            .await
            .ok()?;
        (s.info().await.ok()?.state.messages == 0).then_some(())
    })
    .await;
    assert_eq!(received(&app), want, "each event once, with its publisher");
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_event_fits_the_meshs_nats_and_one_over_a_servers_max_payload_is_413() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let no_app = ClosedPort::new();
    // The largest body the local API takes, in JSON: with its headers, over NATS's default 1 MiB.
    let big = format!("\"{}\"", "x".repeat((1 << 20) - 2));

    // A server as `switchyard up` and the chart configure theirs.
    let mesh = dir.path().join("mesh");
    std::fs::create_dir_all(&mesh).unwrap();
    let (servers, _relays) = nats::cluster_with(
        &mesh,
        1,
        &format!("max_payload: {}", plan::NATS_MAX_PAYLOAD),
        "sync_interval: always",
    )
    .await;
    let url = nats::urls(&servers);
    let app = TestApp::start().await;
    let (_handlers, _) = start(&mesh, "handlers", &receiver(app.port, &url)).await;
    let (_cart, cart) = start(&mesh, "cart", &publisher("cart", no_app.port, &url)).await;
    let r = publish(&client, cart.local_api, "orders", "big-1", &big).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let seen = poll(Duration::from_secs(30), "the 1 MiB event delivered", || {
        std::future::ready(app.state.seen("orders").into_iter().next())
    })
    .await;
    assert_eq!(seen.header("ce-id"), "big-1");
    assert_eq!(seen.body.len(), big.len(), "the whole body");

    // A server with NATS's default max_payload: 413 naming its limit, at once and every time.
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (small, _relays) = nats::cluster(&plain, 1).await;
    let url = nats::urls(&small);
    let (_shop, shop) = start(&plain, "shop", &publisher("shop", no_app.port, &url)).await;
    for _ in 0..2 {
        let r = publish(&client, shop.local_api, "orders", "big-2", &big).await;
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, 413, "{body}");
        assert!(
            body.contains("1048576") && body.contains("max_payload"),
            "names the server's limit: {body}"
        );
        assert!(r.headers.get("retry-after").is_none(), "not to be retried");
    }
    // A small one still goes through that server.
    let r = publish(&client, shop.local_api, "orders", "small-1", "{}").await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    drop(servers);
    drop(small);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_refuses_a_publish_naming_its_limit_and_drops_nothing_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let no_app = ClosedPort::new();
    // The least limit a Manager may set: 32 MiB, about 31 events of the local API's largest size.
    let limit = plan::MIN_STREAM_BYTES;
    let big = |i: usize| format!("\"{i:04}{}\"", "x".repeat((1 << 20) - 6));
    let (servers, _relays) = nats::cluster_with(
        dir.path(),
        1,
        &format!("max_payload: {}", plan::NATS_MAX_PAYLOAD),
        "",
    )
    .await;
    let url = nats::urls(&servers);
    let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());

    // Only the publisher runs: nothing consumes, so the stream fills.
    let mut cart_cfg = publisher("cart", no_app.port, &url);
    for event in ["orders", "refunds"] {
        cart_cfg["destinations"][event]["durable"] = json!({"maxBytes": limit});
    }
    let (_cart, cart) = start(dir.path(), "cart", &cart_cfg).await;
    let mut kept = Vec::new();
    let refused = loop {
        let i = kept.len();
        assert!(i < 40, "32 MiB never filled after {i} events of 1 MiB");
        let key = format!("full-{i}");
        let r = publish(&client, cart.local_api, "orders", &key, &big(i)).await;
        match r.status {
            202 => kept.push(key),
            _ => break r,
        }
    };
    let detail = String::from_utf8_lossy(&refused.body).into_owned();
    assert_eq!(refused.status, 503, "{detail}");
    assert!(
        detail.contains("the event store of Manager handlers is full")
            && detail.contains(&format!("{limit} bytes, its spec.durable.maxBytes")),
        "names the Manager and its limit: {detail}"
    );
    assert_eq!(
        refused.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"5"[..]),
        "to be retried once the backlog drains"
    );
    assert!(kept.len() >= 30, "{} events kept in 32 MiB", kept.len());
    let mut stream = js
        .get_stream(plan::stream_name(NAMESPACE, "handlers"))
        .await
        .unwrap();
    let info = stream.info().await.unwrap().clone();
    assert_eq!(info.config.max_bytes, i64::try_from(limit).unwrap());
    assert_eq!(
        info.state.messages,
        kept.len() as u64,
        "every acknowledged event is in the stream, and only those"
    );
    // A limit lowered below what the stream holds drops none of it (discard new trims nothing).
    let mut lower = info.config.clone();
    lower.max_bytes = 16 << 20;
    js.update_stream(&lower).await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        kept.len() as u64
    );
    // A smaller one does not fit either while the stream is this full; it is refused the same way.
    let r = publish(&client, cart.local_api, "refunds", "small-0", &big(99)).await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));

    // The Manager's own sidecar starts with the same limit and consumes the backlog.
    let app = TestApp::start().await;
    let mut handlers_cfg = receiver(app.port, &url);
    handlers_cfg["maxBytes"] = json!(limit);
    let (_handlers, _) = start(dir.path(), "handlers", &handlers_cfg).await;
    let seen = poll(
        Duration::from_secs(60),
        "every kept event delivered",
        || {
            let seen = app.state.seen("orders");
            std::future::ready((seen.len() >= kept.len()).then_some(seen))
        },
    )
    .await;
    let mut delivered: Vec<String> = seen.iter().map(|e| e.header("ce-id").to_owned()).collect();
    delivered.sort();
    let mut want = kept.clone();
    want.sort();
    assert_eq!(
        delivered, want,
        "each acknowledged event delivered, none dropped"
    );
    assert!(
        seen.iter().all(|e| e.body.len() == big(0).len()),
        "each whole"
    );
    // Its own sidecar gave the stream the Manager's limit back.
    let info = stream.info().await.unwrap().clone();
    assert_eq!(info.config.max_bytes, i64::try_from(limit).unwrap());

    // Its backlog worked down, the stream takes events again.
    let r = publish(&client, cart.local_api, "orders", "after", &big(100)).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    poll(Duration::from_secs(30), "the later event delivered", || {
        std::future::ready(
            app.state
                .seen("orders")
                .iter()
                .any(|e| e.header("ce-id") == "after")
                .then_some(()),
        )
    })
    .await;
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_of_the_largest_request_is_stored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let (servers, _relays) = nats::cluster_with(
        dir.path(),
        1,
        &format!("max_payload: {}", plan::NATS_MAX_PAYLOAD),
        "",
    )
    .await;
    let url = nats::urls(&servers);
    let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());

    // Manager `handlers`, whose app fails `fail` once for good; its dead letters go to `graveyard`,
    // durably (nothing runs there, so the stream keeps them), whose stream has the least byte limit
    // a Manager may set: it still takes the largest event.
    let app = TestApp::start().await;
    let mut mcfg = manager_config(app.port, &Opts::default());
    mcfg["workers"]["retries"]["attempts"] = json!(1);
    mcfg["workers"]["deadLetter"] = json!("dead");
    let nowhere = ClosedPort::new();
    mcfg["destinations"] = json!({"dead": {
        "manager": "graveyard", "service": "graveyard", "port": nowhere.port,
        "podSelector": {}, "durable": {"maxBytes": plan::MIN_STREAM_BYTES},
    }});
    mcfg["staticEndpoints"] = json!({"graveyard": [format!("127.0.0.1:{}", nowhere.port)]});
    mcfg["jetstream"] = json!({"url": url, "replicas": 1});
    let (_handlers, ports) = start(dir.path(), "handlers", &mcfg).await;

    // A Router reading JSON bodies whole up to the 16 MiB an event carries.
    let mut rcfg = router_config(ports.listen, "30s");
    rcfg["spec"]["routes"] = json!([{"event": "fail", "http": {"method": "POST", "path": "/big"}}]);
    rcfg["spec"]["middleware"] = json!([{"bodyLimit": {"maxBytes": 16 << 20}}]);
    rcfg["destinations"] = json!({"fail": rcfg["destinations"]["fail"]});
    let rfile = write_json(dir.path(), "router.json", &rcfg);
    let rdir = dir.path().join("router");
    std::fs::create_dir_all(&rdir).unwrap();
    let (_router, router) = start_router(&rdir, &rfile, &[], &[]).await;

    // As large as a request goes to a Manager whole (a frame's payload less its other fields).
    let body = format!("\"{}\"", "x".repeat((16 << 20) - 16 * 1024));
    let req = hyper::Request::post(format!("http://127.0.0.1:{}/big", router.http))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())))
        .unwrap();
    let r = client.send(req).await.unwrap();
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    let failed = app.state.seen("fail").remove(0);
    assert_eq!(failed.body.len(), body.len());
    let dead = plan::subject(NAMESPACE, "graveyard", "dead", Lane::Unordered);
    let m = poll(
        Duration::from_secs(30),
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
    // The failed event's own id (the Router names a request's event).
    assert_eq!(
        m.headers.get("ce-id").map(|v| v.as_str()),
        Some(failed.header("ce-id"))
    );
    assert_eq!(m.payload.len(), body.len(), "the whole body");
    assert!(
        m.payload.len() > 16 * 1024 * 1024 - 32 * 1024,
        "{}",
        m.payload.len()
    );
    drop(servers);
}
