//! What becomes of a durable delivery, from its delivery count and its attempt's outcome (pure).
//!
//! The server never stops delivering an event (`max_deliver` unlimited); this count ends it. The
//! `attempts`-th delivery is the last attempt: if it fails, the event is dead-lettered. A delivery
//! past it means the last attempt was never answered: its pod was killed, or the app took the
//! sidecar down with it. The event then is dead-lettered at once, by whichever pod the server hands
//! it to after AckWait, without a further attempt. Relying on the pod of the last attempt (or on
//! the server's MaxDeliver advisory, which is not kept and which nobody hears while no pod runs)
//! would strand the event exactly when that pod is the one that died.

use crate::manager::worker::Attempted;

/// What to do with a delivery before attempting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Deliver it to the app.
    Attempt,
    /// Its attempts are spent: to the dead-letter type, then terminated.
    DeadLetter(&'static str),
}

/// How an attempted delivery is settled with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    /// Done: acknowledged (removed from the work queue).
    Ack,
    /// Back to the stream at once for another pod; not this pod's type.
    Release,
    /// Redelivered after the backoff of this failed attempt (its number).
    Retry(u32),
    /// The last attempt failed: to the dead-letter type, then terminated.
    DeadLetter(&'static str),
}

/// Why a delivery past the last attempt is dead-lettered.
pub(super) const UNANSWERED: &str =
    "its last attempt was never answered (the pod delivering it stopped)";

/// The step for the `delivered`-th delivery (1 for the first) of an event allowed `attempts`.
pub(super) fn before(delivered: u64, attempts: u32) -> Step {
    if delivered > u64::from(attempts) {
        Step::DeadLetter(UNANSWERED)
    } else {
        Step::Attempt
    }
}

/// The settlement of the `delivered`-th delivery, attempted with outcome `attempted`.
pub(super) fn after(delivered: u64, attempts: u32, attempted: Attempted) -> Settle {
    match attempted {
        Attempted::Done(_) => Settle::Ack,
        Attempted::NotHere => Settle::Release,
        Attempted::Failed(reason) if delivered >= u64::from(attempts) => Settle::DeadLetter(reason),
        Attempted::Failed(_) => Settle::Retry(u32::try_from(delivered).unwrap_or(u32::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_delivery_up_to_the_last_attempt_is_attempted() {
        assert_eq!(before(1, 3), Step::Attempt);
        assert_eq!(before(3, 3), Step::Attempt);
    }

    #[test]
    fn a_delivery_past_the_last_attempt_is_dead_lettered_without_one() {
        // The pod of the third attempt died: the fourth delivery ends the event.
        assert_eq!(before(4, 3), Step::DeadLetter(UNANSWERED));
        assert_eq!(before(9, 1), Step::DeadLetter(UNANSWERED));
    }

    #[test]
    fn a_failed_attempt_is_retried_until_the_last_which_is_dead_lettered() {
        let failed = Attempted::Failed("5xx");
        assert_eq!(after(1, 3, failed), Settle::Retry(1));
        assert_eq!(after(2, 3, failed), Settle::Retry(2));
        assert_eq!(after(3, 3, failed), Settle::DeadLetter("5xx"));
        assert_eq!(after(1, 1, failed), Settle::DeadLetter("5xx"));
    }

    #[test]
    fn an_answer_is_acknowledged_whatever_the_count() {
        assert_eq!(after(1, 3, Attempted::Done(200)), Settle::Ack);
        assert_eq!(after(3, 3, Attempted::Done(404)), Settle::Ack);
        assert_eq!(after(2, 3, Attempted::NotHere), Settle::Release);
    }
}
