//! JetStream behind the mesh's identity, with real sidecars and a real nats-server configured as
//! `switchyard up` configures its own: TLS with a certificate from the mesh CA, client certificates
//! required and verified, each mapped by its SPIFFE URI (`verify_and_map`) to the NATS user whose
//! permissions `switchyard_protocol::nats_access` gives its Manager.
//!
//! - Manager `cart` publishes `orders` durably to Manager `handlers`, both with mesh certificates:
//!   stored, delivered, acked, through TLS and those permissions alone.
//! - A client without a certificate, or with one from another CA, cannot connect.
//! - A Manager whose table routes nothing durably may publish nothing.
//! - `cart`'s certificate cannot delete `handlers`' stream, pull or ack `handlers`' events, store
//!   a type its table does not route, or read `handlers`' inbox; the server answers each with a
//!   permissions violation naming the subject, and the stream is intact afterwards.

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::identity::{TRUST_DOMAIN, TestIdentity, Workload, certified};
use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_identity::{CertStore, Kind, SpiffeId, tls};
use switchyard_protocol::durable::{self as plan, Lane};
use switchyard_protocol::nats_access::{self, Party, Permissions};

const NAMESPACE: &str = "default";

/// The server's `tls` and `authorization` blocks: `handlers` consumes its stream, both Managers
/// store `orders` in it.
fn access(id: &TestIdentity) -> String {
    let user = |name: &str, consumes: bool| -> (String, Permissions) {
        let party = Party {
            namespace: NAMESPACE.into(),
            manager: name.into(),
            consumes,
            stores: [("handlers".to_owned(), ["orders".to_owned()].into())].into(),
        };
        let uri = SpiffeId::new(TRUST_DOMAIN, NAMESPACE, Kind::Manager, name)
            .unwrap()
            .uri();
        (uri, nats_access::permissions(&party).unwrap())
    };
    // A Manager whose table routes nothing durably: its user may publish nothing at all.
    let idle = (
        SpiffeId::new(TRUST_DOMAIN, NAMESPACE, Kind::Manager, "idle")
            .unwrap()
            .uri(),
        nats_access::permissions(&Party {
            namespace: NAMESPACE.into(),
            manager: "idle".into(),
            ..Party::default()
        })
        .unwrap(),
    );
    format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify_and_map: true\n  timeout: 2\n}}\n{}",
        id.nats_cert.display().to_string(),
        id.nats_key.display().to_string(),
        id.trust_file.display().to_string(),
        nats_access::authorization_block(&[user("handlers", true), user("cart", false), idle])
    )
}

fn receiver(app_port: u16, url: &str) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["events"] = json!(["orders"]);
    cfg["durableEvents"] = json!(["orders"]);
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

