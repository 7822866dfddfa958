//! The routing stage's upstream (EDRI's "router"): the routing table and the multiplexed frame
//! connections to manager sidecars. It sends an event to the least loaded endpoint of its Manager
//! and waits for the answer within the request's deadline. The table comes from the config (static
//! endpoints or DNS) or, with `--control-plane`, from the operator's stream (`follow`).
//!
//! Below the dispatch stage and above the frame codec: nothing here knows which front door a request
//! came through; PUSH frames leave through the [`pushes::PushSink`] a caller hands in.

pub(crate) mod activate;
mod attempt;
mod changes;
mod conn;
mod discovery;
pub(crate) mod follow;
mod hold;
use hold::Waiting;
mod p2c;
mod peer;
mod pool;
mod push_gate;
pub(crate) mod pushes;
pub(crate) mod snapshot;
pub(crate) mod subscribers;
mod table;
pub(crate) mod upload;

use crate::metrics::Metrics;
use crate::net::mesh::MeshTls;
use activate::Activator;
use arc_swap::ArcSwap;
use bytes::Bytes;
use changes::Changes;
use conn::Conn;
pub(crate) use conn::{Answered, Collect};
use discovery::Source;
use peer::{Peer, PeerTls};
pub(crate) use pool::Pool;
use pushes::Pushes;
use snapshot::{ControlPlaneView, RouteInfo, RoutesView, Table, TableSource};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subscribers::{Attrs, Sub};
use switchyard_crds::EventType;
use switchyard_crds::subscription::Observe;
use switchyard_identity::Expect;
use switchyard_protocol::config::{Destination, Subscriber};
use switchyard_protocol::control::v1::RoutingTable;
use switchyard_protocol::durable::DurableRoute;
use switchyard_protocol::frame::{
    DEFAULT_MAX_FRAME, FLAG_ACK, FLAG_NO_REPLY, MAX_PAYLOAD, Request, Response,
};
use tokio::time::timeout_at;

/// Endpoints tried for one request when connections fail before the request was written.
const MAX_TRIES: usize = 3;

/// Why a request got no answer from a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallError {
    /// No manager endpoint is connected (503, retry later).
    NoEndpoint,
    /// Managers gave no credit before the deadline; the request was never sent (503, retry later).
    NoCredit,
    /// The deadline passed after the request was sent (504).
    Timeout,
    /// The connection failed after the request was written; it may have been handled (502).
    Lost,
    /// The event does not fit in a frame (its payload is over the mesh's limit): refused before it
    /// took an endpoint or credit, so the shared connection carries on (413).
    TooLarge {
        /// The payload's size in bytes.
        bytes: usize,
    },
    /// A streamed request body went over its limit (the route's `bodyLimit`; 413).
    OverLimit {
        /// The limit.
        limit: usize,
    },
    /// The body is larger than a manager of a version without streams takes whole (413).
    PeerTakesNoStreams {
        /// What it takes.
        max: usize,
    },
}

/// An event ready to send.
pub(crate) struct Outgoing {
    /// Event type.
    pub event: Arc<str>,
    /// CloudEvents id.
    pub ce_id: String,
    /// W3C traceparent.
    pub traceparent: String,
    /// W3C tracestate, empty when none (sent only to a manager that reads it).
    pub tracestate: String,
    /// The payload.
    pub payload: Bytes,
    /// Its media type when not JSON (a route without a schema passed the client's body as it came).
    pub content_type: Option<String>,
    /// The client's body, unread, to stream after the head (then `payload` is empty).
    pub upload: Option<upload::Upload>,
    /// The client's HTTP fields that pass to the app (a range request; `protocol::headers`).
    pub headers: switchyard_protocol::headers::Fields,
}

impl Outgoing {
    /// Another send of this event (a subscriber's or an observer's), with `headers` for the app.
    /// Only a buffered event has one: a streamed upload is read once, by its handler.
    pub(crate) fn buffered_copy(&self, headers: switchyard_protocol::headers::Fields) -> Outgoing {
        Outgoing {
            event: self.event.clone(),
            ce_id: self.ce_id.clone(),
            traceparent: self.traceparent.clone(),
            tracestate: self.tracestate.clone(),
            payload: self.payload.clone(),
            content_type: self.content_type.clone(),
            upload: None,
            headers,
        }
    }

