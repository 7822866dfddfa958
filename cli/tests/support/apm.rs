//! The APM the tracing tests export to, as production runs it: an OpenTelemetry Collector (OTLP
//! receiver, batch processor, Zipkin exporter) in front of a Zipkin server, both on 127.0.0.1.
//! `e2e/apm/build-tools` builds or fetches them into the tool folder on first use.

use super::{free_port, http, wait_for};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// What `e2e/apm/build-tools` installed: `OTELCOL`, `ZIPKIN_JAR`, `CHROMIUM`, `TMUX`.
pub fn tools() -> Result<&'static HashMap<String, PathBuf>, String> {
    static TOOLS: OnceLock<Result<HashMap<String, PathBuf>, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let script = super::repo_file("e2e/apm/build-tools");
            let out = Command::new(&script)
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("{}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!("{} failed ({})", script.display(), out.status));
            }
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), PathBuf::from(v)))
                .collect())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// One tool's path.
pub fn tool(key: &str) -> Result<PathBuf, String> {
    tools()?
        .get(key)
        .cloned()
        .ok_or_else(|| format!("e2e/apm/build-tools printed no {key}="))
}

/// A child process killed when dropped, its output in a log file.
pub struct Proc {
    pub name: &'static str,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Result<Proc, String> {
        let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        Ok(Proc { name, child, log })
    }

    /// The last lines of its log, for failure messages.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            other => Err(format!(
                "{} exited ({other:?}):\n{}",
                self.name,
                self.tail()
            )),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running collector + Zipkin; both stop when this is dropped.
pub struct Apm {
    /// `http://127.0.0.1:<port>`: the collector's OTLP/gRPC receiver.
    pub otlp_endpoint: String,
    /// Zipkin's port (API and UI).
    pub zipkin_port: u16,
    collector: Proc,
    zipkin: Proc,
    _dir: tempfile::TempDir,
}

impl Apm {
    /// Starts Zipkin, then the collector, and waits until both serve.
    pub fn start() -> Result<Apm, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (zipkin_port, otlp_port) = (free_port(), free_port());
        let mut zipkin = Proc::spawn(
            "zipkin",
            Command::new("java")
                .arg("-Xmx512m")
                // All three, or Zipkin drops its default port list and binds a random one.
                .arg("-Darmeria.ports[0].ip=127.0.0.1")
                .arg(format!("-Darmeria.ports[0].port={zipkin_port}"))
                .arg("-Darmeria.ports[0].protocols[0]=http")
                .arg("-jar")
                .arg(tool("ZIPKIN_JAR")?)
                .current_dir(dir.path()),
            dir.path().join("zipkin.log"),
        )?;
        let config = dir.path().join("collector.yaml");
        std::fs::write(&config, collector_config(otlp_port, zipkin_port))
            .map_err(|e| e.to_string())?;
        let mut collector = Proc::spawn(
            "collector",
            Command::new(tool("OTELCOL")?).arg("--config").arg(&config),
            dir.path().join("collector.log"),
        )?;
        wait_for("Zipkin /health UP", Duration::from_secs(90), || {
            zipkin.alive()?;
            let a = http::get(zipkin_port, "/health")?;
            (a.status == 200 && a.body.contains("UP"))
                .then_some(())
                .ok_or(a.body)
        })?;
        wait_for("collector's OTLP port", Duration::from_secs(30), || {
            collector.alive()?;
            std::net::TcpStream::connect(("127.0.0.1", otlp_port))
                .map(drop)
                .map_err(|e| e.to_string())
        })?;
        Ok(Apm {
            otlp_endpoint: format!("http://127.0.0.1:{otlp_port}"),
            zipkin_port,
            collector,
            zipkin,
            _dir: dir,
        })
    }

    /// The logs' tails, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- collector ---\n{}\n--- zipkin ---\n{}",
            self.collector.tail(),
            self.zipkin.tail()
        )
    }

    /// Zipkin's trace page of `trace_id`.
    pub fn trace_page(&self, trace_id: &str) -> String {
        format!(
            "http://127.0.0.1:{}/zipkin/traces/{trace_id}",
            self.zipkin_port
        )
    }
}

/// The collector's config: OTLP/gRPC in, batches of at most 100 ms, Zipkin JSON v2 out; no
/// telemetry port of its own (parallel runs would fight over :8888).
fn collector_config(otlp_port: u16, zipkin_port: u16) -> String {
    format!(
        r#"receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
    timeout: 100ms
exporters:
  zipkin:
    endpoint: http://127.0.0.1:{zipkin_port}/api/v2/spans
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [zipkin]
"#
    )
}
