//! HTTP/1.1 load from wrk, the generator users measure HTTP servers with: `switchyard-load wrk` runs it
//! (a warm-up run whose figures are dropped, then the measured run) with a Lua `done` hook that prints the
//! counts and latency percentiles on one line, and turns that line into the same JSON summary as the other
//! modes. Parsing is pure; [`run`] is the process edge.

use crate::report::Summary;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The wrk script: the request method from its argument, and the `switchyard-wrk ...` line at the end.
pub const SCRIPT: &str = include_str!("wrk_summary.lua");

/// What can go wrong driving wrk.
#[derive(Debug, thiserror::Error)]
pub enum WrkError {
    /// The program could not be started.
    #[error("cannot run {program}: {source} (Debian: apt-get install wrk)")]
    Spawn {
        /// The program tried.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// wrk's script could not be written.
    #[error("cannot write wrk's script to {path}: {source}")]
    Script {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// wrk ran and failed (it exits 1 when it cannot connect at start).
    #[error("wrk exited with {status}: {stderr}")]
    Failed {
        /// Exit status.
        status: String,
        /// What it printed on stderr (and stdout when stderr was empty).
        stderr: String,
    },
    /// wrk's output has no line from the script's `done` hook.
    #[error("wrk printed no `switchyard-wrk` summary line; its output was: {0:?}")]
    NoSummary(String),
    /// The summary line lacks a field or has one that is not a whole number.
    #[error("wrk's summary line has no whole number for {field:?}: {line:?}")]
    BadField {
        /// The field.
        field: &'static str,
        /// The line.
        line: String,
    },
}

/// The figures of one wrk run, as its `done` hook printed them (latencies in µs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// Completed responses, whatever their status.
    pub requests: u64,
    /// Wall time of the run, µs.
    pub duration_us: u64,
    /// Connect, read, write errors, responses with status >= 400, and timeouts.
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub status: u64,
    pub timeout: u64,
    /// Latency percentiles and maximum, µs.
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

const FIELDS: [&str; 11] = [
    "requests",
    "duration_us",
    "connect",
    "read",
    "write",
    "status",
    "timeout",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
];

/// Reads the `switchyard-wrk key=value ...` line out of wrk's stdout.
pub fn parse(stdout: &str) -> Result<Figures, WrkError> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("switchyard-wrk "))
        .ok_or_else(|| WrkError::NoSummary(stdout.chars().take(2000).collect()))?;
    let mut values = [0u64; FIELDS.len()];
    for (slot, field) in values.iter_mut().zip(FIELDS) {
        *slot = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| WrkError::BadField {
                field,
                line: line.to_owned(),
            })?;
    }
    let [
        requests,
        duration_us,
        connect,
        read,
        write,
        status,
        timeout,
        p50_us,
        p90_us,
        p99_us,
        max_us,
    ] = values;
    Ok(Figures {
        requests,
        duration_us,
        connect,
        read,
        write,
        status,
        timeout,
        p50_us,
        p90_us,
        p99_us,
        max_us,
    })
}

impl Figures {
    /// The run as the load generator's summary: successes are completed responses below 400; every error
    /// kind counts as an error. wrk measures latency from the request's write to the response's end, on
    /// kept-alive connections, as the closed-loop `http` mode does.
    pub fn summary(&self, target: &str, concurrency: usize) -> Summary {
        let ok = self.requests.saturating_sub(self.status);
        let secs = self.duration_us as f64 / 1e6;
        Summary {
            mode: "wrk".to_owned(),
            target: target.to_owned(),
            concurrency,
            duration_s: secs,
            requests: ok,
            errors: self.connect + self.read + self.write + self.status + self.timeout,
            rps: if secs > 0.0 { ok as f64 / secs } else { 0.0 },
            p50_us: self.p50_us as f64,
            p90_us: self.p90_us as f64,
            p99_us: self.p99_us as f64,
            max_us: self.max_us as f64,
            ..Summary::default()
        }
    }
}

/// wrk's version (`4.1.0-3+b2` from `wrk debian/4.1.0-3+b2 [epoll] ...`), when it says one.
pub fn version_of(banner: &str) -> Option<String> {
    let rest = banner.lines().next()?.strip_prefix("wrk ")?;
    let v = rest.split_whitespace().next()?;
    Some(v.rsplit('/').next().unwrap_or(v).to_owned())
}

/// One wrk load run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The wrk program.
    pub program: PathBuf,
    /// `http://host:port/path`.
    pub url: String,
    /// Connections.
    pub concurrency: usize,
    /// wrk's threads (`-t`).
    pub threads: usize,
    /// Measured time and the unrecorded warm-up run before it (wrk counts whole seconds).
    pub duration: Duration,
    pub warmup: Duration,
    /// Request method, extra headers (`Name: value`) and body (none when empty).
    pub method: String,
    pub headers: Vec<String>,
    pub body: String,
    /// A request slower than this counts as a timeout error.
    pub timeout: Duration,
}

