//! Subscriptions with real sidecar processes: a publish fans out to every subscribed Manager once
//! (filters decide who), a request's handler answers while `requests` and `responses` observers
//! get copies, and a stopped observer costs the handler's answer nothing.
//!
//! Managers: `orders` handles `order.created` and `echo`; `billing` subscribes to `order.created`,
//! `shipping` to `order.*`, `analytics` to `order.created` filtered on ids starting `keep-`, and
//! `watch` to the requests and responses of `echo`. `front` is the publisher: the test plays its
//! app through its local API. The Router routes `POST /echo` to `orders`.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use hyper::Request;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Subscribed {
    _dir: tempfile::TempDir,
    apps: std::collections::BTreeMap<&'static str, Arc<TestApp>>,
    procs: std::collections::BTreeMap<&'static str, Proc>,
    front_api: u16,
    http_port: u16,
    router_admin: u16,
    client: Http,
}

const MANAGERS: [(&str, &[&str]); 5] = [
    ("orders", &["order.created", "echo"]),
    ("billing", &["billing.charge"]),
    ("shipping", &["shipping.ship"]),
    ("analytics", &["analytics.count"]),
    ("watch", &["watch.tick"]),
];

fn subscriptions(manager: &str) -> Value {
    match manager {
        "billing" => json!([{"event": "order.created"}]),
        "shipping" => json!([{"event": "order.*"}]),
        "analytics" => {
            json!([{"event": "order.created", "filter": {"prefix": {"id": "keep-"}}}])
        }
        "watch" => json!([{"event": "echo", "observe": ["requests", "responses"]}]),
        _ => json!([]),
    }
}

fn dest(manager: &str, port: u16) -> Value {
    json!({"manager": manager, "service": manager, "port": port, "podSelector": {}})
}

impl Subscribed {
    async fn start() -> Subscribed {
        let dir = tempfile::tempdir().unwrap();
        let mut apps = std::collections::BTreeMap::new();
        let mut procs = std::collections::BTreeMap::new();
        let mut ports = std::collections::BTreeMap::new();
        for (name, events) in MANAGERS {
            let app = TestApp::start().await;
            let mut cfg = manager_config(app.port, &Opts::default());
            cfg["name"] = json!(name);
            cfg["events"] = json!(events);
            cfg["subscriptions"] = subscriptions(name);
            let sub = dir.path().join(name);
            std::fs::create_dir_all(&sub).unwrap();
            let path = write_json(dir.path(), &format!("{name}.json"), &cfg);
            let (p, ports_of) = start_manager(&sub, &path, &[]).await;
            apps.insert(name, app);
            procs.insert(name, p);
            ports.insert(name, ports_of.listen);
        }
        // The Router's table, as the operator renders it: handlers by type, subscribers by key.
        let mut destinations = serde_json::Map::new();
        let mut subscribers = serde_json::Map::new();
        let mut endpoints = serde_json::Map::new();
        for (name, events) in MANAGERS {
            let d = dest(name, ports[name]);
            for e in events {
                destinations.insert((*e).to_owned(), d.clone());
            }
            for s in subscriptions(name).as_array().unwrap() {
                let key = format!("{}@{name}", s["event"].as_str().unwrap());
                subscribers.insert(key, json!({"subscription": s, "destination": d}));
            }
            endpoints.insert(
                name.to_owned(),
                json!([format!("127.0.0.1:{}", ports[name])]),
            );
        }
        let front_app = TestApp::start().await;
        let mut fcfg = manager_config(front_app.port, &Opts::default());
        fcfg["name"] = json!("front");
        fcfg["events"] = json!(["front.page"]);
        fcfg["destinations"] = Value::Object(destinations.clone());
        fcfg["subscribers"] = Value::Object(subscribers.clone());
        fcfg["staticEndpoints"] = Value::Object(endpoints.clone());
        std::fs::create_dir_all(dir.path().join("front")).unwrap();
        let fpath = write_json(dir.path(), "front.json", &fcfg);
        let (front, f) = start_manager(&dir.path().join("front"), &fpath, &[]).await;
        procs.insert("front", front);
        apps.insert("front", front_app);

        let mut rcfg = router_config(ports["orders"], "3s");
        rcfg["destinations"] = Value::Object(destinations);
        rcfg["subscribers"] = Value::Object(subscribers);
        rcfg["staticEndpoints"] = Value::Object(endpoints);
        let rpath = write_json(dir.path(), "router.json", &rcfg);
        let (router, r) = start_router(dir.path(), &rpath, &[], &[]).await;
        procs.insert("router", router);
        let mesh = Subscribed {
            _dir: dir,
            apps,
            procs,
            front_api: f.local_api,
            http_port: r.http,
            router_admin: r.admin,
            client: Http::new(),
        };
        // Connected: a publish is 202 only once every subscriber admitted it (warm-up ids are
        // never counted below).
        let mut n = 0;
        poll(
            Duration::from_secs(20),
            "every subscriber connected",
            || {
                n += 1;
                let id = format!("warm-{n}");
                let mesh = &mesh;
                async move { (mesh.publish("order.created", &id).await == 202).then_some(()) }
            },
        )
        .await;
        poll(Duration::from_secs(20), "the router connected", || async {
            let r = mesh.echo(0).await;
            (r.status == 200).then_some(())
        })
        .await;
        mesh
    }

