//! Long sessions at the edge, end to end: real router and manager sidecar processes, real
//! tokio-tungstenite, tonic and hyper/rustls clients.
//!
//! - A WebSocket session and a gRPC `Connect` stream opened with a JWT end when the token expires
//!   (close 1008; UNAUTHENTICATED), and `refresh` carries a session on with a new token.
//! - WebSocket `subscribe` is authorized per event type by the token's scopes and claims.
//! - The JWT key, the API keys and the edge's TLS certificate are reloaded when their mounted files
//!   change, written as the kubelet writes a Secret volume (a new folder, then the `..data` symlink
//!   swapped by a rename): the new material is taken and the old refused with no restart, and a bad
//!   file keeps what was loaded.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::pusher::Pusher;
use common::*;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_protocol::gateway::v1::ConnectRequest;
use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tonic::Code;
use tonic::transport::Endpoint;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for any one thing; generous for a loaded machine.
const WAIT: Duration = Duration::from_secs(20);
const SECRET: &[u8] = b"first-shared-secret";

// ---------------------------------------------------------------- files as the kubelet writes them

/// Writes Secret `name` under `dir` as the kubelet's atomic writer does: the keys into a new
/// folder `..<generation>`, then a symlink `..data_tmp` to it renamed over `..data`, and each key a
/// symlink `<key> -> ..data/<key>` (made once). A reader never sees a half-written Secret.
fn kubelet_write(dir: &Path, name: &str, keys: &[(&str, &[u8])], generation: u32) {
    let secret = dir.join(name);
    let folder = format!("..{generation}");
    std::fs::create_dir_all(secret.join(&folder)).unwrap();
    for (key, value) in keys {
        std::fs::write(secret.join(&folder).join(key), value).unwrap();
    }
    let tmp = secret.join("..data_tmp");
    std::os::unix::fs::symlink(&folder, &tmp).unwrap();
    std::fs::rename(&tmp, secret.join("..data")).unwrap();
    for (key, _) in keys {
        let link = secret.join(key);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), &link).unwrap();
        }
    }
}

fn secrets_args(dir: &Path) -> Vec<String> {
    vec!["--secrets-dir".into(), dir.to_str().unwrap().into()]
}

