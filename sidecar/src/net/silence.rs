//! Telling a peer that went quiet from one that is busy, without a timer per frame.
//!
//! A `timeout` around each read reads the clock and, when the read is pending, registers a timer
//! and drops it again: once per frame on a busy connection. Instead the reader marks that it heard
//! something, and a ticker [`TICKS`] times per period looks at the mark. A peer is quiet once
//! [`TICKS`] ticks in a row heard nothing: between one period and one period and a tick after its
//! last frame.

use std::time::Duration;
use tokio::time::{Interval, MissedTickBehavior};

/// Ticks per period: the detection is late by at most a tick, a third of the period.
pub(crate) const TICKS: u32 = 3;

/// Whether a peer sent anything within the last ticks.
#[derive(Debug, Default)]
pub(crate) struct Silence {
    heard: bool,
    quiet_ticks: u32,
}

impl Silence {
    /// The peer sent a frame.
    pub(crate) fn heard(&mut self) {
        self.heard = true;
    }

    /// A tick passed; true once [`TICKS`] ticks in a row heard nothing.
    pub(crate) fn tick(&mut self) -> bool {
        if std::mem::take(&mut self.heard) {
            self.quiet_ticks = 0;
        } else {
            self.quiet_ticks += 1;
        }
        self.quiet_ticks >= TICKS
    }
}

/// The ticker for a peer quiet after `period`: its first tick one tick from now, not at once.
pub(crate) fn ticker(period: Duration) -> Interval {
    let every = period / TICKS;
    let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A runtime too busy to tick on time must not count the missed ticks as quiet ones.
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_in_any_tick_keeps_the_peer_alive() {
        let mut s = Silence::default();
        for _ in 0..10 {
            assert!(!s.tick(), "quiet too early");
            s.heard();
        }
        // Two quiet ticks, then a frame: the count starts again.
        assert!(!s.tick());
        assert!(!s.tick());
        s.heard();
        assert!(!s.tick());
        assert!(!s.tick());
        assert!(!s.tick());
        assert!(s.tick(), "three ticks without a frame");
    }

    #[test]
    fn quiet_after_exactly_ticks_ticks() {
        let mut s = Silence::default();
        let ticks = (1..=10).find(|_| s.tick());
        assert_eq!(ticks, Some(TICKS));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_peer_is_told_between_one_period_and_a_tick_more() {
        let period = Duration::from_secs(15);
        let start = tokio::time::Instant::now();
        let mut t = ticker(period);
        let mut s = Silence::default();
        // A frame just after the start, then nothing.
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.heard();
        loop {
            t.tick().await;
            if s.tick() {
                break;
            }
        }
        let quiet = start.elapsed() - Duration::from_millis(100);
        assert!(quiet >= period, "told after {quiet:?}");
        assert!(quiet <= period + period / TICKS, "told after {quiet:?}");
    }
}
