//! Durable subscriptions with a real nats-server, real manager sidecar processes and test apps:
//! a publish is answered 202 once it is stored for its handler and for each durable subscriber
//! (a copy in each subscriber's own stream), each gets it once, in order per key, filters decide
//! who, and a subscriber that starts late gets what was kept for it (`startFrom: stored`) or only
//! what comes after it started (`startFrom: new`).
//!
//! Managers: `orders` handles `ordered` durably; `billing` subscribes to `ordered` (ordering key
//! `/key`), `shipping` to `*`, `analytics` to `ordered` filtered on ids starting `keep-`, `late` to
//! `ordered` (started after the publishes) and `fresh` to `ordered` from `new` (started after
//! them too), all durably. `front` is the publisher: the test plays its app through its local API.
//! `shipping` dead-letters to type `dead`, kept in Manager `graveyard`'s stream (nobody consumes
//! it): a copy its app fails every time ends there.

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::*;
use hyper::Request;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::durable as plan;

const SUBSCRIBERS: [&str; 5] = ["billing", "shipping", "analytics", "late", "fresh"];
/// Events published before `late` and `fresh` start.
const PUBLISHED: u64 = 24;

fn subscription(manager: &str) -> Value {
    match manager {
        "billing" => json!({"event": "ordered", "delivery": "durable"}),
        "shipping" => json!({"event": "*", "delivery": "durable"}),
        "analytics" => json!({
            "event": "ordered", "delivery": "durable",
            "filter": {"prefix": {"id": "keep-"}},
        }),
        "late" => json!({"event": "ordered", "delivery": "durable", "startFrom": "stored"}),
        "fresh" => json!({"event": "ordered", "delivery": "durable", "startFrom": "new"}),
        _ => Value::Null,
    }
}

/// A Manager's config: its own (unused) type and its subscription, on `url`; `nowhere` is the
/// never listening endpoint of Managers nobody runs.
fn config(name: &str, app_port: u16, url: &str, nowhere: u16) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!(name);
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    if name == "orders" {
        cfg["events"] = json!(["ordered"]);
        cfg["durableEvents"] = json!(["ordered"]);
    } else {
        cfg["events"] = json!([format!("{name}.own")]);
        cfg["subscriptions"] = json!([subscription(name)]);
    }
    if name == "billing" {
        cfg["workers"]["orderingKey"] = json!("/key");
    }
    if name == "shipping" {
        cfg["workers"]["deadLetter"] = json!("dead");
        cfg["destinations"] = json!({"dead": {
            "manager": "graveyard", "service": "graveyard", "port": nowhere,
            "podSelector": {}, "durable": {},
        }});
        cfg["staticEndpoints"] = json!({"graveyard": [format!("127.0.0.1:{nowhere}")]});
    }
    cfg
}

struct Run {
    dir: tempfile::TempDir,
    _servers: Vec<nats::NatsServer>,
    url: String,
    apps: BTreeMap<&'static str, Arc<TestApp>>,
    procs: BTreeMap<&'static str, Proc>,
    front_api: u16,
    js: jetstream::Context,
    client: Http,
    _nowhere: ClosedPort,
}

