//! Edge middleware end to end: real router and manager processes on loopback, real HTTP, gRPC and
//! TLS clients. CORS, API key, rate limit and gRPC auth share one mesh; JWT and TLS have their own.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::gateway::v1::CallRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::Endpoint;

/// Writes `<dir>/<name>/<key>` as a mounted Secret would be.
fn secret(dir: &Path, name: &str, key: &str, value: &[u8]) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join(key), value).unwrap();
}

fn secrets_args(dir: &Path) -> Vec<String> {
    vec!["--secrets-dir".into(), dir.to_str().unwrap().into()]
}

async fn send(mesh: &Mesh, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::builder().method(method).uri(mesh.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    mesh.client
        .send(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap()
}

/// Polls until `GET /noop` with `headers` gets 200: the router reaches the manager.
async fn wait_connected(mesh: &Mesh, headers: &[(&str, &str)]) {
    poll(Duration::from_secs(20), "router connected", || async {
        (send(mesh, "GET", "/noop", headers).await.status == 200).then_some(())
    })
    .await;
}

async fn metrics(mesh: &Mesh) -> String {
    let r = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.router_admin))
        .await
        .unwrap();
    String::from_utf8(r.body.to_vec()).unwrap()
}

// ---------------------------------------------------------------- CORS, API key, rate limit

