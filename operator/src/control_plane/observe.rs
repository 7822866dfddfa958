//! Watches Routers, Managers and manager Pods and keeps the routing tables up to date one event at
//! a time (`index`), publishing what changed to the hub. Reads only: every replica runs it, leader
//! or not.
//!
//! Routers and Managers are reflected into stores that the rest of the operator shares (the
//! autoscaler reads the same Managers; the index holds the stores' own `Arc`s, not copies). Pods are
//! not cached as objects at all: the index keeps their selector labels, IP and readiness. Events
//! that arrive together (a rollout moves many pods) are folded into one publish, without waiting
//! for more to come. The `directory` the control plane authorizes callers by is rebuilt from the
//! same stores after a batch that changed a Router or a Manager (pods do not enter it).

use super::directory::{self, Directory};
use super::hub::Hub;
use super::index::{Index, ObjKey};
use super::table::RouterKey;
use crate::metrics::Metrics;
use crate::render::meta;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use switchyard_crds::{Manager, Router};

/// Most events folded into one publish, so a flood of events still publishes now and then.
const BATCH: usize = 1024;

/// The caches every part of the operator shares.
#[derive(Clone)]
pub struct Caches {
    /// Every Router.
    pub routers: Store<Router>,
    /// Every Manager.
    pub managers: Store<Manager>,
}

/// One watch event of any of the three kinds (one lives at a time, so its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Ev {
    Router(watcher::Event<Router>),
    Manager(watcher::Event<Manager>),
    Pod(watcher::Event<Pod>),
}

type Events = Pin<Box<dyn Stream<Item = Ev> + Send>>;

/// What is needed to run the watches, built before the caches are handed out.
pub struct Observer {
    caches: Caches,
    events: Events,
}

