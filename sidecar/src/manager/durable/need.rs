//! How many bytes a lane reserves from the pod's byte budget before it pulls, and how it asks the
//! server to stay within them (pure). A pull request's `max_bytes` bounds what the server sends
//! by its own count of each event (subject, reply, headers, payload); the budget charges an event
//! that plus [`EVENT_OVERHEAD`], so a request for `batch` events asks for the reservation less
//! `batch` overheads, and every event it brings is paid for out of the reservation.
//!
//! The lane does not know the size of its next event. It reserves at least `need` (a small floor
//! at first, then the largest event it last pulled); when the server answers that the next event
//! does not fit (409) and nothing came, `need` doubles, up to half the budget: a lane never waits
//! for bytes the budget could only give when nothing else of the pod held any. A lane that held
//! that much and still did not fit its next event asks for that one event with no bound, so an
//! event larger than a lane may wait for is delivered (alone, paying what it lacks from what is
//! free) rather than stranded.

use switchyard_protocol::memory::EVENT_OVERHEAD;

/// The least a lane reserves before a pull, to begin with.
pub(super) const FLOOR: usize = 256 << 10;

/// What the budget charges an event beside the server's count of it.
pub(super) const OVERHEAD: usize = EVENT_OVERHEAD as usize;

/// A lane's reservation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Need {
    /// The least to reserve before the next pull.
    least: usize,
    /// The most it waits for: half the pod's budget (at least the floor, when the budget has it).
    most: usize,
    /// The last pull held the most and its event still did not fit.
    unbounded: bool,
}

impl Need {
    /// The policy of a lane of a pod whose budget is `total` bytes.
    pub(super) fn new(total: usize) -> Need {
        let most = (total / 2).max(FLOOR.min(total));
        Need {
            least: FLOOR.min(most),
            most,
            unbounded: false,
        }
    }

    /// The least to reserve before the next pull.
    pub(super) fn least(&self) -> usize {
        self.least
    }

    /// The pull to make with `reserved` bytes and `slots` worker slots: how many events, and the
    /// `max_bytes` to give (0: none, only for an event larger than the whole budget).
    pub(super) fn request(&self, reserved: usize, slots: usize) -> (usize, usize) {
        if self.unbounded {
            return (1, 0);
        }
        // Each event's overhead, and at least one byte of it, must fit.
        let batch = slots.min(reserved / (OVERHEAD + 1)).max(1);
        let max_bytes = reserved.saturating_sub(batch * OVERHEAD).max(1);
        (batch, max_bytes)
    }

    /// After a pull that brought `got` events, the largest charged `largest`, and ended `over`
    /// (the server's 409: the next event did not fit what was left) with `reserved` bytes held.
    pub(super) fn after(&mut self, got: usize, largest: usize, over: bool, reserved: usize) {
        if self.unbounded {
            self.unbounded = false;
            self.least = FLOOR.min(self.most);
            return;
        }
        if got > 0 {
            self.least = largest.clamp(FLOOR.min(self.most), self.most);
        } else if over && reserved >= self.most {
            self.unbounded = true;
        } else if over {
            self.least = self.least.saturating_mul(2).min(self.most);
        }
    }

    /// The bytes the budget charges `server_size` (the server's count of an event).
    pub(super) fn charge(server_size: usize) -> usize {
        server_size + OVERHEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_fits_its_events_and_their_overheads_in_the_reservation() {
        let n = Need::new(48 << 20);
        let (batch, max) = n.request(10 << 20, 64);
        assert_eq!(batch, 64);
        assert_eq!(max + batch * OVERHEAD, 10 << 20);
        // Fewer bytes than overheads: fewer events, never a max_bytes of 0 (no bound).
        let (batch, max) = n.request(3 * OVERHEAD, 64);
        assert_eq!(batch, 2);
        assert!(max >= 1 && max + batch * OVERHEAD <= 3 * OVERHEAD);
        assert_eq!(n.request(10, 4), (1, 1));
    }

    #[test]
    fn a_pull_that_did_not_fit_doubles_the_need_up_to_half_the_budget_then_goes_unbounded_once() {
        let mut n = Need::new(4 << 20);
        let half = 2 << 20;
        assert_eq!(n.least(), FLOOR);
        n.after(0, 0, true, FLOOR);
        assert_eq!(n.least(), 2 * FLOOR);
        n.after(0, 0, false, 2 * FLOOR);
        assert_eq!(n.least(), 2 * FLOOR, "nothing there is not too small");
        while n.least() < half {
            n.after(0, 0, true, n.least());
        }
        assert_eq!(n.least(), half);
        assert_eq!(n.request(half, 8), (8, half - 8 * OVERHEAD));
        n.after(0, 0, true, half);
        assert_eq!(
            n.request(half, 8),
            (1, 0),
            "an event larger than half the budget"
        );
        n.after(1, 3 << 20, false, half);
        assert_eq!(n.least(), FLOOR, "back to the floor after it");
    }

    #[test]
    fn the_need_follows_the_largest_event_pulled() {
        let mut n = Need::new(48 << 20);
        n.after(3, Need::charge(1 << 20), false, 10 << 20);
        assert_eq!(n.least(), (1 << 20) + OVERHEAD);
        n.after(3, Need::charge(100), true, 10 << 20);
        assert_eq!(n.least(), FLOOR);
    }
}