    /// Its REQUEST frame as request `id`, carrying `payload` (the event's own, or empty when the
    /// body streams after the head).
    pub(crate) fn request(&self, id: u64, flags: u8, deadline_ms: u32, payload: Bytes) -> Request {
        Request {
            headers: self.headers.clone(),
            id,
            flags,
            deadline_ms,
            event: self.event.to_string(),
            ce_id: self.ce_id.clone(),
            traceparent: self.traceparent.clone(),
            tracestate: self.tracestate.clone(),
            content_type: self
                .content_type
                .clone()
                .unwrap_or_else(|| crate::edge::JSON.to_owned()),
            payload,
        }
    }
}

/// When the call's stages ended, for Server-Timing.
#[derive(Default, Debug)]
pub(crate) struct CallTimes {
    /// Time spent waiting for flow-control credit.
    pub credit_wait: Duration,
    /// When the request frame was handed to its connection.
    pub sent: Option<Instant>,
    /// When the answer arrived.
    pub received: Option<Instant>,
}

enum Attempt {
    /// Not sent, or (a publish) not acknowledged: another endpoint may take it.
    NotSent,
    /// A publish the manager refused (its queue was full): another endpoint may take it.
    Refused(Response),
    Failed(CallError),
}

/// A configured subscriber's subscription as the control plane sends it.
fn wire_subscription(s: &Subscriber) -> switchyard_protocol::control::v1::Subscription {
    switchyard_protocol::control::v1::Subscription {
        event: s.subscription.event.clone(),
        observe: s
            .subscription
            .observe
            .iter()
            .map(|o| o.as_str().to_owned())
            .collect(),
        filter: s
            .subscription
            .filter
            .as_ref()
            .and_then(|f| serde_json::to_string(f).ok())
            .unwrap_or_default(),
    }
}

/// Where a destination's endpoints come from (its static list, else its Service's DNS name), and
/// the name of its pool.
fn source_of(
    dest: &Destination,
    namespace: &str,
    static_endpoints: &BTreeMap<String, Vec<String>>,
) -> (Source, String) {
    let source = match static_endpoints.get(&dest.manager) {
        Some(list) => Source::Static(list.clone()),
        None => Source::Dns(format!("{}.{}.svc:{}", dest.service, namespace, dest.port)),
    };
    let key = match &source {
        Source::Static(list) => format!("{}={}", dest.manager, list.join(",")),
        Source::Dns(name) => name.clone(),
    };
    (source, key)
}

/// A subscriber's route into the config's table (logged and left out when it cannot be read).
fn add_subscription(
    table: &mut Table,
    key: String,
    dest: &Destination,
    wire: &switchyard_protocol::control::v1::Subscription,
    pool_name: String,
    pool: Arc<Pool>,
) {
    match table::subscription(&key, &dest.manager, wire) {
        Ok(mut spec) => {
            spec.durable.clone_from(&dest.durable);
            table.routes.push(RouteInfo {
                event: key,
                manager: dest.manager.clone(),
                pool: pool_name,
                durable: spec.durable.clone().map(Arc::new),
                subscription: Some(spec.clone()),
            });
            table.subscribers.push(Arc::new(Sub { spec, pool }));
        }
        Err(reason) => tracing::warn!("subscription ignored: {reason}"),
    }
}

/// A handled event type's route into the config's table.
fn add_handler(
    table: &mut Table,
    event: String,
    dest: &Destination,
    pool_name: String,
    pool: Arc<Pool>,
) {
    table.by_event.insert(event.clone(), pool);
    let route = dest.durable.clone().map(Arc::new);
    if let Some(r) = &route {
        let manager = Arc::from(dest.manager.as_str());
        table.durable.insert(event.clone(), (manager, r.clone()));
    }
    table.routes.push(RouteInfo {
        event,
        manager: dest.manager.clone(),
        pool: pool_name,
        durable: route,
        subscription: None,
    });
}

/// The mTLS settings of a pool of Manager `manager` in `namespace`.
fn peer_tls(mesh: Option<&Arc<MeshTls>>, namespace: &str, manager: &str) -> Option<PeerTls> {
    mesh.map(|m| PeerTls {
        mesh: m.clone(),
        expect: Expect::manager(namespace, manager),
    })
}

