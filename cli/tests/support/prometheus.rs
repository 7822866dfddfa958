//! A real Prometheus scraping sidecars on loopback: built from the Go module proxy by
//! `e2e/cluster/build-prometheus` on first use (cached in `.tools/bin`), run with its store in a
//! temporary folder, queried through its HTTP API, and killed when dropped.

use super::{free_port, http, repo_file, wait_for};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use switchyard_e2e::prometheus::Sample;
use switchyard_e2e::prometheus::{samples, url_encode};

/// A Prometheus process; killed when dropped.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// The folder holding `prometheus` and `promtool`, built first when missing.
pub fn tools() -> Result<PathBuf, String> {
    let out = Command::new(repo_file("e2e/cluster/build-prometheus"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("e2e/cluster/build-prometheus: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "e2e/cluster/build-prometheus failed: {}",
            out.status
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

impl Prometheus {
    /// Starts Prometheus scraping each `(pod, admin port)` every second, with the labels the
    /// chart's PodMonitors give (`namespace` "local", `pod`), and waits until it is ready.
    pub fn start(targets: &[(String, u16)]) -> Result<Prometheus, String> {
        let bin = tools()?.join("prometheus");
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut config = String::from(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: sidecars\n    static_configs:\n",
        );
        for (pod, port) in targets {
            config.push_str(&format!(
                "      - targets: ['127.0.0.1:{port}']\n        labels: {{namespace: local, pod: {pod}}}\n"
            ));
        }
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).map_err(|e| e.to_string())?;
        let port = free_port();
        let log =
            std::fs::File::create(dir.path().join("prometheus.log")).map_err(|e| e.to_string())?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let p = Prometheus { child, port, dir };
        wait_for("prometheus ready", Duration::from_secs(60), || {
            let a = http::get(port, "/-/ready")?;
            (a.status == 200).then_some(()).ok_or(format!("{a:?}"))
        })
        .map_err(|e| format!("{e}\n{}", p.log()))?;
        Ok(p)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The instant vector `promql` evaluates to now (an error names what Prometheus said).
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let body = format!("query={}", url_encode(promql));
        let a = http::request(
            self.port,
            "POST",
            "/api/v1/query",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            &body,
        )?;
        samples(promql, &a.body)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
