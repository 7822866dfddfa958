//! CPU seconds and peak RSS of a process, read from `/proc` (Linux). Parsing is pure and tested; the
//! read is a thin shell.

use serde::{Deserialize, Serialize};

/// What a process used so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Process id.
    pub pid: u32,
    /// Command name (`comm`).
    pub name: String,
    /// User plus system CPU seconds.
    pub cpu_s: f64,
    /// Peak resident set size (`VmHWM`), MiB.
    pub peak_rss_mb: f64,
    /// Current resident set size (`VmRSS`), MiB.
    pub rss_mb: f64,
    /// Program and role, e.g. `switchyard-sidecar router` (from the command line; `comm` is cut at 15 bytes).
    #[serde(default)]
    pub cmd: String,
}

impl Usage {
    /// Whether this is a Switchyard sidecar (either role).
    pub fn is_sidecar(&self) -> bool {
        self.cmd.starts_with("switchyard-sidecar")
    }
}

/// Program file name and its first argument when that is a word (a subcommand such as `router`), from the
/// NUL-separated content of `/proc/<pid>/cmdline`.
pub fn parse_cmdline(raw: &[u8]) -> String {
    let mut args = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy);
    let Some(prog) = args.next() else {
        return String::new();
    };
    let prog = prog.rsplit('/').next().unwrap_or_default().to_owned();
    match args.next() {
        Some(a) if !a.starts_with('-') && !a.contains('/') && !a.contains('.') => {
            format!("{prog} {a}")
        }
        _ => prog,
    }
}

/// One RSS reading of one process, `t_s` seconds into a sampling run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since sampling began.
    pub t_s: f64,
    /// Process id.
    pub pid: u32,
    /// As [`Usage::cmd`].
    pub cmd: String,
    /// Resident set size, MiB.
    pub rss_mb: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times; 100 on every Linux this runs on.
const TICKS: f64 = 100.0;

/// Name and CPU seconds from the content of `/proc/<pid>/stat`.
pub fn parse_stat(stat: &str) -> Option<(String, f64)> {
    // The name is in parentheses and may itself hold spaces or parentheses: split at the last `)`.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3, utime field 14 and stime field 15 (1-based, man 5 proc).
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / TICKS))
}

/// A `kB` field of `/proc/<pid>/status`, in MiB.
pub fn status_mb(status: &str, field: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line
        .get(field.len()..)?
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Reads the usage of a live process.
pub fn read(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let (name, cpu_s) = parse_stat(&stat)?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| parse_cmdline(&raw))
        .unwrap_or_default();
    Some(Usage {
        cmd,
        pid,
        name,
        cpu_s,
        peak_rss_mb: status_mb(&status, "VmHWM").unwrap_or(0.0),
        rss_mb: status_mb(&status, "VmRSS").unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_time_even_with_odd_names() {
        let stat = "4242 (my (odd) app) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0 100 1000000 500";
        let (name, cpu) = parse_stat(stat).expect("parses");
        assert_eq!(name, "my (odd) app");
        assert!((cpu - 3.0).abs() < 1e-9, "{cpu}");
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn reads_memory_fields_in_mib() {
        let status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(status_mb(status, "VmHWM"), Some(20.0));
        assert_eq!(status_mb(status, "VmRSS"), Some(1.0));
        assert_eq!(status_mb(status, "VmSwap"), None);
    }

    #[test]
    fn names_program_and_role_from_the_command_line() {
        assert_eq!(
            parse_cmdline(b"/t/release/switchyard-sidecar\0router\0--config\0/x.json\0"),
            "switchyard-sidecar router"
        );
        assert_eq!(parse_cmdline(b"/usr/bin/python3\0/tmp/app.py\0"), "python3");
        assert_eq!(
            parse_cmdline(b"switchyard-bare\0--port\0 1\0"),
            "switchyard-bare"
        );
        assert_eq!(parse_cmdline(b""), "");
    }

    #[test]
    fn reads_this_process() {
        let u = read(std::process::id()).expect("own /proc entry");
        assert!(u.peak_rss_mb > 0.0);
    }
}
