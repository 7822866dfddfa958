//! Watches Routers, Managers and manager Pods and keeps the routing tables up to date one event at
//! a time (`index`), publishing what changed to the hub. Reads only: every replica runs it, leader
//! or not.
//!
//! Routers and Managers are reflected into stores that the rest of the operator shares (the
//! autoscaler reads the same Managers; the index holds the stores' own `Arc`s, not copies). With
//! `--watch-namespaces` every kind has one watcher and one store per namespace, and a relist of one
//! namespace only drops what vanished from that namespace. Pods are
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
use crate::scope::{Scope, Stores, Target};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use switchyard_crds::{Manager, Router};

/// Most events folded into one publish, so a flood of events still publishes now and then.
const BATCH: usize = 1024;

/// What the caches do not keep of an object: its managed fields, the field owners of server-side
/// apply, which nothing here reads and which take as much room as the spec (every Manager has
/// the controller's, the autoscaler's and the backlog reader's entries).
pub(crate) fn strip<K: kube::Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// The caches every part of the operator shares.
#[derive(Clone)]
pub(crate) struct Caches {
    /// Every watched Router.
    pub routers: Stores<Router>,
    /// Every watched Manager.
    pub managers: Stores<Manager>,
}

/// One watch event of any of the three kinds (one lives at a time, so its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Ev {
    Router(watcher::Event<Router>),
    Manager(watcher::Event<Manager>),
    Pod(watcher::Event<Pod>),
}

/// The kinds, as indices of [`State::listed`].
const KINDS: usize = 3;

impl Ev {
    fn kind(&self) -> usize {
        match self {
            Ev::Router(_) => 0,
            Ev::Manager(_) => 1,
            Ev::Pod(_) => 2,
        }
    }
}

/// An event and the index of the target (in [`Scope::targets`]) whose watcher saw it.
type Tagged = (usize, Ev);

type Events = Pin<Box<dyn Stream<Item = Tagged> + Send>>;

/// What is needed to run the watches, built before the caches are handed out.
pub(crate) struct Observer {
    caches: Caches,
    targets: Vec<Target>,
    events: Events,
}

