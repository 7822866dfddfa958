//! The handler examples in other languages as a user runs them in a cluster:
//! `examples/cluster/{python,js,go}.yaml` applied on the real node, each Manager's app running the
//! image `deploy/release` built of that example (Debian's python3.13 or nodejs from pinned .debs, or
//! a static Go binary; user 65532) and pulled by the node through its ghcr.io mirror from the test
//! registry. A request from this host, outside the pods, through the Router is answered by the
//! language's handler: `POST /echo` gets its JSON back (the handler also published a `noop` through
//! its sidecar's local API, or it would have answered 502) and `GET /noop` `{"ok":true}`, with
//! Server-Timing.

use super::{Env, node_namespace, ready_router_pod};
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Instant;
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::pods::{check_pulled, check_running_on, live_pods, routed_ip};
use switchyard_e2e::release::HANDLERS;
use switchyard_e2e::{eventually, repo_root, timeout};

pub(super) async fn handler_examples_answer_from_their_images(env: &'static Env) -> Result<()> {
    for lang in HANDLERS {
        handler_example(env, lang)
            .await
            .with_context(|| format!("examples/cluster/{lang}.yaml"))?;
    }
    Ok(())
}

/// The example's file with its image named by the digest this release pushed (still as
/// ghcr.io/…, so the node's mirror serves it): the tag is mutable and the node keeps the copy it
/// pulled first, while every commit releases a new one.
fn manifest(env: &Env, lang: &str) -> Result<(String, String)> {
    let file = repo_root().join(format!("examples/cluster/{lang}.yaml"));
    let example = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let repository = format!("ghcr.io/switchyard-dev/switchyard-example-{lang}");
    let tagged = format!("{repository}:{}", env.release.version);
    let pushed = env
        .release
        .handlers
        .get(lang)
        .with_context(|| format!("the release pushed no {lang} handler image"))?;
    let pinned = format!("{repository}@{}", pushed.digest);
    ensure!(
        example.contains(&format!("image: {tagged}\n")),
        "{} does not name the image {tagged}",
        file.display()
    );
    Ok((example.replace(&tagged, &pinned), pinned))
}

async fn handler_example(env: &'static Env, lang: &str) -> Result<()> {
    let ns = node_namespace(env, &format!("handler-{lang}")).await?;
    let (manifest, image) = manifest(env, lang)?;
    let start = Instant::now();
    env.cluster
        .kubectl()
        .args(["-n", &ns.name, "apply", "-f", "-"])
        .stdin(manifest)
        .ok()
        .await?;
    let client = env.cluster.client().await?;
    let router = ready_router_pod(env, &client, &ns.name).await?;
    let ip = routed_ip(&env.node, &router).await?;
    let http = RouterClient::new(SocketAddr::new(ip.into(), 8080));
    let sent = json!({"value": 7, "lang": lang});
    let echo = eventually(
        &format!("POST /echo answered by the {lang} handler"),
        timeout(),
        || async {
            let a = http.post("/echo", &sent.to_string()).await?;
            ensure!(a.status == 200, "POST /echo: {} {}", a.status, a.body);
            Ok(a)
        },
    )
    .await?;
    let first_200 = start.elapsed();
    let got: Value = serde_json::from_str(&echo.body)
        .with_context(|| format!("POST /echo answered no JSON: {:?}", echo.body))?;
    ensure!(got == sent, "POST /echo answered {got}, sent {sent}");
    let timing = echo.server_timing.clone().unwrap_or_default();
    ensure!(
        timing.contains("app;dur="),
        "POST /echo: Server-Timing {timing:?} has no app stage"
    );
    let noop = http.get("/noop").await?;
    ensure!(
        noop.status == 200,
        "GET /noop: {} {}",
        noop.status,
        noop.body
    );
    let ok: Value = serde_json::from_str(&noop.body)
        .with_context(|| format!("GET /noop answered no JSON: {:?}", noop.body))?;
    ensure!(
        ok == json!({"ok": true}),
        "GET /noop answered {ok}, not {{\"ok\":true}}"
    );
    ensure!(
        noop.server_timing
            .as_deref()
            .is_some_and(|t| t.contains("app;dur=")),
        "GET /noop: Server-Timing {:?}",
        noop.server_timing
    );

    // The app that answered is the released image, pulled by its digest, on the real node.
    let selector = format!("switchyard.dev/manager={lang}");
    let pods = live_pods(&client, &ns.name, &selector).await?;
    ensure!(pods.len() == 1, "{} {lang} manager pods", pods.len());
    check_running_on(&pods[0], &env.node.name)?;
    let digest = image.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
    check_pulled(&pods[0], "app", &image, digest)?;
    eprintln!(
        "[e2e] kubectl apply -f examples/cluster/{lang}.yaml -> the {lang} handler answered POST /echo \
         {:.1}s later, Server-Timing {timing}",
        first_200.as_secs_f64()
    );
    Ok(())
}