    async fn publish(&self, event: &str, id: &str) -> u16 {
        let req = Request::post(format!(
            "http://127.0.0.1:{}/v1/publish/{event}",
            self.front_api
        ))
        .header("content-type", "application/json")
        .header("ce-id", id)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            br#"{"order":1}"#,
        )))
        .unwrap();
        self.client.send(req).await.map(|r| r.status).unwrap_or(0)
    }

    async fn echo(&self, value: i64) -> Reply {
        self.client
            .post(
                &format!("http://127.0.0.1:{}/echo", self.http_port),
                "application/json",
                json!({"value": value}).to_string(),
            )
            .await
            .unwrap()
    }

    /// The events with ce-id `id` manager `m`'s app has received.
    fn got(&self, m: &str, ty: &str, id: &str) -> usize {
        self.apps[m]
            .state
            .seen(ty)
            .iter()
            .filter(|e| e.header("ce-id") == id)
            .count()
    }

    /// Observer copies `watch`'s app has received of kind `kind`.
    fn observed(&self, kind: &str) -> Vec<Seen> {
        self.apps["watch"]
            .state
            .seen("echo")
            .into_iter()
            .filter(|e| e.header("ce-switchyardobserved") == kind)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_reaches_every_matching_manager_once_and_filters_decide() {
    let mesh = Subscribed::start().await;
    assert_eq!(mesh.publish("order.created", "order-1").await, 202);
    assert_eq!(mesh.publish("order.created", "keep-1").await, 202);
    for m in ["orders", "billing", "shipping"] {
        for id in ["order-1", "keep-1"] {
            poll(Duration::from_secs(10), &format!("{id} at {m}"), || async {
                (mesh.got(m, "order.created", id) > 0).then_some(())
            })
            .await;
        }
    }
    poll(Duration::from_secs(10), "keep-1 at analytics", || async {
        (mesh.got("analytics", "order.created", "keep-1") > 0).then_some(())
    })
    .await;
    // A barrier: once this one is everywhere, a duplicate of the first two would be too.
    assert_eq!(mesh.publish("order.created", "keep-2").await, 202);
    for m in ["orders", "billing", "shipping", "analytics"] {
        poll(
            Duration::from_secs(10),
            &format!("keep-2 at {m}"),
            || async { (mesh.got(m, "order.created", "keep-2") > 0).then_some(()) },
        )
        .await;
    }
    for m in ["orders", "billing", "shipping"] {
        for id in ["order-1", "keep-1", "keep-2"] {
            assert_eq!(mesh.got(m, "order.created", id), 1, "{id} at {m}");
        }
    }
    assert_eq!(mesh.got("analytics", "order.created", "keep-1"), 1);
    assert_eq!(
        mesh.got("analytics", "order.created", "order-1"),
        0,
        "analytics' filter takes ids starting keep- only"
    );
    assert!(
        mesh.apps["watch"].state.seen("order.created").is_empty(),
        "watch subscribes to echo only"
    );
    // A pattern subscription takes the types under it that nobody handles: 202 from shipping alone.
    assert_eq!(mesh.publish("order.shipped", "ship-1").await, 202);
    poll(Duration::from_secs(10), "ship-1 at shipping", || async {
        (mesh.got("shipping", "order.shipped", "ship-1") > 0).then_some(())
    })
    .await;
    // A type nobody handles or observes is still refused.
    assert_eq!(mesh.publish("nobody.cares", "x-1").await, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_while_observers_get_the_request_and_the_answer() {
    let mesh = Subscribed::start().await;
    let r = mesh.echo(7).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json(), json!({"value": 7}));
    let handled = mesh.apps["orders"]
        .state
        .seen("echo")
        .into_iter()
        .find(|e| &e.body[..] == br#"{"value":7}"#)
        .expect("orders handled the request");
    let id = handled.header("ce-id").to_owned();
    let request = poll(Duration::from_secs(10), "the request's copy", || async {
        mesh.observed("request")
            .into_iter()
            .find(|e| e.header("ce-id") == id)
    })
    .await;
    assert_eq!(&request.body[..], br#"{"value":7}"#);
    let response = poll(Duration::from_secs(10), "the answer's copy", || async {
        mesh.observed("response")
            .into_iter()
            .find(|e| e.header("ce-switchyardrequestid") == id)
    })
    .await;
    assert_eq!(&response.body[..], br#"{"value":7}"#);
    assert_eq!(response.header("ce-switchyardstatus"), "200");
    assert_ne!(
        response.header("ce-id"),
        id,
        "the answer's copy has an id of its own"
    );
    assert!(
        mesh.apps["watch"]
            .state
            .seen("echo")
            .iter()
            .all(|e| !e.header("ce-switchyardobserved").is_empty()),
        "watch only observes echo: it never handles one"
    );
    let m = metrics_text(&mesh.client, mesh.router_admin).await;
    assert!(
        metric(
            &m,
            r#"switchyard_observer_copies_total{subscription="echo@watch",copy="response",outcome="sent"}"#
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_observer_does_not_delay_the_handlers_answer() {
    let mesh = Subscribed::start().await;
    // Frozen, not gone: its connection stays open and takes frames it never acknowledges, the
    // worst case for a copy (it waits for its deadline rather than failing at once).
    let pid = mesh.procs["watch"].child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut slowest = Duration::ZERO;
    for i in 0..50 {
        let t = Instant::now();
        let r = mesh.echo(i).await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.json(), json!({"value": i}));
    }
    std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    // A copy waits up to 10 s for its acknowledgement; an answer that waited on one would take
    // that long. Generous for a loaded machine, far below the copy's deadline.
    assert!(
        slowest < Duration::from_secs(2),
        "slowest answer {slowest:?}"
    );
    // Thawed, the observer still gets what was sent while it was stopped (the frames waited in
    // its socket), and the handler's answers never waited for it.
    poll(
        Duration::from_secs(15),
        "the copies sent while stopped",
        || async { (mesh.observed("request").len() >= 50).then_some(()) },
    )
    .await;
}
