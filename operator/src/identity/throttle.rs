//! What keeps `Certify` cheap for the API server (pure, time given): a token bucket per caller
//! (per source IP before the review, per ServiceAccount after it), and the pods that reviewed
//! tokens proved, kept by the token's SHA-256 until the token expires, so a sidecar's retries and
//! renewals do not cost a TokenReview each. Both are bounded in entries.

use super::owner::BoundPod;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A bucket's size and refill.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rate {
    /// Requests allowed at once.
    pub burst: f64,
    /// Requests per second refilled.
    pub per_second: f64,
}

/// Per source IP: one pod certifies at start and then at two thirds of its certificate's life;
/// this leaves room for its retries and no more.
pub(crate) const PER_PEER: Rate = Rate {
    burst: 10.0,
    per_second: 0.5,
};

/// Per ServiceAccount (every pod of a namespace, when its workloads share one): a scale-up of a
/// hundred pods at once passes, a loop of requests does not.
pub(crate) const PER_SERVICE_ACCOUNT: Rate = Rate {
    burst: 100.0,
    per_second: 10.0,
};

/// Callers tracked at once; past it the one seen least recently is forgotten.
pub(crate) const MAX_CALLERS: usize = 4096;
/// Reviewed tokens kept at once.
pub(crate) const MAX_REVIEWS: usize = 10_000;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A token bucket per key.
pub(crate) struct RateLimiter<K> {
    rate: Rate,
    max_keys: usize,
    buckets: HashMap<K, Bucket>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// Every key starts with a full bucket.
    pub(crate) fn new(rate: Rate, max_keys: usize) -> Self {
        RateLimiter {
            rate,
            max_keys,
            buckets: HashMap::new(),
        }
    }

    /// Takes one request of `key`'s at `now`; `Err` holds how long until one is allowed.
    pub(crate) fn take(&mut self, key: &K, now: Instant) -> Result<(), Duration> {
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.max_keys {
            // The least recently seen is the one a forgotten bucket matters least for.
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(k, _)| k.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
        let rate = self.rate;
        let b = self.buckets.entry(key.clone()).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate.per_second).min(rate.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / rate.per_second))
        }
    }
}

/// A token's key in the cache: its SHA-256 (the token itself is never kept).
pub(crate) fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The `exp` claim of a JWT, unverified: read only after the API server accepted the token, to
/// know how long its review holds.
pub(crate) fn token_expiry(token: &str) -> Option<SystemTime> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    Some(UNIX_EPOCH + Duration::from_secs(exp))
}

/// Reviewed tokens and the pods they proved, until each token's expiry.
pub(crate) struct ReviewCache {
    max: usize,
    entries: HashMap<[u8; 32], (BoundPod, SystemTime)>,
}

impl ReviewCache {
    /// An empty cache of at most `max` tokens.
    pub(crate) fn new(max: usize) -> Self {
        ReviewCache {
            max,
            entries: HashMap::new(),
        }
    }

    /// The pod `key`'s token proved, while the token has not expired.
    pub(crate) fn get(&mut self, key: &[u8; 32], now: SystemTime) -> Option<BoundPod> {
        match self.entries.get(key) {
            Some((pod, until)) if *until > now => Some(pod.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps what `key`'s token proved until `until`. When full, expired entries go first, then
    /// the one expiring soonest.
    pub(crate) fn put(&mut self, key: [u8; 32], pod: BoundPod, until: SystemTime, now: SystemTime) {
        if until <= now {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max {
            self.entries.retain(|_, (_, u)| *u > now);
            if self.entries.len() >= self.max
                && let Some(soonest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, u))| *u)
                    .map(|(k, _)| *k)
            {
                self.entries.remove(&soonest);
            }
        }
        self.entries.insert(key, (pod, until));
    }

    /// Tokens kept (the tests count them).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> BoundPod {
        BoundPod {
            namespace: "ns".into(),
            service_account: "default".into(),
            name: name.into(),
            uid: "u".into(),
        }
    }

    #[test]
    fn a_caller_gets_its_burst_then_the_refill_rate() {
        let mut l = RateLimiter::new(
            Rate {
                burst: 3.0,
                per_second: 1.0,
            },
            16,
        );
        let t = Instant::now();
        for _ in 0..3 {
            assert!(l.take(&"a", t).is_ok());
        }
        let wait = l.take(&"a", t).expect_err("past the burst");
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(l.take(&"b", t).is_ok(), "another caller has its own bucket");
        assert!(l.take(&"a", t + Duration::from_millis(1100)).is_ok());
        assert!(l.take(&"a", t + Duration::from_millis(1100)).is_err());
    }

    #[test]
    fn callers_past_the_bound_forget_the_least_recent() {
        let rate = Rate {
            burst: 1.0,
            per_second: 0.001,
        };
        let mut l = RateLimiter::new(rate, 2);
        let t = Instant::now();
        assert!(l.take(&1, t).is_ok());
        assert!(l.take(&2, t + Duration::from_secs(1)).is_ok());
        assert!(l.take(&3, t + Duration::from_secs(2)).is_ok());
        assert_eq!(l.buckets.len(), 2);
        assert!(!l.buckets.contains_key(&1));
        assert!(
            l.take(&2, t + Duration::from_secs(3)).is_err(),
            "2 is still counted"
        );
    }

    #[test]
    fn a_review_holds_until_its_token_expires_and_the_cache_is_bounded() {
        let now = SystemTime::now();
        let mut c = ReviewCache::new(2);
        let (a, b, d) = (token_key("a"), token_key("b"), token_key("d"));
        c.put(a, pod("a"), now + Duration::from_secs(60), now);
        assert_eq!(c.get(&a, now), Some(pod("a")));
        assert_eq!(c.get(&a, now + Duration::from_secs(61)), None, "expired");
        assert!(c.is_empty(), "an expired entry is dropped when met");
        c.put(a, pod("a"), now + Duration::from_secs(10), now);
        c.put(b, pod("b"), now + Duration::from_secs(60), now);
        c.put(d, pod("d"), now + Duration::from_secs(60), now);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&a, now), None, "the one expiring soonest made room");
        c.put(token_key("x"), pod("x"), now, now);
        assert!(
            c.get(&token_key("x"), now).is_none(),
            "an expired token is not kept"
        );
    }

    #[test]
    fn the_expiry_is_the_tokens_exp_claim() {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"aud":["switchyard-identity"],"exp":1900000000}"#);
        let token = format!("eyJhbGciOiJSUzI1NiJ9.{claims}.c2ln");
        assert_eq!(
            token_expiry(&token),
            Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000))
        );
        assert_eq!(token_expiry("not-a-jwt"), None);
        assert_eq!(token_expiry("a.!!!.c"), None);
    }
}
