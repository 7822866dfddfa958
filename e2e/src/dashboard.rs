//! The chart's Grafana dashboard (`charts/switchyard/dashboards/switchyard.json`) and the checks
//! its tests make: the metric and label names of its queries against what real processes export
//! on `/metrics`. Pure, but for `rendered_dashboard` (helm).

use crate::Cmd;
use anyhow::{Context, Result, ensure};
use std::collections::{BTreeMap, BTreeSet};

/// Labels the scrape adds (Kubernetes service discovery), not the processes.
pub const TARGET_LABELS: [&str; 2] = ["namespace", "pod"];

/// Exported series names and, per series, the label names seen on its samples.
#[derive(Default, Debug)]
pub struct Exported(pub BTreeMap<String, BTreeSet<String>>);

impl Exported {
    /// Adds one `/metrics` text: `# TYPE` lines give every family (also those without samples yet).
    pub fn add(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let series: Vec<String> = match kind {
                    "counter" => vec![format!("{name}_total")],
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .map(|s| format!("{name}{s}"))
                        .collect(),
                    _ => vec![name.to_owned()],
                };
                for s in series {
                    self.0.entry(s).or_default();
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                let labels = self.0.entry(line[..end].to_owned()).or_default();
                if let Some(body) = line[end..]
                    .strip_prefix('{')
                    .and_then(|b| b.split('}').next())
                {
                    for pair in body.split(',') {
                        if let Some((k, _)) = pair.split_once('=') {
                            labels.insert(k.trim().to_owned());
                        }
                    }
                }
            }
        }
    }
}

/// The `switchyard_*` names of a PromQL expression.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("switchyard_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// The label names of a PromQL expression: in `by (...)` and in `{...}` matchers.
pub fn label_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (open, close) in [("by (", ')'), ("{", '}')] {
        for part in expr.split(open).skip(1) {
            let inside = part.split(close).next().unwrap_or("");
            for item in inside.split(',') {
                let key = item
                    .split(['=', '!'])
                    .next()
                    .unwrap_or("")
                    .trim()
                    .trim_end_matches('~');
                if !key.is_empty() {
                    out.insert(key.to_owned());
                }
            }
        }
    }
    out
}

/// Every `expr` of the dashboard JSON.
pub fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(e) = o.get("expr").and_then(|e| e.as_str()) {
                    out.push(e.to_owned());
                }
                stack.extend(o.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}

/// The dashboard as the chart ships it: the ConfigMap `helm template` renders when enabled.
pub async fn rendered_dashboard() -> Result<serde_json::Value> {
    let chart = crate::charts_dir().join("switchyard");
    let out = Cmd::helm_offline()
        .arg("template")
        .arg("x")
        .arg(&chart)
        .args([
            "--set",
            "grafanaDashboard.enabled=true",
            "-s",
            "templates/grafana-dashboard.yaml",
        ])
        .ok()
        .await?;
    let cm: serde_json::Value =
        serde_saphyr::from_str(&out.stdout).context("the rendered ConfigMap is not YAML")?;
    ensure!(
        cm["metadata"]["labels"]["grafana_dashboard"] == "1",
        "no grafana_dashboard label: {cm}"
    );
    let text = cm["data"]["switchyard.json"]
        .as_str()
        .context("no data.switchyard.json in the ConfigMap")?;
    serde_json::from_str(text).context("the dashboard is not JSON")
}

/// The dashboard file as committed.
pub fn dashboard_file() -> Result<serde_json::Value> {
    let path = crate::charts_dir().join("switchyard/dashboards/switchyard.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
}

/// Whose metrics a query reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exporter {
    /// `switchyard_operator_*`.
    Operator,
    /// The other `switchyard_*`: router and manager sidecars.
    Sidecars,
}

fn exporter_of(name: &str) -> Exporter {
    if name.starts_with("switchyard_operator_") {
        Exporter::Operator
    } else {
        Exporter::Sidecars
    }
}

/// The problems of the queries reading `who`'s metrics, against what those processes `exported`:
/// a name none exports, a label no sample of the query's metrics carries. A query naming no
/// `switchyard_` metric at all is a problem too (of the sidecars' check).
pub fn problems(exprs: &[String], exported: &Exported, who: Exporter) -> Vec<String> {
    let mut problems = Vec::new();
    for expr in exprs {
        let names = metric_names(expr);
        if names.is_empty() {
            if who == Exporter::Sidecars {
                problems.push(format!("no switchyard metric in {expr:?}"));
            }
            continue;
        }
        if !names.iter().all(|n| exporter_of(n) == who) {
            continue;
        }
        let mut labels_seen = BTreeSet::new();
        for name in &names {
            match exported.0.get(name) {
                None => problems.push(format!("{name} (in {expr:?}) is exported by no process")),
                Some(labels) => labels_seen.extend(labels.iter().cloned()),
            }
        }
        for label in label_names(expr) {
            if !TARGET_LABELS.contains(&label.as_str()) && !labels_seen.contains(&label) {
                problems.push(format!(
                    "label {label} (in {expr:?}) is on no sample of {names:?}"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promql_names_and_labels_are_found() {
        let e = r#"histogram_quantile(0.99, sum by (le, event) (rate(switchyard_request_duration_seconds_bucket{namespace=~"$ns",status!="200"}[5m]))) / sum(switchyard_in_flight)"#;
        assert_eq!(
            metric_names(e),
            BTreeSet::from([
                "switchyard_request_duration_seconds_bucket".to_owned(),
                "switchyard_in_flight".to_owned()
            ])
        );
        assert_eq!(
            label_names(e),
            BTreeSet::from(["le", "event", "namespace", "status"].map(str::to_owned))
        );
        let mut x = Exported::default();
        x.add("# TYPE switchyard_in_flight gauge\nswitchyard_request_duration_seconds_bucket{event=\"a\",le=\"1\"} 1\n");
        assert_eq!(
            problems(&[e.to_owned()], &x, Exporter::Sidecars),
            vec![format!(
                "label status (in {e:?}) is on no sample of {:?}",
                metric_names(e)
            )]
        );
    }
}
