//! A token bucket: pure, with the clock passed in.

use std::time::{Duration, Instant};

/// Refill rate and size of every bucket of one limiter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Most tokens a bucket holds (the largest burst).
    pub burst: f64,
}

/// One client's bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket, as a new client gets.
    pub(super) fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: rate.burst,
            at: now,
        }
    }

    /// Takes one token, or says how long until one is there.
    pub(super) fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        // A clock that went backwards (it cannot with Instant, but be safe) adds nothing.
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(rate.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / rate.per_second,
            ))
        }
    }
}

/// `Retry-After` in whole seconds for a wait: rounded up, at least 1.
pub(super) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_second: 2.0,
        burst: 3.0,
    };

    #[test]
    fn a_burst_then_the_refill_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::full(RATE, t0);
        for _ in 0..3 {
            assert_eq!(b.take(RATE, t0), Ok(()));
        }
        let wait = b.take(RATE, t0).expect_err("empty");
        assert_eq!(wait, Duration::from_millis(500));
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.take(RATE, t1), Ok(()));
        assert!(b.take(RATE, t1).is_err());
    }

    #[test]
    fn refill_stops_at_the_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::full(RATE, t0);
        assert_eq!(b.take(RATE, t0), Ok(()));
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(b.take(RATE, later), Ok(()));
        }
        assert!(b.take(RATE, later).is_err());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
