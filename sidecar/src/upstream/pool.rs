//! The endpoints of one Manager (or one per-event-type Deployment): a snapshot list of peers.

use super::changes::Changes;
use super::peer::{Peer, PeerTls};
use super::push_gate::PushGate;
use super::pushes::Pushes;
use crate::metrics::Metrics;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// The peers of one destination.
pub(crate) struct Pool {
    /// Manager name, for logs.
    pub name: String,
    peers: RwLock<Arc<Vec<Arc<Peer>>>>,
    /// Where its connections' PUSH frames go: through the gate of what its Manager may push.
    pushes: Pushes,
    gate: Option<Arc<PushGate>>,
    changes: Arc<Changes>,
    metrics: Arc<Metrics>,
    tls: Option<PeerTls>,
    retired: AtomicBool,
}

impl Pool {
    /// An empty pool whose endpoints' PUSH frames go to `pushes` and whose new connections bump
    /// `changes`; publishes its endpoints lost are counted in `metrics`. Its endpoints connect with
    /// mTLS expecting the Manager in `tls` (plain TCP with `None`).
    pub(crate) fn new(
        name: String,
        pushes: Pushes,
        changes: Arc<Changes>,
        metrics: Arc<Metrics>,
        tls: Option<PeerTls>,
    ) -> Pool {
        // The Manager's pushes pass its gate: none until the table says which types it may push.
        let gate = PushGate::guard(&name, pushes, metrics.clone());
        Pool {
            name,
            peers: RwLock::new(Arc::new(Vec::new())),
            pushes: gate.as_ref().and_then(PushGate::as_pushes),
            gate,
            changes,
            metrics,
            tls,
            retired: AtomicBool::new(false),
        }
    }

    /// Sets the types its Manager may push (it handles them, or lists them in `spec.push`), from
    /// the current routing table.
    pub(crate) fn allow_pushes(&self, types: BTreeSet<String>) {
        if let Some(g) = &self.gate {
            g.allow(types);
        }
    }

    /// The current peers; cheap to take per request.
    pub(crate) fn snapshot(&self) -> Arc<Vec<Arc<Peer>>> {
        self.peers.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether some endpoint has an open connection that takes requests.
    pub(crate) fn has_usable(&self) -> bool {
        self.snapshot().iter().any(|p| p.usable().is_some())
    }

    /// The pool left the routing table: its peers drain and discovery stops filling it.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.replace(BTreeSet::new());
    }

    /// Whether [`Pool::retire`] was called.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Makes the pool hold exactly `addrs`: new ones connect, vanished ones drain.
    pub(crate) fn update(&self, addrs: BTreeSet<String>) {
        self.replace_unless_retired(addrs, true);
    }

    fn replace(&self, addrs: BTreeSet<String>) {
        self.replace_unless_retired(addrs, false);
    }

    fn replace_unless_retired(&self, addrs: BTreeSet<String>, check: bool) {
        let mut guard = self.peers.write().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock: a discovery update racing with `retire` cannot revive the pool.
        if check && self.is_retired() {
            return;
        }
        let mut next = Vec::with_capacity(addrs.len());
        for old in guard.iter() {
            if addrs.contains(&old.addr) {
                next.push(old.clone());
            } else {
                tracing::info!(manager = %self.name, peer = %old.addr, "endpoint removed");
                old.retire();
            }
        }
        for addr in addrs {
            if !next.iter().any(|p| p.addr == addr) {
                tracing::info!(manager = %self.name, peer = %addr, "endpoint added");
                next.push(Peer::spawn(
                    addr,
                    self.pushes.clone(),
                    self.changes.clone(),
                    self.metrics.clone(),
                    self.tls.clone(),
                ));
            }
        }
        *guard = Arc::new(next);
    }
}
