//! PROTOTYPE: the full path measured with each hop: `wrk -t1` -> router-side relay (HTTP/1.1 front door)
//! -> hop -> manager-side relay -> example app, and back. One app for the whole run; for each round and
//! case a fresh pair of relays per hop (frames, then h2), so their peak RSS is the case's own. The
//! parsing of wrk's report is pure; the rest is a thin process shell.

use super::Proto;
use super::compare::{Runner, load_average, median, per_round_ratio};
use crate::procs;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// One full-path case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Name in the table.
    pub label: String,
    /// Path on the front door.
    pub path: String,
    /// Bytes POSTed, when the case uploads.
    pub post_bytes: Option<usize>,
    /// Connections.
    pub concurrency: usize,
    /// Body bytes each request moves, both directions together (for MiB/s).
    pub moved: usize,
}

/// `/noop` at c=1 and c=32, a 1 MiB answer from the app at c=8, and 1 MiB echoed (in and out) at c=8.
pub fn default_cases(bytes: usize) -> Vec<Case> {
    vec![
        Case {
            label: "noop c=1".into(),
            path: "/noop".into(),
            post_bytes: None,
            concurrency: 1,
            moved: 0,
        },
        Case {
            label: "noop c=32".into(),
            path: "/noop".into(),
            post_bytes: None,
            concurrency: 32,
            moved: 0,
        },
        Case {
            label: format!("download {}KiB c=8", bytes / 1024),
            path: format!("/bytes/{bytes}"),
            post_bytes: None,
            concurrency: 8,
            moved: bytes,
        },
        Case {
            label: format!("echo {}KiB both ways c=8", bytes / 1024),
            path: "/echo".into(),
            post_bytes: Some(bytes),
            concurrency: 8,
            moved: 2 * bytes,
        },
    ]
}

/// What wrk reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Wrk {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Requests completed.
    pub requests: f64,
    /// Non-2xx answers plus socket errors.
    pub errors: f64,
}

fn micros(v: &str) -> Option<f64> {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n,
        "ms" => n * 1e3,
        "s" => n * 1e6,
        "m" => n * 60e6,
        _ => return None,
    })
}

/// Parses `wrk --latency` output.
pub fn parse_wrk(out: &str) -> Option<Wrk> {
    let mut w = Wrk::default();
    for line in out.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("50%"), Some(v)) => w.p50_us = micros(v)?,
            (Some("99%"), Some(v)) => w.p99_us = micros(v)?,
            (Some("Requests/sec:"), Some(v)) => w.rps = v.parse().ok()?,
            (Some(n), Some("requests")) => w.requests = n.parse().ok()?,
            (Some("Non-2xx"), _) => {
                w.errors += line.rsplit(' ').next()?.parse::<f64>().ok()?;
            }
            (Some("Socket"), Some("errors:")) => {
                for part in line.trim_start_matches("Socket errors:").split(',') {
                    let n = part.split_whitespace().last()?;
                    w.errors += n.parse::<f64>().ok()?;
                }
            }
            _ => {}
        }
    }
    (w.rps > 0.0).then_some(w)
}

/// One full-path measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Round, from 1.
    pub round: usize,
    /// Which hop.
    pub proto: Proto,
    /// The case's label.
    pub case: String,
    /// What wrk saw.
    pub wrk: Wrk,
    /// Body MiB/s.
    pub mb_per_s: f64,
    /// CPU µs per request of the two relays together (warm-up included).
    pub cpu_us_per_req: f64,
    /// Peak RSS of the router-side relay, MiB.
    pub router_peak_mb: f64,
    /// Peak RSS of the manager-side relay, MiB.
    pub manager_peak_mb: f64,
    /// 1-minute load average at the end.
    pub load: f64,
}

fn spawn_listening(cmd: &mut Command) -> anyhow::Result<(Child, String)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    match line.strip_prefix("listening ") {
        Some(a) => Ok((child, a.trim().to_owned())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("a relay said {line:?} instead of where it listens")
        }
    }
}

fn stop(mut child: Child) {
    // Our own child, by its handle.
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs the full-path measurements against an app already listening at `app`.
pub struct FullRunner<'a> {
    /// Program paths and durations.
    pub runner: &'a Runner,
    /// The app's `host:port`.
    pub app: String,
    /// A folder for wrk's Lua scripts.
    pub scratch: std::path::PathBuf,
}

