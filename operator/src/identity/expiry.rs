//! What the `MeshTrust` condition says about the ends of the mesh's trust (pure): the first
//! trust anchor to expire and the issuer that signs. The same rule as `switchyard check`: wrong
//! once either has expired, a warning within [`WARN_BEFORE`] of the first end. The message names
//! dates, not durations, so it changes only when the CA does and the condition is written once per
//! change, not once a tick on every Router and Manager.

use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, SystemTime};
use switchyard_identity::trust::epoch_seconds;

/// How long before an end the condition turns False (as `switchyard check` warns).
pub(crate) const WARN_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// `True` or `False`.
    pub status: &'static str,
    /// `Valid`, `ExpiresSoon` or `Expired`.
    pub reason: &'static str,
    /// The ends, and what to do.
    pub message: String,
}

/// The verdict on `anchors` (the ends of the trust anchors in the bundle) and `issuer` (the end
/// of the signing issuer) at `now`; None when neither end is known.
pub(crate) fn verdict(
    anchors: &[SystemTime],
    issuer: Option<SystemTime>,
    now: SystemTime,
) -> Option<Verdict> {
    let anchor = anchors.iter().min().copied();
    let mut ends: Vec<(&str, SystemTime)> = Vec::new();
    if let Some(t) = anchor {
        ends.push(("trust anchor", t));
    }
    if let Some(t) = issuer {
        ends.push(("issuer", t));
    }
    let (first_name, first) = ends.iter().min_by_key(|(_, t)| *t).copied()?;
    let listed = ends
        .iter()
        .map(|(name, t)| format!("{name} until {}", date(*t)))
        .collect::<Vec<_>>()
        .join(", ");
    let runbook = "rotate it as docs/ca-rotation.md shows";
    Some(if first <= now {
        Verdict {
            status: "False",
            reason: "Expired",
            message: format!(
                "the mesh {first_name} expired at {}: sidecars cannot renew their certificates; {runbook} ({listed})",
                date(first)
            ),
        }
    } else if first.duration_since(now).unwrap_or_default() < WARN_BEFORE {
        Verdict {
            status: "False",
            reason: "ExpiresSoon",
            message: format!(
                "the mesh {first_name} expires at {}, within 30 days; {runbook} ({listed})",
                date(first)
            ),
        }
    } else {
        Verdict {
            status: "True",
            reason: "Valid",
            message: format!("valid: {listed}"),
        }
    })
}

/// `t` as RFC 3339 in UTC, to the second.
fn date(t: SystemTime) -> String {
    Timestamp::from_second(epoch_seconds(t)).map_or_else(|_| format!("{t:?}"), |ts| ts.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const DAY: u64 = 24 * 3600;

    fn at(days: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(days * DAY)
    }

    #[test]
    fn valid_names_both_ends_and_the_first_anchor_of_several() {
        let v = verdict(&[at(2000), at(1000)], Some(at(500)), at(100)).expect("known");
        assert_eq!((v.status, v.reason), ("True", "Valid"));
        assert_eq!(
            v.message,
            "valid: trust anchor until 1972-09-27T00:00:00Z, issuer until 1971-05-16T00:00:00Z"
        );
    }

    #[test]
    fn within_thirty_days_of_the_first_end_warns_naming_it() {
        let v = verdict(&[at(1000)], Some(at(129)), at(100)).expect("known");
        assert_eq!((v.status, v.reason), ("False", "ExpiresSoon"));
        assert!(
            v.message
                .starts_with("the mesh issuer expires at 1970-05-10T00:00:00Z"),
            "{}",
            v.message
        );
        let v = verdict(&[at(120)], Some(at(1000)), at(100)).expect("known");
        assert!(
            v.message.starts_with("the mesh trust anchor expires"),
            "{}",
            v.message
        );
        let v = verdict(&[at(131)], Some(at(1000)), at(100)).expect("known");
        assert_eq!(v.reason, "Valid", "31 days left");
    }

    #[test]
    fn an_end_passed_is_expired() {
        let v = verdict(&[at(1000)], Some(at(100)), at(100)).expect("known");
        assert_eq!((v.status, v.reason), ("False", "Expired"));
        assert!(v.message.contains("sidecars cannot renew"), "{}", v.message);
    }

    #[test]
    fn the_message_does_not_move_with_the_clock() {
        let a = verdict(&[at(1000)], Some(at(900)), at(100)).expect("known");
        let b = verdict(&[at(1000)], Some(at(900)), at(101)).expect("known");
        assert_eq!(a, b);
    }

    #[test]
    fn nothing_known_says_nothing() {
        assert_eq!(verdict(&[], None, at(1)), None);
    }
}
