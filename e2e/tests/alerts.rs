//! The chart's PrometheusRule against real promtool (built from the Go module proxy): its rules
//! pass `promtool check rules`, every alert fires in one case and stays quiet in another under
//! `promtool test rules` (e2e/prometheus/alerts.test.yaml), each recording rule's series is checked
//! there (the roles kept apart), and each alert links to its own runbook section in docs/alerts.md.
//! No cluster needed.

use anyhow::{Context, Result, ensure};
use std::collections::BTreeSet;
use std::path::PathBuf;
use switchyard_e2e::{Cmd, prometheus, repo_root, unique_suffix, work_dir};

/// The alerts the issue asks for (shedding, no endpoints, old durable backlog, certificate or CA
/// expiry, no leader, reconcile errors, version skew), by name.
const ALERTS: [&str; 10] = [
    "SwitchyardShedding",
    "SwitchyardNoEndpoints",
    "SwitchyardDurableBacklogOld",
    "SwitchyardDurableBacklogStalled",
    "SwitchyardMeshCAExpiringSoon",
    "SwitchyardMeshIssuerExpiringSoon",
    "SwitchyardSidecarCertificateExpiring",
    "SwitchyardNoLeader",
    "SwitchyardReconcileErrors",
    "SwitchyardSidecarVersionSkew",
];

/// A fresh folder holding the rendered rules as `rules.yaml`.
async fn rules_dir(extra: &[&str]) -> Result<(PathBuf, String)> {
    let dir = work_dir()
        .join("promtool")
        .join(format!("rules-{}", unique_suffix()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let rules = prometheus::rendered_rules(extra).await?;
    std::fs::write(dir.join("rules.yaml"), &rules)?;
    Ok((dir, rules))
}

#[tokio::test]
async fn rendered_rules_pass_promtool_check() -> Result<()> {
    let tools = prometheus::tools().await?;
    let (dir, rules) = rules_dir(&[]).await?;
    let out = Cmd::new(tools.join("promtool").to_string_lossy().as_ref())
        .args(["check", "rules"])
        .arg(dir.join("rules.yaml"))
        .ok()
        .await?;
    ensure!(
        out.stdout.contains("SUCCESS"),
        "promtool check rules: {}",
        out.combined()
    );
    let names: BTreeSet<String> = prometheus::alert_names(&rules)?.into_iter().collect();
    let wanted: BTreeSet<String> = ALERTS.iter().map(|s| (*s).to_owned()).collect();
    ensure!(names == wanted, "alerts {names:?}, wanted {wanted:?}");

    // A bound the user sets reaches the queries (rendered into PromQL, still valid).
    let (dir, rules) = rules_dir(&["monitoring.rules.durableBacklogMaxAgeSeconds=3600"]).await?;
    ensure!(
        rules.contains(r#""for":"3600s""#)
            && rules.contains("> 3600")
            && !rules.contains("DURABLE_BACKLOG"),
        "{rules}"
    );
    Cmd::new(tools.join("promtool").to_string_lossy().as_ref())
        .args(["check", "rules"])
        .arg(dir.join("rules.yaml"))
        .ok()
        .await?;
    Ok(())
}

#[tokio::test]
async fn every_alert_fires_and_stays_quiet_under_promtool_test() -> Result<()> {
    let tools = prometheus::tools().await?;
    let (dir, rules) = rules_dir(&[]).await?;
    let cases = repo_root().join("e2e/prometheus/alerts.test.yaml");
    let text = std::fs::read_to_string(&cases).with_context(|| cases.display().to_string())?;
    std::fs::write(dir.join("alerts.test.yaml"), &text)?;

    // Each alert has an evaluation expecting it to fire and one expecting silence.
    let tests: serde_json::Value = serde_saphyr::from_str(&text).context("alerts.test.yaml")?;
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    let mut evaluated = BTreeSet::new();
    for t in tests["tests"].as_array().context("no tests")? {
        for case in t["promql_expr_test"].as_array().into_iter().flatten() {
            evaluated.insert(case["expr"].as_str().context("expr")?.to_owned());
        }
        for case in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"].as_str().context("alertname")?.to_owned();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                fires.insert(name);
            }
        }
    }
    for alert in prometheus::alert_names(&rules)? {
        ensure!(fires.contains(&alert), "no case where {alert} fires");
        ensure!(quiet.contains(&alert), "no case where {alert} stays quiet");
    }
    // And each recording rule has its series checked.
    let all: serde_json::Value = serde_json::from_str(&rules)?;
    for record in all["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["record"].as_str())
    {
        ensure!(
            evaluated.contains(record),
            "no promql_expr_test of {record}"
        );
    }

    let out = Cmd::new(tools.join("promtool").to_string_lossy().as_ref())
        .args(["test", "rules"])
        .arg(dir.join("alerts.test.yaml"))
        .cwd(&dir)
        .output()
        .await?;
    ensure!(out.success(), "promtool test rules:\n{}", out.combined());
    Ok(())
}

#[tokio::test]
async fn every_alert_links_to_its_runbook_section() -> Result<()> {
    let url = "https://docs.example/switchyard/alerts.html";
    let rules =
        prometheus::rendered_rules(&[&format!("monitoring.rules.runbookUrl={url}")]).await?;
    let v: serde_json::Value = serde_json::from_str(&rules)?;
    let docs = std::fs::read_to_string(repo_root().join("docs/alerts.md"))?;
    let headings: BTreeSet<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(str::trim)
        .collect();
    for rule in v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter(|r| r.get("alert").is_some())
    {
        let name = rule["alert"].as_str().context("alert name")?;
        let link = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        ensure!(
            link == format!("{url}#{}", name.to_lowercase()),
            "{name}: runbook_url {link:?}"
        );
        ensure!(
            headings.contains(name),
            "docs/alerts.md has no `## {name}` section"
        );
        for key in ["summary", "description"] {
            ensure!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}: no {key}"
            );
        }
        ensure!(
            rule["labels"]["severity"].is_string(),
            "{name}: no severity label"
        );
    }
    Ok(())
}
