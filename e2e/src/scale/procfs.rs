//! CPU time and memory of a process on this host, read from `/proc` (Linux).

use anyhow::{Context, Result};

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on every Linux this runs on).
const TICKS: f64 = 100.0;

/// User plus system CPU seconds the process has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse_cpu(&stat).with_context(|| format!("parsing /proc/{pid}/stat: {stat:?}"))
}

fn parse_cpu(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces; fields after the closing parenthesis are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS)
}

/// (current RSS, peak RSS) in bytes.
pub fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |v| v * 1024)
    };
    Ok((kb("VmRSS:"), kb("VmHWM:")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utime_and_stime_after_a_name_with_spaces() {
        let line = "42 (a b) S 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 1 1 1";
        assert_eq!(parse_cpu(line), Some(3.0));
        assert!(cpu_seconds(std::process::id()).is_ok());
        let (rss, peak) = memory(std::process::id()).expect("own status");
        assert!(rss > 0 && peak >= rss);
    }
}
