//! Scale from zero at the router: a router following a control plane (a fake one in this process,
//! serving tables from a watch channel and recording `Activate` calls) holds a request whose event
//! type has no ready endpoint, asks for a pod at once, and delivers the request when a table brings
//! an endpoint (a real manager sidecar and app started only after the activation); an event type
//! that never gets one is answered 503 with Retry-After after the activation timeout.

#![allow(clippy::unwrap_used)]

mod common;

use common::control_plane::FakeControlPlane;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use switchyard_protocol::control::v1::{ActivateRequest, Endpoint, Route, RoutingTable};
use tokio::sync::{mpsc, watch};

fn table(version: u64, endpoints: &[String]) -> RoutingTable {
    RoutingTable {
        version,
        router: "edge".into(),
        namespace: "default".into(),
        routes: vec![Route {
            event_type: "noop".into(),
            manager: "handlers".into(),
            pool: "handlers-manager".into(),
            endpoints: endpoints
                .iter()
                .map(|a| Endpoint {
                    address: a.clone(),
                    pod: "handlers-0".into(),
                })
                .collect(),
            durable: None,
            subscription: None,
            push: Vec::new(),
        }],
        ..RoutingTable::default()
    }
}

struct Setup {
    dir: tempfile::TempDir,
    tables: watch::Sender<RoutingTable>,
    activations: mpsc::UnboundedReceiver<(Instant, ActivateRequest)>,
    router: Proc,
    http_port: u16,
    admin: u16,
    client: Http,
}

/// The fake control plane with an empty `noop` route, and a router following it whose broker
/// holds for `activation_timeout`.
async fn setup(activation_timeout: &str) -> Setup {
    let FakeControlPlane {
        addr: cp,
        tables,
        activations,
    } = FakeControlPlane::start(table(1, &[])).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_json(
        dir.path(),
        "router.json",
        &json!({
            "name": "edge",
            "namespace": "default",
            "spec": {
                "listeners": {"http": {"port": 0}},
                "routes": [{"event": "noop", "http": {"method": "GET", "path": "/noop"}}],
                "broker": {
                    "queueCapacity": 16,
                    "responseTimeout": "30s",
                    "activationTimeout": activation_timeout,
                },
            },
            "destinations": {},
        }),
    );
    let url = format!("http://{cp}");
    let (router, ports) = start_router(
        dir.path(),
        &cfg,
        &["--control-plane", &url],
        &[("POD_NAME", "edge-0")],
    )
    .await;
    let (http_port, admin) = (ports.http, ports.admin);
    let client = Http::new();
    // The first table (an empty route) is in place.
    poll(Duration::from_secs(10), "the first table", || async {
        let r = client
            .get(&format!("http://127.0.0.1:{admin}/routes"))
            .await
            .ok()?;
        (r.json()["version"] == 1).then_some(())
    })
    .await;
    Setup {
        dir,
        tables,
        activations,
        router,
        http_port,
        admin,
        client,
    }
}

async fn held(s: &Setup) -> f64 {
    let r = s
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", s.admin))
        .await
        .unwrap();
    metric(
        &String::from_utf8_lossy(&r.body),
        "switchyard_held_requests",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_delivered_when_an_endpoint_appears() {
    let mut s = setup("20s").await;
    let url = format!("http://127.0.0.1:{}/noop", s.http_port);
    let client = s.client.clone();
    let started = Instant::now();
    let request = tokio::spawn(async move { client.get(&url).await });

    // The router asks for a pod at once, naming the event type.
    let (_, a) = tokio::time::timeout(Duration::from_secs(10), s.activations.recv())
        .await
        .expect("an Activate call")
        .unwrap();
    println!("activation after {:?}", started.elapsed());
    assert_eq!(
        (a.namespace.as_str(), a.router.as_str(), a.pod.as_str()),
        ("default", "edge", "edge-0")
    );
    assert_eq!((a.event_type.as_str(), a.held), ("noop", 1));
    assert!(!request.is_finished(), "the request is held, not refused");
    assert_eq!(held(&s).await, 1.0);

    // Only now does a manager exist; a table brings its endpoint.
    let app = TestApp::start().await;
    let mcfg = write_json(
        s.dir.path(),
        "manager.json",
        &manager_config(app.port, &Opts::default()),
    );
    let (_manager, m) = start_manager(s.dir.path(), &mcfg, &[]).await;
    s.tables
        .send_replace(table(2, &[format!("127.0.0.1:{}", m.listen)]));

    let reply = tokio::time::timeout(Duration::from_secs(15), request)
        .await
        .expect("the held request is answered")
        .unwrap()
        .unwrap();
    println!("held request answered after {:?}", started.elapsed());
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        String::from_utf8_lossy(&reply.body),
        s.router.log_text()
    );
    assert_eq!(app.state.seen("noop").len(), 1);
    assert_eq!(held(&s).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_endpoint_the_hold_ends_in_503_with_retry_after() {
    let mut s = setup("1s").await;
    let started = Instant::now();
    let reply = s
        .client
        .get(&format!("http://127.0.0.1:{}/noop", s.http_port))
        .await
        .unwrap();
    let waited = started.elapsed();
    println!("answered after {waited:?}");
    assert_eq!(
        reply.status,
        503,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(reply.header("retry-after").is_some(), "{:?}", reply.headers);
    assert!(
        waited >= Duration::from_secs(1),
        "held for the activation timeout first: {waited:?}"
    );
    let answered = started + waited;
    let (first, a) = s.activations.try_recv().expect("an Activate call was made");
    assert_eq!((a.event_type.as_str(), a.held), ("noop", 1));
    assert_eq!(held(&s).await, 0.0);
    // Repeated once a second while held, and not after. This sleep is the behaviour under test: a
    // quiet window of more than two repeat periods after the hold ended, in which a router that
    // kept asking would call at least twice more.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut later = Vec::new();
    while let Ok((at, a)) = s.activations.try_recv() {
        assert_eq!(
            (a.event_type.as_str(), a.held),
            ("noop", 1),
            "sent while held"
        );
        later.push(at);
    }
    // The 1 s hold has room for the first call and one repeat, which may race the hold's end and
    // arrive just after the answer; a repeat after the hold would come a full period later.
    assert!(
        later.len() <= 1,
        "{} more calls after the first; the hold lasted {waited:?}",
        later.len()
    );
    for at in later {
        assert!(
            at < answered + Duration::from_millis(900),
            "an Activate call {:?} after the answer (first call at {:?})",
            at.saturating_duration_since(answered),
            first.saturating_duration_since(started)
        );
    }
}
