//! One trace per event across all its subscribers, with real sidecar processes, a real nats-server
//! and an OTLP receiver in this process: an app publishes with the client's traceparent, a direct
//! subscriber (`billing`) and a durable one (`audit`, whose copy waits in its JetStream stream) each
//! deliver it, and every delivery span hangs under the publishing sidecar's spans in the client's
//! trace; each app is handed that trace.

#![allow(clippy::unwrap_used)]

mod common;

use common::otlp::{GotSpan, Receiver};
use common::*;
use hyper::Request;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const EVENT: &str = "order.created";
const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

fn subscription(manager: &str) -> Value {
    match manager {
        "billing" => json!({"event": EVENT}),
        _ => json!({"event": EVENT, "delivery": "durable"}),
    }
}

struct Traced {
    _dir: tempfile::TempDir,
    _servers: Vec<nats::NatsServer>,
    _procs: Vec<Proc>,
    apps: HashMap<&'static str, Arc<TestApp>>,
    front_api: u16,
    client: Http,
}

impl Traced {
    async fn start(rx: &Receiver) -> Traced {
        let dir = tempfile::tempdir().unwrap();
        let (servers, _relays) = nats::cluster(dir.path(), 1).await;
        let url = nats::urls(&servers);
        let opts = Opts::default();
        let tracing = json!({"otlpEndpoint": rx.endpoint(), "samplingRatio": 1.0});
        let mut procs = Vec::new();
        let mut apps = HashMap::new();
        let mut subscribers = serde_json::Map::new();
        let mut endpoints = serde_json::Map::new();
        for name in ["billing", "audit"] {
            let app = TestApp::start().await;
            let mut cfg = manager_config(app.port, &opts);
            cfg["name"] = json!(name);
            cfg["tracing"] = tracing.clone();
            cfg["events"] = json!([format!("{name}.own")]);
            cfg["subscriptions"] = json!([subscription(name)]);
            cfg["jetstream"] = json!({"url": url, "replicas": 1});
            let (p, ports) = spawn(dir.path(), name, &cfg).await;
            let durable = (name == "audit").then(|| json!({}));
            let mut dest =
                json!({"manager": name, "service": name, "port": ports.listen, "podSelector": {}});
            if let Some(d) = durable {
                dest["durable"] = d;
            }
            subscribers.insert(
                format!("{EVENT}@{name}"),
                json!({"subscription": subscription(name), "destination": dest}),
            );
            endpoints.insert(name.into(), json!([format!("127.0.0.1:{}", ports.listen)]));
            procs.push(p);
            apps.insert(name, app);
        }
        let front_app = TestApp::start().await;
        let mut fcfg = manager_config(front_app.port, &opts);
        fcfg["name"] = json!("front");
        fcfg["tracing"] = tracing;
        fcfg["events"] = json!(["front.page"]);
        fcfg["jetstream"] = json!({"url": url, "replicas": 1});
        fcfg["subscribers"] = Value::Object(subscribers);
        fcfg["staticEndpoints"] = Value::Object(endpoints);
        let (front, f) = spawn(dir.path(), "front", &fcfg).await;
        procs.push(front);
        apps.insert("front", front_app);
        let traced = Traced {
            _dir: dir,
            _servers: servers,
            _procs: procs,
            apps,
            front_api: f.local_api,
            client: Http::new(),
        };
        // Connected: 202 once both copies are admitted or stored (these untraced ids are not checked).
        let mut n = 0;
        poll(Duration::from_secs(30), "both subscribers reached", || {
            n += 1;
            let id = format!("warm-{n}");
            let t = &traced;
            async move { (t.publish(&id, None).await == 202).then_some(()) }
        })
        .await;
        traced
    }

    async fn publish(&self, id: &str, traceparent: Option<&str>) -> u16 {
        let mut req = Request::post(format!(
            "http://127.0.0.1:{}/v1/publish/{EVENT}",
            self.front_api
        ))
        .header("content-type", "application/json")
        .header("ce-id", id);
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        let req = req
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                b"{\"order\":1}",
            )))
            .unwrap();
        self.client.send(req).await.unwrap().status
    }

    /// The traceparent the app of `m` was handed with the event `id`, once it got it.
    async fn handed(&self, m: &str, id: &str) -> String {
        poll(Duration::from_secs(30), &format!("{id} at {m}"), || async {
            self.apps[m]
                .state
                .seen(EVENT)
                .iter()
                .find(|e| e.header("ce-id") == id)
                .map(|e| e.header("traceparent").to_owned())
        })
        .await
    }
}

async fn spawn(dir: &Path, name: &str, cfg: &Value) -> (Proc, ManagerPorts) {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let path = write_json(dir, &format!("{name}.json"), cfg);
    start_manager(&sub, &path, &[]).await
}

/// The services of the spans from `span` up its parents within `spans`, and the parent id where
/// the walk left them (the remote parent of the trace's first span here).
fn ancestry(spans: &[GotSpan], span: &GotSpan) -> (Vec<String>, String) {
    let by_id: HashMap<&str, &GotSpan> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut services = vec![span.service.clone()];
    let mut parent = span.parent.clone();
    while let Some(p) = by_id.get(parent.as_str()) {
        services.push(p.service.clone());
        parent = p.parent.clone();
    }
    (services, parent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscribers_delivery_hangs_under_the_publish_in_one_trace() {
    let rx = Receiver::start().await;
    let t = Traced::start(&rx).await;
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    assert_eq!(t.publish("traced-1", Some(&traceparent)).await, 202);
    for m in ["billing", "audit"] {
        let handed = t.handed(m, "traced-1").await;
        assert!(
            handed.starts_with(&format!("00-{CLIENT_TRACE}-")),
            "{m}'s app was handed {handed:?}, not the client's trace"
        );
    }
    let deliver = format!("deliver {EVENT}");
    // Each process exports in its own batches: wait for the publishing sidecar's span as well as
    // both deliveries before looking at the chains.
    let publish = format!("publish {EVENT}");
    let spans = poll(
        Duration::from_secs(30),
        "both subscribers' delivery spans and the publish span",
        || async {
            let spans: Vec<GotSpan> = rx
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == CLIENT_TRACE)
                .collect();
            let delivered = ["billing", "audit"]
                .iter()
                .all(|m| spans.iter().any(|s| s.service == *m && s.name == deliver));
            let published = spans
                .iter()
                .any(|s| s.service == "front" && s.name == publish);
            (delivered && published).then_some(spans)
        },
    )
    .await;
    for m in ["billing", "audit"] {
        let d = spans
            .iter()
            .find(|s| s.service == m && s.name == deliver)
            .unwrap();
        let (services, top) = ancestry(&spans, d);
        assert!(
            services.iter().any(|s| s == "front"),
            "{m}'s delivery does not hang under the publishing sidecar: {services:?}\n{spans:#?}"
        );
        assert_eq!(
            top, CLIENT_SPAN,
            "{m}'s chain {services:?} does not reach the client's span"
        );
        // The app's delivery is the span handed on: its parent is one of the subscriber's spans.
        assert_eq!(services[0], m);
    }
    let by_service = |m: &str| spans.iter().filter(|s| s.service == m).count();
    eprintln!(
        "spans in the client's trace: front {}, billing {}, audit {}",
        by_service("front"),
        by_service("billing"),
        by_service("audit")
    );
}
