//! A connection's timers (pure): what it has done ([`Activity`], updated by the request path) and
//! when it is due to be asked to end or to be closed ([`next`]), with time passed in.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a connection may wait for its first request, sit idle, and live. `None` turns a
/// timer off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// From accept to the first request.
    pub first_byte: Option<Duration>,
    /// With no request in flight, after the first.
    pub idle: Option<Duration>,
    /// From accept to the GOAWAY (or `Connection: close`) for age, jitter included.
    pub max_age: Option<Duration>,
    /// From that GOAWAY to the close.
    pub max_age_grace: Duration,
}

impl Timeouts {
    /// No timer at all (the accept loop's drain still applies).
    pub(crate) const NONE: Timeouts = Timeouts {
        first_byte: None,
        idle: None,
        max_age: None,
        max_age_grace: Duration::ZERO,
    };
}

/// How long a connection told to end for idleness (or for sending nothing) has before it is closed:
/// it has no request in flight by definition, so this only covers a request that crossed the
/// GOAWAY and the client's answer to the GOAWAY's PING.
pub(crate) const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What a connection's requests did, shared by its request path (writes) and its watcher (reads).
/// Two atomic updates per request; nothing wakes the watcher, which re-reads when a deadline passes.
#[derive(Debug)]
pub(crate) struct Activity {
    started: Instant,
    requested: AtomicBool,
    in_flight: AtomicU32,
    /// When the last request ended, as nanoseconds after `started`.
    idle_since: AtomicU64,
}

impl Activity {
    /// A connection accepted at `started`.
    pub(crate) fn new(started: Instant) -> Activity {
        Activity {
            started,
            requested: AtomicBool::new(false),
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
        }
    }

    /// When the connection was accepted.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// A request arrived (its head is complete); it is in flight until [`Activity::end_at`].
    pub(crate) fn begin(&self) {
        self.requested.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A request that [`Activity::begin`] counted ended at `now` (its answer was sent or dropped).
    pub(crate) fn end_at(&self, now: Instant) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let nanos = now.saturating_duration_since(self.started).as_nanos();
            // The latest end wins even when two requests' ends race here.
            self.idle_since
                .fetch_max(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::AcqRel);
        }
    }

    /// The state the timers read.
    pub(crate) fn seen(&self) -> Seen {
        let in_flight = self.in_flight.load(Ordering::Acquire);
        Seen {
            requested: self.requested.load(Ordering::Relaxed),
            in_flight: in_flight > 0,
            idle_since: self.started
                + Duration::from_nanos(self.idle_since.load(Ordering::Acquire)),
        }
    }
}

/// A snapshot of [`Activity`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// A request has arrived.
    pub requested: bool,
    /// A request is in flight now.
    pub in_flight: bool,
    /// When the last request ended.
    pub idle_since: Instant,
}

/// Which timer is due; its `label` is the closed-connection metric's `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// No request within the first-byte timeout: ask it to end.
    FirstByte,
    /// No request in flight for the idle timeout: ask it to end.
    Idle,
    /// Reached its maximum age: ask it to end.
    MaxAge,
    /// Asked to end and still open at the end of its grace: close it.
    Grace,
}

impl Due {
    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Due::FirstByte => "first_byte_timeout",
            Due::Idle => "idle_timeout",
            Due::MaxAge => "max_connection_age",
            Due::Grace => "grace_expired",
        }
    }
}

/// The next timer of a connection and when it is due; `closing` is the close deadline once the
/// connection was asked to end (then nothing else matters). `None`: no timer is on.
pub(crate) fn next(
    t: &Timeouts,
    started: Instant,
    seen: Seen,
    closing: Option<Instant>,
) -> Option<(Instant, Due)> {
    if let Some(at) = closing {
        return Some((at, Due::Grace));
    }
    let age = t.max_age.map(|a| (started + a, Due::MaxAge));
    let quiet = if !seen.requested {
        t.first_byte.map(|f| (started + f, Due::FirstByte))
    } else if seen.in_flight {
        None
    } else {
        t.idle.map(|i| (seen.idle_since + i, Due::Idle))
    };
    match (age, quiet) {
        (Some(a), Some(q)) => Some(if q.0 < a.0 { q } else { a }),
        (a, q) => a.or(q),
    }
}