/// The routing table (swapped whole, read without locks) and the manager connections.
pub(crate) struct Upstream {
    table: ArcSwap<Table>,
    /// Serialises table updates; never taken on the request path.
    update: Mutex<()>,
    name: String,
    namespace: String,
    control: Option<Control>,
    metrics: Arc<Metrics>,
    pushes: Pushes,
    /// Mesh TLS of the connections to managers; `None`: plain TCP.
    mesh: Option<Arc<MeshTls>>,
    /// Bumped at each table and each new endpoint connection; held requests wait on it.
    changes: Arc<Changes>,
    /// Set when following the control plane: requests with no ready endpoint are held and the
    /// operator is asked for a pod.
    activator: Option<Arc<Activator>>,
    /// The CloudEvents `source` subscription filters see of the events leaving this sidecar.
    source: String,
}

/// The state of the control-plane stream, for `/routes`.
struct Control {
    url: String,
    connected: AtomicBool,
    received: AtomicU64,
}

/// What a sidecar's configuration says its upstream reaches, from the start (the control plane's
/// tables replace it later): the handlers' destinations per event type, the subscribers per route key,
/// and the Managers with fixed endpoints instead of DNS.
#[derive(Clone, Copy)]
pub(crate) struct Reach<'a> {
    pub destinations: &'a BTreeMap<EventType, Destination>,
    pub subscribers: &'a BTreeMap<String, Subscriber>,
    pub static_endpoints: &'a BTreeMap<String, Vec<String>>,
}

impl Upstream {
    /// Builds the pools of `destinations` of Router `name` and starts discovery: a Manager listed in
    /// `static_endpoints` uses that list, any other is found through `<service>.<namespace>.svc` DNS.
    /// Both roles use it (the router role for clients, the manager role for its app's outgoing events);
    /// PUSH frames go to `pushes` (the router role's WebSocket subscribers; `None` takes none).
    /// With `mesh`, connections are mTLS and each endpoint must be a pod of its Manager.
    pub(crate) fn start(
        name: &str,
        namespace: &str,
        reach: Reach<'_>,
        pushes: Pushes,
        mesh: Option<Arc<MeshTls>>,
        metrics: Arc<Metrics>,
    ) -> Upstream {
        let Reach {
            destinations,
            subscribers,
            static_endpoints,
        } = reach;
        let changes = Arc::new(Changes::default());
        let mut table = Table {
            version: 0,
            source: TableSource::Config,
            pools: BTreeMap::new(),
            by_event: HashMap::new(),
            durable: HashMap::new(),
            subscribers: Vec::new(),
            routes: Vec::new(),
        };
        let handlers = destinations
            .iter()
            .map(|(event, dest)| (event.as_str().to_owned(), dest, None));
        let subs = subscribers
            .iter()
            .map(|(key, s)| (key.clone(), &s.destination, Some(wire_subscription(s))));
        let pushable = config_pushable(destinations, subscribers);
        for (event, dest, sub) in handlers.chain(subs) {
            let (source, key) = source_of(dest, namespace, static_endpoints);
            let pool = table
                .pools
                .entry(key.clone())
                .or_insert_with(|| {
                    let pool = Arc::new(Pool::new(
                        dest.manager.clone(),
                        pushes.clone(),
                        changes.clone(),
                        metrics.clone(),
                        peer_tls(mesh.as_ref(), namespace, &dest.manager),
                    ));
                    pool.allow_pushes(pushable.get(&dest.manager).cloned().unwrap_or_default());
                    discovery::start(pool.clone(), source);
                    pool
                })
                .clone();
            match &sub {
                Some(wire) => add_subscription(&mut table, event, dest, wire, key, pool),
                None => add_handler(&mut table, event, dest, key, pool),
            }
        }
        table.routes.sort_by(|a, b| a.event.cmp(&b.event));
        Upstream {
            table: ArcSwap::from_pointee(table),
            update: Mutex::new(()),
            source: format!("/switchyard/{namespace}/{name}"),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            control: None,
            metrics,
            pushes,
            mesh,
            changes,
            activator: None,
        }
    }

    /// Sets the CloudEvents `source` that subscription filters see of the events leaving this
    /// sidecar (`/switchyard/<namespace>/<Router or Manager>`; the Router's by default).
    pub(crate) fn with_source(mut self, source: String) -> Upstream {
        self.source = source;
        self
    }

