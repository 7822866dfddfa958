//! Rate limit: a token bucket per client key (peer IP or a header), with a bounded number of keys.
//!
//! Buckets live in LRU maps split in shards (one lock per shard, not per process); when a shard is
//! full the bucket idle the longest is dropped, so memory is bounded whatever clients send. A dropped
//! bucket comes back full, which only ever errs toward admitting.

use super::bucket::{Bucket, Rate, retry_after_secs};
use super::gate::{Denial, Gate, Head, Token};
use hyper::header::HeaderName;
use lru::LruCache;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Instant;
use switchyard_crds::router::{RateLimit, RateLimitKey};

/// Lock shards; a power of two well above the core count keeps contention low.
const SHARDS: usize = 16;
/// Buckets kept per shard (65536 clients in all, a few MB at most).
const PER_SHARD: usize = 4096;
/// Longest header value used as a key; longer values are cut (they still limit, just coarser).
const MAX_KEY: usize = 256;

/// What identifies a client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Ip(IpAddr),
    Header(Box<[u8]>),
}

/// The rate-limit gate.
pub(crate) struct Limiter {
    rate: Rate,
    header: Option<HeaderName>,
    hasher: RandomState,
    shards: Box<[Mutex<LruCache<Key, Bucket>>]>,
}

impl Limiter {
    /// Builds the limiter; errors name the sub-field (e.g. `.header`) and the problem.
    pub(crate) fn build(spec: &RateLimit) -> Result<Limiter, (&'static str, String)> {
        if spec.requests_per_second < 1 {
            return Err((".requestsPerSecond", "must be at least 1".into()));
        }
        if spec.burst < spec.requests_per_second {
            return Err((".burst", "must be at least requestsPerSecond".into()));
        }
        let header = match spec.key {
            RateLimitKey::ClientIp => None,
            RateLimitKey::Header => {
                let name = spec
                    .header
                    .as_deref()
                    .ok_or((".header", "key: header needs the header field".to_owned()))?;
                Some(
                    HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| (".header", format!("{name:?} is not a header name")))?,
                )
            }
        };
        Ok(Limiter::new(
            Rate {
                per_second: f64::from(spec.requests_per_second),
                burst: f64::from(spec.burst),
            },
            header,
        ))
    }

    fn new(rate: Rate, header: Option<HeaderName>) -> Limiter {
        let cap = NonZeroUsize::new(PER_SHARD).unwrap_or(NonZeroUsize::MIN);
        Limiter {
            rate,
            header,
            hasher: RandomState::new(),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(cap)))
                .collect(),
        }
    }

    fn key(&self, head: &Head<'_>) -> Key {
        // Without the header the client is limited by its address instead.
        match self.header.as_ref().and_then(|h| head.headers.get(h)) {
            Some(v) => {
                let b = v.as_bytes();
                Key::Header(b[..b.len().min(MAX_KEY)].into())
            }
            None => Key::Ip(head.peer),
        }
    }

    /// Takes a token for `key` at `now`; `Err` is the wait in whole seconds.
    fn take(&self, key: Key, now: Instant) -> Result<(), u64> {
        let shard = &self.shards[(self.hasher.hash_one(&key) as usize) % SHARDS];
        let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = map.get_or_insert_mut(key, || Bucket::full(self.rate, now));
        bucket.take(self.rate, now).map_err(retry_after_secs)
    }

    /// Buckets held, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

impl Gate for Limiter {
    fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial> {
        self.take(self.key(head), Instant::now())
            .map(|()| None)
            .map_err(|secs| Denial {
                middleware: "rateLimit",
                reason: "exhausted",
                status: 429,
                detail: format!("rate limit reached for this client; retry in {secs}s"),
                challenge: None,
                retry_after: Some(secs),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::HeaderMap;
    use std::time::Duration;

    fn limiter(header: Option<&str>) -> Limiter {
        Limiter::new(
            Rate {
                per_second: 1.0,
                burst: 2.0,
            },
            header.map(|h| HeaderName::from_bytes(h.as_bytes()).expect("name")),
        )
    }

    #[test]
    fn each_client_has_its_own_bucket() {
        let l = limiter(None);
        let t = Instant::now();
        let a = Key::Ip("10.0.0.1".parse().expect("ip"));
        let b = Key::Ip("10.0.0.2".parse().expect("ip"));
        assert_eq!(l.take(a.clone(), t), Ok(()));
        assert_eq!(l.take(a.clone(), t), Ok(()));
        assert_eq!(l.take(a.clone(), t), Err(1));
        assert_eq!(l.take(b, t), Ok(()));
        assert_eq!(l.take(a, t + Duration::from_secs(1)), Ok(()));
    }

    #[test]
    fn header_key_falls_back_to_the_peer() {
        let l = limiter(Some("x-client"));
        let mut headers = HeaderMap::new();
        let peer: IpAddr = "10.0.0.9".parse().expect("ip");
        assert_eq!(
            l.key(&Head {
                headers: &headers,
                peer
            }),
            Key::Ip(peer)
        );
        headers.insert("x-client", "alice".parse().expect("value"));
        assert_eq!(
            l.key(&Head {
                headers: &headers,
                peer
            }),
            Key::Header(b"alice".as_slice().into())
        );
    }

    #[test]
    fn tracked_keys_are_bounded() {
        let l = limiter(Some("x-client"));
        let t = Instant::now();
        for i in 0..(SHARDS * PER_SHARD * 2) {
            let _ = l.take(Key::Header(i.to_string().into_bytes().into()), t);
        }
        assert!(l.len() <= SHARDS * PER_SHARD, "{}", l.len());
    }

    #[test]
    fn denial_is_429_with_retry_after() {
        let l = limiter(None);
        let headers = HeaderMap::new();
        let head = Head {
            headers: &headers,
            peer: "10.0.0.1".parse().expect("ip"),
        };
        assert!(l.check(&head).is_ok());
        assert!(l.check(&head).is_ok());
        let d = l.check(&head).expect_err("limited");
        assert_eq!(
            (d.status, d.retry_after, d.reason),
            (429, Some(1), "exhausted")
        );
    }

    #[test]
    fn build_checks_fields() {
        let spec = RateLimit {
            requests_per_second: 5,
            burst: 1,
            key: RateLimitKey::ClientIp,
            header: None,
        };
        assert_eq!(Limiter::build(&spec).err().map(|e| e.0), Some(".burst"));
        let spec = RateLimit {
            requests_per_second: 1,
            burst: 1,
            key: RateLimitKey::Header,
            header: None,
        };
        assert_eq!(Limiter::build(&spec).err().map(|e| e.0), Some(".header"));
    }
}
