//! The router stage: sends events to manager sidecars over multiplexed frame connections and
//! waits for their answers, within the request's deadline.

mod conn;
pub mod discovery;
pub mod p2c;
mod peer;
pub mod pool;

use crate::metrics::Metrics;
use crate::push::Hub;
use bytes::Bytes;
use conn::Conn;
use discovery::Source;
use peer::Peer;
use pool::Pool;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::EventType;
use switchyard_protocol::config::Destination;
use switchyard_protocol::frame::{FLAG_NO_REPLY, Frame, Request, Response};
use tokio::time::timeout_at;

/// Endpoints tried for one request when connections fail before the request was written.
const MAX_TRIES: usize = 3;

/// Why a request got no answer from a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// No manager endpoint is connected (503, retry later).
    NoEndpoint,
    /// Managers gave no credit before the deadline; the request was never sent (503, retry later).
    NoCredit,
    /// The deadline passed after the request was sent (504).
    Timeout,
    /// The connection failed after the request was written; it may have been handled (502).
    Lost,
}

/// An event ready to send.
pub struct Outgoing {
    /// Event type.
    pub event: Arc<str>,
    /// CloudEvents id.
    pub ce_id: String,
    /// W3C traceparent.
    pub traceparent: String,
    /// JSON payload.
    pub payload: Bytes,
}

/// When the call's stages ended, for Server-Timing.
#[derive(Default, Debug)]
pub struct CallTimes {
    /// Time spent waiting for flow-control credit.
    pub credit_wait: Duration,
    /// When the request frame was handed to its connection.
    pub sent: Option<Instant>,
    /// When the answer arrived.
    pub received: Option<Instant>,
}

enum Attempt {
    NotSent,
    Failed(CallError),
}

/// Every destination pool, and which pool serves each event type.
pub struct Router {
    pools: Vec<Arc<Pool>>,
    by_event: HashMap<String, usize>,
    metrics: Arc<Metrics>,
    hub: Arc<Hub>,
}

impl Router {
    /// Builds the pools of `destinations` and starts discovery: a Manager listed in `static_endpoints`
    /// uses that list, any other is found through `<service>.<namespace>.svc` DNS. Both roles use it
    /// (the router role for clients, the manager role for its app's outgoing events).
    pub fn start(
        namespace: &str,
        destinations: &BTreeMap<EventType, Destination>,
        static_endpoints: &BTreeMap<String, Vec<String>>,
        metrics: Arc<Metrics>,
    ) -> Router {
        let hub = Arc::new(Hub::new(metrics.clone()));
        let mut sources: BTreeMap<Source, usize> = BTreeMap::new();
        let mut pools = Vec::new();
        let mut by_event = HashMap::new();
        for (event, dest) in destinations {
            let source = match static_endpoints.get(&dest.manager) {
                Some(list) => Source::Static(list.clone()),
                None => Source::Dns(format!("{}.{}.svc:{}", dest.service, namespace, dest.port)),
            };
            let idx = *sources.entry(source.clone()).or_insert_with(|| {
                let pool = Arc::new(Pool::new(dest.manager.clone(), hub.clone()));
                discovery::start(pool.clone(), source);
                pools.push(pool);
                pools.len() - 1
            });
            by_event.insert(event.as_str().to_owned(), idx);
        }
        Router {
            pools,
            by_event,
            metrics,
            hub,
        }
    }

    /// The push hub that PUSH frames from this router's managers go to.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The pool serving `event`, if any Manager handles it.
    pub fn pool_of(&self, event: &str) -> Option<usize> {
        self.by_event.get(event).copied()
    }

