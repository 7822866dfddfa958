//! Pure: what to do with the Lease, judged by this replica's own clock.
//!
//! As client-go does, a foreign claim expires a lease duration after this replica last *saw the
//! record change*, not at `renewTime + leaseDuration`: the holder's clock and ours may disagree, so
//! the timestamps inside the record are only compared for equality. The holder, in turn, steps down
//! when it has not renewed for `renew_deadline` (< `duration`) measured from when it *sent* its last
//! successful renewal. Sent-before-written-before-observed, so the holder always stops before any
//! other replica may take over, even when a renewal call hangs.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;
use tokio::time::Instant;

/// How long claims last and how often they are renewed (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// How long a holder's claim lasts, as judged by the others.
    pub duration: Duration,
    /// How long the holder keeps leading without a successful renewal; shorter than `duration`.
    pub renew_deadline: Duration,
    /// How often the holder renews and a candidate retries.
    pub retry: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// What to do with the Lease as it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nobody holds it, or the holder's claim expired: take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live claim.
    Wait {
        /// The holder.
        holder: String,
    },
}

/// The parts of a Lease record whose change proves its holder is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    duration_s: Option<i32>,
    acquired: Option<Timestamp>,
    renewed: Option<Timestamp>,
    transitions: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Record {
        Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            duration_s: spec.lease_duration_seconds,
            acquired: spec.acquire_time.as_ref().map(|t| t.0),
            renewed: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions,
        }
    }
}

/// The last Lease record seen and when this replica first saw it (its own clock).
#[derive(Clone, Debug, Default)]
pub(crate) struct Observer {
    last: Option<(Record, Instant)>,
}

impl Observer {
    /// Notes the record read at `now`; the clock restarts only when the record changed.
    pub(crate) fn observe(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        let Some(spec) = spec else {
            self.last = None;
            return;
        };
        let record = Record::of(spec);
        if self.last.as_ref().is_none_or(|(r, _)| *r != record) {
            self.last = Some((record, now));
        }
    }

    /// Decides for `me` at `now`, from what was observed.
    pub(crate) fn decide(&self, me: &str, now: Instant) -> Decision {
        let Some((record, seen)) = &self.last else {
            return Decision::Acquire;
        };
        if record.holder.is_empty() {
            return Decision::Acquire;
        }
        if record.holder == me {
            return Decision::Renew;
        }
        // A record without a usable duration gets client-go's default rather than none at all.
        let secs = record.duration_s.filter(|d| *d > 0).unwrap_or(15);
        let lasts = Duration::from_secs(u64::try_from(secs).unwrap_or(15));
        if now.saturating_duration_since(*seen) < lasts {
            Decision::Wait {
                holder: record.holder.clone(),
            }
        } else {
            Decision::Acquire
        }
    }
}

/// How long the holder may still wait for a renewal: the rest of `renew_deadline` since the last
/// successful renewal was sent. None when it is spent and the holder must step down.
pub(crate) fn renew_budget(
    last_renewed: Instant,
    timing: &Timing,
    now: Instant,
) -> Option<Duration> {
    let deadline = last_renewed + timing.renew_deadline;
    let left = deadline.saturating_duration_since(now);
    (!left.is_zero()).then_some(left)
}

/// The Lease spec after `me` acquires or renews it at wall-clock `now` (written for others to see;
/// they compare it only for change).
pub(crate) fn claimed(
    old: Option<&LeaseSpec>,
    me: &str,
    timing: &Timing,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = old.and_then(|s| s.holder_identity.as_deref()) == Some(me);
    let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(i32::try_from(timing.duration.as_secs()).unwrap_or(15)),
        acquire_time: if renewing {
            old.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing {
            transitions
        } else {
            transitions + 1
        }),
        ..LeaseSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    fn held_by(who: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn missing_or_empty_lease_is_acquired() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        assert_eq!(o.decide("a", t0), Decision::Acquire);
        o.observe(None, t0);
        assert_eq!(o.decide("a", t0), Decision::Acquire);
        o.observe(Some(&LeaseSpec::default()), t0);
        assert_eq!(o.decide("a", t0), Decision::Acquire);
    }

    #[test]
    fn own_lease_is_renewed() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        o.observe(Some(&held_by("a", 99)), t0);
        assert_eq!(o.decide("a", t0), Decision::Renew);
    }

    #[test]
    fn a_foreign_claim_expires_a_duration_after_it_was_last_seen_changing() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut o = Observer::default();
        o.observe(Some(&held_by("b", 90)), t0);
        o.observe(Some(&held_by("b", 90)), t0 + s(10));
        assert_eq!(
            o.decide("a", t0 + s(14)),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(o.decide("a", t0 + s(15)), Decision::Acquire);
        // A renewal restarts the clock: seen at t0+12, alive until t0+27.
        o.observe(Some(&held_by("b", 92)), t0 + s(12));
        assert_eq!(
            o.decide("a", t0 + s(26)),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(o.decide("a", t0 + s(27)), Decision::Acquire);
    }

    #[test]
    fn the_holders_clock_does_not_matter() {
        // renewTime far in the past or future (skewed clocks): only the local observation counts.
        let t0 = Instant::now();
        let mut o = Observer::default();
        o.observe(Some(&held_by("b", 1)), t0);
        assert_eq!(
            o.decide("a", t0 + Duration::from_secs(1)),
            Decision::Wait { holder: "b".into() }
        );
        let mut o = Observer::default();
        o.observe(Some(&held_by("b", 4_000_000_000)), t0);
        assert_eq!(
            o.decide("a", t0 + Duration::from_secs(16)),
            Decision::Acquire
        );
    }

    #[test]
    fn the_renewal_budget_is_what_is_left_of_the_deadline() {
        let t = Timing::default();
        let t0 = Instant::now();
        assert_eq!(renew_budget(t0, &t, t0), Some(Duration::from_secs(10)));
        assert_eq!(
            renew_budget(t0, &t, t0 + Duration::from_secs(7)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(renew_budget(t0, &t, t0 + Duration::from_secs(10)), None);
        assert_eq!(renew_budget(t0, &t, t0 + Duration::from_secs(30)), None);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let t = Timing::default();
        let taken = claimed(Some(&held_by("b", 1)), "a", &t, at(50));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(50))));
        let renewed = claimed(Some(&taken), "a", &t, at(52));
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(50))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(52))));
    }
}
