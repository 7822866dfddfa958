//! The chart's Prometheus Operator objects (`monitoring.*`: a ServiceMonitor, two PodMonitors, a
//! PrometheusRule) applied to the real API server with the Prometheus Operator's CRDs installed,
//! from the `github.com/prometheus-operator/prometheus-operator` module (the version in
//! `e2e/cluster/versions.env`), so a field the CRDs do not know, or one they would prune, fails here.
//! No operator needed.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use switchyard_e2e::{Cmd, KUBE_VERSION, RELEASE, TestNamespace, charts_dir, cluster, module_crds};

/// The CRDs the chart's objects need.
const CRDS: [&str; 3] = ["servicemonitors", "podmonitors", "prometheusrules"];

/// Installs the module's CRDs and checks the API server serves this version of them.
async fn install_crds(version: &str) -> Result<()> {
    let module = module_crds::download(
        "github.com/prometheus-operator/prometheus-operator",
        version,
    )
    .await?;
    let files = module_crds::files(
        &module.join("example/prometheus-operator-crd"),
        "monitoring.coreos.com_",
        &CRDS,
    );
    let names: Vec<String> = CRDS
        .iter()
        .map(|n| format!("{n}.monitoring.coreos.com"))
        .collect();
    let crd = module_crds::install(&files, &names).await?;
    let served = &crd["metadata"]["annotations"]["operator.prometheus.io/version"];
    let want = version.trim_start_matches('v');
    ensure!(
        served == want,
        "the cluster's {} CRD is {served}, not {want}",
        names[0]
    );
    Ok(())
}

/// The chart's monitoring objects, every one enabled, rendered for namespace `ns`.
async fn monitoring_objects(ns: &str) -> Result<Vec<Value>> {
    let out = Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join("switchyard"))
        .args(["--namespace", ns])
        .args(["--kube-version", KUBE_VERSION])
        .args(["--set", "monitoring.serviceMonitor.enabled=true"])
        .args(["--set", "monitoring.podMonitors.enabled=true"])
        .args(["--set", "monitoring.rules.enabled=true"])
        .args(["--set", "monitoring.labels.release=prometheus"])
        .ok()
        .await?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&out.stdout).context("parsing helm template output")?;
    let objects: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["apiVersion"] == "monitoring.coreos.com/v1")
        .collect();
    ensure!(objects.len() == 4, "{objects:#?}");
    Ok(objects)
}

#[tokio::test]
async fn monitoring_objects_apply_to_the_prometheus_operator_crds_unchanged() -> Result<()> {
    let version = module_crds::pinned_version("PROMETHEUS_OPERATOR_VERSION")?;
    install_crds(&version).await?;
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "monitors").await?;
    let objects = monitoring_objects(&ns.name).await?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    // kubectl's default field validation is strict: a field the CRD does not know is refused.
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(list.to_string())
        .ok()
        .await
        .context("the chart's monitoring objects")?;

    // Read back as stored: nothing pruned, nothing changed.
    for o in &objects {
        let kind = o["kind"].as_str().context("kind")?;
        let name = o["metadata"]["name"].as_str().context("name")?;
        let out = c
            .kubectl()
            .args(["get", "-n", &ns.name, kind, name, "-o", "json"])
            .ok()
            .await?;
        let stored: Value = serde_json::from_str(&out.stdout)?;
        ensure!(
            stored["spec"] == o["spec"],
            "{kind}/{name} stored differs from rendered:\nstored {}\nrendered {}",
            stored["spec"],
            o["spec"]
        );
    }

    // The CRDs' schemas are in force (so a misspelt field above would have failed): refused, named.
    let mut wrong = objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .context("no ServiceMonitor")?
        .clone();
    wrong["metadata"]["name"] = "misspelt".into();
    wrong["spec"]["endpoints"][0]["honourLabels"] = true.into();
    let refused = c
        .kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(wrong.to_string())
        .fails()
        .await?;
    ensure!(
        refused.combined().contains("honourLabels"),
        "refusal does not name the field:\n{}",
        refused.combined()
    );
    Ok(())
}
