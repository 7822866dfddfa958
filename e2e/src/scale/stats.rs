//! Pure: summaries of measured samples (nearest-rank percentiles).

use serde::Serialize;

/// p50, p99, max and mean of a set of samples, in the samples' unit.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// The nearest-rank `q` quantile (0..=1) of sorted samples; 0 when there are none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes `samples` (NaNs are dropped).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return Summary::default();
    }
    Summary {
        count: s.len(),
        p50: quantile(&s, 0.50),
        p99: quantile(&s, 0.99),
        max: s[s.len() - 1],
        mean: s.iter().sum::<f64>() / s.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!((s.count, s.p50, s.p99, s.max), (100, 50.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        assert_eq!(summarize(&[3.0]).p99, 3.0);
        assert_eq!(summarize(&[]), Summary::default());
        assert_eq!(summarize(&[f64::NAN, 2.0]).count, 1);
    }
}
