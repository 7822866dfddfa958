//! Who leads, as this replica last saw it: the control plane's server reads it to decide whether a
//! load report or an activation is kept here or forwarded to the leader.

use tokio::sync::watch;

/// The leader as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Leader {
    /// Not known yet (or the last holder gave the Lease up and nobody took it yet).
    Unknown,
    /// This replica leads (or leader election is off).
    Me,
    /// Another replica holds the Lease.
    Other {
        /// Its identity in the Lease.
        identity: String,
        /// Its control-plane URL, as it wrote into the Lease; None when it published none.
        url: Option<String>,
    },
}

/// Shared view of the leader, updated by the election loop.
pub(crate) struct LeaderView(watch::Sender<Leader>);

impl Default for LeaderView {
    fn default() -> Self {
        LeaderView(watch::Sender::new(Leader::Unknown))
    }
}

impl LeaderView {
    /// A view that says this replica leads (leader election off).
    pub(crate) fn me() -> Self {
        LeaderView(watch::Sender::new(Leader::Me))
    }

    /// Records who leads; wakes watchers only on a change.
    pub(crate) fn set(&self, leader: Leader) {
        self.0.send_if_modified(|cur| {
            if *cur == leader {
                return false;
            }
            *cur = leader;
            true
        });
    }

    /// The leader now.
    pub(crate) fn get(&self) -> Leader {
        self.0.borrow().clone()
    }

    /// Whether this replica leads now.
    pub(crate) fn is_me(&self) -> bool {
        *self.0.borrow() == Leader::Me
    }

    /// A receiver that sees each change.
    pub(crate) fn watch(&self) -> watch::Receiver<Leader> {
        self.0.subscribe()
    }
}
