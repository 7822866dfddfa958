//! Simulated router sidecars: real gRPC clients following `WatchRoutes` (asking for deltas, and
//! taking whole tables from an operator that sends only those), each keeping the table it built,
//! and noting when each expected change reaches it.

use super::mirror::Mirror;
use prost::Message;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::control::v1::WatchRoutesRequest;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use tonic::transport::Endpoint;

/// What a change must make true in the table of every stream of its Router.
#[derive(Clone, Debug)]
pub enum Condition {
    /// `addr` is listed (or not) for the event type.
    Endpoint {
        /// `ip:port`.
        addr: String,
        /// Listed or not.
        present: bool,
    },
    /// The event type lists exactly this many endpoints.
    Count(usize),
}

/// One change in flight: sent at `sent`, seen by some of its Router's streams so far.
struct Pending {
    id: usize,
    router: usize,
    event: String,
    condition: Condition,
    sent: Instant,
    /// Per stream of the Router: when it saw the change.
    seen: Vec<Option<Duration>>,
    left: usize,
}

/// A change every affected stream has seen.
#[derive(Clone, Debug)]
pub struct Done {
    /// Its id.
    pub id: usize,
    /// Per affected stream, from sending the change to the stream holding it.
    pub per_stream: Vec<Duration>,
}

/// Counters of one stream.
#[derive(Default)]
pub struct StreamStats {
    /// Encoded bytes received.
    pub bytes: AtomicU64,
    /// Messages received.
    pub messages: AtomicU64,
    /// Whole tables received (the first, and every resync).
    pub whole: AtomicU64,
    /// Times the stream was reopened (errors, gaps).
    pub reconnects: AtomicU64,
    /// Subscriber routes (`<event>@<manager>`) in the table it holds now.
    pub subscriber_routes: AtomicU64,
}

/// Every simulated stream and the changes they are waiting for.
pub struct Streams {
    /// Router index of each stream.
    pub router_of: Vec<usize>,
    /// Streams per Router (their position within it is their index in `Pending::seen`).
    pub members: Vec<Vec<usize>>,
    /// Counters per stream.
    pub stats: Vec<Arc<StreamStats>>,
    pending: Mutex<Vec<Pending>>,
    done: Mutex<Vec<Done>>,
    next_id: AtomicU64,
}

impl Streams {
    /// Streams spread round-robin over `routers` Routers.
    pub fn new(count: usize, routers: usize) -> Arc<Streams> {
        let router_of: Vec<usize> = (0..count).map(|i| i % routers.max(1)).collect();
        let mut members = vec![Vec::new(); routers.max(1)];
        for (i, r) in router_of.iter().enumerate() {
            members[*r].push(i);
        }
        Arc::new(Streams {
            stats: (0..count).map(|_| Arc::default()).collect(),
            router_of,
            members,
            pending: Mutex::new(Vec::new()),
            done: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        })
    }

    /// Registers a change about to be made; returns its id.
    pub fn expect(&self, router: usize, event: &str, condition: Condition) -> usize {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as usize;
        let n = self.members[router].len();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Pending {
                id,
                router,
                event: event.to_owned(),
                condition,
                sent: Instant::now(),
                seen: vec![None; n],
                left: n,
            });
        id
    }

    /// Changes still waiting for some stream.
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Ids of the changes still waiting (to avoid flipping a pod twice at once).
    pub fn pending_ids(&self) -> BTreeSet<usize> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| p.id)
            .collect()
    }

    /// Changes every stream has seen, taken out.
    pub fn take_done(&self) -> Vec<Done> {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Marks what stream `s` now holds.
    fn check(&self, s: usize, mirror: &Mirror) {
        let router = self.router_of[s];
        let pos = self.members[router]
            .iter()
            .position(|m| *m == s)
            .unwrap_or(0);
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut finished = Vec::new();
        for (i, p) in pending.iter_mut().enumerate() {
            if p.router != router || p.seen[pos].is_some() {
                continue;
            }
            let holds = match &p.condition {
                Condition::Endpoint { addr, present } => mirror.has(&p.event, addr) == *present,
                Condition::Count(n) => mirror.count(&p.event) == *n,
            };
            if holds {
                p.seen[pos] = Some(now - p.sent);
                p.left -= 1;
                if p.left == 0 {
                    finished.push(i);
                }
            }
        }
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        for i in finished.into_iter().rev() {
            let p = pending.swap_remove(i);
            done.push(Done {
                id: p.id,
                per_stream: p.seen.into_iter().flatten().collect(),
            });
        }
    }

    /// Streams that hold a table.
    pub fn synced(&self) -> usize {
        self.stats
            .iter()
            .filter(|s| s.whole.load(Ordering::Relaxed) > 0)
            .count()
    }
}

/// The loopback address stream `s` connects from: one of its own, as each sidecar is a pod with its
/// own address, so the control plane's cap per peer address (64 connections) counts each stream as
/// the peer it stands for (500 streams from 127.0.0.1 alone were refused past the 64th).
fn source_address(s: usize) -> std::net::IpAddr {
    let [hi, lo] = u16::try_from(s + 1).unwrap_or(u16::MAX).to_be_bytes();
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 1, hi, lo))
}

/// Follows Router `router` (namespace `ns`) at `url` as stream `s` until the task is aborted.
pub async fn follow(
    streams: Arc<Streams>,
    s: usize,
    url: String,
    ns: String,
    router: String,
    deltas: bool,
) {
    let stats = streams.stats[s].clone();
    loop {
        let ended = async {
            let channel = Endpoint::from_shared(url.clone())?
                .local_address(Some(source_address(s)))
                .connect()
                .await?;
            let mut client = ControlPlaneClient::new(channel).max_decoding_message_size(64 << 20);
            let mut stream = client
                .watch_routes(WatchRoutesRequest {
                    router: router.clone(),
                    namespace: ns.clone(),
                    pod: format!("sim-{s}"),
                    deltas,
                    // As the sidecars ask (whole tables in parts), unless measuring old ones.
                    parts: deltas,
                })
                .await?
                .into_inner();
            let mut mirror = Mirror::default();
            while let Some(msg) = stream.message().await? {
                stats
                    .bytes
                    .fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
                stats.messages.fetch_add(1, Ordering::Relaxed);
                if msg.base == 0 && !msg.more {
                    stats.whole.fetch_add(1, Ordering::Relaxed);
                }
                if mirror.apply(msg)? {
                    streams.check(s, &mirror);
                    let subscribed = mirror.subscriber_routes() as u64;
                    stats.subscriber_routes.store(subscribed, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        }
        .await;
        stats.reconnects.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = ended {
            eprintln!("[scale] stream {s}: {e:#}; reconnecting");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
