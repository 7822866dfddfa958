//! When the key set is fetched again: its cache lifetime (the response's `Cache-Control`, kept
//! within bounds), the wait after a failed fetch, and the rate limit on early fetches a token with
//! an unknown `kid` asks for. Pure, so the rules are tested without an issuer.

use std::time::{Duration, Instant};

/// Shortest cache lifetime: an issuer saying `no-store` or `max-age=0` is still not fetched per
/// request.
pub(super) const MIN_LIFETIME: Duration = Duration::from_secs(60);
/// Longest cache lifetime: keys an issuer removed stop being accepted within a day at most.
pub(super) const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Lifetime of a key set whose answer had no `max-age`.
pub(super) const DEFAULT_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Wait after a failed fetch before the next scheduled one.
pub(super) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10);
/// Least time between two early fetches asked for by tokens (an unknown `kid`, no keys yet), so
/// tokens with made-up key ids cannot make the sidecar hammer the issuer.
pub(super) const EARLY_FETCH_INTERVAL: Duration = Duration::from_secs(10);
/// Longest a request waits for an early fetch before it is decided with the keys at hand.
pub(super) const EARLY_FETCH_WAIT: Duration = Duration::from_secs(3);

/// How long a key set fetched with this `Cache-Control` value is used before fetching it again.
pub(super) fn lifetime(cache_control: Option<&str>) -> Duration {
    let Some(value) = cache_control else {
        return DEFAULT_LIFETIME;
    };
    let mut max_age = None;
    for directive in value.split(',').map(str::trim) {
        let (name, arg) = match directive.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
            None => (directive, None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            return MIN_LIFETIME;
        }
        if name.eq_ignore_ascii_case("max-age") {
            max_age = arg.and_then(|a| a.parse::<u64>().ok());
        }
    }
    max_age.map_or(DEFAULT_LIFETIME, |secs| {
        Duration::from_secs(secs).clamp(MIN_LIFETIME, MAX_LIFETIME)
    })
}

/// The rate limit on early fetches: at most one per [`EARLY_FETCH_INTERVAL`].
#[derive(Debug, Default)]
pub(super) struct EarlyFetches {
    last: Option<Instant>,
}

impl EarlyFetches {
    /// Whether an early fetch may start at `now`; if so, it is counted.
    pub(super) fn try_start(&mut self, now: Instant) -> bool {
        let allowed = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= EARLY_FETCH_INTERVAL);
        if allowed {
            self.last = Some(now);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_followed_within_bounds() {
        assert_eq!(
            lifetime(Some("public, max-age=3600")),
            Duration::from_secs(3600)
        );
        assert_eq!(lifetime(Some("max-age=\"600\"")), Duration::from_secs(600));
        assert_eq!(lifetime(Some("max-age=5")), MIN_LIFETIME);
        assert_eq!(lifetime(Some("max-age=0, must-revalidate")), MIN_LIFETIME);
        assert_eq!(lifetime(Some("max-age=31536000")), MAX_LIFETIME);
        assert_eq!(lifetime(Some("no-store")), MIN_LIFETIME);
        assert_eq!(lifetime(Some("private, No-Cache")), MIN_LIFETIME);
    }

    #[test]
    fn no_or_unreadable_max_age_takes_the_default() {
        assert_eq!(lifetime(None), DEFAULT_LIFETIME);
        assert_eq!(lifetime(Some("public")), DEFAULT_LIFETIME);
        assert_eq!(lifetime(Some("max-age=soon")), DEFAULT_LIFETIME);
        assert_eq!(lifetime(Some("max-age=-5")), DEFAULT_LIFETIME);
    }

    #[test]
    fn early_fetches_are_one_per_interval() {
        let t0 = Instant::now();
        let mut e = EarlyFetches::default();
        assert!(e.try_start(t0), "the first is allowed");
        assert!(!e.try_start(t0), "a second at once is not");
        assert!(!e.try_start(t0 + EARLY_FETCH_INTERVAL - Duration::from_millis(1)));
        assert!(
            e.try_start(t0 + EARLY_FETCH_INTERVAL),
            "allowed again after the interval"
        );
        assert!(!e.try_start(t0 + EARLY_FETCH_INTERVAL + Duration::from_secs(1)));
    }
}
