//! An operator upgrade that changes the sidecar image reaches the mesh at the pace the user set
//! (issue 39, deliverable 5: "sidecar rollouts caused by an operator upgrade proceed at a bounded
//! rate the user sets, not all mesh pods at once").
//!
//! An operator with the current sidecar image makes the quickstart's Router and a Manager split
//! per event type (three mesh Deployments, pods on kwok). A second operator, as after a `helm
//! upgrade`, injects another image with `--sidecar-rollouts-at-once=1`. A watch on the namespace's
//! Deployments sees every change in the API server's order: at no event may more than one
//! Deployment have the new image and an unfinished rollout, and in the end all run it.

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, BTreeSet};
use switchyard_crds::{Manager, Router};
use switchyard_e2e::k8s::{check_rolled_out, wait_ready};
use switchyard_e2e::operator::OperatorLock;
use switchyard_e2e::{
    Operator, OperatorOpts, SIDECAR_IMAGE, TestNamespace, cluster, fixtures, timeout,
};

/// The image the "upgraded" operator injects; never pulled (kwok runs the pods).
const NEW_IMAGE: &str = "ghcr.io/switchyard-dev/switchyard-sidecar:0.2.0-e2e";
/// The mesh Deployments of the namespace once the Manager is split.
const MESH: [&str; 3] = ["edge-router", "handlers-echo", "handlers-noop"];

fn sidecar_image(d: &Deployment) -> Option<String> {
    let pod = d.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == "switchyard-sidecar")
        .and_then(|c| c.image.clone())
}

#[tokio::test]
async fn a_new_sidecar_image_reaches_the_mesh_one_deployment_at_a_time() -> Result<()> {
    let c = cluster().await?;
    let _lock = OperatorLock::acquire().await?;
    let ns = TestNamespace::create(c, "sidecar-pace").await?;
    let client = c.client().await?;
    let opts = |id: &str, image: &str| OperatorOpts {
        sidecar_image: image.into(),
        extra_args: vec![
            format!("--watch-namespaces={}", ns.name),
            "--sidecar-rollouts-at-once=1".into(),
        ],
        ..OperatorOpts::new(id)
    };

    // Before the upgrade: the mesh on the current image, rolled out.
    let before = Operator::start(c, opts("e2e-pace-before", SIDECAR_IMAGE)).await?;
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;
    c.kubectl()
        .args([
            "-n", &ns.name, "patch", "manager", "handlers", "--type", "merge",
        ])
        .args(["-p", r#"{"spec":{"scaling":{"split":"perEventType"}}}"#])
        .ok()
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    switchyard_e2e::eventually(
        "the mesh rolled out on the current image",
        timeout(),
        || async {
            for name in MESH {
                let d = deployments.get(name).await?;
                check_rolled_out(&d, 1)?;
                ensure!(
                    sidecar_image(&d).as_deref() == Some(SIDECAR_IMAGE),
                    "{name} image"
                );
            }
            Ok(())
        },
    )
    .await?;
    before.stop().await?;

    // The watch starts before the upgraded operator, so it sees each of its changes.
    let mut changes = watcher(deployments.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let after = Operator::start(c, opts("e2e-pace-after", NEW_IMAGE)).await?;
    let watched = tokio::time::timeout(timeout(), async {
        // Per Deployment: whether it runs the new image, and whether it is rolled out.
        let mut state: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        let mut most_rolling = 0;
        let mut order = Vec::new();
        while let Some(d) = changes.try_next().await? {
            let name = d.name_any();
            let new = sidecar_image(&d).as_deref() == Some(NEW_IMAGE);
            let done = check_rolled_out(&d, 1).is_ok();
            if new && !state.get(&name).is_some_and(|(n, _)| *n) {
                order.push(name.clone());
            }
            state.insert(name, (new, done));
            let rolling: BTreeSet<&String> = state
                .iter()
                .filter(|(_, (new, done))| *new && !*done)
                .map(|(n, _)| n)
                .collect();
            most_rolling = most_rolling.max(rolling.len());
            ensure!(
                rolling.len() <= 1,
                "{} Deployments roll the new sidecar image at once: {rolling:?}",
                rolling.len()
            );
            if MESH.iter().all(|m| state.get(*m) == Some(&(true, true))) {
                return anyhow::Ok((most_rolling, order));
            }
        }
        anyhow::bail!("the Deployment watch ended")
    })
    .await
    .context("the whole mesh on the new sidecar image")?;
    let (most_rolling, order) = match watched {
        Ok(w) => w,
        Err(e) => {
            eprintln!("[e2e] operator log:\n{}", after.log_tail(40));
            return Err(e);
        }
    };
    eprintln!(
        "[e2e] new sidecar image rolled in the order {order:?}, at most {most_rolling} at once"
    );
    ensure!(most_rolling == 1, "at most {most_rolling} rolling at once");

    // And the resources are Ready on it.
    let routers: Api<Router> = Api::namespaced(client.clone(), &ns.name);
    let managers: Api<Manager> = Api::namespaced(client, &ns.name);
    wait_ready(&routers, "edge").await?;
    wait_ready(&managers, "handlers").await?;
    after.stop().await?;
    Ok(())
}
