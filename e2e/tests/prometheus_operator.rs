//! The chart's Prometheus Operator objects (`monitoring.*`: a ServiceMonitor, two PodMonitors, a
//! PrometheusRule) applied to the real API server with the Prometheus Operator's CRDs installed,
//! from the `github.com/prometheus-operator/prometheus-operator` module (the version in
//! `e2e/cluster/versions.env`), so a field the CRDs do not know, or one they would prune, fails here.
//! No operator needed.

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use switchyard_e2e::{Cmd, KUBE_VERSION, RELEASE, TestNamespace, charts_dir, cluster, repo_root};

/// The CRDs the chart's objects need.
const CRDS: [&str; 3] = ["servicemonitors", "podmonitors", "prometheusrules"];

/// `PROMETHEUS_OPERATOR_VERSION` of `e2e/cluster/versions.env`.
fn operator_version() -> Result<String> {
    let env = std::fs::read_to_string(repo_root().join("e2e/cluster/versions.env"))?;
    env.lines()
        .find_map(|l| l.strip_prefix("PROMETHEUS_OPERATOR_VERSION="))
        .map(|v| v.trim().to_owned())
        .context("no PROMETHEUS_OPERATOR_VERSION in versions.env")
}

/// The module's source folder, downloaded from the Go module proxy (cached by Go afterwards). The CRD
/// YAML ships inside it, under `example/prometheus-operator-crd/`.
async fn operator_module(version: &str) -> Result<PathBuf> {
    let out = Cmd::new("go")
        .args(["mod", "download", "-json"])
        .arg(format!(
            "github.com/prometheus-operator/prometheus-operator@{version}"
        ))
        .env("GOFLAGS", "-mod=mod")
        .cwd(std::env::temp_dir())
        .timeout(Duration::from_secs(600))
        .ok()
        .await?;
    let info: Value =
        serde_json::from_str(&out.stdout).context("`go mod download -json` output")?;
    let dir = info["Dir"]
        .as_str()
        .with_context(|| format!("`go mod download` gave no Dir: {}", out.stdout))?;
    Ok(PathBuf::from(dir))
}

/// Installs the CRDs (server-side, so reruns and other test processes agree), waits until the API
/// server serves them, and checks they are the module's version.
async fn install_crds(module: &Path, version: &str) -> Result<()> {
    let c = cluster().await?;
    let mut apply = c
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts"])
        .args(["--field-manager", "switchyard-e2e"]);
    for name in CRDS {
        let file = module.join(format!(
            "example/prometheus-operator-crd/monitoring.coreos.com_{name}.yaml"
        ));
        ensure!(file.is_file(), "{} is not in the module", file.display());
        apply = apply.arg("-f").arg(file);
    }
    apply.ok().await?;
    let names: Vec<String> = CRDS
        .iter()
        .map(|n| format!("crd/{n}.monitoring.coreos.com"))
        .collect();
    c.kubectl()
        .args(["wait", "--for=condition=Established", "--timeout=60s"])
        .args(&names)
        .timeout(Duration::from_secs(90))
        .ok()
        .await?;
    let out = c
        .kubectl()
        .args([
            "get",
            "crd/servicemonitors.monitoring.coreos.com",
            "-o",
            "json",
        ])
        .ok()
        .await?;
    let crd: Value = serde_json::from_str(&out.stdout)?;
    let served = &crd["metadata"]["annotations"]["operator.prometheus.io/version"];
    let want = version.trim_start_matches('v');
    ensure!(
        served == want,
        "the cluster's ServiceMonitor CRD is {served}, not {want}"
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
    let version = operator_version()?;
    let module = operator_module(&version).await?;
    install_crds(&module, &version).await?;
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
