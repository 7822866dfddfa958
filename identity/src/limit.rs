//! Connection caps of a listener: at most so many connections at once, and at most so many from
//! one source IP, so that one client (or one compromised pod) opening thousands of idle
//! connections cannot take the descriptors, the memory or the handshake slots every other client
//! needs. A connection is admitted at accept, before any TLS, and holds its [`ConnPermit`] until it
//! closes. Pure bookkeeping under a mutex; the accept loops (`incoming`, the operator's servers) are
//! the I/O around it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (handshaking or handshaken).
    pub max_connections: usize,
    /// Connections open at once from one source IP.
    pub max_per_peer: usize,
    /// Time a client has from accept to the end of its TLS handshake (or, without TLS, to its
    /// first request).
    pub handshake_timeout: Duration,
    /// A connection with no request in progress for this long is closed.
    pub idle_timeout: Duration,
}

/// Why a connection was not admitted; [`Refused::reason`] is its metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds `max_connections`.
    Full,
    /// The source IP holds `max_per_peer`.
    PeerFull,
}

impl Refused {
    /// Metric label: `connections` or `peer_connections`.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Full => "connections",
            Refused::PeerFull => "peer_connections",
        }
    }
}

#[derive(Default)]
struct Open {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// Counts the open connections of a listener against its [`Limits`].
pub struct ConnLimiter {
    limits: Limits,
    open: Mutex<Open>,
}

impl ConnLimiter {
    /// A limiter with nothing open.
    pub fn new(limits: Limits) -> Arc<ConnLimiter> {
        Arc::new(ConnLimiter {
            limits,
            open: Mutex::default(),
        })
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Admits a connection from `ip`, or says which cap it hit.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnPermit, Refused> {
        // Counting is all this lock guards: a panic elsewhere leaves the counts usable.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.limits.max_connections {
            return Err(Refused::Full);
        }
        let n = open.per_peer.entry(ip).or_insert(0);
        if *n >= self.limits.max_per_peer {
            return Err(Refused::PeerFull);
        }
        *n += 1;
        open.total += 1;
        Ok(ConnPermit {
            limiter: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    fn release(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_peer.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                // Gone peers are forgotten, so the map is bounded by what is open.
                open.per_peer.remove(&ip);
            }
        }
    }
}

/// One admitted connection; dropping it gives its place back.
pub struct ConnPermit {
    limiter: Arc<ConnLimiter>,
    ip: IpAddr,
}

impl std::fmt::Debug for ConnPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnPermit").field("ip", &self.ip).finish()
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.limiter.release(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize, max_per_peer: usize) -> Limits {
        Limits {
            max_connections,
            max_per_peer,
            handshake_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_peer_gets_its_share_and_the_others_still_get_in() {
        let l = ConnLimiter::new(limits(10, 2));
        let a1 = l.admit(ip(1)).expect("first");
        let _a2 = l.admit(ip(1)).expect("second");
        assert_eq!(
            l.admit(ip(1)).expect_err("over the share"),
            Refused::PeerFull
        );
        let _b = l.admit(ip(2)).expect("another peer");
        drop(a1);
        let _a3 = l.admit(ip(1)).expect("a place given back is taken again");
        assert_eq!(l.open(), 3);
    }

    #[test]
    fn the_listener_is_full_at_its_cap_whoever_asks() {
        let l = ConnLimiter::new(limits(3, 2));
        let held: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|i| l.admit(ip(i)).expect("under the cap"))
            .collect();
        assert_eq!(l.admit(ip(4)).expect_err("full"), Refused::Full);
        drop(held);
        assert_eq!(l.open(), 0);
        assert!(
            l.open.lock().expect("lock").per_peer.is_empty(),
            "closed peers are forgotten"
        );
        assert!(l.admit(ip(4)).is_ok());
    }
}
