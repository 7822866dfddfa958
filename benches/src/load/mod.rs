//! The load generator's drivers: one connection per worker, each worker keeps its own histogram, and
//! the histograms are merged at the end, so workers share nothing while they run.

pub mod frames;
pub mod grpc;
pub mod grpc_stream;
pub mod http;
pub mod jetstream;
pub mod wrk;
pub mod ws;

use crate::report::{self, Measured};
use hdrhistogram::Histogram;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// When a run measures: requests completing before `start` are warm-up and not recorded.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// When the run (warm-up included) began.
    pub begin: Instant,
    /// Start of the measured window.
    pub start: Instant,
    /// End of the run.
    pub end: Instant,
}

impl Window {
    /// A window that starts after `warmup` and lasts `duration`.
    pub fn new(warmup: Duration, duration: Duration) -> Window {
        let begin = Instant::now();
        let start = begin + warmup;
        Window {
            begin,
            start,
            end: start + duration,
        }
    }
}

/// What one worker saw.
pub struct Tally {
    /// Latencies of successful requests in the window.
    pub hist: Histogram<u64>,
    /// Failures in the window.
    pub errors: u64,
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        Tally {
            hist: report::histogram(),
            errors: 0,
        }
    }

    /// Counts one request that was sent at `sent` and ended now, if it ended in the window.
    pub fn count(&mut self, w: &Window, sent: Instant, ok: bool) {
        let now = Instant::now();
        if now < w.start {
            return;
        }
        if ok {
            report::record(&mut self.hist, now - sent);
        } else {
            self.errors += 1;
        }
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

/// Runs `concurrency` workers (`make(i)` builds worker `i`) and merges what they saw.
pub async fn run_workers<F, Fut>(concurrency: usize, w: Window, make: F) -> Measured
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let handles: Vec<_> = (0..concurrency).map(|i| tokio::spawn(make(i))).collect();
    let mut hist = report::histogram();
    let mut errors = 0;
    for h in handles {
        match h.await {
            Ok(t) => {
                // Same bounds on both sides, so adding cannot fail.
                let _ = hist.add(&t.hist);
                errors += t.errors;
            }
            Err(_) => errors += 1,
        }
    }
    let end = Instant::now().max(w.start);
    Measured {
        hist,
        errors,
        elapsed: end.saturating_duration_since(w.start),
    }
}

/// A pause after a failed connect, so a dead target is not hammered in a spin.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(50);