impl FullRunner<'_> {
    fn wrk(&self, case: &Case, url: &str, duration: &str) -> anyhow::Result<Wrk> {
        let mut cmd = Command::new("wrk");
        cmd.args([
            "-t1",
            "-c",
            &case.concurrency.to_string(),
            "-d",
            duration,
            "--latency",
        ]);
        if let Some(n) = case.post_bytes {
            let script = self.scratch.join(format!("post-{n}.lua"));
            std::fs::write(
                &script,
                format!(
                    "wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", {n})\nwrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n"
                ),
            )?;
            cmd.arg("-s").arg(script);
        }
        let out = cmd.arg(url).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        parse_wrk(&text).ok_or_else(|| anyhow::anyhow!("wrk said: {text}"))
    }

    /// One measurement in a fresh pair of relays.
    pub fn measure(&self, round: usize, proto: Proto, case: &Case) -> anyhow::Result<Row> {
        let r = self.runner;
        let (manager, maddr) = spawn_listening(
            Command::new(&r.exe)
                .arg("relay-manager")
                .args(["--proto", proto.name(), "--app", &self.app])
                .args(&r.settings_args),
        )?;
        let router = spawn_listening(
            Command::new(&r.exe)
                .arg("relay-router")
                .args(["--proto", proto.name(), "--manager", &maddr])
                .args(&r.settings_args),
        );
        let (router, raddr) = match router {
            Ok(x) => x,
            Err(e) => {
                stop(manager);
                return Err(e);
            }
        };
        let url = format!("http://{raddr}{}", case.path);
        let warm = self.wrk(case, &url, &r.warmup);
        let measured = warm.and_then(|_| self.wrk(case, &url, &r.duration));
        let usage = (procs::read(router.id()), procs::read(manager.id()));
        stop(router);
        stop(manager);
        let wrk = measured?;
        let (Some(ru), Some(mu)) = usage else {
            anyhow::bail!("a relay vanished during the run");
        };
        // The warm-up ran as long as wrk was told; its requests are estimated at the measured rate.
        let warm_s: f64 = humantime::parse_duration(&r.warmup)?.as_secs_f64();
        let total = (wrk.requests + wrk.rps * warm_s).max(1.0);
        Ok(Row {
            round,
            proto,
            case: case.label.clone(),
            wrk,
            mb_per_s: wrk.rps * case.moved as f64 / 1_048_576.0,
            cpu_us_per_req: (ru.cpu_s + mu.cpu_s) * 1e6 / total,
            router_peak_mb: ru.peak_rss_mb,
            manager_peak_mb: mu.peak_rss_mb,
            load: load_average(),
        })
    }
}

fn med(rows: &[Row], case: &str, proto: Proto, f: impl Fn(&Row) -> f64) -> f64 {
    median(
        rows.iter()
            .filter(|r| r.case == case && r.proto == proto)
            .map(f)
            .collect(),
    )
}

/// The Markdown table of medians per case and hop, with the median of the per-round h2/frames ratios.
pub fn table(rows: &[Row], cases: &[Case]) -> String {
    let mut out = String::from(
        "| case | hop | req/s | p50 µs | p99 µs | MiB/s | CPU µs/req (both relays) | peak RSS router-side MiB | peak RSS manager-side MiB | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    type Metric = fn(&Row) -> f64;
    let metrics: [Metric; 8] = [
        |r| r.wrk.rps,
        |r| r.wrk.p50_us,
        |r| r.wrk.p99_us,
        |r| r.mb_per_s,
        |r| r.cpu_us_per_req,
        |r| r.router_peak_mb,
        |r| r.manager_peak_mb,
        |r| r.wrk.errors,
    ];
    for case in cases {
        for proto in [Proto::Frames, Proto::H2] {
            let m: Vec<f64> = metrics
                .iter()
                .map(|f| med(rows, &case.label, proto, f))
                .collect();
            out.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |\n",
                case.label,
                proto.name(),
                m[0],
                m[1],
                m[2],
                m[3],
                m[4],
                m[5],
                m[6],
                m[7]
            ));
        }
        let ratio = |i: usize| {
            per_round_ratio(
                rows,
                |r| r.case == case.label,
                |r| r.round,
                |r| r.proto,
                metrics[i],
            )
            .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"))
        };
        out.push_str(&format!(
            "| {} | h2 / frames | {} | {} | {} | {} | {} | {} | {} | |\n",
            case.label,
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3),
            ratio(4),
            ratio(5),
            ratio(6)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_reports() {
        let out = "Running 5s test @ http://127.0.0.1:1/noop
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   610.00us  100.00us   5.00ms   90.00%
  Latency Distribution
     50%  594.00us
     75%  650.00us
     90%  700.00us
     99%    1.23ms
  263000 requests in 5.00s, 30.00MB read
  Non-2xx or 3xx responses: 3
  Socket errors: connect 0, read 1, write 0, timeout 2
Requests/sec:  52600.00
Transfer/sec:      6.00MB
";
        let w = parse_wrk(out).expect("parses");
        assert_eq!(w.rps, 52600.0);
        assert_eq!(w.p50_us, 594.0);
        assert_eq!(w.p99_us, 1230.0);
        assert_eq!(w.requests, 263000.0);
        assert_eq!(w.errors, 6.0);
        assert_eq!(micros("2.5s"), Some(2.5e6));
        assert_eq!(parse_wrk("garbage"), None);
    }
}
