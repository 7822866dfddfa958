//! Exponential backoff with jitter, shared by reconnects and delivery retries. Pure.

use std::time::Duration;

/// Delay before retry number `attempt` (0-based): `base * 2^attempt`, capped at `max`, then jittered
/// into `[d/2, d]` with `unit` in `[0, 1)` so that peers failing together do not retry together.
pub fn delay(base: Duration, max: Duration, attempt: u32, unit: f64) -> Duration {
    let factor = 2u32.saturating_pow(attempt.min(31));
    let d = base.saturating_mul(factor).min(max);
    let unit = unit.clamp(0.0, 1.0);
    d / 2 + d.mul_f64(unit / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