fn publisher(no_app: u16, url: &str) -> Value {
    let mut cfg = manager_config(no_app, &Opts::default());
    cfg["name"] = json!("cart");
    cfg["events"] = json!(["cart.unused"]);
    let dest = json!({"manager": "handlers", "service": "handlers", "port": no_app, "podSelector": {}, "durable": {}});
    cfg["destinations"] = json!({"orders": dest});
    cfg["staticEndpoints"] = json!({"handlers": [format!("127.0.0.1:{no_app}")]});
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

async fn start(dir: &Path, name: &str, cfg: &Value, id: &TestIdentity) -> (Proc, ManagerPorts) {
    let file = write_json(dir, &format!("{name}.json"), cfg);
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let env = id.env(Kind::Manager, name);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    start_manager(&d, &file, &env).await
}

/// A NATS client presenting `store`'s certificate (none when it holds none), trusting `id`'s CA,
/// with `inbox` as its reply prefix; the server's errors are collected in the returned list.
async fn connect(
    url: &str,
    id: &TestIdentity,
    store: Arc<CertStore>,
    inbox: &str,
) -> Result<(async_nats::Client, Arc<Mutex<Vec<String>>>), async_nats::ConnectError> {
    let trust = std::fs::read(&id.trust_file).unwrap();
    let roots = tls::roots(&switchyard_identity::pem::parse_certs(&trust).unwrap()).unwrap();
    let config = tls::jetstream_client_config(store, roots).unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let client = async_nats::ConnectOptions::new()
        .tls_client_config(config)
        .require_tls(true)
        .custom_inbox_prefix(inbox)
        .connection_timeout(Duration::from_secs(3))
        .max_reconnects(Some(1))
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(url)
        .await?;
    Ok((client, errors))
}

/// Waits until the server reported a permissions violation naming `subject`.
async fn refused(errors: &Arc<Mutex<Vec<String>>>, subject: &str) {
    poll(
        Duration::from_secs(10),
        &format!("a permissions violation for {subject}"),
        || {
            let hit = errors.lock().unwrap().iter().any(|e| {
                e.to_ascii_lowercase().contains("permissions violation") && e.contains(subject)
            });
            std::future::ready(hit.then_some(()))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_mesh_identities_reach_jetstream_and_each_only_what_its_table_routes() {
    let dir = tempfile::tempdir().unwrap();
    let id = TestIdentity::start(
        dir.path(),
        Duration::from_secs(3600),
        &[
            Workload {
                kind: Kind::Manager,
                name: "handlers",
            },
            Workload {
                kind: Kind::Manager,
                name: "cart",
            },
        ],
    )
    .await;
    let (servers, _relays) = nats::cluster_with(dir.path(), 1, &access(&id), "").await;
    let url = format!("tls://127.0.0.1:{}", servers[0].port);
    let app = TestApp::start().await;
    let no_app = ClosedPort::new();
    let (_handlers, _) = start(dir.path(), "handlers", &receiver(app.port, &url), &id).await;
    let (_cart, cart) = start(dir.path(), "cart", &publisher(no_app.port, &url), &id).await;

    // The mesh's own path works through TLS and these permissions alone.
    let client = Http::new();
    let req = hyper::Request::post(format!(
        "http://127.0.0.1:{}/v1/publish/orders",
        cart.local_api
    ))
    .header("content-type", "application/json")
    .header("idempotency-key", "o-1")
    .body(http_body_util::Full::new(bytes::Bytes::from_static(
        br#"{"order":1}"#,
    )))
    .unwrap();
    let r = client.send(req).await.unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    poll(Duration::from_secs(20), "orders delivered", || {
        std::future::ready((!app.state.seen("orders").is_empty()).then_some(()))
    })
    .await;

    // No certificate, or one from another CA: no connection.
    let none = connect(&url, &id, Arc::new(CertStore::default()), "_X").await;
    assert!(none.is_err(), "a client without a certificate connected");
    let other = switchyard_identity::local::LocalIdentity::new(TRUST_DOMAIN).unwrap();
    let forged = certified(other.ca(), Kind::Manager, "handlers");
    let forged = connect(&url, &id, forged, "_SY_INBOX.default.handlers").await;
    assert!(
        forged.is_err(),
        "a certificate of another CA connected as handlers"
    );

    // cart's own certificate: what its table routes is allowed, nothing of handlers' is.
    let cart_store = certified(&id.ca, Kind::Manager, "cart");
    let (nc, errors) = connect(
        &url,
        &id,
        cart_store,
        &nats_access::inbox_prefix(NAMESPACE, "cart"),
    )
    .await
    .unwrap();
    let js = jetstream::new(nc.clone());
    let allowed = plan::subject(NAMESPACE, "handlers", "orders", Lane::Unordered);
    let ack = js
        .publish(allowed, bytes::Bytes::from_static(b"{}"))
        .await
        .unwrap()
        .await;
    assert!(ack.is_ok(), "cart could not store orders: {ack:?}");

    let stream = plan::stream_name(NAMESPACE, "handlers");
    let consumer = plan::consumer_name("orders", Lane::Unordered);
    let not_routed = plan::subject(NAMESPACE, "handlers", "refunds", Lane::Unordered);
    for subject in [
        format!("$JS.API.STREAM.DELETE.{stream}"),
        format!("$JS.API.STREAM.PURGE.{stream}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
        format!("$JS.API.CONSUMER.DELETE.{stream}.{consumer}"),
        format!("$JS.ACK.{stream}.{consumer}.1.1.1.1.0"),
        not_routed,
    ] {
        nc.publish(subject.clone(), bytes::Bytes::new())
            .await
            .unwrap();
        refused(&errors, &subject).await;
    }
    let snoop = "_SY_INBOX.default.handlers.>";
    let _sub = nc.subscribe(snoop).await.unwrap();
    refused(&errors, snoop).await;

    // A Manager with nothing durable to store may publish nothing (an empty allow list would
    // have been no restriction at all).
    let (idle, idle_errors) = connect(
        &url,
        &id,
        certified(&id.ca, Kind::Manager, "idle"),
        &nats_access::inbox_prefix(NAMESPACE, "idle"),
    )
    .await
    .unwrap();
    let orders = plan::subject(NAMESPACE, "handlers", "orders", Lane::Unordered);
    idle.publish(orders.clone(), bytes::Bytes::new())
        .await
        .unwrap();
    refused(&idle_errors, &orders).await;

    // handlers' stream and consumer survived every attempt, and keep delivering.
    let r = client
        .send(
            hyper::Request::post(format!(
                "http://127.0.0.1:{}/v1/publish/orders",
                cart.local_api
            ))
            .header("content-type", "application/json")
            .header("idempotency-key", "o-2")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                br#"{"order":2}"#,
            )))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    poll(Duration::from_secs(20), "order o-2 delivered", || {
        let seen = app.state.seen("orders");
        std::future::ready(
            seen.iter()
                .any(|e| e.header("ce-id") == "o-2")
                .then_some(()),
        )
    })
    .await;
}
