//! Polling with a deadline: every assertion about the cluster is "eventually", never a fixed sleep.

use anyhow::{Result, anyhow};
use std::future::Future;
use std::time::{Duration, Instant};

/// Default deadline of one "eventually": `SWITCHYARD_E2E_TIMEOUT` seconds, 60 by default.
pub fn timeout() -> Duration {
    let secs = std::env::var("SWITCHYARD_E2E_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// Calls `check` every 250 ms until it returns `Ok`, and returns that value. After `within` it
/// fails with `what` and the last error `check` returned (which should say what it saw).
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if start.elapsed() >= within {
            return Err(anyhow!(
                "timed out after {within:?} waiting for {what}; last observation: {last:#}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