async fn guarded_mesh(secrets: &Path) -> (Mesh, u16) {
    secret(secrets, "api-keys", "keys", b"key-one\nkey-two\n");
    let mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
            cfg["spec"]["routes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"event": "noop", "grpc": {"method": "noop"}}));
            cfg["spec"]["middleware"] = json!([
                {"cors": {"allowOrigins": ["https://app.example"],
                          "allowHeaders": ["content-type", "x-api-key"], "maxAge": "10m"}},
                {"auth": {"apiKey": {"header": "x-api-key",
                                     "keysSecretRef": {"name": "api-keys", "key": "keys"}}}},
                {"rateLimit": {"requestsPerSecond": 1, "burst": 2, "key": "header", "header": "x-client"}},
            ]);
        },
    )
    .await;
    wait_connected(&mesh, &[("x-api-key", "key-one"), ("x-client", "probe")]).await;
    let grpc_port = mesh.grpc();
    (mesh, grpc_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_api_key_rate_limit_and_grpc_auth() {
    let secrets = tempfile::tempdir().unwrap();
    let (mesh, grpc_port) = guarded_mesh(secrets.path()).await;

    // CORS preflight is answered at the edge, before auth (it carries no credentials).
    let r = send(
        &mesh,
        "OPTIONS",
        "/echo",
        &[
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "content-type, x-api-key"),
        ],
    )
    .await;
    assert_eq!(r.status, 204, "{:?}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let methods = r.header("access-control-allow-methods").unwrap();
    assert!(
        methods.contains("POST") && methods.contains("GET"),
        "{methods}"
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type, x-api-key")
    );
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert_eq!(r.header("vary"), Some("Origin"));
    // A preflight from another origin is refused, saying which origin.
    let r = send(
        &mesh,
        "OPTIONS",
        "/echo",
        &[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "POST"),
        ],
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("evil.example")
    );
    assert_eq!(r.header("access-control-allow-origin"), None);

    // A simple request from the allowed origin gets the origin back; another origin does not.
    let key = ("x-api-key", "key-two");
    let r = send(
        &mesh,
        "GET",
        "/noop",
        &[key, ("x-client", "c1"), ("origin", "https://app.example")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = send(
        &mesh,
        "GET",
        "/noop",
        &[key, ("x-client", "c2"), ("origin", "https://other.example")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);

    // API key: missing and wrong keys get 401 problem+json naming the header.
    let r = send(&mesh, "GET", "/noop", &[("x-client", "c3")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(r.json()["detail"].as_str().unwrap().contains("x-api-key"));
    assert!(r.header("www-authenticate").is_some());
    let r = send(
        &mesh,
        "GET",
        "/noop",
        &[("x-api-key", "key-three"), ("x-client", "c3")],
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.json()["detail"].as_str().unwrap().contains("not valid"));
    // Refused before its body was read, an HTTP/1.1 request closes its connection.
    let r = mesh
        .client
        .post(&mesh.url("/echo"), "application/json", r#"{"value": 1}"#)
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("connection"), Some("close"));

    // Rate limit: 1/s with a burst of 2 per x-client. Requests sent back to back run out; a
    // refill during a slow run only delays that, so the loop is long enough for any machine.
    let mut limited = None;
    for _ in 0..20 {
        let r = send(&mesh, "GET", "/noop", &[key, ("x-client", "greedy")]).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let r = limited.expect("never rate limited");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    // Another client key is not affected.
    let r = send(&mesh, "GET", "/noop", &[key, ("x-client", "patient")]).await;
    assert_eq!(r.status, 200);

    // gRPC: auth protects calls too.
    let channel = poll(Duration::from_secs(10), "gRPC listener", || async {
        Endpoint::from_shared(format!("http://127.0.0.1:{grpc_port}"))
            .unwrap()
            .connect()
            .await
            .ok()
    })
    .await;
    let mut client = GatewayClient::new(channel);
    let call = || CallRequest {
        method: "noop".into(),
        payload: b"{}".to_vec(),
        metadata: Default::default(),
    };
    let err = client.call(call()).await.expect_err("no key");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("x-api-key"), "{}", err.message());
    let mut req = tonic::Request::new(call());
    req.metadata_mut()
        .insert("x-api-key", "key-one".parse().unwrap());
    req.metadata_mut()
        .insert("x-client", "grpc".parse().unwrap());
    let reply = client.call(req).await.unwrap().into_inner();
    assert_eq!(reply.status, 200);
    // gRPC: the rate limit too, with RESOURCE_EXHAUSTED and retry-after.
    let mut exhausted = None;
    for _ in 0..20 {
        let mut req = tonic::Request::new(call());
        req.metadata_mut()
            .insert("x-api-key", "key-one".parse().unwrap());
        req.metadata_mut()
            .insert("x-client", "grpc-greedy".parse().unwrap());
        if let Err(status) = client.call(req).await {
            exhausted = Some(status);
            break;
        }
    }
    let status = exhausted.expect("gRPC never rate limited");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.metadata().get("retry-after").is_some(), "{status:?}");

    // Every rejection is counted by middleware and reason.
    let text = metrics(&mesh).await;
    for needle in [
        r#"switchyard_middleware_rejections_total{middleware="cors",reason="origin"} 1"#,
        r#"switchyard_middleware_rejections_total{middleware="apiKey",reason="invalid"} 1"#,
        r#"switchyard_middleware_rejections_total{middleware="rateLimit",reason="exhausted"}"#,
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    // Missing keys: the GET, the POST and the gRPC call.
    assert!(
        text.contains(
            r#"switchyard_middleware_rejections_total{middleware="apiKey",reason="missing"} 3"#
        ),
        "{text}"
    );
}

// ---------------------------------------------------------------- JWT

/// The access log's lines so far: (client, path, status).
fn access_lines(mesh: &Mesh) -> Vec<(String, String, u64)> {
    mesh.router
        .log_lines()
        .into_iter()
        .filter(|l| l["target"] == "access")
        .map(|l| {
            let f = &l["fields"];
            (
                f["client"].as_str().unwrap_or_default().to_owned(),
                f["path"].as_str().unwrap_or_default().to_owned(),
                f["status"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The client the rate limit and the access log see is the TCP peer: a client cannot pass as
/// another by sending `X-Forwarded-For`, and a refused request is logged too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_and_rate_limit_see_the_peer_not_a_forwarded_header() {
    let mesh = Mesh::start_with(Opts::default(), |cfg| {
        cfg["spec"]["accessLog"] = json!({"enabled": true});
        // One request a second per client: the second of two back-to-back requests is refused.
        cfg["spec"]["middleware"] = json!([{"rateLimit": {"requestsPerSecond": 1, "burst": 1}}]);
    })
    .await;
    // Mesh::start waited for a 200, which took this client's one token; wait for it to come back.
    let first = poll(Duration::from_secs(10), "a token for 127.0.0.1", || async {
        let r = send(&mesh, "GET", "/noop?token=secret", &[]).await;
        (r.status == 200).then_some(r)
    })
    .await;
    assert!(
        first.header("server-timing").is_some(),
        "{:?}",
        first.headers
    );
    // The same peer claiming another address by header is still the same client to the limiter.
    let spoofed = send(&mesh, "GET", "/noop", &[("x-forwarded-for", "203.0.113.9")]).await;
    assert_eq!(
        spoofed.status,
        429,
        "{}",
        String::from_utf8_lossy(&spoofed.body)
    );
    let lines = poll(Duration::from_secs(10), "the access lines", || {
        let lines = access_lines(&mesh);
        std::future::ready(lines.iter().any(|l| l.2 == 429).then_some(lines))
    })
    .await;
    assert!(
        lines.iter().all(|(client, _, _)| client == "127.0.0.1"),
        "{lines:?}"
    );
    assert!(
        lines.contains(&("127.0.0.1".into(), "/noop".into(), 200)),
        "{lines:?}"
    );
    assert!(
        lines.contains(&("127.0.0.1".into(), "/noop".into(), 429)),
        "{lines:?}"
    );
    assert!(
        !mesh.router.log_text().contains("token=secret"),
        "the query string reached the log"
    );
}

/// Without `accessLog` no request is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_access_log_unless_asked() {
    let mesh = Mesh::start(Opts::default()).await;
    let r = send(&mesh, "GET", "/noop", &[]).await;
    assert_eq!(r.status, 200);
    // The line is written before the answer leaves (see access_log::logged): none came.
    assert_eq!(access_lines(&mesh), vec![]);
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(claims: Value, secret: &[u8]) -> String {
    let t = encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .unwrap();
    format!("Bearer {t}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_accepts_good_tokens_and_names_each_problem() {
    let secrets = tempfile::tempdir().unwrap();
    // A trailing newline, as `echo` writes it, is not part of the key.
    secret(secrets.path(), "jwt", "hmac", b"shared-secret\n");
    let mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets.path()),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["middleware"] = json!([
                {"auth": {"jwt": {"algorithm": "HS256", "issuer": "https://issuer.example",
                                  "audience": "orders", "keySecretRef": {"name": "jwt", "key": "hmac"}}}},
            ]);
        },
    )
    .await;
    let claims = |exp: u64, aud: &str| json!({"iss": "https://issuer.example", "aud": aud, "exp": exp, "sub": "u1"});
    let good = token(claims(now() + 600, "orders"), b"shared-secret");
    wait_connected(&mesh, &[("authorization", &good)]).await;

    let cases = [
        (None, "missing"),
        (
            Some(token(claims(now() - 600, "orders"), b"shared-secret")),
            "expired",
        ),
        (
            Some(token(claims(now() + 600, "orders"), b"other-secret")),
            "signature",
        ),
        (
            Some(token(claims(now() + 600, "billing"), b"shared-secret")),
            "audience",
        ),
        (Some("Bearer abc.def".to_owned()), "well-formed"),
    ];
    for (auth, word) in cases {
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let r = send(&mesh, "GET", "/noop", &headers).await;
        assert_eq!(r.status, 401, "{word}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let challenge = r.header("www-authenticate").unwrap();
        assert!(
            challenge.starts_with(r#"Bearer error="invalid_token", error_description=""#),
            "{challenge}"
        );
        assert!(challenge.contains(word), "{word}: {challenge}");
        assert!(
            r.json()["detail"].as_str().unwrap().contains(word),
            "{word}"
        );
    }
    let r = send(&mesh, "GET", "/noop", &[("authorization", &good)]).await;
    assert_eq!(r.status, 200);
    let text = metrics(&mesh).await;
    assert!(
        text.contains(
            r#"switchyard_middleware_rejections_total{middleware="jwt",reason="expired"} 1"#
        ),
        "{text}"
    );
}

// ---------------------------------------------------------------- key files at start-up

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_file_exits_2_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = router_config(1, "3s");
    cfg["spec"]["middleware"] = json!([
        {"auth": {"apiKey": {"keysSecretRef": {"name": "absent", "key": "keys"}}}},
    ]);
    let file = write_json(dir.path(), "router.json", &cfg);
    let secrets = dir.path().join("secrets");
    let mut p = spawn_router(
        dir.path(),
        &file,
        &["--secrets-dir", secrets.to_str().unwrap()],
        &[],
    );
    assert_eq!(p.wait_exit(Duration::from_secs(20)).await, Some(2));
    let log = p.log_text();
    assert!(
        log.contains("spec.middleware[0].auth.apiKey.keysSecretRef"),
        "{log}"
    );
    assert!(
        log.contains(&secrets.join("absent/keys").display().to_string()),
        "{log}"
    );
}

// ---------------------------------------------------------------- TLS

struct TestCert {
    pem: String,
}

fn tls_secret(dir: &Path) -> TestCert {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let pem = ck.cert.pem();
    secret(dir, "edge-tls", "tls.crt", pem.as_bytes());
    secret(
        dir,
        "edge-tls",
        "tls.key",
        ck.signing_key.serialize_pem().as_bytes(),
    );
    TestCert { pem }
}

fn connector(cert: &TestCert, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(cert.pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One HTTPS GET over a new connection; returns the status and the ALPN protocol agreed.
async fn https_get(cert: &TestCert, port: u16, alpn: &[&[u8]], path: &str) -> (u16, Vec<u8>) {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector(cert, alpn).connect(name, tcp).await.unwrap();
    let agreed = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let req = Request::get(format!("https://localhost:{port}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let status = if agreed == b"h2" {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        resp.into_body().collect().await.unwrap();
        status
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        resp.into_body().collect().await.unwrap();
        status
    };
    (status, agreed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_h1_and_h2_by_alpn_and_refuses_plain_http() {
    let secrets = tempfile::tempdir().unwrap();
    let cert = tls_secret(secrets.path());
    let mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets.path()),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["listeners"]["tls"] = json!({"secretName": "edge-tls"});
            cfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
        },
    )
    .await;
    let port = mesh.http_port;
    let grpc_port = mesh.grpc();
    poll(Duration::from_secs(20), "HTTPS /noop", || async {
        let (status, _) = https_get(&cert, port, &[b"http/1.1"], "/noop").await;
        (status == 200).then_some(())
    })
    .await;
    assert_eq!(
        https_get(&cert, port, &[b"http/1.1"], "/noop").await,
        (200, b"http/1.1".to_vec())
    );
    assert_eq!(
        https_get(&cert, port, &[b"h2", b"http/1.1"], "/noop").await,
        (200, b"h2".to_vec())
    );
    // The gRPC listener serves TLS too, with ALPN h2.
    let (_, agreed) = https_get(&cert, grpc_port, &[b"h2"], "/grpc.health.v1.Health/Check").await;
    assert_eq!(agreed, b"h2".to_vec());
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = mesh.client.get(&mesh.url("/noop")).await;
    assert!(
        plain.is_err(),
        "plain HTTP was answered: {:?}",
        plain.map(|r| r.status)
    );
    // Nor does a client that does not trust the certificate.
    let other = TestCert {
        pem: rcgen::generate_simple_self_signed(vec!["localhost".into()])
            .unwrap()
            .cert
            .pem(),
    };
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    assert!(
        connector(&other, &[b"h2"])
            .connect(name, tcp)
            .await
            .is_err()
    );
}