    /// Sends `out` to the least loaded of two endpoints of `pool` and waits for the answer until
    /// `deadline`. A request whose connection fails before it was written is tried on another endpoint.
    pub async fn call(
        &self,
        pool: usize,
        out: &Outgoing,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Response, CallError> {
        self.send_to(pool, out, 0, deadline, times).await
    }

    /// Sends `out` fire-and-forget (`FLAG_NO_REPLY`): done once a manager sidecar granted credit and
    /// the frame was flushed to its socket. `deadline` bounds the wait for an endpoint and credit.
    pub async fn publish(
        &self,
        pool: usize,
        out: &Outgoing,
        deadline: Instant,
    ) -> Result<(), CallError> {
        let mut times = CallTimes::default();
        self.send_to(pool, out, FLAG_NO_REPLY, deadline, &mut times)
            .await
            .map(|_| ())
    }

    async fn send_to(
        &self,
        pool: usize,
        out: &Outgoing,
        flags: u8,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Response, CallError> {
        let Some(pool) = self.pools.get(pool) else {
            return Err(CallError::NoEndpoint);
        };
        let mut tried: Vec<Arc<Peer>> = Vec::new();
        for _ in 0..MAX_TRIES {
            let peers = pool.snapshot();
            let candidates: Vec<(&Arc<Peer>, Arc<Conn>)> = peers
                .iter()
                .filter(|p| !tried.iter().any(|t| Arc::ptr_eq(t, p)))
                .filter_map(|p| p.usable().map(|c| (p, c)))
                .collect();
            let Some(i) = p2c::choose(
                candidates.len(),
                |i| candidates[i].0.load(),
                |k| fastrand::usize(..k),
            ) else {
                break;
            };
            let (peer, conn) = &candidates[i];
            tried.push((*peer).clone());
            let _load = peer.track();
            match self.once(conn, out, flags, deadline, times).await {
                Ok(r) => return Ok(r),
                Err(Attempt::Failed(e)) => return Err(e),
                Err(Attempt::NotSent) => {
                    tracing::debug!(peer = %peer.addr, "connection failed before the request was written; trying another endpoint");
                }
            }
        }
        Err(CallError::NoEndpoint)
    }

    async fn once(
        &self,
        conn: &Arc<Conn>,
        out: &Outgoing,
        flags: u8,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Response, Attempt> {
        let waited = Instant::now();
        self.metrics.queued.inc();
        let credit = timeout_at(deadline.into(), conn.credits.acquire()).await;
        self.metrics.queued.dec();
        times.credit_wait += waited.elapsed();
        match credit {
            Err(_) => return Err(Attempt::Failed(CallError::NoCredit)),
            Ok(Err(_closed)) => return Err(Attempt::NotSent),
            // The manager re-grants the credit when it finishes the work, so it is consumed here.
            Ok(Ok(permit)) => permit.forget(),
        }
        let no_reply = flags & FLAG_NO_REPLY != 0;
        let slot = conn.register(no_reply).ok_or(Attempt::NotSent)?;
        let mut guard = CancelOnDrop {
            conn,
            id: slot.id,
            // A published event belongs to the manager once written: nothing to cancel.
            armed: !no_reply,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let frame = Frame::Request(Request {
            id: slot.id,
            flags,
            // The publisher's deadline only bounds getting the event out; the manager then delivers
            // under its own attempt timeout and retries.
            deadline_ms: if no_reply {
                0
            } else {
                u32::try_from(remaining.as_millis())
                    .unwrap_or(u32::MAX)
                    .max(1)
            },
            event: out.event.to_string(),
            ce_id: out.ce_id.clone(),
            traceparent: out.traceparent.clone(),
            content_type: crate::edge::JSON.to_owned(),
            payload: out.payload.clone(),
        });
        times.sent = Some(Instant::now());
        match timeout_at(deadline.into(), conn.send(frame)).await {
            Err(_) => return Err(Attempt::Failed(CallError::Timeout)),
            Ok(Err(())) => {
                guard.armed = false;
                return Err(Attempt::NotSent);
            }
            Ok(Ok(())) => {}
        }
        let answer = timeout_at(deadline.into(), slot.reply).await;
        match answer {
            Err(_) => Err(Attempt::Failed(CallError::Timeout)),
            Ok(Ok(Ok(resp))) => {
                guard.armed = false;
                times.received = Some(Instant::now());
                Ok(resp)
            }
            Ok(Ok(Err(lost))) => {
                guard.armed = false;
                if lost.written {
                    Err(Attempt::Failed(CallError::Lost))
                } else {
                    Err(Attempt::NotSent)
                }
            }
            Ok(Err(_)) => {
                guard.armed = false;
                Err(Attempt::Failed(CallError::Lost))
            }
        }
    }
}

/// Sends CANCEL when a request is abandoned: its deadline passed or the client went away (the
/// listener drops the request future).
struct CancelOnDrop<'a> {
    conn: &'a Conn,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.id);
        }
    }
}
