//! PROTOTYPE: both hops measured in one run, in interleaved rounds (for each round and case: frames,
//! then h2), each measurement in a fresh manager-side and router-side process, so peak RSS is the
//! measurement's own. Medians over rounds and the h2/frames ratios are printed as a Markdown table.
//! The process handling is a thin shell; the table is pure.

use super::{Proto, Scenario};
use crate::procs;
use crate::report::Summary;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// One load case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// What each request does.
    pub scenario: Scenario,
    /// Requests in flight.
    pub concurrency: usize,
    /// Body bytes of uploads and downloads.
    pub bytes: usize,
}

impl Case {
    /// Its name in the table: `noop c=1`, `upload 1MiB c=8`.
    pub fn label(&self) -> String {
        match self.scenario {
            Scenario::Noop => format!("noop c={}", self.concurrency),
            s => format!(
                "{} {} c={}",
                s.event(),
                size_label(self.bytes),
                self.concurrency
            ),
        }
    }
}

fn size_label(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}KiB", n >> 10)
    } else {
        format!("{n}B")
    }
}

/// The cases of issue 14: `/noop` at c=1 and c=32, 1 MiB bodies both ways at c=8.
pub fn default_cases(bytes: usize) -> Vec<Case> {
    vec![
        Case {
            scenario: Scenario::Noop,
            concurrency: 1,
            bytes: 0,
        },
        Case {
            scenario: Scenario::Noop,
            concurrency: 32,
            bytes: 0,
        },
        Case {
            scenario: Scenario::Upload,
            concurrency: 8,
            bytes,
        },
        Case {
            scenario: Scenario::Download,
            concurrency: 8,
            bytes,
        },
    ]
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Round, from 1.
    pub round: usize,
    /// Which hop.
    pub proto: Proto,
    /// The case.
    pub case: Case,
    /// Successful requests per second.
    pub rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Body bytes per second, MiB.
    pub mb_per_s: f64,
    /// Failed requests.
    pub errors: u64,
    /// CPU µs per request of both processes together (warm-up included on both sides).
    pub cpu_us_per_req: f64,
    /// Peak RSS of the router-side process, MiB.
    pub client_peak_mb: f64,
    /// Peak RSS of the manager-side process, MiB.
    pub server_peak_mb: f64,
    /// 1-minute load average when the measurement ended.
    pub load: f64,
}

/// The median of some numbers (the mean of the middle two for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The median over rounds of each round's h2/frames ratio of a metric: the two runs of a round are
/// next to each other in time, so their ratio cancels most of the machine's drift.
pub fn per_round_ratio<R>(
    rows: &[R],
    same_case: impl Fn(&R) -> bool,
    round: impl Fn(&R) -> usize,
    proto: impl Fn(&R) -> Proto,
    f: impl Fn(&R) -> f64,
) -> Option<f64> {
    let mut ratios = Vec::new();
    let rounds: std::collections::BTreeSet<usize> =
        rows.iter().filter(|r| same_case(r)).map(&round).collect();
    for n in rounds {
        let pick = |p: Proto| {
            rows.iter()
                .find(|r| same_case(r) && round(r) == n && proto(r) == p)
                .map(&f)
        };
        if let (Some(a), Some(b)) = (pick(Proto::Frames), pick(Proto::H2))
            && a > 0.0
        {
            ratios.push(b / a);
        }
    }
    (!ratios.is_empty()).then(|| median(ratios))
}

fn med(rows: &[Row], case: &Case, proto: Proto, f: impl Fn(&Row) -> f64) -> f64 {
    median(
        rows.iter()
            .filter(|r| r.case == *case && r.proto == proto)
            .map(f)
            .collect(),
    )
}

