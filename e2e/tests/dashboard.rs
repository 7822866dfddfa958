//! The chart's Grafana dashboard against what the operator really exports: `helm template` renders
//! the opt-in ConfigMap, and every `switchyard_operator_*` metric its queries name must be on the
//! `/metrics` of a real operator that has done the work each one counts (reconciles, an invalid
//! spec, a failed apply, an autoscaler decision from load reports), with the labels the queries
//! use. The sidecars' half of the dashboard is checked by `cli/tests/dashboard.rs`.

use anyhow::{Result, bail, ensure};
use futures::SinkExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_e2e::dashboard::{self, Exported, Exporter};
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::{
    Operator, OperatorOpts, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

/// A Manager the autoscaler scales up at once under the load below.
const SCALING: &str = "  replicas: 1
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 3
    targets:
      noop: {targetInFlight: 10}
    scaleUp: {stableWindow: 4s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 60s}
";

/// Load reports for `noop` (40 in flight against a target of 10), every 500 ms until aborted.
fn push_load(cp: String, ns: String) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut client = ControlPlaneClient::connect(cp).await?;
        let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(4);
        let call = tokio::spawn(async move { client.report_load(rx).await });
        loop {
            let report = LoadReport {
                pod: "edge-router-dashboard".into(),
                namespace: ns.clone(),
                role: "router".into(),
                owner: "edge".into(),
                timestamp_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                window_ms: 500,
                events: vec![EventLoad {
                    event_type: "noop".into(),
                    in_flight: 40,
                    arrivals_per_second: 400.0,
                    latency_p50_ms: 5.0,
                    latency_p99_ms: 20.0,
                    ..EventLoad::default()
                }],
            };
            if tx.send(report).await.is_err() {
                let answer = call.await?;
                bail!("the report stream ended: {answer:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_queries_name_what_the_operator_exports() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    // First: it builds the tools (helm among them) on a fresh machine.
    let c = cluster().await?;
    let exprs = dashboard::queries(&dashboard::rendered_dashboard().await?);
    ensure!(
        exprs.len() >= 20,
        "only {} queries in the dashboard",
        exprs.len()
    );
    let ns = TestNamespace::create(c, "dash").await?;
    let cp_port = free_port()?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(cp_port),
            ..OperatorOpts::new("e2e-dashboard")
        },
    )
    .await?;
    // Reconciles; an invalid spec (two routes on one method and path: valid to the API server,
    // not to the operator); a failed apply (a container name the API server refuses in the
    // Deployment); an autoscaler decision.
    let dup = fixtures::router("dup").replace(
        "      http: {method: GET, path: /noop}\n",
        "      http: {method: GET, path: /noop}\n    - event: echo\n      http: {method: GET, path: /noop}\n",
    );
    let broken = fixtures::manager("broken", "edge", "[echo]", "")
        .replace("- name: app", "- name: Not_A_DNS_Label");
    ensure!(
        broken.contains("Not_A_DNS_Label"),
        "the Manager fixture changed shape"
    );
    let manifests = [
        fixtures::router("edge"),
        fixtures::manager("hot", "edge", "[noop]", SCALING),
        dup,
        broken,
    ]
    .join("---\n");
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    let pusher = push_load(format!("http://127.0.0.1:{cp_port}"), ns.name.clone());
    let wanted = [
        "switchyard_operator_reconciles_total",
        "switchyard_operator_reconcile_duration_seconds_bucket",
        "switchyard_operator_invalid_specs_total",
        "switchyard_operator_reconcile_failures_total",
        "switchyard_operator_scale_decisions_total",
    ];
    let seen = eventually("the operator to count its work", timeout(), || async {
        let m = op.metrics().await?;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| m.samples(w).is_empty())
            .collect();
        ensure!(missing.is_empty(), "no samples yet of {missing:?}");
        Ok(m)
    })
    .await;
    pusher.abort();
    let metrics = seen?;
    let mut exported = Exported::default();
    exported.add(&metrics.0);
    let problems = dashboard::problems(&exprs, &exported, Exporter::Operator);
    if !problems.is_empty() {
        bail!(
            "{} problem(s):\n{}\nexported: {:#?}",
            problems.len(),
            problems.join("\n"),
            exported.0
        );
    }
    op.stop().await?;
    Ok(())
}
