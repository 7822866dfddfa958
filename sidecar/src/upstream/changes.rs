//! A change counter for the routing state: bumped when a table is applied and when a connection to
//! a manager endpoint opens. Held requests wait on it (no polling) and look again at each bump.

use tokio::sync::watch;

/// Shared by the router, its pools and their peers.
#[derive(Debug)]
pub(crate) struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Changes(watch::Sender::new(0))
    }
}

impl Changes {
    /// Wakes every waiter.
    pub(crate) fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every bump after this call.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}
