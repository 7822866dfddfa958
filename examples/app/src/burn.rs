//! The `burn` event: spends a fixed amount of CPU time, so scaling benches have a handler whose cost is known.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// CPU time burned when the event carries no `ms`.
pub const DEFAULT_BURN_MS: u64 = 2;
/// Upper bound of `ms`, so one event cannot hold a core for long.
pub const MAX_BURN_MS: u64 = 1000;

/// Runs burns off the async workers, at most one per core at a time: a CPU-bound handler can't do more in
/// parallel anyway, and keeping the async workers free keeps `/healthz` and cheap events answering while burns
/// queue.
#[derive(Clone)]
pub struct Burner {
    cores: Arc<Semaphore>,
}

impl Burner {
    /// A burner allowing one burn per available core.
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Burner {
            cores: Arc::new(Semaphore::new(cores)),
        }
    }

    /// Burns `ms` milliseconds of CPU on a blocking thread.
    pub async fn burn(&self, ms: u64) {
        // The semaphore is never closed, so acquiring only fails if it was; then burning unthrottled is the
        // least surprising fallback.
        let permit = Arc::clone(&self.cores).acquire_owned().await.ok();
        let done = tokio::task::spawn_blocking(move || {
            spin(Duration::from_millis(ms));
            drop(permit);
        });
        // A panic inside `spin` is impossible short of a broken clock; either way the request still gets its
        // answer.
        let _ = done.await;
    }
}

impl Default for Burner {
    fn default() -> Self {
        Self::new()
    }
}

/// Busy-loops until `d` of wall time has passed on this thread (with one burn per core, wall time ≈ CPU time).
fn spin(d: Duration) {
    let start = Instant::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while start.elapsed() < d {
        // Some real arithmetic between clock reads, kept alive by black_box so the loop is not optimised away.
        for _ in 0..256 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

/// Reads `ms` from the event data: empty data means the default; otherwise a JSON object whose optional `ms` is a
/// non-negative integer, capped at [`MAX_BURN_MS`].
pub fn parse_ms(body: &[u8]) -> Result<u64, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DEFAULT_BURN_MS);
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("event data is not JSON: {e}"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| "event data must be a JSON object like {\"ms\": 2}".to_owned())?;
    match obj.get("ms") {
        None | Some(serde_json::Value::Null) => Ok(DEFAULT_BURN_MS),
        Some(v) => v
            .as_u64()
            .map(|ms| ms.min(MAX_BURN_MS))
            .ok_or_else(|| format!("ms: must be a non-negative integer, got {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_defaults_caps_and_rejects() {
        assert_eq!(parse_ms(b""), Ok(DEFAULT_BURN_MS));
        assert_eq!(parse_ms(b"{}"), Ok(DEFAULT_BURN_MS));
        assert_eq!(parse_ms(br#"{"ms":5}"#), Ok(5));
        assert_eq!(parse_ms(br#"{"ms":999999}"#), Ok(MAX_BURN_MS));
        assert!(parse_ms(br#"{"ms":-1}"#).is_err_and(|e| e.starts_with("ms:")));
        assert!(parse_ms(br#"{"ms":"x"}"#).is_err());
        assert!(parse_ms(b"[1]").is_err());
        assert!(parse_ms(b"nope").is_err());
    }

    #[test]
    fn spin_takes_about_the_time_asked() {
        let start = Instant::now();
        spin(Duration::from_millis(3));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(3), "{took:?}");
        assert!(took < Duration::from_millis(500), "{took:?}");
    }
}
