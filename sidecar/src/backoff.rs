//! Exponential backoff with jitter, shared by reconnects and delivery retries. Pure.

use std::time::Duration;

/// Delay before retry number `attempt` (0-based): `base * 2^attempt`, capped at `max`, then jittered
/// into `[d/2, d]` with `unit` in `[0, 1)` so that peers failing together do not retry together.
pub(crate) fn delay(base: Duration, max: Duration, attempt: u32, unit: f64) -> Duration {
    let factor = 2u32.saturating_pow(attempt.min(31));
    let d = base.saturating_mul(factor).min(max);
    let unit = unit.clamp(0.0, 1.0);
    d / 2 + d.mul_f64(unit / 2.0)
}

/// The failure series of a long-lived stream that reconnects (the control-plane streams): a stream
/// that lived `stable_after` ends the series, so the next failure waits the shortest delay again.
pub(crate) struct StreamRetry {
    base: Duration,
    max: Duration,
    stable_after: Duration,
    failures: u32,
}

/// What to do after a stream ended.
pub(crate) struct Next {
    /// The first failure of a series: worth a warning; repeats of it are not.
    pub first: bool,
    /// How long to wait before reconnecting.
    pub wait: Duration,
}

impl StreamRetry {
    /// The control-plane streams' policy: 200 ms doubling to 10 s; 10 s of life resets it.
    pub(crate) fn control_plane() -> StreamRetry {
        StreamRetry {
            base: Duration::from_millis(200),
            max: Duration::from_secs(10),
            stable_after: Duration::from_secs(10),
            failures: 0,
        }
    }

    /// Records a stream that lived `lived`; `unit` in `[0, 1)` jitters the wait.
    pub(crate) fn ended(&mut self, lived: Duration, unit: f64) -> Next {
        self.failures = if lived >= self.stable_after {
            0
        } else {
            self.failures.saturating_add(1)
        };
        Next {
            first: self.failures <= 1,
            wait: delay(self.base, self.max, self.failures.saturating_sub(1), unit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_retry_series_grows_and_a_stable_stream_resets_it() {
        let mut r = StreamRetry::control_plane();
        let short = Duration::from_millis(5);
        let n = r.ended(short, 1.0);
        assert!(n.first);
        assert_eq!(n.wait, Duration::from_millis(200));
        let n = r.ended(short, 1.0);
        assert!(!n.first);
        assert_eq!(n.wait, Duration::from_millis(400));
        let n = r.ended(Duration::from_secs(10), 1.0);
        assert!(n.first, "a stream that lived long starts a new series");
        assert_eq!(n.wait, Duration::from_millis(200));
    }

    #[test]
    fn doubles_caps_and_jitters_within_half() {
        let b = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert_eq!(delay(b, m, 0, 1.0), Duration::from_millis(100));
        assert_eq!(delay(b, m, 0, 0.0), Duration::from_millis(50));
        assert_eq!(delay(b, m, 2, 1.0), Duration::from_millis(400));
        assert_eq!(delay(b, m, 10, 1.0), m);
        assert_eq!(delay(b, m, u32::MAX, 0.0), m / 2);
    }
}
