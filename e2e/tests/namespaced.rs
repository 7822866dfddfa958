//! The namespaced install mode (issue 12, cluster hardening: "a namespaced install mode
//! (`watchNamespaces`) with Role/RoleBinding instead of cluster-wide write access").
//!
//! A release of the chart with `watchNamespaces: [<watched>]` and no operator pods
//! (`replicaCount=0`) gives its ServiceAccount a Role in the watched namespace and nothing
//! cluster-wide (`meshTLS.enabled=false`, so not even TokenReview). A real operator process runs as that
//! ServiceAccount with `--watch-namespaces=<watched>`: the quickstart's Router and Manager in the
//! watched namespace are reconciled (Deployments, Ready in status), the same objects in a second,
//! unwatched namespace are left alone (no children, no status, no Events), and the operator's log
//! has no permission error: it never asked for anything its Role does not grant.

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::time::Duration;
use switchyard_crds::{Manager, Router};
use switchyard_e2e::k8s::{wait_ready, wait_rolled_out};
use switchyard_e2e::operator::{OperatorLock, RunAs};
use switchyard_e2e::{Cluster, Operator, OperatorOpts, TestNamespace, cluster, fixtures};

/// Helm release (and full name of its objects, its ServiceAccount among them) and its namespace.
const RELEASE: &str = "switchyard-ns";
const NAMESPACE: &str = "switchyard-ns";