    /// The subscribers that take `what` of `out` (its type's pattern, filter and kind), one per
    /// Manager, never the type's handler (which gets a publish as its handler).
    pub(crate) fn subscribers_of(&self, out: &Outgoing, what: Observe) -> Vec<Arc<Sub>> {
        let table = self.table.load();
        if table.subscribers.is_empty() {
            return Vec::new();
        }
        let attrs = Attrs {
            event: &out.event,
            id: &out.ce_id,
            source: &self.source,
            content_type: out.content_type.as_deref(),
        };
        let handler = table.by_event.get(&*out.event).map(|p| p.name.clone());
        subscribers::pick(
            table.subscribers.iter().map(|s| &s.spec),
            what,
            &attrs,
            handler.as_deref().filter(|_| what == Observe::Published),
        )
        .into_iter()
        .map(|i| table.subscribers[i].clone())
        .collect()
    }

    /// Holds requests whose event type has no ready endpoint and asks the control plane for a pod
    /// (see [`Upstream::ready_pool`]).
    pub(crate) fn with_activation(mut self, activator: Activator) -> Upstream {
        self.activator = Some(Arc::new(activator));
        self
    }

    /// Marks this router as following the control plane at `url` (shown at `/routes`).
    pub(crate) fn with_control_plane(mut self, url: String) -> Upstream {
        self.control = Some(Control {
            url,
            connected: AtomicBool::new(false),
            received: AtomicU64::new(0),
        });
        self
    }

    /// Name and namespace of the Router, as the control plane knows it.
    pub(crate) fn identity(&self) -> (&str, &str) {
        (&self.name, &self.namespace)
    }

    /// The pool serving `event`, if any Manager handles it.
    pub(crate) fn pool_of(&self, event: &str) -> Option<Arc<Pool>> {
        self.table.load().by_event.get(event).cloned()
    }

    /// The Manager and durable route of `event` when the current table says it is delivered
    /// durably (its publishes go to that Manager's stream); `None`: direct, or no route.
    pub(crate) fn durable_of(&self, event: &str) -> Option<(Arc<str>, Arc<DurableRoute>)> {
        self.table.load().durable.get(event).cloned()
    }

    /// Replaces the table with one from the control plane. Pools that keep their name keep their
    /// connections; pools that vanish drain; the config's DNS and static pools retire at the first one.
    pub(crate) fn apply(&self, incoming: &RoutingTable) {
        let plan = table::plan(incoming);
        for reason in &plan.rejected {
            tracing::warn!(
                version = incoming.version,
                "routing table entry ignored: {reason}"
            );
        }
        let _serial = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.table.load_full();
        let pools = self.pools_for(&current, plan.pools, &plan.pushable);
        let mut by_event = HashMap::with_capacity(plan.events.len());
        let mut durable = HashMap::with_capacity(plan.durable.len());
        let mut routes = Vec::with_capacity(plan.events.len());
        let mut subscribed = Vec::with_capacity(plan.subscribers.len());
        for (key, (spec, pool)) in plan.subscribers {
            if let Some(p) = pools.get(&pool) {
                subscribed.push(Arc::new(Sub {
                    spec: spec.clone(),
                    pool: p.clone(),
                }));
            }
            routes.push(RouteInfo {
                event: key,
                manager: spec.manager.to_string(),
                pool,
                durable: spec.durable.clone().map(Arc::new),
                subscription: Some(spec),
            });
        }
        let mut planned_durable = plan.durable;
        for (event, (manager, pool)) in plan.events {
            if let Some(p) = pools.get(&pool) {
                by_event.insert(event.clone(), p.clone());
            }
            let route = planned_durable.remove(&event).map(Arc::new);
            if let Some(r) = &route {
                durable.insert(event.clone(), (Arc::from(manager.as_str()), r.clone()));
            }
            routes.push(RouteInfo {
                event,
                manager,
                pool,
                durable: route,
                subscription: None,
            });
        }
        routes.sort_by(|a, b| a.event.cmp(&b.event));
        tracing::info!(
            version = incoming.version,
            routes = routes.len(),
            durable = durable.len(),
            subscribers = subscribed.len(),
            pools = pools.len(),
            "routing table from the control plane"
        );
        self.table.store(Arc::new(Table {
            version: incoming.version,
            source: TableSource::ControlPlane,
            pools,
            by_event,
            durable,
            subscribers: subscribed,
            routes,
        }));
        self.metrics.control_plane_tables.inc();
        if let Some(c) = &self.control {
            c.received.fetch_add(1, Ordering::Relaxed);
        }
        self.changes.bump();
    }