/// Sets up the watches of `scope`; the caches fill once [`Observer::run`] runs.
pub(crate) fn start(client: Client, scope: &Scope) -> Observer {
    let targets = scope.targets();
    // Only manager pods: the operator does not look at the cluster's other pods.
    let manager_pods =
        watcher::Config::default().labels(&format!("{}=switchyard-manager", meta::NAME));
    let mut routers = Vec::new();
    let mut managers = Vec::new();
    let mut events = Vec::new();
    for (slot, target) in targets.iter().enumerate() {
        let (rs, rw) = reflector::store::<Router>();
        let (ms, mw) = reflector::store::<Manager>();
        routers.push((target.clone(), rs));
        managers.push((target.clone(), ms));
        events.push(logged(
            watcher(
                target.api::<Router>(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(strip)
            .reflect(rw),
            "routers",
            slot,
            Ev::Router,
        ));
        events.push(logged(
            watcher(
                target.api::<Manager>(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(strip)
            .reflect(mw),
            "managers",
            slot,
            Ev::Manager,
        ));
        events.push(logged(
            watcher(target.api::<Pod>(client.clone()), manager_pods.clone()).default_backoff(),
            "pods",
            slot,
            Ev::Pod,
        ));
    }
    Observer {
        caches: Caches {
            routers: Stores::new(routers),
            managers: Stores::new(managers),
        },
        targets,
        events: Box::pin(futures::stream::select_all(events)),
    }
}

impl Observer {
    /// The shared caches.
    pub(crate) fn caches(&self) -> Caches {
        self.caches.clone()
    }

    /// Keeps `hub` and `directory` up to date until the future is dropped.
    pub(crate) async fn run(
        mut self,
        hub: Arc<Hub>,
        directory: Arc<directory::Current>,
        metrics: Arc<Metrics>,
    ) {
        let mut state = State {
            index: Index::default(),
            managers: self.caches.managers.clone(),
            relist: self.targets.iter().map(|_| Relist::default()).collect(),
            targets: self.targets.clone(),
            listed: vec![[false; KINDS]; self.targets.len()],
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
            // Until all three of every target are listed, a missing Manager or pod could be a false
            // absence.
            if !state.listed.iter().flatten().all(|l| *l) {
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
    managers: Stores<Manager>,
    /// Per target.
    relist: Vec<Relist>,
    /// The targets, by the index events are tagged with.
    targets: Vec<Target>,
    /// Per target: Routers, Managers, Pods listed at least once.
    listed: Vec<[bool; KINDS]>,
    /// A Router or Manager event came since the directory was last built.
    owners_changed: bool,
}

fn obj_key<K: ResourceExt>(k: &K) -> ObjKey {
    (k.namespace().unwrap_or_default(), k.name_any())
}

impl State {
    fn handle(&mut self, (slot, ev): Tagged) {
        use watcher::Event as E;
        if !matches!(ev, Ev::Pod(_)) {
            self.owners_changed = true;
        }
        if matches!(
            ev,
            Ev::Router(E::InitDone) | Ev::Manager(E::InitDone) | Ev::Pod(E::InitDone)
        ) {
            self.listed[slot][ev.kind()] = true;
        }
        let target = &self.targets[slot];
        let relist = &mut self.relist[slot];
        match ev {
            Ev::Router(e) => match e {
                E::Init => relist.routers = Some(HashSet::new()),
                E::InitApply(r) | E::Apply(r) => {
                    if let (Some(seen), Some(ns)) = (relist.routers.as_mut(), r.namespace()) {
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
                    if let Some(seen) = relist.routers.take() {
                        self.index
                            .retain_routers(|k| seen.contains(k) || !target.holds(&k.namespace));
                    }
                }
            },
            Ev::Manager(e) => match e {
                E::Init => relist.managers = Some(HashSet::new()),
                E::InitApply(m) | E::Apply(m) => {
                    if let Some(seen) = relist.managers.as_mut() {
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
                    if let Some(seen) = relist.managers.take() {
                        self.index
                            .retain_managers(|k| seen.contains(k) || !target.holds(&k.0));
                    }
                }
            },
            Ev::Pod(e) => match e {
                E::Init => relist.pods = Some(HashSet::new()),
                E::InitApply(p) | E::Apply(p) => {
                    if let Some(seen) = relist.pods.as_mut() {
                        seen.insert(obj_key(&p));
                    }
                    self.index.apply_pod(&p);
                }
                E::Delete(p) => self.index.delete_pod(&obj_key(&p)),
                E::InitDone => {
                    if let Some(seen) = relist.pods.take() {
                        self.index
                            .retain_pods(|k| seen.contains(k) || !target.holds(&k.0));
                    }
                }
            },
        }
    }
}

/// A watch stream with its errors logged (the backoff retries them), wrapped as [`Ev`].
fn logged<K, S>(
    stream: S,
    what: &'static str,
    slot: usize,
    wrap: fn(watcher::Event<K>) -> Ev,
) -> Events
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    Box::pin(stream.filter_map(move |ev| {
        let ev = match ev {
            Ok(ev) => Some((slot, wrap(ev))),
            Err(e) => {
                tracing::warn!(what, error = %e, "control-plane watch failed; retrying");
                None
            }
        };
        std::future::ready(ev)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event as E;

    fn router(ns: &str, name: &str) -> Router {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "switchyard.dev/v1alpha1", "kind": "Router",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"listeners": {"http": {"port": 8080}}, "routes": []},
        }))
        .expect("router")
    }

    #[test]
    fn a_relist_of_one_namespace_keeps_the_other_namespaces_routers() {
        let targets = vec![Target::Namespace("a".into()), Target::Namespace("b".into())];
        let mut state = State {
            index: Index::default(),
            managers: Stores::new(Vec::new()),
            relist: targets.iter().map(|_| Relist::default()).collect(),
            listed: vec![[false; KINDS]; targets.len()],
            targets,
            owners_changed: false,
        };
        for (slot, ns) in [(0, "a"), (1, "b")] {
            state.handle((slot, Ev::Router(E::Init)));
            state.handle((slot, Ev::Router(E::InitApply(router(ns, "r")))));
            state.handle((slot, Ev::Router(E::InitDone)));
        }
        assert_eq!(state.index.router_count(), 2);
        assert!(state.listed.iter().all(|l| l[0] && !l[1] && !l[2]));
        // Namespace a relists with its Router gone: b's stays.
        state.handle((0, Ev::Router(E::Init)));
        state.handle((0, Ev::Router(E::InitDone)));
        assert_eq!(state.index.router_count(), 1);
        // One watcher of every namespace relists the lot.
        state.targets = vec![Target::All];
        state.relist = vec![Relist::default()];
        state.handle((0, Ev::Router(E::Init)));
        state.handle((0, Ev::Router(E::InitDone)));
        assert_eq!(state.index.router_count(), 0);
    }
}
