//! A sliding window of load samples for one (Manager, event type), averaged over the stable and
//! panic windows (pure: times are passed in).

use std::collections::VecDeque;

/// Most samples kept: one per second for an hour, whatever window a spec asks for.
pub(crate) const MAX_SAMPLES: usize = 3600;

/// The load of one event type at one moment, summed over the pods that reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Arrivals per second.
    pub rate: f64,
    /// Events in flight (including queued ones).
    pub in_flight: f64,
    /// Worst 99th percentile latency of the reporting pods, in milliseconds.
    pub p99_ms: f64,
    /// Events refused because a bound was reached, per second (shown in the status; the
    /// decisions do not read it: a shed event is load the pods could not take, already counted
    /// in the arrivals).
    pub shed: f64,
}

/// Samples over time, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Window {
    samples: VecDeque<(u64, Sample)>,
}

impl Window {
    /// Adds the sample taken at `now_ms` and forgets samples older than `keep_ms`.
    pub(crate) fn push(&mut self, now_ms: u64, sample: Sample, keep_ms: u64) {
        self.samples.push_back((now_ms, sample));
        let oldest = now_ms.saturating_sub(keep_ms);
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| *t < oldest || self.samples.len() > MAX_SAMPLES)
        {
            self.samples.pop_front();
        }
    }

    /// The mean of the samples taken in the last `span_ms` before `now_ms`; None without samples.
    pub(crate) fn average(&self, now_ms: u64, span_ms: u64) -> Option<Sample> {
        let since = now_ms.saturating_sub(span_ms);
        let mut n = 0u32;
        let mut sum = Sample::default();
        for (_, s) in self.samples.iter().rev().take_while(|(t, _)| *t > since) {
            n += 1;
            sum.rate += s.rate;
            sum.in_flight += s.in_flight;
            sum.p99_ms = sum.p99_ms.max(s.p99_ms);
            sum.shed += s.shed;
        }
        (n > 0).then(|| Sample {
            rate: sum.rate / f64::from(n),
            in_flight: sum.in_flight / f64::from(n),
            p99_ms: sum.p99_ms,
            shed: sum.shed / f64::from(n),
        })
    }

    /// The sample taken at `now_ms`, if this tick took one (an older one is not news: the pods
    /// that reported it may have stopped).
    pub(crate) fn taken_at(&self, now_ms: u64) -> Option<Sample> {
        self.samples
            .back()
            .filter(|(t, _)| *t == now_ms)
            .map(|(_, s)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(rate: f64) -> Sample {
        Sample {
            rate,
            in_flight: rate / 10.0,
            p99_ms: rate,
            shed: rate / 100.0,
        }
    }

    #[test]
    fn averages_only_the_span_asked() {
        let mut w = Window::default();
        for t in 1..=10u64 {
            w.push(t * 1000, s(if t > 8 { 100.0 } else { 0.0 }), 60_000);
        }
        let recent = w.average(10_000, 2_000).expect("samples");
        assert_eq!(recent.rate, 100.0);
        let all = w.average(10_000, 60_000).expect("samples");
        assert_eq!(all.rate, 20.0);
        assert_eq!(all.p99_ms, 100.0);
        assert_eq!(all.shed, 0.2, "the mean, as the rate's");
    }

    #[test]
    fn forgets_old_samples() {
        let mut w = Window::default();
        w.push(1_000, s(50.0), 5_000);
        w.push(10_000, s(10.0), 5_000);
        assert_eq!(w.average(10_000, 60_000).map(|a| a.rate), Some(10.0));
        assert!(w.average(100_000, 5_000).is_none());
        assert_eq!(w.taken_at(10_000).map(|a| a.rate), Some(10.0));
        assert!(w.taken_at(11_000).is_none(), "not news a tick later");
    }
}