    /// The pools of a control plane's table: a pool that keeps its name keeps its connections
    /// (once the current table is the control plane's too), each gets its new endpoints, and the
    /// current pools not kept retire.
    fn pools_for(
        &self,
        current: &Table,
        planned: BTreeMap<String, table::PoolPlan>,
        pushable: &BTreeMap<String, std::collections::BTreeSet<String>>,
    ) -> BTreeMap<String, Arc<Pool>> {
        let reuse = current.source == TableSource::ControlPlane;
        let mut pools = BTreeMap::new();
        for (name, p) in planned {
            let pool = reuse
                .then(|| current.pools.get(&name).cloned())
                .flatten()
                .unwrap_or_else(|| {
                    Arc::new(Pool::new(
                        p.manager.clone(),
                        self.pushes.clone(),
                        self.changes.clone(),
                        self.metrics.clone(),
                        peer_tls(self.mesh.as_ref(), &self.namespace, &p.manager),
                    ))
                });
            // Before its new endpoints connect: a push on a fresh connection meets the new list.
            pool.allow_pushes(pushable.get(&p.manager).cloned().unwrap_or_default());
            pool.update(p.addrs);
            pools.insert(name, pool);
        }
        for (name, old) in &current.pools {
            if !pools.get(name).is_some_and(|p| Arc::ptr_eq(p, old)) {
                old.retire();
            }
        }
        pools
    }

    /// The pool serving `event` once it has a connected endpoint. Without activation, or when one
    /// is connected already, that is [`Upstream::pool_of`] at once. Otherwise the request is held:
    /// the operator is asked for a pod, and each new table or new connection is looked at (no
    /// polling) until an endpoint is ready, the activation timeout passes or `deadline` comes; then
    /// the pool is returned as it is and the call fails with `NoEndpoint` (503 + Retry-After).
    /// None when no Manager handles `event`.
    pub(crate) async fn ready_pool(
        &self,
        event: &Arc<str>,
        deadline: Instant,
    ) -> Option<Arc<Pool>> {
        self.ready(Waiting::handler(event), deadline, |t| {
            t.by_event.get(&**event).cloned()
        })
        .await
    }

    /// The pool of the subscriber `sub` of `event`, waited for as [`Upstream::ready_pool`] waits
    /// for a handler: a Manager at zero replicas that subscribes is activated (the control plane
    /// is told which Manager) and its first pod awaited. Each table is searched afresh for the
    /// subscription, by its key.
    pub(crate) async fn ready_subscriber(
        &self,
        sub: &Sub,
        event: &Arc<str>,
        deadline: Instant,
    ) -> Option<Arc<Pool>> {
        // The common case costs nothing more than before: a connected pool, or nobody to activate.
        if self.activator.is_none() || sub.pool.has_usable() {
            return Some(sub.pool.clone());
        }
        let key = &sub.spec.key;
        let waiting = Waiting {
            event: event.clone(),
            manager: Some(sub.spec.manager.clone()),
        };
        self.ready(waiting, deadline, |t| {
            t.subscribers
                .iter()
                .find(|s| s.spec.key == *key)
                .map(|s| s.pool.clone())
        })
        .await
    }

    async fn ready(
        &self,
        what: Waiting,
        deadline: Instant,
        pool_in: impl Fn(&Table) -> Option<Arc<Pool>>,
    ) -> Option<Arc<Pool>> {
        let Some(activator) = &self.activator else {
            return pool_in(&self.table.load());
        };
        let mut changed = self.changes.subscribe();
        let pool = pool_in(&self.table.load())?;
        if pool.has_usable() {
            return Some(pool);
        }
        let until = hold::hold_until(Instant::now(), activator.timeout(), deadline);
        let _held = activator.hold(&what);
        // Queued in the load reports: the autoscaler must not scale the handler to zero under held
        // requests. (A subscriber's pods report its subscriptions; the Router's reports are the
        // handler's.)
        let _waiting = what
            .manager
            .is_none()
            .then(|| self.metrics.wait(&what.event));
        self.metrics.held.inc();
        let _unheld = HeldGauge(&self.metrics);
        tracing::debug!(event = %what.event, subscriber = ?what.manager, "no ready endpoint; holding the request");
        loop {
            // Marks the current state seen before looking, so a bump during the look wakes us.
            changed.borrow_and_update();
            let pool = pool_in(&self.table.load())?;
            if pool.has_usable() {
                return Some(pool);
            }
            match timeout_at(until.into(), changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Some(pool),
            }
        }
    }

