//! A CA rotation under steady load through real sidecar processes, with no restart (issue 38,
//! item 3): the identity service in the test process signs with an issuer under a root, as
//! cert-manager keeps one (`tls.crt`, `tls.key`, `ca.crt`), and is rotated the staged way through
//! the same `Issuing::offer` the operator's watch of its CA Secret calls: (1) the new root joins the
//! bundle, (2) the issuer is re-issued under the new root (announced, then signing after the
//! activation delay), (3) the old root leaves the bundle. Meanwhile clients send `/noop` through the
//! router sidecar to the manager sidecar over mTLS.
//!
//! Shown: no request fails; neither sidecar restarts; both take each new trust from the service
//! while running and renew early from the new issuer (their certificates live a minute, so no
//! scheduled renewal falls in the run); every certification succeeds, each over a new TLS
//! connection to a service whose own certificate moved to the new issuer; afterwards the manager's
//! frame port accepts a client of the new issuer, and refuses one of the old root and one of another
//! issuer under the new root.

#![allow(clippy::unwrap_used)]

mod common;

use common::identity::{TRUST_DOMAIN, TestIdentity, Workload, certified};
use common::*;
use futures::{SinkExt, StreamExt};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};
use switchyard_identity::authority::Change;
use switchyard_identity::ca::{Ca, CaPem};
use switchyard_identity::local::LocalIdentity;
use switchyard_identity::tls::{self, Expect};
use switchyard_identity::{CertStore, Kind, Trust, TrustStore};
use switchyard_protocol::frame::{Frame, FrameCodec};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// How often the sidecars ask for the trust.
const POLL: &str = "300ms";
/// How long a new issuer is announced before it signs.
const DELAY: Duration = Duration::from_secs(2);
/// Certificates live a minute: renewal is due at 40 s, after the run, so a certificate of the new
/// issuer can only come from an early renewal.
const LIFETIME: Duration = Duration::from_secs(60);
/// Concurrent clients.
const CLIENTS: usize = 32;