impl Run {
    async fn start() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let (servers, _relays) = nats::cluster(dir.path(), 1).await;
        let url = nats::urls(&servers);
        let nowhere = ClosedPort::new();
        // The publisher's table, as the operator renders it: durable routes carry the stream's
        // Manager settings; no frame is ever sent to these endpoints.
        let dest = |m: &str, durable: Value| json!({"manager": m, "service": m, "port": nowhere.port, "podSelector": {}, "durable": durable});
        let mut subscribers = serde_json::Map::new();
        let mut endpoints = serde_json::Map::new();
        for m in SUBSCRIBERS {
            let s = subscription(m);
            let durable = if m == "billing" {
                json!({"orderingKey": "/key"})
            } else {
                json!({})
            };
            subscribers.insert(
                format!("{}@{m}", s["event"].as_str().unwrap()),
                json!({"subscription": s, "destination": dest(m, durable)}),
            );
            endpoints.insert(m.into(), json!([format!("127.0.0.1:{}", nowhere.port)]));
        }
        endpoints.insert(
            "orders".into(),
            json!([format!("127.0.0.1:{}", nowhere.port)]),
        );
        let front_app = TestApp::start().await;
        let mut fcfg = config("front", front_app.port, &url, nowhere.port);
        fcfg["subscriptions"] = json!([]);
        fcfg["destinations"] = json!({"ordered": dest("orders", json!({}))});
        fcfg["subscribers"] = Value::Object(subscribers);
        fcfg["staticEndpoints"] = Value::Object(endpoints);
        let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());
        let mut run = Run {
            dir,
            _servers: servers,
            url,
            apps: BTreeMap::new(),
            procs: BTreeMap::new(),
            front_api: 0,
            js,
            client: Http::new(),
            _nowhere: nowhere,
        };
        let (front, f) = run.spawn("front", front_app, &fcfg).await;
        run.front_api = f.local_api;
        run.procs.insert("front", front);
        for m in ["orders", "billing", "shipping", "analytics"] {
            run.start_manager(m).await;
        }
        run
    }

    async fn spawn(
        &mut self,
        name: &'static str,
        app: Arc<TestApp>,
        cfg: &Value,
    ) -> (Proc, ManagerPorts) {
        let sub = self.dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let path = write_json(self.dir.path(), &format!("{name}.json"), cfg);
        self.apps.insert(name, app);
        start_manager(Path::new(&sub), &path, &[]).await
    }

    async fn start_manager(&mut self, name: &'static str) {
        let app = TestApp::start().await;
        let cfg = config(name, app.port, &self.url, self._nowhere.port);
        let (p, _) = self.spawn(name, app, &cfg).await;
        self.procs.insert(name, p);
    }

    async fn publish(&self, id: &str, key: &str, seq: u64) -> Reply {
        self.publish_as("ordered", id, key, seq).await
    }

    async fn publish_as(&self, event: &str, id: &str, key: &str, seq: u64) -> Reply {
        let body = json!({"key": key, "seq": seq}).to_string();
        let req = Request::post(format!(
            "http://127.0.0.1:{}/v1/publish/{event}",
            self.front_api
        ))
        .header("content-type", "application/json")
        .header("ce-id", id)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
        self.client.send(req).await.unwrap()
    }

    /// The ce-ids of `ordered` events manager `m`'s app received, in arrival order.
    fn ids(&self, m: &str) -> Vec<String> {
        self.apps[m]
            .state
            .seen("ordered")
            .iter()
            .map(|e| e.header("ce-id").to_owned())
            .collect()
    }

    async fn wait_for(&self, m: &str, ids: &[String]) {
        poll(
            Duration::from_secs(30),
            &format!("{} events at {m}", ids.len()),
            || async {
                let got = self.ids(m);
                ids.iter().all(|id| got.contains(id)).then_some(())
            },
        )
        .await;
    }

    /// Events Manager `m`'s stream still holds (none when it has no stream yet).
    async fn stored(&self, m: &str) -> u64 {
        match self.js.get_stream(plan::stream_name("default", m)).await {
            Ok(mut stream) => stream.info().await.unwrap().state.messages,
            Err(_) => 0,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_is_kept_for_each_durable_subscriber_and_a_late_one_gets_what_it_missed() {
    let mut run = Run::start().await;
    // Every stream exists from the first publish: a subscriber with no pod yet keeps its copies.
    let mut ids = Vec::new();
    for seq in 0..PUBLISHED {
        let id = if seq % 2 == 0 {
            format!("keep-{seq}")
        } else {
            format!("drop-{seq}")
        };
        let r = run.publish(&id, &format!("k{}", seq % 3), seq).await;
        assert_eq!(r.status, 202, "{id}: {}", String::from_utf8_lossy(&r.body));
        ids.push(id);
    }
    let keep: Vec<String> = ids
        .iter()
        .filter(|i| i.starts_with("keep-"))
        .cloned()
        .collect();
    for m in ["orders", "billing", "shipping"] {
        run.wait_for(m, &ids).await;
    }
    run.wait_for("analytics", &keep).await;
    // Per key in order at billing (its ordering key), one at a time.
    let billing = run.apps["billing"].state.clone();
    let order = billing.order.lock().unwrap().clone();
    for key in ["k0", "k1", "k2"] {
        let seqs: Vec<u64> = order
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect();
        assert!(seqs.is_sorted(), "{key} in order at billing: {seqs:?}");
        assert_eq!(seqs.len(), usize::try_from(PUBLISHED / 3).unwrap());
    }
    assert_eq!(
        billing.overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    // `late` starts now and gets everything kept for it; `fresh` starts now and skips it.
    run.start_manager("late").await;
    run.start_manager("fresh").await;
    run.wait_for("late", &ids).await;
    for m in ["late", "fresh"] {
        poll(
            Duration::from_secs(30),
            &format!("{m}'s stream worked down"),
            || async { (run.stored(m).await == 0).then_some(()) },
        )
        .await;
    }
    assert!(
        run.ids("fresh").is_empty(),
        "fresh starts from new: {:?}",
        run.ids("fresh")
    );
    let after = "keep-after".to_owned();
    assert_eq!(run.publish(&after, "k0", PUBLISHED).await.status, 202);
    let all: Vec<String> = ids.iter().cloned().chain([after.clone()]).collect();
    for m in ["orders", "billing", "shipping", "late"] {
        run.wait_for(m, &all).await;
    }
    run.wait_for("fresh", std::slice::from_ref(&after)).await;
    run.wait_for("analytics", std::slice::from_ref(&after))
        .await;

    // Once each, everywhere it matched, and nowhere else; the type came with each copy.
    for m in ["orders", "billing", "shipping", "late"] {
        let got = run.ids(m);
        for id in &all {
            assert_eq!(got.iter().filter(|g| *g == id).count(), 1, "{id} at {m}");
        }
        assert_eq!(got.len(), all.len(), "{m}: {got:?}");
    }
    let analytics = run.ids("analytics");
    assert!(
        analytics.iter().all(|i| i.starts_with("keep-")),
        "{analytics:?}"
    );
    assert_eq!(analytics.len(), keep.len() + 1, "{analytics:?}");
    assert_eq!(run.ids("fresh"), [after]);
    // The publisher is named as the source, whichever stream the copy came from.
    let seen = run.apps["shipping"].state.seen("ordered");
    assert!(
        seen.iter()
            .all(|e| e.header("ce-source") == "/switchyard/default/front"),
        "{:?}",
        seen.first().map(|e| &e.headers)
    );
    // A copy shipping's app fails every time (`fail` answers 500): its last attempt dead-letters
    // it to `dead`, kept in graveyard's stream, and it leaves shipping's. Nobody else takes `fail`.
    assert_eq!(
        run.publish_as("fail", "doomed-1", "k0", 0).await.status,
        202
    );
    poll(
        Duration::from_secs(30),
        "the failed copy in graveyard's stream",
        || async { (run.stored("graveyard").await == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        run.apps["shipping"].state.seen("fail").len(),
        3,
        "3 attempts"
    );
    // Every stream is worked down: each copy was acknowledged by its own subscriber.
    for m in [
        "orders",
        "billing",
        "shipping",
        "analytics",
        "late",
        "fresh",
    ] {
        poll(
            Duration::from_secs(30),
            &format!("{m}'s stream empty"),
            || async { (run.stored(m).await == 0).then_some(()) },
        )
        .await;
    }
    run.procs.clear();
}
