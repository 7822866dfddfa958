//! A durable Manager upgraded into the subscriptions layout loses no stored event (issue 36), with a
//! real nats-server and real sidecar processes.
//!
//! The layout of a handled type did not change with durable subscriptions (commit f85ff08): the same
//! stream `SY_<ns>_<manager>`, subjects `sy.<ns>.<manager>.<type>.<lane>`, headers and consumers; a
//! subscription adds consumers and subjects under `_s-` tokens beside them. So "before the upgrade"
//! is a Manager configured as every Manager was then (handled types only), whose events are stored
//! while its pod is down, byte for byte as the previous sidecar stored them (the store path of a
//! handled type is unchanged since); "after" is the same Manager restarted with a durable
//! subscription added, as `kubectl apply` of the new spec would roll it.

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::*;
use hyper::Request;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::durable as plan;

const STORED: u64 = 20;

fn orders_config(app_port: u16, url: &str, upgraded: bool) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!("orders");
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg["events"] = json!(["ordered"]);
    cfg["durableEvents"] = json!(["ordered"]);
    if upgraded {
        cfg["subscriptions"] = json!([{"event": "audit.*", "delivery": "durable"}]);
    }
    cfg
}

async fn spawn(dir: &Path, name: &str, cfg: &Value) -> (Proc, ManagerPorts) {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let path = write_json(dir, &format!("{name}.json"), cfg);
    start_manager(&sub, &path, &[]).await
}

async fn publish(client: &Http, api: u16, event: &str, id: &str) -> u16 {
    let req = Request::post(format!("http://127.0.0.1:{api}/v1/publish/{event}"))
        .header("content-type", "application/json")
        .header("ce-id", id)
        .body(http_body_util::Full::new(bytes::Bytes::from(
            json!({"id": id}).to_string(),
        )))
        .unwrap();
    let r = client.send(req).await.unwrap();
    assert_eq!(
        r.status,
        202,
        "{event} {id}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.status
}

fn ids(app: &TestApp, event: &str) -> Vec<String> {
    app.state
        .seen(event)
        .iter()
        .map(|e| e.header("ce-id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stored_before_a_manager_takes_a_subscription_are_delivered_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_servers, _relays) = nats::cluster(dir.path(), 1).await;
    let url = nats::urls(&_servers);
    let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());
    let nowhere = ClosedPort::new();
    let client = Http::new();
    let stored_now = || async {
        let mut stream = js
            .get_stream(plan::stream_name("default", "orders"))
            .await
            .unwrap();
        stream.info().await.unwrap().state.messages
    };

    // The previous layout: orders handles `ordered` durably and has no subscription.
    let before = TestApp::start().await;
    let (orders_v1, _) = spawn(
        dir.path(),
        "orders-v1",
        &orders_config(before.port, &url, false),
    )
    .await;
    // The publisher's table as the operator renders it after the upgrade: orders' durable route and
    // its subscription; no frame is sent to these endpoints.
    let dest = json!({"manager": "orders", "service": "orders", "port": nowhere.port, "podSelector": {}, "durable": {}});
    let front_app = TestApp::start().await;
    let mut fcfg = manager_config(front_app.port, &Opts::default());
    fcfg["name"] = json!("front");
    fcfg["events"] = json!(["front.page"]);
    fcfg["jetstream"] = json!({"url": url, "replicas": 1});
    fcfg["destinations"] = json!({"ordered": dest});
    fcfg["subscribers"] = json!({"audit.*@orders": {
        "subscription": {"event": "audit.*", "delivery": "durable"},
        "destination": dest,
    }});
    fcfg["staticEndpoints"] = json!({"orders": [format!("127.0.0.1:{}", nowhere.port)]});
    let (_front, f) = spawn(dir.path(), "front", &fcfg).await;

    // The old pod delivers one, then goes down (a rollout's old pod, SIGKILLed to leave nothing
    // in flight); what is published meanwhile waits in the stream.
    publish(&client, f.local_api, "ordered", "warm-0").await;
    poll(Duration::from_secs(30), "warm-0 at the old pod", || async {
        ids(&before, "ordered")
            .contains(&"warm-0".to_owned())
            .then_some(())
    })
    .await;
    poll(Duration::from_secs(30), "warm-0 acknowledged", || async {
        (stored_now().await == 0).then_some(())
    })
    .await;
    drop(orders_v1);
    let stored: Vec<String> = (0..STORED).map(|i| format!("before-{i}")).collect();
    for id in &stored {
        publish(&client, f.local_api, "ordered", id).await;
    }
    let waiting = stored_now().await;
    assert_eq!(waiting, STORED, "stored while no pod runs");

    // The upgraded pod: the same Manager with a durable subscription added.
    let after = Arc::new(TestApp::start().await);
    let (_orders_v2, _) = spawn(
        dir.path(),
        "orders-v2",
        &orders_config(after.port, &url, true),
    )
    .await;
    poll(
        Duration::from_secs(30),
        "every stored event at the new pod",
        || async {
            let got = ids(&after, "ordered");
            stored.iter().all(|id| got.contains(id)).then_some(())
        },
    )
    .await;
    // The new layout works beside what was there: a subscription's copy and a new handled event.
    publish(&client, f.local_api, "audit.login", "audit-1").await;
    publish(&client, f.local_api, "ordered", "after-1").await;
    poll(
        Duration::from_secs(30),
        "the copy and the new event",
        || async {
            (ids(&after, "audit.login") == ["audit-1"]
                && ids(&after, "ordered").contains(&"after-1".to_owned()))
            .then_some(())
        },
    )
    .await;
    poll(
        Duration::from_secs(30),
        "the stream worked down",
        || async { (stored_now().await == 0).then_some(()) },
    )
    .await;
    let got = ids(&after, "ordered");
    for id in stored.iter().chain([&"after-1".to_owned()]) {
        assert_eq!(
            got.iter().filter(|g| *g == id).count(),
            1,
            "{id} once: {got:?}"
        );
    }
    assert!(
        !got.contains(&"warm-0".to_owned()),
        "acknowledged by the old pod, never again"
    );
}
