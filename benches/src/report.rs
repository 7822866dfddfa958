//! One load run's summary (req/s and latency percentiles), as the load generator prints it in JSON.
//!
//! Pure: built from a merged latency histogram, the count of errors and the measured wall time.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest latency the histograms hold (60 s); slower answers are clamped to it.
const MAX_NS: u64 = 60_000_000_000;

/// A latency histogram in nanoseconds, 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("constant bounds that hdrhistogram accepts")
}

/// Records one latency, clamped into the histogram's range.
pub fn record(hist: &mut Histogram<u64>, latency: Duration) {
    let ns = u64::try_from(latency.as_nanos())
        .unwrap_or(MAX_NS)
        .clamp(1, MAX_NS);
    hist.saturating_record(ns);
}

/// The result of one load run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Which part of the benchmark run this belongs to (`noop`, `protocols`, ...), set by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// Which system was driven (`bare`, `switchyard`, `edri`, ...), set by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// What varies within the section (`1KB`, `replicas=2`, ...), set by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Which round of an interleaved run this was (1, 2, ...), set by the runner; the report takes the median
    /// of the rounds of each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// What generated the load, e.g. `wrk 4.1.0 -t1` or `switchyard-load -t1`: a ratio compares two runs only
    /// when the same generator drove both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// Figures particular to a mode, e.g. `sent` and `lost` of fire-and-forget frames.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
    /// `http`, `http-open`, `http-churn`, `wrk`, `ws`, `grpc`, ...
    pub mode: String,
    /// URL or address driven.
    pub target: String,
    /// Connections (one per worker).
    pub concurrency: usize,
    /// Offered rate in requests/s for open-loop runs.
    pub rate: Option<f64>,
    /// Measured seconds (warm-up excluded).
    pub duration_s: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests (transport errors and non-success statuses).
    pub errors: u64,
    /// Successful requests per second.
    pub rps: f64,
    /// Median latency, microseconds.
    pub p50_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Slowest request, microseconds.
    pub max_us: f64,
}

/// What a run measured, before it is summarized.
pub struct Measured {
    /// Latencies of successful requests.
    pub hist: Histogram<u64>,
    /// Failed requests.
    pub errors: u64,
    /// Wall time of the measured window.
    pub elapsed: Duration,
}

impl Summary {
    /// Summarizes a run.
    pub fn new(
        mode: &str,
        target: &str,
        concurrency: usize,
        rate: Option<f64>,
        m: &Measured,
    ) -> Summary {
        let secs = m.elapsed.as_secs_f64();
        let us = |q: f64| m.hist.value_at_quantile(q) as f64 / 1_000.0;
        let requests = m.hist.len();
        Summary {
            section: None,
            system: None,
            variant: None,
            round: None,
            generator: None,
            extra: BTreeMap::new(),
            mode: mode.to_owned(),
            target: target.to_owned(),
            concurrency,
            rate,
            duration_s: secs,
            requests,
            errors: m.errors,
            rps: if secs > 0.0 {
                requests as f64 / secs
            } else {
                0.0
            },
            p50_us: us(0.5),
            p90_us: us(0.9),
            p99_us: us(0.99),
            max_us: m.hist.max() as f64 / 1_000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_rate_come_from_the_histogram() {
        let mut hist = histogram();
        for i in 1..=100u64 {
            record(&mut hist, Duration::from_micros(i * 10));
        }
        let m = Measured {
            hist,
            errors: 3,
            elapsed: Duration::from_secs(2),
        };
        let s = Summary::new("http", "u", 4, None, &m);
        assert_eq!(s.requests, 100);
        assert_eq!(s.errors, 3);
        assert!((s.rps - 50.0).abs() < 1e-9);
        assert!((s.p50_us - 500.0).abs() < 1.0, "{}", s.p50_us);
        assert!((s.p99_us - 990.0).abs() < 1.0, "{}", s.p99_us);
        assert!((s.max_us - 1000.0).abs() < 1.0, "{}", s.max_us);
    }

    #[test]
    fn latencies_out_of_range_are_clamped_not_lost() {
        let mut hist = histogram();
        record(&mut hist, Duration::ZERO);
        record(&mut hist, Duration::from_secs(3600));
        assert_eq!(hist.len(), 2);
    }

    #[test]
    fn an_empty_run_reports_zero_rate() {
        let m = Measured {
            hist: histogram(),
            errors: 0,
            elapsed: Duration::ZERO,
        };
        assert_eq!(Summary::new("ws", "u", 1, None, &m).rps, 0.0);
    }
}
