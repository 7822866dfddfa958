//! Prometheus and promtool for the chart's rule tests and the scrape test: built from the Go module
//! proxy into the tool folder by `e2e/cluster/build-prometheus` on first use (cached afterwards),
//! and the chart's PrometheusRule as Prometheus reads rule files.

use crate::Cmd;
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::time::Duration;

/// The folder holding `prometheus` and `promtool`, built first when missing.
pub async fn tools() -> Result<PathBuf> {
    let script = crate::repo_root().join("e2e/cluster/build-prometheus");
    let built = Cmd::new(script.to_string_lossy().as_ref())
        .timeout(Duration::from_secs(30 * 60))
        .ok()
        .await?;
    let dir = PathBuf::from(built.stdout.trim());
    for bin in ["prometheus", "promtool"] {
        ensure!(
            dir.join(bin).is_file(),
            "build-prometheus left no {bin} in {}",
            dir.display()
        );
    }
    Ok(dir)
}

/// The rule groups of the PrometheusRule `helm template` renders with `--set` pairs `extra` (the
/// rules enabled), as a rule file's text (JSON, which Prometheus reads as YAML).
pub async fn rendered_rules(extra: &[&str]) -> Result<String> {
    let mut cmd = Cmd::helm_offline()
        .arg("template")
        .arg("x")
        .arg(crate::charts_dir().join("switchyard"))
        .args(["--set", "monitoring.rules.enabled=true"])
        .args(["-s", "templates/prometheus-rule.yaml"]);
    for pair in extra {
        cmd = cmd.args(["--set", pair]);
    }
    let out = cmd.ok().await?;
    let rule: serde_json::Value =
        serde_saphyr::from_str(&out.stdout).context("the rendered PrometheusRule is not YAML")?;
    ensure!(
        rule["kind"] == "PrometheusRule" && rule["apiVersion"] == "monitoring.coreos.com/v1",
        "not a PrometheusRule: {rule}"
    );
    let groups = &rule["spec"]["groups"];
    ensure!(groups.is_array(), "no spec.groups in {rule}");
    Ok(serde_json::json!({ "groups": groups }).to_string())
}

/// Every alert name of a rule file's text.
pub fn alert_names(rules: &str) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_saphyr::from_str(rules).context("rules are not YAML")?;
    Ok(v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect())
}
