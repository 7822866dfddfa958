//! OIDC auth end to end against a real OpenID provider: Ory Hydra (built from the Go module proxy
//! into `.tools`), serving its issuer over HTTPS from a test CA and issuing JWT access tokens by
//! the client-credentials grant, in front of real router and manager processes.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::hydra::{Hydra, TestCa, kid};
use common::*;
use http_body_util::Full;
use hyper::Request;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// A router whose only middleware is `auth.oidc` for `hydra` and audience `orders`, trusting the
/// test CA through a mounted Secret.
async fn mesh(hydra: &Hydra, secrets: &Path) -> Mesh {
    std::fs::create_dir_all(secrets.join("issuer-ca")).unwrap();
    std::fs::write(secrets.join("issuer-ca/ca.crt"), &hydra.ca_pem).unwrap();
    let issuer = hydra.issuer.clone();
    Mesh::start_with(
        Opts {
            router_args: vec!["--secrets-dir".into(), secrets.to_str().unwrap().into()],
            wait_connected: false,
            ..Opts::default()
        },
        move |cfg| {
            cfg["spec"]["middleware"] = json!([
                {"auth": {"oidc": {"issuer": issuer, "audiences": ["orders"],
                                   "algorithms": ["RS256", "ES256"],
                                   "caSecretRef": {"name": "issuer-ca", "key": "ca.crt"}}}},
            ]);
        },
    )
    .await
}

async fn noop(mesh: &Mesh, token: &str) -> Reply {
    let req = Request::get(mesh.url("/noop"))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    mesh.client.send(req).await.unwrap()
}

/// Polls until `token` gets 200 on `/noop`: the router has the issuer's keys and reaches the
/// manager.
async fn wait_accepted(mesh: &Mesh, token: &str) {
    poll(Duration::from_secs(30), "token accepted", || async {
        (noop(mesh, token).await.status == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hydra_tokens_pass_and_a_key_rotation_is_followed_within_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let hydra = Hydra::start(&dir.path().join("hydra"), &TestCa::new()).await;
    let client = hydra.client(&["orders"]).await;
    let first = hydra.token(&client, "orders").await;
    let mesh = mesh(&hydra, &dir.path().join("secrets")).await;
    wait_accepted(&mesh, &first).await;
    let router_pid = mesh.router.child.id();

    // Hydra signs new tokens with the key just added to its access-token set: a kid the
    // router's cached key set does not have.
    let rotated = hydra.rotate("rotated-es256", "ES256").await;
    let second = hydra.token(&client, "orders").await;
    assert_eq!(kid(&second), rotated, "Hydra signs with the new key");
    assert_ne!(kid(&second), kid(&first));
    // One request: the unknown kid makes the router fetch the key set again before deciding.
    let r = noop(&mesh, &second).await;
    assert_eq!(
        r.status,
        200,
        "the rotated token on its first request: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(mesh.router.child.id(), router_pid, "no restart");
    // The old key is still published, so its tokens still pass.
    assert_eq!(noop(&mesh, &first).await.status, 200);
    let text = mesh.router_metrics().await;
    assert!(
        !text.contains(r#"middleware="oidc""#),
        "nothing was refused: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_for_another_audience_or_issuer_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let hydra = Hydra::start(&dir.path().join("hydra"), &ca).await;
    let other = Hydra::start(&dir.path().join("other"), &ca).await;
    let client = hydra.client(&["orders", "billing"]).await;
    let good = hydra.token(&client, "orders").await;
    let mesh = mesh(&hydra, &dir.path().join("secrets")).await;
    wait_accepted(&mesh, &good).await;

    let billing = hydra.token(&client, "billing").await;
    let foreign = {
        let c = other.client(&["orders"]).await;
        other.token(&c, "orders").await
    };
    for (token, word) in [(&billing, "audience (aud)"), (&foreign, "issuer (iss)")] {
        let r = noop(&mesh, token).await;
        assert_eq!(r.status, 401, "{word}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let detail = r.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(word), "{word}: {detail}");
        let challenge = r.header("www-authenticate").unwrap();
        assert!(challenge.contains(word), "{word}: {challenge}");
    }
    let text = mesh.router_metrics().await;
    for reason in ["wrong_audience", "wrong_issuer"] {
        assert!(
            text.contains(&format!(
                r#"switchyard_middleware_rejections_total{{middleware="oidc",reason="{reason}"}} 1"#
            )),
            "{reason}: {text}"
        );
    }
    assert_eq!(noop(&mesh, &good).await.status, 200);
}