/// An issuer under `root`: its certificate and key, PEM.
fn intermediate(root: &CaPem) -> (String, String) {
    let root_issuer =
        rcgen::Issuer::from_ca_cert_pem(&root.cert, KeyPair::from_pem(&root.key).unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "switchyard issuer");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.signed_by(&key, &root_issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The CA Secret's content: issuer `(tls.crt, tls.key)` and the anchors as `ca.crt`.
fn secret(issuer: &(String, String), anchors: &[&CaPem]) -> Ca {
    let bundle: String = anchors.iter().map(|a| a.cert.as_str()).collect();
    Ca::from_pem(&issuer.0, &issuer.1, Some(&bundle)).unwrap()
}

/// A store certified by `ca` as Router `edge`.
fn edge(ca: &Ca) -> Arc<CertStore> {
    certified(ca, Kind::Router, "edge")
}

async fn metrics(client: &Http, admin: u16) -> String {
    let r = client
        .get(&format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .unwrap();
    String::from_utf8_lossy(&r.body).into_owned()
}

const UPDATES: &str = "switchyard_mesh_trust_updates_total";

/// Waits until both sidecars took a trust update past `before`.
async fn both_updated(client: &Http, admins: [u16; 2], before: [f64; 2], what: &str) -> [f64; 2] {
    poll(Duration::from_secs(10), what, || async {
        let mut now = [0.0; 2];
        for (i, admin) in admins.iter().enumerate() {
            now[i] = metric(&metrics(client, *admin).await, UPDATES);
        }
        (now[0] > before[0] && now[1] > before[1]).then_some(now)
    })
    .await
}

/// Whether the manager's frame port answers a client showing `store`'s certificate (and trusting
/// `trust`) with its hello.
async fn frame_port_accepts(port: u16, store: Arc<CertStore>, trust: Arc<TrustStore>) -> bool {
    let config = tls::client_config(Some(store), trust, &[tls::FRAMES_ALPN]).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = Expect::manager("default", "handlers")
        .server_name()
        .unwrap();
    let Ok(s) = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
    else {
        return false;
    };
    let mut conn = Framed::new(s, FrameCodec::default());
    let hello = Frame::Hello {
        reads_headers: false,
        takes_pushes: true,
        implicit_credit: true,
        releases_credit: false,
        streams: None,
        reads_tracestate: true,
    };
    if conn.send(hello).await.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout(Duration::from_secs(5), conn.next()).await,
        Ok(Some(Ok(Frame::Hello { .. })))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_ca_rotation_under_load_fails_no_request_and_restarts_no_sidecar() {
    let now = SystemTime::now();
    let (_, r1) = Ca::generate(TRUST_DOMAIN, now).unwrap();
    let (_, r2) = Ca::generate(TRUST_DOMAIN, now).unwrap();
    let (i1, i2) = (intermediate(&r1), intermediate(&r2));
    let i1_cert = secret(&i1, &[&r1]).issuer_cert().to_vec();
    let i2_cert = secret(&i2, &[&r2]).issuer_cert().to_vec();

    let dir = tempfile::tempdir().unwrap();
    let local =
        LocalIdentity::with_ca(TRUST_DOMAIN, secret(&i1, &[&r1])).with_activation_delay(DELAY);
    let identity = TestIdentity::start_with(
        dir.path(),
        LIFETIME,
        &[
            Workload {
                kind: Kind::Router,
                name: "edge",
            },
            Workload {
                kind: Kind::Manager,
                name: "handlers",
            },
        ],
        local,
    )
    .await;
    let app = TestApp::start().await;
    let mcfg = write_json(
        dir.path(),
        "manager.json",
        &manager_config(app.port, &Opts::default()),
    );
    let env = |kind, name| {
        let mut env = identity.env(kind, name);
        env.push(("SWITCHYARD_IDENTITY_TRUST_POLL".into(), POLL.into()));
        env
    };
    let menv = env(Kind::Manager, "handlers");
    let menv: Vec<(&str, &str)> = menv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (mut manager, mports) = start_manager(dir.path(), &mcfg, &menv).await;
    let rcfg = write_json(
        dir.path(),
        "router.json",
        &router_config(mports.listen, "5s"),
    );
    let renv = env(Kind::Router, "edge");
    let renv: Vec<(&str, &str)> = renv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (mut router, rports) = start_router(dir.path(), &rcfg, &[], &renv).await;
    let client = Http::new();
    let url = format!("http://127.0.0.1:{}/noop", rports.http);
    poll(Duration::from_secs(20), "an answer over mTLS", || async {
        let r = client.get(&url).await.ok()?;
        (r.status == 200).then_some(())
    })
    .await;
    let admins = [rports.admin, mports.admin];
    let mut seen = [0.0; 2];
    for (i, admin) in admins.iter().enumerate() {
        seen[i] = metric(&metrics(&client, *admin).await, UPDATES);
    }

    // Steady load until the rotation is over.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let ok = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut load = Vec::new();
    for _ in 0..CLIENTS {
        let (client, url, stop, ok, failures) = (
            client.clone(),
            url.clone(),
            stop.clone(),
            ok.clone(),
            failures.clone(),
        );
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match client.get(&url).await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures
                        .lock()
                        .unwrap()
                        .push(format!("{:?}", other.map(|r| r.status))),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. The new root joins the bundle.
    let change = identity
        .issuing
        .offer(secret(&i1, &[&r1, &r2]), SystemTime::now())
        .unwrap();
    assert_eq!(change, Change::Anchors);
    seen = both_updated(&client, admins, seen, "both sidecars trust the new root").await;

    // 2. The issuer is re-issued under the new root: announced first, then signing.
    let change = identity
        .issuing
        .offer(secret(&i2, &[&r1, &r2]), SystemTime::now())
        .unwrap();
    assert_eq!(change, Change::Staged);
    seen = both_updated(&client, admins, seen, "both sidecars accept the new issuer").await;
    poll(DELAY * 3, "the new issuer signs", || async {
        identity
            .issuing
            .tick(SystemTime::now())
            .unwrap()
            .then_some(())
    })
    .await;
    poll(
        Duration::from_secs(10),
        "both sidecars renewed early from the new issuer",
        || async {
            let renewed = ["edge-0", "handlers-0"]
                .iter()
                .all(|pod| identity.issued.signer_of(pod).as_ref() == Some(&i2_cert));
            renewed.then_some(())
        },
    )
    .await;

    // 3. The old root leaves the bundle.
    let change = identity
        .issuing
        .offer(secret(&i2, &[&r2]), SystemTime::now())
        .unwrap();
    assert_eq!(change, Change::Anchors);
    both_updated(&client, admins, seen, "both sidecars dropped the old root").await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    let took = started.elapsed();
    let total = ok.load(Ordering::Relaxed);
    let failed = failures.lock().unwrap().clone();
    println!(
        "{total} requests in {:.1} s ({:.0} req/s) over a staged CA rotation, {} failed",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} requests failed during the rotation, e.g. {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(total > 200, "too little load to mean anything: {total}");
    assert!(
        router.child.try_wait().unwrap().is_none() && manager.child.try_wait().unwrap().is_none(),
        "a sidecar exited during the rotation"
    );
    for admin in admins {
        let text = metrics(&client, admin).await;
        assert_eq!(
            metric(
                &text,
                r#"switchyard_mesh_certifications_total{result="failed"}"#
            ),
            0.0,
            "a certification failed during the rotation"
        );
    }
    assert_ne!(i1_cert, i2_cert);

    // New handshakes at the manager follow the rotated trust.
    let trust = || {
        Arc::new(
            TrustStore::new(Trust {
                anchors: secret(&i2, &[&r2]).trust().to_vec(),
                issuers: Some(vec![secret(&i2, &[&r2]).issuer_cert().clone()]),
            })
            .unwrap(),
        )
    };
    let port = mports.listen;
    assert!(
        frame_port_accepts(port, edge(&secret(&i2, &[&r2])), trust()).await,
        "a client of the new issuer is refused"
    );
    assert!(
        !frame_port_accepts(port, edge(&secret(&i1, &[&r1])), trust()).await,
        "a client of the removed root is accepted"
    );
    let stranger = intermediate(&r2);
    assert!(
        !frame_port_accepts(port, edge(&secret(&stranger, &[&r2])), trust()).await,
        "a client of another issuer under the mesh's root is accepted"
    );
}