// ---------------------------------------------------------------- tokens

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn jwt(claims: Value, secret: &[u8]) -> String {
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

// ---------------------------------------------------------------- clients

async fn ws_connect(mesh: &Mesh, header: (&str, &str)) -> Ws {
    let mut req = format!("ws://127.0.0.1:{}/ws", mesh.http_port)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        hyper::header::HeaderName::from_bytes(header.0.as_bytes()).unwrap(),
        header.1.parse().unwrap(),
    );
    let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

/// The next text message as JSON (pings and pongs skipped).
async fn next_json(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a message in time")
            .expect("connection open")
            .expect("valid frame");
        match m {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// Sends a command and returns its reply.
async fn ask(ws: &mut Ws, v: Value) -> Value {
    ws.send(Message::text(v.to_string())).await.unwrap();
    let r = next_json(ws).await;
    assert_eq!(r["type"], "reply", "{r}");
    r
}

/// Waits (bounded by `limit`) for the server's close frame; any replies before it are skipped.
async fn close_frame(ws: &mut Ws, limit: Duration) -> CloseFrame {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the server closed the session in time");
        match m {
            Some(Ok(Message::Close(Some(f)))) => return f,
            Some(Ok(Message::Close(None))) => panic!("a close frame without a code"),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("the connection failed before its close frame: {e}"),
            None => panic!("the connection ended without a close frame"),
        }
    }
}

async fn http_get(mesh: &Mesh, path: &str, header: (&str, &str)) -> u16 {
    let req = hyper::Request::get(mesh.url(path))
        .header(header.0, header.1)
        .body(Full::new(Bytes::new()))
        .unwrap();
    mesh.client.send(req).await.unwrap().status
}

/// Polls until `GET /noop` with `header` answers `status`.
async fn wait_status(mesh: &Mesh, header: (&str, &str), status: u16, what: &str) {
    poll(WAIT, what, || async {
        (http_get(mesh, "/noop", header).await == status).then_some(())
    })
    .await;
}

/// Polls the router's metrics until a line starting with `prefix` reads `value`.
async fn wait_metric(mesh: &Mesh, prefix: &str, value: f64) {
    poll(WAIT, prefix, || async {
        let text = mesh.router_metrics().await;
        (metric_line(&text, prefix) == Some(value)).then_some(())
    })
    .await;
}

fn metric_line(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------- a JWT-guarded mesh

/// A mesh whose Router checks HS256 JWTs with no leeway (so a token ends at its `exp`), with the
/// WebSocket listener (and `rules` as its subscribe rules), gRPC, and with a pusher the Manager of
/// `tick` and `marker`.
async fn jwt_mesh(secrets: &Path, rules: Option<Value>, pusher: Option<&Pusher>) -> Mesh {
    kubelet_write(secrets, "jwt", &[("hmac", SECRET)], 1);
    let port = pusher.map(|p| p.port);
    let mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["listeners"]["websocket"] = json!({"path": "/ws"});
            if let Some(r) = rules {
                cfg["spec"]["listeners"]["websocket"]["subscribe"] = r;
            }
            cfg["spec"]["listeners"]["grpc"] = json!({"port": 0});
            cfg["spec"]["routes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"event": "noop", "grpc": {"method": "noop"}}));
            cfg["spec"]["middleware"] = json!([
                {"auth": {"jwt": {"algorithm": "HS256", "leeway": "0s",
                                  "keySecretRef": {"name": "jwt", "key": "hmac"}}}},
            ]);
            if let Some(port) = port {
                let dest = json!({"manager": "pusher", "service": "pusher", "port": port, "podSelector": {}});
                cfg["destinations"]["tick"] = dest.clone();
                cfg["destinations"]["marker"] = dest;
                cfg["staticEndpoints"]["pusher"] = json!([format!("127.0.0.1:{port}")]);
            }
        },
    )
    .await;
    let probe = bearer(&jwt(json!({"sub": "probe", "exp": now() + 600}), SECRET));
    wait_status(&mesh, ("authorization", &probe), 200, "router connected").await;
    if let Some(p) = pusher {
        p.wait_connected().await;
    }
    mesh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_session_closes_with_1008_when_its_token_expires() {
    let secrets = tempfile::tempdir().unwrap();
    let mesh = jwt_mesh(secrets.path(), None, None).await;
    let exp = now() + 3;
    let token = bearer(&jwt(json!({"sub": "u1", "exp": exp}), SECRET));
    let mut ws = ws_connect(&mesh, ("authorization", &token)).await;
    // The session works while the token is valid.
    let r = ask(&mut ws, json!({"command": "noop", "id": 1})).await;
    assert_eq!(r["status"], 200, "{r}");

    let f = close_frame(&mut ws, WAIT).await;
    let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert_eq!(f.code, CloseCode::Policy, "{f:?}");
    assert_eq!(u16::from(f.code), 1008);
    assert_eq!(
        f.reason.as_str(),
        "the token has expired; reconnect with a fresh token"
    );
    // Closed at the expiry, not before it (the leeway is 0s).
    assert!(
        at >= Duration::from_secs(exp),
        "closed at {at:?}, exp {exp}"
    );
    wait_metric(
        &mesh,
        r#"switchyard_sessions_lapsed_total{protocol="websocket",reason="expired"}"#,
        1.0,
    )
    .await;
    // The same token cannot open a new session.
    let mut req = format!("ws://127.0.0.1:{}/ws", mesh.http_port)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", token.parse().unwrap());
    let refused = tokio_tungstenite::connect_async(req)
        .await
        .expect_err("refused");
    let tokio_tungstenite::tungstenite::Error::Http(resp) = refused else {
        panic!("expected an HTTP refusal, got {refused:?}")
    };
    assert_eq!(resp.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_carries_a_session_past_its_first_token() {
    let secrets = tempfile::tempdir().unwrap();
    let mesh = jwt_mesh(secrets.path(), None, None).await;
    let first_exp = now() + 4;
    let first = bearer(&jwt(json!({"sub": "u1", "exp": first_exp}), SECRET));
    let mut ws = ws_connect(&mesh, ("authorization", &first)).await;

    // Refused refreshes leave the session on its first token.
    let stranger = jwt(json!({"sub": "u2", "exp": now() + 600}), SECRET);
    let r = ask(
        &mut ws,
        json!({"command": "refresh", "id": "a", "token": stranger}),
    )
    .await;
    assert_eq!(r["status"], 403, "{r}");
    assert!(
        r["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("another subject"),
        "{r}"
    );
    let forged = jwt(json!({"sub": "u1", "exp": now() + 600}), b"not-the-key");
    let r = ask(
        &mut ws,
        json!({"command": "refresh", "id": "b", "token": forged}),
    )
    .await;
    assert_eq!(r["status"], 401, "{r}");
    assert_eq!(
        r["error"]["detail"], "the token signature is not valid",
        "{r}"
    );
    let r = ask(&mut ws, json!({"command": "refresh", "id": "c"})).await;
    assert_eq!(r["status"], 400, "{r}");

    let second_exp = now() + 600;
    let second = jwt(json!({"sub": "u1", "exp": second_exp}), SECRET);
    let r = ask(
        &mut ws,
        json!({"command": "refresh", "id": "d", "token": second}),
    )
    .await;
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["expires"], second_exp, "{r}");
    assert!(r.get("unsubscribed").is_none(), "{r}");

    // Past the first token's expiry the session still serves.
    poll(WAIT, "the first token's expiry to pass", || async {
        (now() > first_exp + 1).then_some(())
    })
    .await;
    let r = ask(&mut ws, json!({"command": "noop", "id": 2})).await;
    assert_eq!(r["status"], 200, "{r}");
    ws.close(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_is_authorized_per_event_type_and_a_refusal_keeps_the_session() {
    let pusher = Pusher::start().await;
    let secrets = tempfile::tempdir().unwrap();
    let rules = json!([
        {"events": ["tick"], "scopes": ["ticks:read"]},
        {"events": ["marker"], "claims": {"tier": "gold"}},
    ]);
    let mesh = jwt_mesh(secrets.path(), Some(rules), Some(&pusher)).await;
    let silver = jwt(
        json!({"sub": "u1", "exp": now() + 600, "scope": "openid ticks:read", "tier": "silver"}),
        SECRET,
    );
    let mut ws = ws_connect(&mesh, ("authorization", &bearer(&silver))).await;

    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": 1, "event": "tick"}),
    )
    .await;
    assert_eq!(r["status"], 200, "{r}");
    let tick_sub = r["subscription"].as_u64().unwrap();
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": 2, "event": "marker"}),
    )
    .await;
    assert_eq!(r["status"], 403, "{r}");
    assert_eq!(r["error"]["title"], "Forbidden", "{r}");
    assert_eq!(
        r["error"]["detail"],
        "subscribing to marker needs the claim `tier` to be `gold`, which the token does not hold"
    );
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": 3, "event": "orders.created"}),
    )
    .await;
    assert_eq!(r["status"], 403, "{r}");
    assert_eq!(
        r["error"]["detail"],
        "subscribing to orders.created is not allowed on this endpoint"
    );
    // The session stays usable: commands and the allowed subscription's pushes.
    let r = ask(&mut ws, json!({"command": "noop", "id": 4})).await;
    assert_eq!(r["status"], 200, "{r}");
    pusher.push("tick", r#"{"n":1}"#);
    let p = next_json(&mut ws).await;
    assert_eq!(
        (p["type"].as_str(), p["subscription"].as_u64(), &p["data"]),
        (Some("push"), Some(tick_sub), &json!({"n": 1})),
        "{p}"
    );

    // A new token without the scope but with the claim: the tick subscription ends, marker opens.
    let gold = jwt(
        json!({"sub": "u1", "exp": now() + 600, "tier": "gold"}),
        SECRET,
    );
    let r = ask(
        &mut ws,
        json!({"command": "refresh", "id": 5, "token": gold}),
    )
    .await;
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["unsubscribed"], json!([tick_sub]), "{r}");
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": 6, "event": "marker"}),
    )
    .await;
    assert_eq!(r["status"], 200, "{r}");
    let marker_sub = r["subscription"].as_u64().unwrap();
    // Pushes from one manager connection arrive in order: had the tick been delivered, it would
    // come before the marker.
    pusher.push("tick", r#"{"n":2}"#);
    pusher.push("marker", r#"{"n":3}"#);
    let p = next_json(&mut ws).await;
    assert_eq!(
        (p["subscription"].as_u64(), &p["data"]),
        (Some(marker_sub), &json!({"n": 3})),
        "{p}"
    );
    let text = mesh.router_metrics().await;
    assert_eq!(
        metric_line(
            &text,
            r#"switchyard_ws_messages_total{command="subscribe",status="403"}"#
        ),
        Some(2.0),
        "{text}"
    );
    ws.close(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_stream_ends_unauthenticated_when_its_token_expires() {
    let secrets = tempfile::tempdir().unwrap();
    let mesh = jwt_mesh(secrets.path(), None, None).await;
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{}", mesh.grpc()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = GatewayClient::new(channel);
    let exp = now() + 3;
    let token = bearer(&jwt(json!({"sub": "u1", "exp": exp}), SECRET));
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("authorization", token.parse().unwrap());
    let mut replies = client.connect(req).await.unwrap().into_inner();
    tx.send(ConnectRequest {
        id: 1,
        method: "noop".into(),
        payload: b"{}".to_vec(),
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, replies.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((r.id, r.status), (1, 200));

    // The client keeps its half open; the server ends the stream at the expiry.
    let end = tokio::time::timeout(WAIT, replies.message())
        .await
        .expect("the stream ended in time");
    let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let status = end.expect_err("the stream ended with a status");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(
        status.message(),
        "the token has expired; open a new stream with a fresh token"
    );
    assert!(at >= Duration::from_secs(exp), "ended at {at:?}, exp {exp}");
    drop(tx);
    wait_metric(
        &mesh,
        r#"switchyard_sessions_lapsed_total{protocol="grpc",reason="expired"}"#,
        1.0,
    )
    .await;
}

// ---------------------------------------------------------------- reloads

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_jwt_key_is_taken_without_a_restart_and_a_bad_one_keeps_it() {
    let secrets = tempfile::tempdir().unwrap();
    let mut mesh = jwt_mesh(secrets.path(), None, None).await;
    let claims = json!({"sub": "u1", "exp": now() + 600});
    let old = bearer(&jwt(claims.clone(), SECRET));
    let new = bearer(&jwt(claims, b"second-shared-secret"));
    assert_eq!(http_get(&mesh, "/noop", ("authorization", &new)).await, 401);
    let mut session = ws_connect(&mesh, ("authorization", &old)).await;
    let r = ask(&mut session, json!({"command": "noop", "id": 1})).await;
    assert_eq!(r["status"], 200, "{r}");

    kubelet_write(
        secrets.path(),
        "jwt",
        &[("hmac", b"second-shared-secret\n")],
        2,
    );
    wait_status(&mesh, ("authorization", &new), 200, "the new key accepted").await;
    assert_eq!(http_get(&mesh, "/noop", ("authorization", &old)).await, 401);
    // The session opened with a token of the old key ends: a new request with it is refused.
    let f = close_frame(&mut session, WAIT).await;
    assert_eq!(f.code, CloseCode::Policy, "{f:?}");
    assert_eq!(
        f.reason.as_str(),
        "no longer authorized: the token signature is not valid"
    );
    wait_metric(
        &mesh,
        r#"switchyard_secret_reloads_total{secret="jwt",result="ok"}"#,
        1.0,
    )
    .await;

    // A blank key file is refused: the second key stays in use.
    kubelet_write(secrets.path(), "jwt", &[("hmac", b"\n")], 3);
    wait_metric(
        &mesh,
        r#"switchyard_secret_reloads_total{secret="jwt",result="error"}"#,
        1.0,
    )
    .await;
    assert_eq!(http_get(&mesh, "/noop", ("authorization", &new)).await, 200);
    let line = mesh
        .router
        .log_line("key material reload failed; the material loaded before stays in use")
        .await;
    let file = secrets.path().join("jwt/hmac").display().to_string();
    assert_eq!(line["files"], file.as_str(), "{line}");
    assert_eq!(line["error"], "the HS256 secret is blank", "{line}");
    assert!(
        mesh.router.child.try_wait().unwrap().is_none(),
        "the router exited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_api_keys_are_taken_and_sessions_of_a_removed_key_end() {
    let secrets = tempfile::tempdir().unwrap();
    kubelet_write(secrets.path(), "api-keys", &[("keys", b"key-one\n")], 1);
    let mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets.path()),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["listeners"]["websocket"] = json!({"path": "/ws"});
            cfg["spec"]["middleware"] = json!([
                {"auth": {"apiKey": {"keysSecretRef": {"name": "api-keys", "key": "keys"}}}},
            ]);
        },
    )
    .await;
    wait_status(&mesh, ("x-api-key", "key-one"), 200, "router connected").await;
    assert_eq!(
        http_get(&mesh, "/noop", ("x-api-key", "key-two")).await,
        401
    );
    let mut one = ws_connect(&mesh, ("x-api-key", "key-one")).await;
    let r = ask(&mut one, json!({"command": "noop", "id": 1})).await;
    assert_eq!(r["status"], 200, "{r}");

    kubelet_write(secrets.path(), "api-keys", &[("keys", b"key-two\n")], 2);
    wait_status(&mesh, ("x-api-key", "key-two"), 200, "the new key accepted").await;
    assert_eq!(
        http_get(&mesh, "/noop", ("x-api-key", "key-one")).await,
        401
    );
    let f = close_frame(&mut one, WAIT).await;
    assert_eq!(f.code, CloseCode::Policy, "{f:?}");
    assert_eq!(
        f.reason.as_str(),
        "no longer authorized: the API key in x-api-key is not valid"
    );
    // A session of a key still listed lives on through a reload.
    let mut two = ws_connect(&mesh, ("x-api-key", "key-two")).await;
    kubelet_write(
        secrets.path(),
        "api-keys",
        &[("keys", b"key-two\nkey-three\n")],
        3,
    );
    wait_status(
        &mesh,
        ("x-api-key", "key-three"),
        200,
        "a third key accepted",
    )
    .await;
    let r = ask(&mut two, json!({"command": "noop", "id": 2})).await;
    assert_eq!(r["status"], 200, "{r}");

    // A file with no keys is refused and the keys before it stay.
    kubelet_write(secrets.path(), "api-keys", &[("keys", b"\n\n")], 4);
    wait_metric(
        &mesh,
        r#"switchyard_secret_reloads_total{secret="api-keys",result="error"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        http_get(&mesh, "/noop", ("x-api-key", "key-two")).await,
        200
    );
    assert_eq!(
        http_get(&mesh, "/noop", ("x-api-key", "key-three")).await,
        200
    );
    let r = ask(&mut two, json!({"command": "noop", "id": 3})).await;
    assert_eq!(r["status"], 200, "{r}");
    let text = mesh.router_metrics().await;
    assert_eq!(
        metric_line(
            &text,
            r#"switchyard_secret_reloads_total{secret="api-keys",result="ok"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric_line(
            &text,
            r#"switchyard_sessions_lapsed_total{protocol="websocket",reason="invalid"}"#
        ),
        Some(1.0),
        "{text}"
    );
    two.close(None).await.unwrap();
}

// ---------------------------------------------------------------- TLS

struct Pair {
    crt: String,
    key: String,
}

fn pair() -> Pair {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    Pair {
        crt: ck.cert.pem(),
        key: ck.signing_key.serialize_pem(),
    }
}

/// `GET /noop` over a new TLS connection from a client that trusts only `trusted`'s certificate:
/// the status, or the handshake's error.
async fn https_noop(port: u16, trusted: &Pair) -> Result<u16, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(trusted.crt.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("https://localhost:{port}/noop"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    resp.into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_tls_certificate_is_served_without_a_restart_and_a_bad_pair_keeps_it() {
    let secrets = tempfile::tempdir().unwrap();
    let a = pair();
    kubelet_write(
        secrets.path(),
        "edge-tls",
        &[("tls.crt", a.crt.as_bytes()), ("tls.key", a.key.as_bytes())],
        1,
    );
    let mut mesh = Mesh::start_with(
        Opts {
            router_args: secrets_args(secrets.path()),
            wait_connected: false,
            ..Opts::default()
        },
        |cfg| {
            cfg["spec"]["listeners"]["tls"] = json!({"secretName": "edge-tls"});
        },
    )
    .await;
    let port = mesh.http_port;
    poll(WAIT, "HTTPS with the first certificate", || async {
        (https_noop(port, &a).await == Ok(200)).then_some(())
    })
    .await;
    let b = pair();
    assert!(https_noop(port, &b).await.is_err());

    kubelet_write(
        secrets.path(),
        "edge-tls",
        &[("tls.crt", b.crt.as_bytes()), ("tls.key", b.key.as_bytes())],
        2,
    );
    poll(WAIT, "HTTPS with the second certificate", || async {
        (https_noop(port, &b).await == Ok(200)).then_some(())
    })
    .await;
    let refused = https_noop(port, &a)
        .await
        .expect_err("the old certificate is gone");
    assert!(refused.contains("certificate"), "{refused}");
    wait_metric(
        &mesh,
        r#"switchyard_secret_reloads_total{secret="edge-tls",result="ok"}"#,
        1.0,
    )
    .await;

    // A certificate with another certificate's key cannot serve: the second pair stays.
    let (c, d) = (pair(), pair());
    kubelet_write(
        secrets.path(),
        "edge-tls",
        &[("tls.crt", c.crt.as_bytes()), ("tls.key", d.key.as_bytes())],
        3,
    );
    wait_metric(
        &mesh,
        r#"switchyard_secret_reloads_total{secret="edge-tls",result="error"}"#,
        1.0,
    )
    .await;
    assert_eq!(https_noop(port, &b).await, Ok(200));
    let line = mesh
        .router
        .log_line("key material reload failed; the material loaded before stays in use")
        .await;
    let files = line["files"].as_str().unwrap();
    assert!(
        files.contains("edge-tls/tls.crt") && files.contains("edge-tls/tls.key"),
        "{line}"
    );
    assert!(
        line["error"]
            .as_str()
            .unwrap()
            .starts_with("the certificate and key cannot serve TLS"),
        "{line}"
    );
}
