//! mTLS on the router -> manager hop with real sidecar processes certified by an identity service
//! in the test process (the path `switchyard up` and a cluster take): requests are answered over
//! one handshake per pod pair; a raw TCP client speaking frames, a client of another CA, a valid
//! identity that is not allowed and a client over its credit are refused; an event or an answer the
//! frame cannot carry fails alone; certificates renewed under load lose no request.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::{Bytes, BytesMut};
use common::identity::{TestIdentity, Workload, certified};
use common::*;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_identity::tls::{self, Expect};
use switchyard_identity::{CertStore, Kind};
use switchyard_protocol::frame::{Frame, FrameCodec, MAX_PAYLOAD, Request};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// The router and manager sidecars with their own configs, both certified by `identity`.
struct TlsMesh {
    dir: tempfile::TempDir,
    identity: TestIdentity,
    _app: Arc<TestApp>,
    _manager: Proc,
    _router: Proc,
    http_port: u16,
    router_admin: u16,
    manager_admin: u16,
    manager_port: u16,
    client: Http,
}

impl TlsMesh {
    async fn start(lifetime: Duration) -> TlsMesh {
        let dir = tempfile::tempdir().unwrap();
        let identity = TestIdentity::start(
            dir.path(),
            lifetime,
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
        )
        .await;
        let app = TestApp::start().await;
        let mut mcfg = manager_config(app.port, &Opts::default());
        let events = mcfg["events"].as_array_mut().unwrap();
        events.push(json!("big"));
        events.push(json!("longtype"));
        let mcfg = write_json(dir.path(), "manager.json", &mcfg);
        let menv = identity.env(Kind::Manager, "handlers");
        let menv: Vec<(&str, &str)> = menv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        // Ready once certified: the ready line names the ports it bound.
        let (manager, mports) = start_manager(dir.path(), &mcfg, &menv).await;
        let mut rcfg = router_config(mports.listen, "5s");
        let dest = rcfg["destinations"]["noop"].clone();
        rcfg["destinations"]["big"] = dest.clone();
        rcfg["destinations"]["longtype"] = dest;
        let routes = rcfg["spec"]["routes"].as_array_mut().unwrap();
        routes.push(json!({"event": "big", "http": {"method": "POST", "path": "/big"}}));
        routes.push(json!({"event": "longtype", "http": {"method": "GET", "path": "/longtype"}}));
        // Over the mesh's payload limit, which the CRD would refuse: the sidecar's own check is what
        // keeps such a body off the shared connection.
        rcfg["spec"]["middleware"] = json!([{"bodyLimit": {"maxBytes": 2 * MAX_PAYLOAD}}]);
        let rcfg = write_json(dir.path(), "router.json", &rcfg);
        let renv = identity.env(Kind::Router, "edge");
        let renv: Vec<(&str, &str)> = renv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (router, rports) = start_router(dir.path(), &rcfg, &[], &renv).await;
        let client = Http::new();
        let (http_port, router_admin) = (rports.http, rports.admin);
        let (manager_port, manager_admin) = (mports.listen, mports.admin);
        let mesh = TlsMesh {
            dir,
            identity,
            _app: app,
            _manager: manager,
            _router: router,
            http_port,
            router_admin,
            manager_admin,
            manager_port,
            client,
        };
        poll(Duration::from_secs(20), "an answer over mTLS", || async {
            let r = mesh.client.get(&mesh.url("/noop")).await.ok()?;
            (r.status == 200).then_some(())
        })
        .await;
        mesh
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    async fn metrics(&self, admin: u16) -> String {
        let r = self
            .client
            .get(&format!("http://127.0.0.1:{admin}/metrics"))
            .await
            .unwrap();
        String::from_utf8_lossy(&r.body).into_owned()
    }

    async fn handshakes(&self) -> (f64, f64) {
        let router = self.metrics(self.router_admin).await;
        let manager = self.metrics(self.manager_admin).await;
        (
            metric(
                &router,
                r#"switchyard_mesh_handshakes_total{side="client",result="ok"}"#,
            ),
            metric(
                &manager,
                r#"switchyard_mesh_handshakes_total{side="server",result="ok"}"#,
            ),
        )
    }

    /// A TLS client of the frame port presenting `store`'s certificate.
    async fn tls_client(
        &self,
        store: Option<Arc<CertStore>>,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let roots = tls::roots(self.identity.ca.trust()).unwrap();
        let config = tls::client_config(store, roots, &[tls::FRAMES_ALPN]).unwrap();
        let tcp = TcpStream::connect(("127.0.0.1", self.manager_port))
            .await
            .unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                Expect::manager("default", "handlers")
                    .server_name()
                    .unwrap(),
                tcp,
            )
            .await
    }
}