/// Sets up the watches; the caches fill once [`Observer::run`] runs.
pub fn start(client: Client) -> Observer {
    let (routers, rw) = reflector::store::<Router>();
    let (managers, mw) = reflector::store::<Manager>();
    // Only manager pods: the operator does not look at the cluster's other pods.
    let manager_pods =
        watcher::Config::default().labels(&format!("{}=switchyard-manager", meta::NAME));
    let events = futures::stream::select_all([
        logged(
            watcher(
                Api::<Router>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(rw),
            "routers",
            Ev::Router,
        ),
        logged(
            watcher(
                Api::<Manager>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(mw),
            "managers",
            Ev::Manager,
        ),
        logged(
            watcher(Api::<Pod>::all(client), manager_pods).default_backoff(),
            "pods",
            Ev::Pod,
        ),
    ]);
    Observer {
        caches: Caches { routers, managers },
        events: Box::pin(events),
    }
}

impl Observer {
    /// The shared caches.
    pub fn caches(&self) -> Caches {
        self.caches.clone()
    }

    /// Keeps `hub` and `directory` up to date until the future is dropped.
    pub async fn run(
        mut self,
        hub: Arc<Hub>,
        directory: Arc<directory::Current>,
        metrics: Arc<Metrics>,
    ) {
        let mut state = State {
            index: Index::default(),
            managers: self.caches.managers.clone(),
            relist: Relist::default(),
            listed: [false; 3],
            owners_changed: true,
        };
        while let Some(ev) = self.events.next().await {
            state.handle(ev);
            // Fold in whatever else is ready now; never wait for more.
            for _ in 0..BATCH {
                match self.events.next().now_or_never() {
                    Some(Some(ev)) => state.handle(ev),
                    _ => break,
                }
            }
            // Until all three are listed, a missing Manager or pod could be a false absence.
            if !state.listed.iter().all(|l| *l) {
                continue;
            }
            if std::mem::take(&mut state.owners_changed) {
                // Before the tables: a sidecar seeing its new table is then also allowed what it
                // lists.
                let routers = self.caches.routers.state();
                let managers = self.caches.managers.state();
                let r: Vec<&Router> = routers.iter().map(AsRef::as_ref).collect();
                let m: Vec<&Manager> = managers.iter().map(AsRef::as_ref).collect();
                directory.set(Directory::build(&r, &m));
            }
            let started = Instant::now();
            let changes = state.index.take();
            let changed = hub.publish(changes);
            if !hub.is_synced() {
                hub.mark_synced();
                tracing::info!(
                    routers = state.index.router_count(),
                    "control-plane caches synced; serving routing tables"
                );
            }
            metrics.set_routing_tables(state.index.router_count());
            if changed > 0 {
                metrics.table_publish(started.elapsed());
                tracing::debug!(changed, "routing tables changed");
            }
        }
    }
}

/// Keys seen during a relist of each kind, to drop what vanished while unwatched.
#[derive(Default)]
struct Relist {
    routers: Option<HashSet<RouterKey>>,
    managers: Option<HashSet<ObjKey>>,
    pods: Option<HashSet<ObjKey>>,
}

struct State {
    index: Index,
    managers: Store<Manager>,
    relist: Relist,
    /// Routers, Managers, Pods listed at least once.
    listed: [bool; 3],
    /// A Router or Manager event came since the directory was last built.
    owners_changed: bool,
}

fn obj_key<K: ResourceExt>(k: &K) -> ObjKey {
    (k.namespace().unwrap_or_default(), k.name_any())
}

impl State {
    fn handle(&mut self, ev: Ev) {
        use watcher::Event as E;
        if !matches!(ev, Ev::Pod(_)) {
            self.owners_changed = true;
        }
        match ev {
            Ev::Router(e) => match e {
                E::Init => self.relist.routers = Some(HashSet::new()),
                E::InitApply(r) | E::Apply(r) => {
                    if let (Some(seen), Some(ns)) = (self.relist.routers.as_mut(), r.namespace()) {
                        seen.insert(RouterKey {
                            namespace: ns,
                            name: r.name_any(),
                        });
                    }
                    self.index.apply_router(&r);
                }
                E::Delete(r) => {
                    let (namespace, name) = obj_key(&r);
                    self.index.delete_router(&RouterKey { namespace, name });
                }
                E::InitDone => {
                    if let Some(seen) = self.relist.routers.take() {
                        self.index.retain_routers(&seen);
                    }
                    self.listed[0] = true;
                }
            },
            Ev::Manager(e) => match e {
                E::Init => self.relist.managers = Some(HashSet::new()),
                E::InitApply(m) | E::Apply(m) => {
                    if let Some(seen) = self.relist.managers.as_mut() {
                        seen.insert(obj_key(&m));
                    }
                    // The store's own Arc, so the index shares the cached object instead of copying it.
                    let shared = self
                        .managers
                        .get(&ObjectRef::from_obj(&m))
                        .unwrap_or_else(|| Arc::new(m));
                    self.index.apply_manager(shared);
                }
                E::Delete(m) => self.index.delete_manager(&obj_key(&m)),
                E::InitDone => {
                    if let Some(seen) = self.relist.managers.take() {
                        self.index.retain_managers(&seen);
                    }
                    self.listed[1] = true;
                }
            },
            Ev::Pod(e) => match e {
                E::Init => self.relist.pods = Some(HashSet::new()),
                E::InitApply(p) | E::Apply(p) => {
                    if let Some(seen) = self.relist.pods.as_mut() {
                        seen.insert(obj_key(&p));
                    }
                    self.index.apply_pod(&p);
                }
                E::Delete(p) => self.index.delete_pod(&obj_key(&p)),
                E::InitDone => {
                    if let Some(seen) = self.relist.pods.take() {
                        self.index.retain_pods(&seen);
                    }
                    self.listed[2] = true;
                }
            },
        }
    }
}

/// A watch stream with its errors logged (the backoff retries them), wrapped as [`Ev`].
fn logged<K, S>(stream: S, what: &'static str, wrap: fn(watcher::Event<K>) -> Ev) -> Events
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    Box::pin(stream.filter_map(move |ev| {
        let ev = match ev {
            Ok(ev) => Some(wrap(ev)),
            Err(e) => {
                tracing::warn!(what, error = %e, "control-plane watch failed; retrying");
                None
            }
        };
        std::future::ready(ev)
    }))
}