/// The grace a connection gets after it was asked to end for `due`.
pub(crate) fn grace(t: &Timeouts, due: Due) -> Duration {
    match due {
        Due::MaxAge => t.max_age_grace,
        Due::FirstByte | Due::Idle | Due::Grace => IDLE_CLOSE_GRACE,
    }
}

/// `age` spread by `jitter` in [0, 1): from 90 % to 100 % of it, so connections opened together
/// (a client fleet after a rollout) do not all reconnect at once.
pub(crate) fn jittered(age: Duration, jitter: f64) -> Duration {
    age.mul_f64(1.0 - 0.1 * jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn timeouts() -> Timeouts {
        Timeouts {
            first_byte: Some(100 * MS),
            idle: Some(300 * MS),
            max_age: Some(1000 * MS),
            max_age_grace: 50 * MS,
        }
    }

    #[test]
    fn a_silent_connection_is_due_at_the_first_byte_timeout() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        assert_eq!(
            next(&timeouts(), t0, a.seen(), None),
            Some((t0 + 100 * MS, Due::FirstByte))
        );
    }

    #[test]
    fn a_request_in_flight_holds_off_idleness_but_not_age() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        a.begin();
        assert_eq!(
            next(&timeouts(), t0, a.seen(), None),
            Some((t0 + 1000 * MS, Due::MaxAge))
        );
        a.end_at(t0 + 20 * MS);
        let seen = a.seen();
        assert!(seen.requested && !seen.in_flight);
        let (at, due) = next(&timeouts(), t0, seen, None).expect("a timer");
        assert_eq!(due, Due::Idle);
        assert_eq!(at, t0 + 320 * MS);
    }

    #[test]
    fn idleness_counts_from_the_last_request_of_several() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        a.begin();
        a.begin();
        a.end_at(t0 + 10 * MS); // one of the two ends: still busy
        assert!(a.seen().in_flight);
        assert_eq!(
            next(&timeouts(), t0, a.seen(), None).map(|n| n.1),
            Some(Due::MaxAge)
        );
        a.end_at(t0 + 40 * MS);
        assert!(!a.seen().in_flight);
        assert_eq!(
            next(&timeouts(), t0, a.seen(), None),
            Some((t0 + 340 * MS, Due::Idle))
        );
    }

    #[test]
    fn age_wins_when_it_comes_first_and_off_timers_are_skipped() {
        let t0 = Instant::now();
        let mut t = timeouts();
        t.first_byte = Some(5000 * MS);
        let a = Activity::new(t0);
        assert_eq!(
            next(&t, t0, a.seen(), None),
            Some((t0 + 1000 * MS, Due::MaxAge))
        );
        assert_eq!(next(&Timeouts::NONE, t0, a.seen(), None), None);
        let idle_only = Timeouts {
            idle: Some(MS),
            ..Timeouts::NONE
        };
        // Before a first request only the first-byte timer counts, and it is off.
        assert_eq!(next(&idle_only, t0, a.seen(), None), None);
    }

    #[test]
    fn once_closing_only_the_grace_counts() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let at = t0 + 7 * MS;
        assert_eq!(
            next(&timeouts(), t0, a.seen(), Some(at)),
            Some((at, Due::Grace))
        );
        assert_eq!(grace(&timeouts(), Due::MaxAge), 50 * MS);
        assert_eq!(grace(&timeouts(), Due::Idle), IDLE_CLOSE_GRACE);
    }

    #[test]
    fn jitter_stays_within_ten_percent_below() {
        let age = Duration::from_secs(100);
        assert_eq!(jittered(age, 0.0), age);
        assert!(jittered(age, 0.999) > Duration::from_secs(90));
        assert_eq!(jittered(age, 7.0), Duration::from_secs(90));
    }
}
