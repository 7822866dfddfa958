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

/// A Prometheus scraping targets on loopback every second, its store in a fresh folder under the
/// work dir; killed when dropped.
pub struct Prometheus {
    child: tokio::process::Child,
    port: u16,
    log: PathBuf,
}

/// One series of a query's answer: its labels and value.
pub type Sample = (std::collections::BTreeMap<String, String>, f64);

impl Prometheus {
    /// Starts Prometheus scraping `127.0.0.1:<port>` of each `(job, port)` every second, and waits
    /// until it is ready.
    pub async fn start(targets: &[(&str, u16)]) -> Result<Prometheus> {
        let bin = tools().await?.join("prometheus");
        let dir = crate::work_dir()
            .join("prometheus")
            .join(format!("run-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let mut config = String::from(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n",
        );
        for (job, port) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            ));
        }
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config)?;
        let port = crate::operator::free_port()?;
        let log = dir.join("prometheus.log");
        let child = tokio::process::Command::new(&bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| bin.display().to_string())?;
        let p = Prometheus { child, port, log };
        crate::eventually("prometheus ready", Duration::from_secs(60), || async {
            let (code, body) = crate::operator::http_get(port, "/-/ready").await?;
            ensure!(code == 200, "{code} {body}");
            Ok(())
        })
        .await
        .with_context(|| p.log_tail())?;
        Ok(p)
    }

    /// The end of its log.
    pub fn log_tail(&self) -> String {
        crate::tail_file(&self.log, 20)
    }

    /// The instant vector `promql` evaluates to now.
    pub async fn query(&self, promql: &str) -> Result<Vec<Sample>> {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        let (code, body) = crate::operator::http_get(self.port, &path).await?;
        samples(promql, &body).map_err(|e| anyhow::anyhow!("{code}: {e}"))
    }
}

/// The series of an instant query's answer (`/api/v1/query`), or what Prometheus said instead.
pub fn samples(promql: &str, body: &str) -> std::result::Result<Vec<Sample>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("{promql}: {body}"));
    }
    Ok(v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let labels = s["metric"]
                .as_object()?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect();
            // [time, "value"]; NaN and ±Inf come as strings Rust parses too.
            let value = s["value"][1].as_str()?.parse().ok()?;
            Some((labels, value))
        })
        .collect())
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Percent-encoding of a query parameter: unreserved bytes as they are, the rest as %XX.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
