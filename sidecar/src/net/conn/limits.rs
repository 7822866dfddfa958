//! Connection caps (pure accounting): how many client connections a process holds, in all and per
//! client address. A connection takes a [`Slot`] when accepted and gives it back when dropped; a
//! refused one is closed at once by the accept loop, which never stops accepting.

use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// The caps: most connections at once, and most from one client key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Most connections at once (every listener sharing the tracker).
    pub total: usize,
    /// Most connections at once from one [`ClientKey`].
    pub per_client: usize,
}

/// Why a connection was refused; its `label` is the metric's `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The process holds `Caps::total` connections.
    Total,
    /// The client holds `Caps::per_client` connections.
    PerClient,
}

impl Refusal {
    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerClient => "max_connections_per_client",
        }
    }
}

/// Whom a per-client cap counts: an IPv4 address, or the /64 of an IPv6 one (one host usually
/// holds a whole /64, so counting single v6 addresses would cap nothing). IPv4-mapped IPv6
/// addresses (a dual-stack socket) count as the IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ClientKey(IpAddr);

impl ClientKey {
    /// The key of a client at `ip`.
    pub(crate) fn of(ip: IpAddr) -> ClientKey {
        match ip.to_canonical() {
            IpAddr::V4(v4) => ClientKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                ClientKey(IpAddr::V6(Ipv6Addr::from(prefix)))
            }
        }
    }
}

#[derive(Default)]
struct Counts {
    total: usize,
    // Only clients with an open connection have an entry, so its size is bounded by `Caps::total`.
    by_client: HashMap<ClientKey, usize>,
}

/// The open connections of a process, against its [`Caps`].
pub(crate) struct Tracker {
    caps: Caps,
    counts: Mutex<Counts>,
}

impl Tracker {
    /// A tracker with nothing open.
    pub(crate) fn new(caps: Caps) -> Arc<Tracker> {
        Arc::new(Tracker {
            caps,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Takes a slot for a connection from `ip`, or says which cap refuses it. `open` (the
    /// listener's gauge of open connections) counts the slot while it lives.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr, open: &Gauge) -> Result<Slot, Refusal> {
        let key = ClientKey::of(ip);
        let mut c = self.lock();
        if c.total >= self.caps.total {
            return Err(Refusal::Total);
        }
        let mine = c.by_client.entry(key).or_insert(0);
        if *mine >= self.caps.per_client {
            return Err(Refusal::PerClient);
        }
        *mine += 1;
        c.total += 1;
        drop(c);
        open.inc();
        Ok(Slot {
            tracker: self.clone(),
            key,
            open: open.clone(),
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts stay consistent across a panic elsewhere (each update is one step), so a
        // poisoned lock is still usable.
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn release(&self, key: ClientKey) {
        let mut c = self.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_client.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&key);
            }
        }
    }
}

/// One admitted connection; dropping it frees its place.
pub(crate) struct Slot {
    tracker: Arc<Tracker>,
    key: ClientKey,
    open: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.tracker.release(self.key);
        self.open.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn per_client_cap_refuses_only_that_client() {
        let t = Tracker::new(Caps {
            total: 10,
            per_client: 2,
        });
        let g = Gauge::default();
        let a1 = t.admit(ip("10.0.0.1"), &g).expect("first");
        let _a2 = t.admit(ip("10.0.0.1"), &g).expect("second");
        assert_eq!(t.admit(ip("10.0.0.1"), &g).err(), Some(Refusal::PerClient));
        let _b = t.admit(ip("10.0.0.2"), &g).expect("another client");
        assert_eq!(g.get(), 3);
        drop(a1);
        assert_eq!(g.get(), 2);
        let _a3 = t
            .admit(ip("10.0.0.1"), &g)
            .expect("a freed place is taken again");
        assert_eq!(t.open(), 3);
    }

    #[test]
    fn total_cap_refuses_everyone_and_frees_on_drop() {
        let t = Tracker::new(Caps {
            total: 2,
            per_client: 2,
        });
        let g = Gauge::default();
        let a = t.admit(ip("10.0.0.1"), &g).expect("a");
        let _b = t.admit(ip("10.0.0.2"), &g).expect("b");
        assert_eq!(t.admit(ip("10.0.0.3"), &g).err(), Some(Refusal::Total));
        // A refusal takes nothing.
        assert_eq!(t.open(), 2);
        drop(a);
        assert!(t.admit(ip("10.0.0.3"), &g).is_ok());
    }

    #[test]
    fn clients_leave_no_entry_behind() {
        let t = Tracker::new(Caps {
            total: 100,
            per_client: 1,
        });
        let g = Gauge::default();
        for i in 0..50u8 {
            drop(t.admit(IpAddr::from([10, 0, 0, i]), &g).expect("admitted"));
        }
        assert_eq!(t.lock().by_client.len(), 0);
        assert_eq!(t.open(), 0);
        assert_eq!(g.get(), 0);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        assert_eq!(
            ClientKey::of(ip("2001:db8:1:2::1")),
            ClientKey::of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            ClientKey::of(ip("2001:db8:1:2::1")),
            ClientKey::of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            ClientKey::of(ip("::ffff:10.1.2.3")),
            ClientKey::of(ip("10.1.2.3"))
        );
        let t = Tracker::new(Caps {
            total: 10,
            per_client: 1,
        });
        let g = Gauge::default();
        let _a = t.admit(ip("::ffff:10.1.2.3"), &g).expect("mapped");
        assert_eq!(t.admit(ip("10.1.2.3"), &g).err(), Some(Refusal::PerClient));
    }
}
