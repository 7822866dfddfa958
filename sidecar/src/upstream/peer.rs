//! One manager endpoint: keeps a connection to it open, reconnecting with backoff. With mesh TLS
//! the connection is mTLS, and the handshake checks the endpoint is a pod of the Manager the table
//! says it is (an address reused by another workload, or a spoofed endpoint, is refused).

use super::changes::Changes;
use super::conn::{self, Conn};
use super::pushes::Pushes;
use crate::backoff;
use crate::metrics::{EventLabel, EventLabels, Metrics};
use crate::net::mesh::MeshTls;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_identity::Expect;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RECONNECT_BASE: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// A connection that lived this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(5);

/// How a pool's endpoints are reached over mTLS: this sidecar's TLS and the Manager expected.
#[derive(Clone)]
pub(crate) struct PeerTls {
    /// This sidecar's mesh TLS.
    pub(crate) mesh: Arc<MeshTls>,
    /// The Manager whose pods the endpoints must be.
    pub(crate) expect: Expect,
}

/// A manager endpoint and its connection.
pub(crate) struct Peer {
    /// `host:port` of the manager sidecar's frame listener.
    pub addr: String,
    in_flight: AtomicUsize,
    conn: Mutex<Option<Arc<Conn>>>,
    stop: CancellationToken,
    pushes: Pushes,
    changes: Arc<Changes>,
    metrics: Arc<Metrics>,
    tls: Option<PeerTls>,
}

impl Peer {
    /// Creates the peer and starts its connection loop; its PUSH frames go to `pushes`, and each
    /// connection it opens bumps `changes` (held requests wait for that); admitted publishes a lost
    /// connection never confirmed are counted in `metrics`. With `tls` it connects with mTLS.
    pub(crate) fn spawn(
        addr: String,
        pushes: Pushes,
        changes: Arc<Changes>,
        metrics: Arc<Metrics>,
        tls: Option<PeerTls>,
    ) -> Arc<Peer> {
        let peer = Arc::new(Peer {
            addr,
            in_flight: AtomicUsize::new(0),
            conn: Mutex::new(None),
            stop: CancellationToken::new(),
            pushes,
            changes,
            metrics,
            tls,
        });
        tokio::spawn(peer.clone().run());
        peer
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Conn>>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection, when one is open and accepts new requests.
    pub(crate) fn usable(&self) -> Option<Arc<Conn>> {
        self.slot().as_ref().filter(|c| c.is_usable()).cloned()
    }

    /// Requests currently using this endpoint (waiting for credit or for a reply).
    pub(crate) fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request on this endpoint until the guard drops.
    pub(crate) fn track(self: &Arc<Self>) -> LoadGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        LoadGuard(self.clone())
    }

    /// The endpoint left discovery: no reconnects; the open connection drains.
    pub(crate) fn retire(&self) {
        self.stop.cancel();
        if let Some(c) = self.slot().clone() {
            c.begin_drain();
        }
    }

    /// Publishes this endpoint acknowledged (its app was told 202) and never reported done before
    /// the connection died: if the pod died, they are lost (in-memory delivery keeps no copy).
    /// Logged one by one, so they can be found, and counted.
    fn unconfirmed(&self, published: Vec<conn::Published>) {
        if published.is_empty() {
            return;
        }
        tracing::warn!(
            peer = %self.addr,
            count = published.len(),
            "connection lost with acknowledged publishes not reported done; lost if the pod died"
        );
        for p in published {
            tracing::warn!(peer = %self.addr, event = %p.event, ce_id = %p.ce_id, "acknowledged publish unconfirmed");
            self.metrics
                .published_unconfirmed
                .get_or_create(&EventLabels {
                    event: EventLabel(p.event),
                })
                .inc();
        }
    }

    /// Runs one connection on `stream` (TCP or mTLS) until it ends.
    async fn serve<S: crate::net::io::SplitIo>(&self, stream: S) {
        let unconfirmed = conn::run(stream, &self.addr, &self.pushes, |c| {
            *self.slot() = Some(c);
            self.changes.bump();
        })
        .await;
        self.unconfirmed(unconfirmed);
    }

    async fn run(self: Arc<Self>) {
        let mut failures = 0u32;
        while !self.stop.is_cancelled() {
            let attempt = tokio::select! {
                r = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(self.addr.as_str())) => r,
                _ = self.stop.cancelled() => return,
            };
            match attempt {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    let opened = Instant::now();
                    let ran = match &self.tls {
                        None => {
                            tracing::info!(peer = %self.addr, "connected to manager");
                            self.serve(stream).await;
                            true
                        }
                        Some(t) => match t.mesh.connect(stream, &t.expect).await {
                            Ok(tls) => {
                                tracing::info!(peer = %self.addr, manager = %t.expect, "connected to manager (mTLS)");
                                self.serve(tls).await;
                                true
                            }
                            Err(e) => {
                                if failures == 0 {
                                    tracing::warn!(peer = %self.addr, expected = %t.expect, error = %e, "mTLS handshake with manager failed; retrying with backoff");
                                }
                                false
                            }
                        },
                    };
                    *self.slot() = None;
                    failures = if ran && opened.elapsed() >= STABLE_AFTER {
                        0
                    } else {
                        failures.saturating_add(1)
                    };
                }
                Ok(Err(e)) => {
                    if failures == 0 {
                        tracing::warn!(peer = %self.addr, error = %e, "cannot connect to manager; retrying with backoff");
                    }
                    failures = failures.saturating_add(1);
                }
                Err(_) => {
                    tracing::warn!(peer = %self.addr, "connect to manager timed out");
                    failures = failures.saturating_add(1);
                }
            }
            let wait = backoff::delay(
                RECONNECT_BASE,
                RECONNECT_MAX,
                failures.saturating_sub(1),
                fastrand::f64(),
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => return,
            }
        }
    }
}

/// Decrements the endpoint's load when dropped.
pub(crate) struct LoadGuard(Arc<Peer>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
