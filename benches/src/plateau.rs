//! Does a process's memory level off under load? Pure: a series of RSS readings in, a verdict out.

use serde::{Deserialize, Serialize};

/// Growth allowed between the middle and the last third of a run before it counts as still rising:
/// whichever is larger, this many MiB or [`SLACK_FRACTION`] of the middle third's peak.
pub const SLACK_MB: f64 = 2.0;
/// See [`SLACK_MB`].
pub const SLACK_FRACTION: f64 = 0.05;

/// First, last and highest reading, and whether the series levelled off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plateau {
    /// Readings.
    pub samples: usize,
    /// First reading, MiB.
    pub first_mb: f64,
    /// Last reading, MiB.
    pub last_mb: f64,
    /// Highest reading, MiB.
    pub max_mb: f64,
    /// Peak of the last third over the peak of the middle third, MiB (negative when it fell).
    pub late_growth_mb: f64,
    /// `late_growth_mb` within the slack (`None` with fewer than 6 readings: too short to tell).
    pub levelled: Option<bool>,
}

fn peak(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::MIN, f64::max)
}

/// Judges a series of RSS readings (MiB, in time order). The first third is warm-up (caches, pools and
/// buffers fill there); a leak keeps growing through the last third, a plateau does not.
pub fn judge(rss_mb: &[f64]) -> Option<Plateau> {
    let (&first_mb, &last_mb) = (rss_mb.first()?, rss_mb.last()?);
    let n = rss_mb.len();
    let third = n / 3;
    let (middle, late) = (&rss_mb[third..2 * third], &rss_mb[2 * third..]);
    let late_growth_mb = if middle.is_empty() {
        0.0
    } else {
        peak(late) - peak(middle)
    };
    let slack = SLACK_MB.max(SLACK_FRACTION * peak(middle));
    Some(Plateau {
        samples: n,
        first_mb,
        last_mb,
        max_mb: peak(rss_mb),
        late_growth_mb,
        levelled: (n >= 6).then_some(late_growth_mb <= slack),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_that_grows_then_holds_levels_off() {
        let s = [8.0, 12.0, 14.0, 15.0, 15.2, 15.1, 15.3, 15.2, 15.4];
        let p = judge(&s).expect("judged");
        assert_eq!(p.levelled, Some(true));
        assert_eq!((p.first_mb, p.last_mb, p.max_mb), (8.0, 15.4, 15.4));
    }

    #[test]
    fn a_steady_climb_does_not() {
        let s: Vec<f64> = (0..30).map(|i| 10.0 + f64::from(i)).collect();
        let p = judge(&s).expect("judged");
        assert_eq!(p.levelled, Some(false), "{p:?}");
        assert!((p.late_growth_mb - 10.0).abs() < 1e-9);
    }

    #[test]
    fn too_short_or_empty_is_not_judged() {
        assert_eq!(judge(&[]), None);
        assert_eq!(judge(&[1.0, 2.0]).and_then(|p| p.levelled), None);
    }
}