/// The Markdown table of medians per case and hop, with the median of the per-round h2/frames ratios.
pub fn table(rows: &[Row], cases: &[Case]) -> String {
    let mut out = String::from(
        "| case | hop | req/s | p50 µs | p99 µs | MiB/s | CPU µs/req (both ends) | peak RSS router-side MiB | peak RSS manager-side MiB | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    type Metric = fn(&Row) -> f64;
    let metrics: [Metric; 8] = [
        |r| r.rps,
        |r| r.p50_us,
        |r| r.p99_us,
        |r| r.mb_per_s,
        |r| r.cpu_us_per_req,
        |r| r.client_peak_mb,
        |r| r.server_peak_mb,
        |r| r.errors as f64,
    ];
    for case in cases {
        for proto in [Proto::Frames, Proto::H2] {
            let m: Vec<f64> = metrics.iter().map(|f| med(rows, case, proto, f)).collect();
            out.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |\n",
                case.label(),
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
                |r| r.case == *case,
                |r| r.round,
                |r| r.proto,
                metrics[i],
            )
            .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"))
        };
        out.push_str(&format!(
            "| {} | h2 / frames | {} | {} | {} | {} | {} | {} | {} | |\n",
            case.label(),
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

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// How to start the two processes: this program's own `serve` and `drive` subcommands.
pub struct Runner {
    /// This program.
    pub exe: std::path::PathBuf,
    /// `--duration` of each measurement, e.g. `5s`.
    pub duration: String,
    /// `--warmup` of each measurement.
    pub warmup: String,
    /// Settings flags passed to both sides.
    pub settings_args: Vec<String>,
}

impl Runner {
    /// Runs one measurement in fresh processes.
    pub fn measure(&self, round: usize, proto: Proto, case: Case) -> anyhow::Result<Row> {
        let mut server = Command::new(&self.exe)
            .arg("serve")
            .args(["--proto", proto.name(), "--port", "0"])
            .args(&self.settings_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let result = self.drive(&mut server, proto, case);
        let server_usage = procs::read(server.id());
        // Our own child, by its handle.
        let _ = server.kill();
        let _ = server.wait();
        let summary = result?;
        let server_usage =
            server_usage.ok_or_else(|| anyhow::anyhow!("the manager-side process vanished"))?;
        let extra = |k: &str| summary.extra.get(k).copied().unwrap_or(0.0);
        let total = extra("total_requests").max(1.0);
        Ok(Row {
            round,
            proto,
            case,
            rps: summary.rps,
            p50_us: summary.p50_us,
            p99_us: summary.p99_us,
            mb_per_s: extra("mb_per_s"),
            errors: summary.errors,
            cpu_us_per_req: (extra("client_cpu_s") + server_usage.cpu_s) * 1e6 / total,
            client_peak_mb: extra("client_peak_rss_mb"),
            server_peak_mb: server_usage.peak_rss_mb,
            load: load_average(),
        })
    }

    fn drive(
        &self,
        server: &mut std::process::Child,
        proto: Proto,
        case: Case,
    ) -> anyhow::Result<Summary> {
        let stdout = server
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout from the manager-side process"))?;
        // Its first line says where it listens: it is ready.
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .strip_prefix("listening ")
            .map(str::trim)
            .ok_or_else(|| anyhow::anyhow!("the manager-side process said {line:?}"))?
            .to_owned();
        let out = Command::new(&self.exe)
            .arg("drive")
            .args(["--proto", proto.name(), "--addr", &addr])
            .args(["--scenario", case.scenario.event()])
            .args(["--bytes", &case.bytes.to_string()])
            .args(["-c", &case.concurrency.to_string()])
            .args(["--duration", &self.duration, "--warmup", &self.warmup])
            .args(&self.settings_args)
            .stderr(Stdio::inherit())
            .output()?;
        if !out.status.success() {
            anyhow::bail!("the router-side process failed: {}", out.status);
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(round: usize, proto: Proto, case: Case, rps: f64) -> Row {
        Row {
            round,
            proto,
            case,
            rps,
            p50_us: 10.0,
            p99_us: 20.0,
            mb_per_s: 0.0,
            errors: 0,
            cpu_us_per_req: 5.0,
            client_peak_mb: 3.0,
            server_peak_mb: 4.0,
            load: 1.0,
        }
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
        let cases = default_cases(1 << 20);
        let rows = vec![
            row(1, Proto::Frames, cases[0], 100.0),
            row(1, Proto::H2, cases[0], 50.0),
            row(2, Proto::Frames, cases[0], 300.0),
            row(2, Proto::H2, cases[0], 240.0),
            row(3, Proto::Frames, cases[0], 200.0),
            row(3, Proto::H2, cases[0], 140.0),
        ];
        let t = table(&rows, &cases[..1]);
        assert!(t.contains("| noop c=1 | frames | 200 |"), "{t}");
        // Per round: 0.5, 0.8, 0.7; not the ratio of the medians (140 / 200).
        assert!(t.contains("| noop c=1 | h2 / frames | 0.70 |"), "{t}");
        assert_eq!(cases[2].label(), "upload 1MiB c=8");
    }
}
