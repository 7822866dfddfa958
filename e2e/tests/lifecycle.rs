//! Operator process lifecycle: a restart that must change nothing, and leader election between
//! two replicas. Each test runs its own operators while holding the operator lock, so these tests
//! run one at a time and never beside another operator.

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use switchyard_crds::{Manager, Router};
use switchyard_e2e::k8s::{self, wait_ready, wait_rolled_out};
use switchyard_e2e::operator::OperatorLock;
use switchyard_e2e::{
    Metrics, Operator, OperatorOpts, SYSTEM_NAMESPACE, TestNamespace, cluster, eventually,
    fixtures, timeout, unique_suffix,
};

/// Appends the tails of the operators' logs to an error.
fn with_logs<T>(result: Result<T>, ops: &[&Operator]) -> Result<T> {
    result.map_err(|e| {
        let logs: Vec<String> = ops
            .iter()
            .map(|o| {
                format!(
                    "--- operator {} log {} (tail) ---\n{}",
                    o.identity,
                    o.log.display(),
                    o.log_tail(30)
                )
            })
            .collect();
        anyhow::anyhow!("{e:#}\n{}", logs.join("\n"))
    })
}

/// resourceVersions of the CRs and all operator-managed children in `ns`, keyed `Kind/name`.
async fn snapshot(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, String>> {
    let mut all = k8s::children(client, ns).await?;
    for r in Api::<Router>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        all.insert(
            format!("Router/{}", r.name_any()),
            r.resource_version().unwrap_or_default(),
        );
    }
    for m in Api::<Manager>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        all.insert(
            format!("Manager/{}", m.name_any()),
            m.resource_version().unwrap_or_default(),
        );
    }
    // ReplicaSets too: a pod template change would add one (and bump the Deployment).
    for rs in Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        all.insert(
            format!("ReplicaSet/{}", rs.name_any()),
            rs.resource_version().unwrap_or_default(),
        );
    }
    Ok(all)
}

const RECONCILES: &str = "switchyard_operator_reconciles_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_restart_changes_nothing() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "restart").await?;

    let first = Operator::start(c, OperatorOpts::new("e2e-restart-1")).await?;
    let settled = async {
        c.kubectl()
            .args(["apply", "-n", &ns.name, "-f"])
            .arg(fixtures::quickstart())
            .ok()
            .await?;
        wait_ready(&Api::<Router>::namespaced(client.clone(), &ns.name), "edge").await?;
        wait_ready(
            &Api::<Manager>::namespaced(client.clone(), &ns.name),
            "handlers",
        )
        .await?;
        wait_rolled_out(&client, &ns.name, "edge-router", 1).await?;
        wait_rolled_out(&client, &ns.name, "handlers-manager", 1).await?;
        anyhow::Ok(())
    }
    .await;
    with_logs(settled, &[&first])?;
    let log1 = first.log.clone();
    let code = first.stop().await?;
    ensure!(
        code == Some(0),
        "the operator exited with {code:?} on SIGTERM (want 0); log {}",
        log1.display()
    );

    let before = snapshot(&client, &ns.name).await?;
    let keys: Vec<&str> = before
        .keys()
        .map(String::as_str)
        .filter(|k| !k.starts_with("ReplicaSet/"))
        .collect();
    ensure!(
        keys == [
            "ConfigMap/edge-router-config",
            "ConfigMap/handlers-manager-config",
            "Deployment/edge-router",
            "Deployment/handlers-manager",
            "Manager/handlers",
            "Router/edge",
            "Service/edge-router",
            "Service/handlers-manager",
        ],
        "objects before the restart: {keys:?}"
    );

    let second = Operator::start(c, OperatorOpts::new("e2e-restart-2")).await?;
    let checked = async {
        // Wait until the new process has reconciled every CR in the cluster at least once, and its
        // counter has stopped moving.
        let routers = Api::<Router>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .len();
        let managers = Api::<Manager>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .len();
        let op = &second;
        eventually(
            &format!("the new operator to reconcile {routers} Routers and {managers} Managers"),
            timeout(),
            || async move {
                let m: Metrics = op.metrics().await?;
                let (r, mg, all) = (
                    m.sum_where(RECONCILES, "controller", "router"),
                    m.sum_where(RECONCILES, "controller", "manager"),
                    m.sum(RECONCILES),
                );
                let enough = if r + mg > 0.0 {
                    r >= routers as f64 && mg >= managers as f64
                } else {
                    all >= (routers + managers) as f64
                };
                ensure!(enough, "{RECONCILES}: router {r}, manager {mg}, all {all}");
                Ok(())
            },
        )
        .await?;
        // Settled: the counter has not moved for two seconds.
        let last = &std::cell::Cell::new((-1.0, Instant::now()));
        eventually(
            "the reconcile counter to settle",
            timeout(),
            || async move {
                let all = op.metrics().await?.sum(RECONCILES);
                let (previous, since) = last.get();
                if all != previous {
                    last.set((all, Instant::now()));
                }
                ensure!(
                    all == previous && since.elapsed() >= Duration::from_secs(2),
                    "{RECONCILES} still moving: {all}"
                );
                Ok(())
            },
        )
        .await?;

        let after = snapshot(&client, &ns.name).await?;
        let changed: Vec<String> = before
            .iter()
            .filter(|(k, v)| after.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
            .chain(
                after
                    .keys()
                    .filter(|k| !before.contains_key(*k))
                    .map(|k| format!("{k}: new")),
            )
            .collect();
        ensure!(
            changed.is_empty(),
            "the restart changed objects:\n{}",
            changed.join("\n")
        );

        let names = k8s::deployment_names(&client, &ns.name).await?;
        ensure!(
            names == ["edge-router", "handlers-manager"],
            "Deployments after the restart: {names:?}"
        );
        anyhow::Ok(())
    }
    .await;
    with_logs(checked, &[&second])?;
    let code = second.stop().await?;
    ensure!(
        code == Some(0),
        "the operator exited with {code:?} on SIGTERM (want 0)"
    );
    Ok(())
}