/// Reads what the server sends until it closes (at most 5 s): its frames, or the error that
/// ended the read (a TLS alert, a reset).
async fn frames_until_closed<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Framed<S, FrameCodec>,
) -> (Vec<Frame>, Option<String>) {
    let mut frames = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match conn.next().await {
                None => return None,
                Some(Ok(f)) => frames.push(f),
                Some(Err(e)) => return Some(e.to_string()),
            }
        }
    })
    .await
    .expect("the server closes the connection within 5 s");
    (frames, end)
}

fn noop(id: u64) -> Frame {
    Frame::Request(Request {
        headers: Vec::new(),
        id,
        flags: 0,
        deadline_ms: 5_000,
        event: "slowish".into(),
        ce_id: format!("mtls-{id}"),
        traceparent: String::new(),
        tracestate: String::new(),
        content_type: "application/json".into(),
        payload: Bytes::from_static(b"{}"),
    })
}

fn hello() -> Frame {
    Frame::Hello {
        reads_headers: false,
        takes_pushes: true,
        implicit_credit: true,
        releases_credit: false,
        streams: None,
        reads_tracestate: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cross_mtls_over_one_handshake_and_hostile_peers_are_refused() {
    let mesh = TlsMesh::start(Duration::from_secs(3600)).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (client, url) = (mesh.client.clone(), mesh.url("/noop"));
        tasks.push(tokio::spawn(async move {
            client.get(&url).await.map(|r| r.status)
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), Ok(200));
    }
    assert_eq!(
        mesh.handshakes().await,
        (1.0, 1.0),
        "one handshake per pod pair"
    );
    let manager_metrics = mesh.metrics(mesh.manager_admin).await;
    assert_eq!(
        metric(
            &manager_metrics,
            r#"switchyard_mesh_certifications_total{result="ok"}"#
        ),
        1.0
    );

    // 1. Plain frames, as an old router or anything on the pod network would send them.
    let tcp = TcpStream::connect(("127.0.0.1", mesh.manager_port))
        .await
        .unwrap();
    let mut raw = Framed::new(tcp, FrameCodec::default());
    raw.send(hello()).await.unwrap();
    raw.send(noop(1)).await.unwrap();
    let (frames, end) = frames_until_closed(&mut raw).await;
    assert!(
        frames.is_empty(),
        "no frame answers plain frames: {frames:?}"
    );
    println!("refused: raw TCP frames -> connection closed ({end:?})");

    // 2. A certificate of another CA, for the right name.
    let (other, _) = switchyard_identity::Ca::generate(
        common::identity::TRUST_DOMAIN,
        std::time::SystemTime::now(),
    )
    .unwrap();
    let stranger = certified(&other, Kind::Router, "edge");
    let outcome = match mesh.tls_client(Some(stranger)).await {
        Err(e) => format!("handshake failed: {e}"),
        Ok(s) => {
            let mut conn = Framed::new(s, FrameCodec::default());
            let _ = conn.send(hello()).await;
            let (frames, end) = frames_until_closed(&mut conn).await;
            assert!(
                frames.is_empty(),
                "another CA's client got frames: {frames:?}"
            );
            format!("closed: {end:?}")
        }
    };
    println!("refused: a certificate of another CA -> {outcome}");

    // 3. No certificate at all.
    let outcome = match mesh.tls_client(None).await {
        Err(e) => format!("handshake failed: {e}"),
        Ok(s) => {
            let mut conn = Framed::new(s, FrameCodec::default());
            let _ = conn.send(hello()).await;
            let (frames, end) = frames_until_closed(&mut conn).await;
            assert!(
                frames.is_empty(),
                "a client without a certificate got frames: {frames:?}"
            );
            format!("closed: {end:?}")
        }
    };
    println!("refused: no client certificate -> {outcome}");
    let manager_metrics = mesh.metrics(mesh.manager_admin).await;
    assert!(
        metric(
            &manager_metrics,
            r#"switchyard_mesh_handshakes_total{side="server",result="failed"}"#
        ) >= 3.0,
        "{manager_metrics}"
    );

    // 4. A valid identity of this mesh that may not send events here: another Router.
    let other_router = certified(&mesh.identity.ca, Kind::Router, "other");
    let s = mesh.tls_client(Some(other_router)).await.unwrap();
    let mut conn = Framed::new(s, FrameCodec::default());
    conn.send(hello()).await.unwrap();
    let _ = conn.send(noop(1)).await;
    let (frames, _) = frames_until_closed(&mut conn).await;
    let [Frame::GoAway { reason }] = frames.as_slice() else {
        panic!("a GOAWAY saying why, then the close: {frames:?}");
    };
    assert!(
        reason.contains("spiffe://test.local/ns/default/router/other may not send events"),
        "{reason}"
    );
    println!("refused: valid identity not allowed -> GOAWAY {reason:?}");

    // 5. The right identity sending more requests than its credit.
    let edge = certified(&mesh.identity.ca, Kind::Router, "edge");
    let s = mesh.tls_client(Some(edge)).await.unwrap();
    let mut conn = Framed::new(s, FrameCodec::default());
    conn.send(hello()).await.unwrap();
    assert!(matches!(
        conn.next().await,
        Some(Ok(Frame::Hello {
            reads_tracestate: true,
            streams: None,
            ..
        }))
    ));
    let Some(Ok(Frame::Credit { credits })) = conn.next().await else {
        panic!("the grant follows the manager's HELLO");
    };
    for id in 1..=u64::from(credits) + 1 {
        conn.feed(noop(id)).await.unwrap();
    }
    conn.flush().await.unwrap();
    let (frames, _) = frames_until_closed(&mut conn).await;
    // The slow requests were cancelled when the connection closed: none was answered.
    assert!(
        !frames
            .iter()
            .any(|f| matches!(f, Frame::Response(r) if r.status == 200)),
        "{frames:?}"
    );
    println!(
        "refused: {} requests on {credits} credits -> connection closed after {} frames",
        credits + 1,
        frames.len()
    );
    let manager_metrics = mesh.metrics(mesh.manager_admin).await;
    assert_eq!(
        metric(
            &manager_metrics,
            r#"switchyard_mesh_refused_total{reason="identity"}"#
        ),
        1.0,
        "{manager_metrics}"
    );
    assert_eq!(
        metric(
            &manager_metrics,
            r#"switchyard_mesh_refused_total{reason="credit"}"#
        ),
        1.0,
        "{manager_metrics}"
    );

    // The router's own connection carried on through all of it (the manager also counts the two
    // test clients whose handshakes succeeded).
    assert_eq!(
        mesh.client.get(&mesh.url("/noop")).await.unwrap().status,
        200
    );
    assert_eq!(mesh.handshakes().await, (1.0, 3.0));
    // No secrets and no addresses in /metrics.
    for admin in [mesh.router_admin, mesh.manager_admin] {
        let text = mesh.metrics(admin).await;
        assert!(
            !text.contains("127.0.0.1"),
            "an address in /metrics: {text}"
        );
        assert!(!text.contains("BEGIN"), "key material in /metrics");
    }
    drop(mesh.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_frame_cannot_carry_fails_alone() {
    let mesh = TlsMesh::start(Duration::from_secs(3600)).await;
    // Requests on the same connection keep flowing while the oversized ones fail.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let (client, url, stop) = (mesh.client.clone(), mesh.url("/noop"), stop.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                statuses.push(client.get(&url).await.map(|r| r.status));
            }
            statuses
        })
    };
    let pad = |n: usize| {
        let mut body = BytesMut::from(&b"{\"pad\":\""[..]);
        body.resize(n - 2, b'x');
        body.extend_from_slice(b"\"}");
        body.freeze()
    };
    let over = mesh
        .client
        .post(
            &mesh.url("/big"),
            "application/json",
            pad(MAX_PAYLOAD + 4096),
        )
        .await
        .unwrap();
    assert_eq!(over.status, 413, "{}", String::from_utf8_lossy(&over.body));
    let detail = over.json()["detail"].as_str().unwrap().to_owned();
    // The router reads a JSON body whole only up to what one event carries, so it refuses this one
    // at the edge, before any frame (bodyLimit here is 32 MiB: only a streamed body may reach it).
    assert!(
        detail.starts_with("body is larger than 16777216 bytes, the most read whole"),
        "{detail}"
    );
    println!("413 for a body just over the frame limit: {detail}");
    let under = mesh
        .client
        .post(
            &mesh.url("/big"),
            "application/json",
            pad(MAX_PAYLOAD - 4096),
        )
        .await
        .unwrap();
    assert_eq!(under.status, 200, "just under the limit travels");
    let long = mesh.client.get(&mesh.url("/longtype")).await.unwrap();
    assert_eq!(long.status, 502, "{}", String::from_utf8_lossy(&long.body));
    let detail = long.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("Content-Type of 326 bytes"), "{detail}");
    println!("502 for an app's 326-byte Content-Type: {detail}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = background.await.unwrap();
    assert!(!statuses.is_empty());
    assert!(
        statuses.iter().all(|s| *s == Ok(200)),
        "every other request answered: {statuses:?}"
    );
    assert_eq!(
        mesh.handshakes().await,
        (1.0, 1.0),
        "the shared connection was never torn down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_renewed_under_load_lose_no_request() {
    // Three-second certificates: renewed every two seconds, each sidecar several times in the run.
    let mesh = TlsMesh::start(Duration::from_secs(3)).await;
    let before = mesh
        .identity
        .issued
        .0
        .load(std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, url) = (mesh.client.clone(), mesh.url("/noop"));
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            let mut failed = Vec::new();
            while started.elapsed() < Duration::from_secs(8) {
                match client.get(&url).await {
                    Ok(r) if r.status == 200 => n += 1,
                    other => failed.push(format!("{:?}", other.map(|r| r.status))),
                }
            }
            (n, failed)
        }));
    }
    let mut total = 0;
    for t in tasks {
        let (n, failed) = t.await.unwrap();
        assert!(
            failed.is_empty(),
            "requests failed during renewals: {failed:?}"
        );
        total += n;
    }
    let renewals = mesh
        .identity
        .issued
        .0
        .load(std::sync::atomic::Ordering::SeqCst)
        - before;
    println!("{total} requests over 8 s, {renewals} certificates renewed, none lost");
    assert!(
        renewals >= 4,
        "both sidecars renewed at least twice: {renewals}"
    );
    // A new connection after the renewals handshakes with the renewed certificates.
    let edge = certified(&mesh.identity.ca, Kind::Router, "edge");
    let s = mesh.tls_client(Some(edge)).await.unwrap();
    let mut conn = Framed::new(s, FrameCodec::default());
    conn.send(hello()).await.unwrap();
    assert!(matches!(
        conn.next().await,
        Some(Ok(Frame::Hello {
            reads_tracestate: true,
            streams: None,
            ..
        }))
    ));
    assert!(matches!(conn.next().await, Some(Ok(Frame::Credit { .. }))));
    let value: Value = mesh.client.get(&mesh.url("/noop")).await.unwrap().json();
    assert_eq!(value, json!({}));
    let (client_ok, _) = mesh.handshakes().await;
    assert_eq!(client_ok, 1.0, "renewal keeps open connections");
}