    /// Records whether the control-plane stream is open.
    pub(crate) fn set_connected(&self, connected: bool) {
        self.metrics
            .control_plane_connected
            .set(i64::from(connected));
        if let Some(c) = &self.control {
            c.connected.store(connected, Ordering::Relaxed);
        }
    }

    /// The current table as `/routes` shows it.
    pub(crate) fn view(&self) -> RoutesView {
        let table = self.table.load();
        RoutesView {
            router: self.name.clone(),
            namespace: self.namespace.clone(),
            source: table.source,
            version: table.version,
            control_plane: self.control.as_ref().map(|c| ControlPlaneView {
                url: c.url.clone(),
                connected: c.connected.load(Ordering::Relaxed),
                tables_received: c.received.load(Ordering::Relaxed),
            }),
            routes: table.route_views(),
        }
    }

    /// Sends `out` to the least loaded of two endpoints of `pool` and waits for the answer until
    /// `deadline`. A request whose connection fails before it was written is tried on another endpoint.
    pub(crate) async fn call(
        &self,
        pool: &Pool,
        out: &Outgoing,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Answered, CallError> {
        self.send_to(pool, out, 0, deadline, times).await
    }

    /// Publishes `out` (`FLAG_NO_REPLY | FLAG_ACK`): done once a manager sidecar admitted it to its
    /// queue. A manager that refuses it (queue full) or whose connection fails before acknowledging
    /// it is passed over for another endpoint; the same ce-id travels each time, so an event that
    /// did reach a pod that then died may arrive twice, never zero times after an `Ok`. When every
    /// endpoint refused, the last refusal comes back as the answer (a 503 from the mesh).
    /// `deadline` bounds the wait for an endpoint, credit and the acknowledgement.
    pub(crate) async fn publish(
        &self,
        pool: &Pool,
        out: &Outgoing,
        deadline: Instant,
    ) -> Result<Response, CallError> {
        let mut times = CallTimes::default();
        // An acknowledgement never streams; a body on one (a manager's bug) is dropped, resetting it.
        self.send_to(pool, out, FLAG_NO_REPLY | FLAG_ACK, deadline, &mut times)
            .await
            .map(|a| a.head)
    }

    async fn send_to(
        &self,
        pool: &Pool,
        out: &Outgoing,
        flags: u8,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Answered, CallError> {
        fits(out)?;
        let mut tried: Vec<Arc<Peer>> = Vec::new();
        let mut refused = None;
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
                Err(Attempt::Refused(r)) => {
                    tracing::debug!(peer = %peer.addr, "manager refused the publish; trying another endpoint");
                    refused = Some(r);
                }
                Err(Attempt::NotSent) => {
                    tracing::debug!(peer = %peer.addr, "connection failed before the request was written or acknowledged; trying another endpoint");
                }
            }
        }
        refused
            .map(|head| Answered { head, body: None })
            .ok_or(CallError::NoEndpoint)
    }
}

/// Whether `out` fits in a REQUEST frame the managers accept. Small events always do (their string
/// fields are bounded far below the limit), so only large ones pay for the exact check.
fn fits(out: &Outgoing) -> Result<(), CallError> {
    if out.payload.len() <= MAX_PAYLOAD - 4096 {
        return Ok(());
    }
    // With its headers: they travel in the frame too.
    let probe = out.request(0, 0, 0, out.payload.clone());
    probe
        .check(DEFAULT_MAX_FRAME)
        .map_err(|_| CallError::TooLarge {
            bytes: out.payload.len(),
        })
}

/// Ends a held request's count in `switchyard_held_requests`.
struct HeldGauge<'a>(&'a Metrics);

impl Drop for HeldGauge<'_> {
    fn drop(&mut self) {
        self.0.held.dec();
    }
}

/// Manager -> the types its pods may push, from the config's table (locally): those it handles
/// and its `spec.push`, as the control plane's routes say in a cluster.
fn config_pushable(
    destinations: &BTreeMap<EventType, Destination>,
    subscribers: &BTreeMap<String, Subscriber>,
) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let listed = destinations
        .values()
        .chain(subscribers.values().map(|s| &s.destination));
    for dest in listed {
        out.entry(dest.manager.clone())
            .or_default()
            .extend(dest.push.iter().map(|e| e.as_str().to_owned()));
    }
    for (event, dest) in destinations {
        out.entry(dest.manager.clone())
            .or_default()
            .insert(event.as_str().to_owned());
    }
    out
}

#[cfg(test)]
mod tests;