async fn leader_gauge(op: &Operator) -> Result<f64> {
    op.metrics()
        .await?
        .value("switchyard_operator_leader")
        .context("no switchyard_operator_leader sample")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_fails_over() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "leader").await?;
    let lease_name = format!("e2e-lease-{}", unique_suffix());
    let leases: Api<Lease> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let routers: Api<Router> = Api::namespaced(client.clone(), &ns.name);

    let a = Operator::start(
        c,
        OperatorOpts::new("e2e-le-a").leader_election(&lease_name),
    )
    .await?;
    let b = Operator::start(
        c,
        OperatorOpts::new("e2e-le-b").leader_election(&lease_name),
    )
    .await?;

    let elected = eventually("exactly one leader", timeout(), || async {
        let (la, lb) = (leader_gauge(&a).await?, leader_gauge(&b).await?);
        ensure!(
            (la, lb) == (1.0, 0.0) || (la, lb) == (0.0, 1.0),
            "switchyard_operator_leader: a={la} b={lb}"
        );
        Ok(la == 1.0)
    })
    .await;
    let a_leads = with_logs(elected, &[&a, &b])?;
    let (mut leader, standby) = if a_leads { (a, b) } else { (b, a) };

    let checked = async {
        let lease = leases.get(&lease_name).await.context("the Lease")?;
        let holder = lease.spec.and_then(|s| s.holder_identity);
        ensure!(
            holder.as_deref() == Some(leader.identity.as_str()),
            "Lease holder {holder:?}, but {} reports leader",
            leader.identity
        );
        for op in [&leader, &standby] {
            let (code, body) = op.get("/readyz").await?;
            ensure!(
                code == 200,
                "/readyz of {} answered {code}: {body}",
                op.identity
            );
        }
        c.kubectl()
            .args(["apply", "-n", &ns.name, "-f", "-"])
            .stdin(fixtures::router("first"))
            .ok()
            .await?;
        wait_ready(&routers, "first").await?;
        let standby_reconciles = standby.metrics().await?.sum(RECONCILES);
        ensure!(
            standby_reconciles == 0.0,
            "the standby {} reconciled ({RECONCILES} = {standby_reconciles})",
            standby.identity
        );
        anyhow::Ok(())
    }
    .await;
    with_logs(checked, &[&leader, &standby])?;

    // The leader crashes; the standby takes over once the Lease expires.
    leader.kill().await?;
    let killed = Instant::now();
    let took_over = async {
        eventually(
            "the standby to become leader",
            Duration::from_secs(45),
            || async {
                let l = leader_gauge(&standby).await?;
                ensure!(
                    l == 1.0,
                    "switchyard_operator_leader of {} is {l}",
                    standby.identity
                );
                Ok(())
            },
        )
        .await?;
        let took = killed.elapsed();
        eprintln!("[e2e] standby took over {took:?} after the leader was killed");
        let holder = leases
            .get(&lease_name)
            .await?
            .spec
            .and_then(|s| s.holder_identity);
        ensure!(
            holder.as_deref() == Some(standby.identity.as_str()),
            "Lease holder {holder:?} after the failover"
        );
        c.kubectl()
            .args(["apply", "-n", &ns.name, "-f", "-"])
            .stdin(fixtures::router("second"))
            .ok()
            .await?;
        wait_ready(&routers, "second").await?;
        wait_rolled_out(&client, &ns.name, "second-router", 1).await?;
        let (code, _) = standby.get("/readyz").await?;
        ensure!(code == 200, "/readyz of the new leader answered {code}");
        anyhow::Ok(())
    }
    .await;
    with_logs(took_over, &[&leader, &standby])?;
    let code = standby.stop().await?;
    ensure!(
        code == Some(0),
        "the operator exited with {code:?} on SIGTERM (want 0)"
    );
    Ok(())
}