async fn helm_install(c: &Cluster, watched: &str) -> Result<()> {
    c.helm()
        .args(["upgrade", "--install", RELEASE])
        .arg(switchyard_e2e::charts_dir().join("switchyard"))
        .args(["--namespace", NAMESPACE, "--create-namespace"])
        // Mesh TLS off: the operator runs outside the cluster with no sidecar to certify, so the
        // release has nothing cluster-wide at all (the TokenReview ClusterRole of a namespaced
        // install with mesh TLS is checked by tests/cluster.rs).
        .args(["--set", "replicaCount=0,meshTLS.enabled=false", "--set"])
        .arg(format!("watchNamespaces={{{watched}}}"))
        .args(["--wait=false"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .context("helm install of the operator chart with watchNamespaces")?;
    Ok(())
}

/// `kubectl auth can-i VERB RESOURCE[/SUBRESOURCE]` as the release's ServiceAccount, in `ns` or
/// (None) across all namespaces.
async fn can_i(c: &Cluster, verb: &str, resource: &str, ns: Option<&str>) -> Result<bool> {
    let who = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
    let mut cmd = match resource.split_once('/') {
        Some((resource, sub)) => {
            c.kubectl()
                .args(["auth", "can-i", verb, resource, "--subresource", sub])
        }
        None => c.kubectl().args(["auth", "can-i", verb, resource]),
    };
    cmd = cmd.args(["--as", &who]);
    cmd = match ns {
        Some(ns) => cmd.args(["-n", ns]),
        None => cmd.arg("--all-namespaces"),
    };
    // Exit code 1 with "no" is an answer, not a failure.
    let out = cmd.output().await?;
    match out.stdout.trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => anyhow::bail!(
            "`{}` answered neither yes nor no: {} {}",
            out.command,
            out.stdout,
            out.stderr
        ),
    }
}

async fn apply_quickstart(c: &Cluster, ns: &str) -> Result<()> {
    c.kubectl()
        .args(["apply", "-n", ns, "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;
    Ok(())
}

/// Lines of the operator's log that report a refusal by the API server (kube's error carries the
/// status reason `Forbidden` and the message "... is forbidden: User ... cannot ...").
fn permission_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden") || l.contains("code: 403"))
        .collect()
}

#[tokio::test]
async fn a_namespaced_install_reconciles_only_its_namespaces() -> Result<()> {
    let c = cluster().await?;
    let lock = OperatorLock::acquire().await?;
    let watched = TestNamespace::create(c, "watched").await?;
    let unwatched = TestNamespace::create(c, "unwatched").await?;
    helm_install(c, &watched.name).await?;
    let result = run(c, &lock, &watched.name, &unwatched.name).await;
    let uninstalled = c.helm_uninstall(RELEASE, NAMESPACE).await;
    result?;
    uninstalled
}

async fn run(c: &Cluster, _lock: &OperatorLock, watched: &str, unwatched: &str) -> Result<()> {
    // The release grants the watched namespace, and nothing cluster-wide.
    for (verb, resource) in [
        ("watch", "routers.switchyard.dev"),
        ("patch", "managers.switchyard.dev/status"),
        ("create", "deployments.apps"),
        ("delete", "services"),
        ("list", "pods"),
    ] {
        ensure!(
            can_i(c, verb, resource, Some(watched)).await?,
            "the release's ServiceAccount may not {verb} {resource} in {watched}"
        );
        ensure!(
            !can_i(c, verb, resource, Some(unwatched)).await?,
            "the release's ServiceAccount may {verb} {resource} in {unwatched}"
        );
        ensure!(
            !can_i(c, verb, resource, None).await?,
            "the release's ServiceAccount may {verb} {resource} in all namespaces"
        );
    }
    ensure!(
        !can_i(c, "create", "tokenreviews.authentication.k8s.io", None).await?,
        "without mesh TLS the release grants TokenReview"
    );

    // The unwatched namespace's objects first: by the time the watched ones are Ready, the older
    // ones would long have been reconciled if the operator looked there.
    apply_quickstart(c, unwatched).await?;
    let op = Operator::start(
        c,
        OperatorOpts {
            run_as: RunAs {
                namespace: NAMESPACE.into(),
                service_account: RELEASE.into(),
            },
            extra_args: vec![format!("--watch-namespaces={watched}")],
            ..OperatorOpts::new("e2e-namespaced")
        },
    )
    .await?;
    eprintln!(
        "[e2e] namespaced operator pid {}, log {}",
        op.pid(),
        op.log.display()
    );
    let checked = check(c, &op, watched, unwatched).await;
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    let code = op.stop().await?;
    checked.with_context(|| format!("operator log:\n{log}"))?;
    ensure!(code == Some(0), "the operator exited with {code:?}:\n{log}");
    let refused = permission_errors(&log);
    ensure!(
        refused.is_empty(),
        "the operator hit permission errors:\n{}",
        refused.join("\n")
    );
    ensure!(
        log.contains(&format!("namespaces {watched}")),
        "the operator did not log its scope:\n{log}"
    );
    ensure!(
        !log.contains(unwatched),
        "the operator's log names the unwatched namespace {unwatched}:\n{log}"
    );
    Ok(())
}

async fn check(c: &Cluster, op: &Operator, watched: &str, unwatched: &str) -> Result<()> {
    let client = c.client().await?;
    apply_quickstart(c, watched).await?;
    let router = wait_ready(&Api::<Router>::namespaced(client.clone(), watched), "edge").await?;
    let manager = wait_ready(
        &Api::<Manager>::namespaced(client.clone(), watched),
        "handlers",
    )
    .await?;
    ensure!(
        router.status.as_ref().is_some_and(|s| s.routes == 4),
        "Router status {:?}",
        router.status
    );
    ensure!(
        manager
            .status
            .as_ref()
            .and_then(|s| s.event_types.as_deref())
            == Some("noop,echo"),
        "Manager status {:?}",
        manager.status
    );
    wait_rolled_out(&client, watched, "edge-router", 1).await?;
    wait_rolled_out(&client, watched, "handlers-manager", 1).await?;

    // The unwatched namespace: no children, no status, no Events.
    let deployments = Api::<Deployment>::namespaced(client.clone(), unwatched)
        .list(&ListParams::default())
        .await?;
    ensure!(
        deployments.items.is_empty(),
        "Deployments in the unwatched namespace: {:?}",
        deployments
            .items
            .iter()
            .map(|d| d.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let router = Api::<Router>::namespaced(client.clone(), unwatched)
        .get("edge")
        .await?;
    let manager = Api::<Manager>::namespaced(client.clone(), unwatched)
        .get("handlers")
        .await?;
    ensure!(
        router.status.is_none() && manager.status.is_none(),
        "status written in the unwatched namespace: Router {:?}, Manager {:?}",
        router.status,
        manager.status
    );
    let events = Api::<Event>::namespaced(client.clone(), unwatched)
        .list(&ListParams::default())
        .await?;
    ensure!(
        !events.items.iter().any(|e| e
            .reporting_controller
            .as_deref()
            .is_some_and(|r| r.contains("switchyard"))),
        "the operator wrote Events in the unwatched namespace: {:?}",
        events.items
    );
    // None of its reconciles failed.
    let metrics = op.metrics().await?;
    ensure!(
        metrics.sum("switchyard_operator_reconciles_total") > 0.0,
        "no reconciles counted"
    );
    let failures = metrics.sum("switchyard_operator_reconcile_failures_total");
    ensure!(failures == 0.0, "{failures} reconciles failed");
    Ok(())
}