/// Whole seconds for wrk's `-d`, rounded up, at least 1.
pub fn whole_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

fn wrk(o: &Options, script: &Path, secs: u64) -> Result<String, WrkError> {
    let mut cmd = Command::new(&o.program);
    cmd.arg("-t")
        .arg(o.threads.to_string())
        .arg("-c")
        .arg(o.concurrency.to_string())
        .arg("-d")
        .arg(format!("{secs}s"))
        .arg("--timeout")
        .arg(format!("{}s", whole_secs(o.timeout)))
        .arg("-s")
        .arg(script);
    for h in &o.headers {
        cmd.arg("-H").arg(h);
    }
    cmd.arg(&o.url).arg("--").arg(&o.method);
    if !o.body.is_empty() {
        cmd.arg(&o.body);
    }
    let out = cmd.output().map_err(|source| WrkError::Spawn {
        program: o.program.display().to_string(),
        source,
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(WrkError::Failed {
            status: out.status.to_string(),
            stderr: if stderr.is_empty() { stdout } else { stderr },
        });
    }
    Ok(stdout)
}

/// Runs the warm-up (when not zero) and the measured run; the summary carries `wrk VERSION -tN` as its
/// generator.
pub fn run(o: &Options) -> Result<Summary, WrkError> {
    let banner = Command::new(&o.program)
        .arg("--version")
        .output()
        .map_err(|source| WrkError::Spawn {
            program: o.program.display().to_string(),
            source,
        })?;
    // `wrk --version` prints its banner and exits 1; the banner is all we want.
    let version = version_of(&String::from_utf8_lossy(&banner.stdout));
    let script = std::env::temp_dir().join(format!("switchyard-wrk-{}.lua", std::process::id()));
    std::fs::write(&script, SCRIPT).map_err(|source| WrkError::Script {
        path: script.clone(),
        source,
    })?;
    let measured = (|| {
        if !o.warmup.is_zero() {
            wrk(o, &script, whole_secs(o.warmup))?;
        }
        parse(&wrk(o, &script, whole_secs(o.duration))?)
    })();
    let _ = std::fs::remove_file(&script);
    let mut s = measured?.summary(&o.url, o.concurrency);
    s.generator = Some(match version {
        Some(v) => format!("wrk {v} -t{}", o.threads),
        None => format!("wrk -t{}", o.threads),
    });
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "Running 1s test @ http://127.0.0.1:18080/noop\n  1 threads and 32 connections\n\
        Requests/sec: 200000.00\n\
        switchyard-wrk requests=200500 duration_us=1002500 connect=0 read=0 write=0 status=500 timeout=0 \
        p50_us=150 p90_us=210 p99_us=400 max_us=9000\n";

    #[test]
    fn reads_the_hook_line_into_a_summary() {
        let f = parse(OUT).expect("parses");
        assert_eq!(f.requests, 200_500);
        assert_eq!(f.p99_us, 400);
        let s = f.summary("http://x/noop", 32);
        assert_eq!(s.requests, 200_000, "status errors are not successes");
        assert_eq!(s.errors, 500);
        assert!((s.rps - 200_000.0 / 1.0025).abs() < 1e-6, "{}", s.rps);
        assert_eq!((s.p50_us, s.p90_us, s.max_us), (150.0, 210.0, 9000.0));
        assert_eq!(s.mode, "wrk");
    }

    #[test]
    fn missing_or_bad_lines_are_named() {
        let none =
            parse("unable to connect to 127.0.0.1:1 Connection refused").expect_err("no line");
        assert!(none.to_string().contains("Connection refused"), "{none}");
        let bad = parse("switchyard-wrk requests=x duration_us=1").expect_err("bad field");
        assert!(bad.to_string().contains("\"requests\""), "{bad}");
        let short = parse("switchyard-wrk requests=1 duration_us=1").expect_err("short");
        assert!(short.to_string().contains("\"connect\""), "{short}");
    }

    #[test]
    fn the_script_prints_every_field_the_parser_reads() {
        for f in FIELDS {
            assert!(SCRIPT.contains(&format!("{f}=")), "script lacks {f}");
        }
    }

    #[test]
    fn versions_and_seconds() {
        assert_eq!(
            version_of("wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer\nUsage"),
            Some("4.1.0-3+b2".to_owned())
        );
        assert_eq!(version_of("wrk 4.2.0 [epoll]"), Some("4.2.0".to_owned()));
        assert_eq!(version_of("nope"), None);
        assert_eq!(whole_secs(Duration::from_millis(500)), 1);
        assert_eq!(whole_secs(Duration::from_millis(2500)), 3);
        assert_eq!(whole_secs(Duration::from_secs(10)), 10);
        assert_eq!(whole_secs(Duration::ZERO), 1);
    }
}
