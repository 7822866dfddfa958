//! lapinbeam's figures, read from the summary its peer runner prints (`lapinbeam/run.sh`). Pure.

use serde::{Deserialize, Serialize};

/// What the runner's summary says, where it says it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lapinbeam {
    /// Remote (loopback TCP) RTT p50, ms, from the shipped bench_latency.py.
    pub rtt_p50_ms: Option<f64>,
    /// Remote RTT p99, ms.
    pub rtt_p99_ms: Option<f64>,
    /// Remote send rate (`send()` returns), msg/s, from the shipped bench_remote.py.
    pub remote_send_per_s: Option<f64>,
    /// Cross-process fire-and-forget: best delivered msg/s among the offered rates.
    pub xproc_delivered_per_s: Option<f64>,
    /// Cross-process fire-and-forget: messages lost at that rate.
    pub xproc_lost: Option<f64>,
    /// Cross-process send+ack RTT p50 / p99, ms.
    pub xproc_ack_p50_ms: Option<f64>,
    /// See `xproc_ack_p50_ms`.
    pub xproc_ack_p99_ms: Option<f64>,
}

fn num(s: &str) -> Option<f64> {
    s.trim().replace(',', "").parse().ok()
}

/// Numbers after `key` on a line, in order (commas dropped; `/` and words skipped).
fn numbers_after(line: &str, key: &str) -> Vec<f64> {
    line.split_once(key)
        .map(|(_, rest)| {
            rest.split(|c: char| c.is_whitespace() || c == '/')
                .filter_map(num)
                .collect()
        })
        .unwrap_or_default()
}

/// Parses the runner's summary; fields it cannot find stay `None`.
pub fn parse(text: &str) -> Lapinbeam {
    let mut l = Lapinbeam::default();
    let mut in_xproc = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("bench_peer.py --mode") {
            in_xproc = t.contains("xproc");
            continue;
        }
        if t.starts_with("remote RTT p50 / p99") {
            let v = numbers_after(t, "p99");
            l.rtt_p50_ms = v.first().copied();
            l.rtt_p99_ms = v.get(1).copied();
        } else if t.starts_with("remote send") {
            l.remote_send_per_s = numbers_after(t, ")").first().copied();
        } else if in_xproc && t.starts_with("fire_and_forget") {
            let delivered = numbers_after(t, "delivered").first().copied();
            let lost = numbers_after(t, "lost").first().copied();
            if delivered > l.xproc_delivered_per_s {
                l.xproc_delivered_per_s = delivered;
                l.xproc_lost = lost;
            }
        } else if in_xproc && t.starts_with("rtt_send_ack") {
            let v: Vec<f64> = t.split_whitespace().filter_map(num).collect();
            l.xproc_ack_p50_ms = v.first().copied();
            l.xproc_ack_p99_ms = v.get(1).copied();
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "shipped bench_remote.py (1 runs, median):
  asyncio.Queue baseline           512,000 msg/s
  local send                       430,000 msg/s   published ~440K msg/s
  remote send (send() returns)      21,500 msg/s   published ~20K msg/s (docs/benchmarks.md; README says ~16K)
shipped bench_latency.py (1 runs, median):
  local dispatch RTT p50        0.007 ms          published p50 0.007 ms
  remote RTT p50 / p99          0.330 / 0.420 ms  published p50 0.44 ms / p99 0.93 ms
bench_peer.py --mode inproc (1 runs, median):
  fire_and_forget_50000    send() returns   400,000/s  delivered  390,000/s  lost 0 of 50,000
bench_peer.py --mode xproc (1 runs, median):
  fire_and_forget_10000    send() returns    10,000/s  delivered   10,000/s  lost 0 of 10,000
  fire_and_forget_50000    send() returns    50,000/s  delivered   24,000/s  lost 26,000 of 50,000
  rtt_send_ack             p50 0.350 ms  p99 0.600 ms
  rtt_ask                  p50 0.400 ms  p99 0.700 ms
";

    #[test]
    fn reads_the_runners_summary() {
        let l = parse(SUMMARY);
        assert_eq!(l.rtt_p50_ms, Some(0.33));
        assert_eq!(l.rtt_p99_ms, Some(0.42));
        assert_eq!(l.remote_send_per_s, Some(21_500.0));
        assert_eq!(l.xproc_delivered_per_s, Some(24_000.0));
        assert_eq!(l.xproc_lost, Some(26_000.0));
        assert_eq!(l.xproc_ack_p50_ms, Some(0.35));
        assert_eq!(l.xproc_ack_p99_ms, Some(0.6));
    }

    #[test]
    fn nothing_found_is_all_none() {
        assert_eq!(parse("timed out"), Lapinbeam::default());
    }
}
