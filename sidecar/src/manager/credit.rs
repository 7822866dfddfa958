//! The credit a router connection holds, as the manager counts it: requests received minus
//! credits given back. A router that sends more than it was granted is misbehaving or hostile,
//! and its connection closes rather than growing this manager's queue past its bound.

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests a connection has outstanding, against the credit it was granted.
#[derive(Debug)]
pub(crate) struct Ledger {
    granted: u64,
    outstanding: AtomicU64,
}

impl Ledger {
    /// A ledger for a connection granted `granted` credits at its start.
    pub(crate) fn new(granted: u32) -> Ledger {
        Ledger {
            granted: u64::from(granted),
            outstanding: AtomicU64::new(0),
        }
    }

    /// A request arrived; `false` when it exceeds the credit granted.
    pub(crate) fn take(&self) -> bool {
        let now = self.outstanding.fetch_add(1, Ordering::AcqRel) + 1;
        now <= self.granted
    }

    /// One credit goes back to the router; called before the frame that carries it is queued, so
    /// the router can never use it before it is counted.
    pub(crate) fn give_back(&self) {
        let _ = self
            .outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_granted_is_refused() {
        let l = Ledger::new(2);
        assert!(l.take());
        assert!(l.take());
        assert!(!l.take(), "a third request with two credits");
        let l = Ledger::new(1);
        assert!(l.take());
        l.give_back();
        assert!(l.take(), "a returned credit may be used again");
        l.give_back();
        l.give_back();
        assert!(l.take());
        assert!(!l.take(), "extra give-backs never add credit");
    }
}
