//! Pure: the routing tables of every Router, kept up to date one object at a time.
//!
//! Each destination (event type of a Router) selects a *pool* of pods by labels; pools are indexed
//! by the Manager label they select on, and remember which (Router, event type) routes use them. A
//! pod change therefore looks only at the one or two pools of its Manager and marks only the routes
//! that use them; a Manager change recomputes only its Router's destinations; status-only updates
//! (the bulk of the traffic) change nothing and cost a comparison. [`Index::take`] hands out what
//! changed since the last call, per Router, for the hub. `table::all_tables` (the whole computation
//! from scratch) is the reference the tests hold this against.

use super::delta::Changes;
use super::hub::RouterChange;
use super::table::RouterKey;
use crate::render::{self, meta};
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use switchyard_crds::{Manager, Router};
use switchyard_protocol::control::v1::{Endpoint, Route, Subscription};
use switchyard_protocol::durable::DurableRoute;

/// Namespace and name of an object.
pub(crate) type ObjKey = (String, String);

/// Labels a destination selects on; the index keeps only these of each pod.
const SELECTOR_LABELS: [&str; 4] = [meta::NAME, meta::INSTANCE, meta::MANAGER, meta::EVENT_TYPE];

/// A group of pods one or more routes send to: the pods its selector picks in its namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct PoolKey {
    namespace: String,
    selector: BTreeMap<String, String>,
    port: u16,
}

impl PoolKey {
    fn manager(&self) -> ObjKey {
        let m = self
            .selector
            .get(meta::MANAGER)
            .cloned()
            .unwrap_or_default();
        (self.namespace.clone(), m)
    }
}

/// Where one event type of a Router goes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dest {
    manager: String,
    pool_name: String,
    pool: PoolKey,
    /// Set when the type is delivered durably; its route says so.
    durable: Option<DurableRoute>,
    /// Set on a subscriber's route (keyed `<event>@<manager>`).
    subscription: Option<Subscription>,
    /// The types the Manager may push beside those it handles (`spec.push`).
    push: Vec<String>,
}

/// What the index keeps of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodEntry {
    labels: BTreeMap<String, String>,
    ip: Option<IpAddr>,
    ready: bool,
}

impl PodEntry {
    fn of(pod: &Pod) -> PodEntry {
        let all = pod.labels();
        PodEntry {
            labels: SELECTOR_LABELS
                .iter()
                .filter_map(|k| all.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect(),
            ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
            ready: is_ready(pod),
        }
    }

    fn manager(&self) -> Option<&String> {
        self.labels.get(meta::MANAGER)
    }

    /// Its endpoint in `pool`, if it belongs there and may get work.
    fn endpoint_in(&self, pool: &PoolKey) -> Option<String> {
        let selected = pool
            .selector
            .iter()
            .all(|(k, v)| self.labels.get(k) == Some(v));
        let ip = self.ip.filter(|_| selected && self.ready)?;
        Some(SocketAddr::new(ip, pool.port).to_string())
    }
}

/// Ready and not being deleted: a terminating pod drains and must not get new work.
pub(crate) fn is_ready(pod: &Pod) -> bool {
    pod.meta().deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[derive(Debug, Default)]
struct Pool {
    /// Pod name -> `ip:port`.
    endpoints: BTreeMap<String, String>,
    /// Routes sending to this pool.
    users: BTreeSet<(RouterKey, String)>,
}

/// The incremental routing tables.
#[derive(Default)]
pub(crate) struct Index {
    routers: HashSet<RouterKey>,
    managers: HashMap<ObjKey, Arc<Manager>>,
    managers_of: HashMap<RouterKey, BTreeSet<String>>,
    /// Per Router with a table: event type -> destination.
    dests: HashMap<RouterKey, BTreeMap<String, Dest>>,
    pods: HashMap<ObjKey, PodEntry>,
    /// (namespace, Manager label) -> pod names.
    pods_of: HashMap<ObjKey, BTreeSet<String>>,
    pools: HashMap<PoolKey, Pool>,
    /// (namespace, Manager) -> the pools selecting on it.
    pools_of: HashMap<ObjKey, BTreeSet<PoolKey>>,
    /// Routes changed since the last `take`.
    dirty: BTreeMap<RouterKey, BTreeSet<String>>,
    /// Routers whose table went away since the last `take`.
    gone: BTreeSet<RouterKey>,
}

fn router_key(r: &Router) -> Option<RouterKey> {
    Some(RouterKey {
        namespace: r.namespace()?,
        name: r.name_any(),
    })
}

/// What of a Manager decides its destinations (which types, which pods, and whether a publish goes
/// to a stream); status and template changes do not.
type RoutingSpec<'a> = (
    &'a str,
    &'a [switchyard_crds::EventType],
    switchyard_crds::manager::Split,
    switchyard_crds::manager::DeliveryMode,
    &'a BTreeMap<String, switchyard_crds::manager::DeliveryMode>,
    Option<&'a str>,
    &'a switchyard_crds::manager::Durable,
    &'a [switchyard_crds::subscription::Subscription],
    &'a [switchyard_crds::EventType],
);

fn routing_spec(m: &Manager) -> RoutingSpec<'_> {
    let s = &m.spec;
    (
        s.router_ref.name.as_str(),
        s.events.as_slice(),
        s.scaling.split,
        s.delivery,
        &s.event_delivery,
        s.workers.ordering_key.as_deref(),
        &s.durable,
        s.subscriptions.as_slice(),
        s.push.as_slice(),
    )
}

impl Index {
    /// A Router was created or changed.
    pub(crate) fn apply_router(&mut self, r: &Router) {
        let Some(key) = router_key(r) else { return };
        if r.meta().deletion_timestamp.is_some() {
            self.delete_router(&key);
        } else if self.routers.insert(key.clone()) {
            self.recompute(&key);
        }
    }

    /// A Router is gone.
    pub(crate) fn delete_router(&mut self, key: &RouterKey) {
        if self.routers.remove(key) {
            self.recompute(key);
        }
    }

    /// A Manager was created or changed.
    pub(crate) fn apply_manager(&mut self, m: Arc<Manager>) {
        let Some(ns) = m.namespace() else { return };
        let key = (ns, m.name_any());
        if m.meta().deletion_timestamp.is_some() {
            self.delete_manager(&key);
            return;
        }
        let old = self.managers.insert(key.clone(), m.clone());
        if old
            .as_ref()
            .is_some_and(|o| routing_spec(o) == routing_spec(&m))
        {
            return;
        }
        let new_router = RouterKey {
            namespace: key.0.clone(),
            name: m.spec.router_ref.name.clone(),
        };
        if let Some(o) = old {
            let old_router = RouterKey {
                namespace: key.0.clone(),
                name: o.spec.router_ref.name.clone(),
            };
            if old_router != new_router {
                self.forget_manager_of(&old_router, &key.1);
                self.recompute(&old_router);
            }
        }
        self.managers_of
            .entry(new_router.clone())
            .or_default()
            .insert(key.1.clone());
        self.recompute(&new_router);
    }

    /// A Manager is gone.
    pub(crate) fn delete_manager(&mut self, key: &ObjKey) {
        let Some(old) = self.managers.remove(key) else {
            return;
        };
        let router = RouterKey {
            namespace: key.0.clone(),
            name: old.spec.router_ref.name.clone(),
        };
        self.forget_manager_of(&router, &key.1);
        self.recompute(&router);
    }

    fn forget_manager_of(&mut self, router: &RouterKey, manager: &str) {
        if let Some(set) = self.managers_of.get_mut(router) {
            set.remove(manager);
            if set.is_empty() {
                self.managers_of.remove(router);
            }
        }
    }

    /// A manager pod was created or changed.
    pub(crate) fn apply_pod(&mut self, pod: &Pod) {
        let Some(ns) = pod.namespace() else { return };
        let key = (ns, pod.name_any());
        let entry = PodEntry::of(pod);
        if entry.manager().is_none() {
            self.delete_pod(&key);
            return;
        }
        let old = self.pods.insert(key.clone(), entry.clone());
        if old.as_ref() == Some(&entry) {
            return;
        }
        let old_manager = old.as_ref().and_then(|o| o.manager().cloned());
        if old_manager.as_ref() != entry.manager()
            && let Some(m) = &old_manager
        {
            self.unlist_pod(&key.0, m, &key.1);
        }
        if let Some(m) = entry.manager() {
            self.pods_of
                .entry((key.0.clone(), m.clone()))
                .or_default()
                .insert(key.1.clone());
        }
        let mut managers: BTreeSet<String> = old_manager.into_iter().collect();
        managers.extend(entry.manager().cloned());
        for m in managers {
            self.resync_pod_in_pools(&key, &(key.0.clone(), m), Some(&entry));
        }
    }

    /// A manager pod is gone.
    pub(crate) fn delete_pod(&mut self, key: &ObjKey) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        if let Some(m) = old.manager() {
            self.unlist_pod(&key.0, m, &key.1);
            self.resync_pod_in_pools(key, &(key.0.clone(), m.clone()), None);
        }
    }

    fn unlist_pod(&mut self, ns: &str, manager: &str, pod: &str) {
        let k = (ns.to_owned(), manager.to_owned());
        if let Some(set) = self.pods_of.get_mut(&k) {
            set.remove(pod);
            if set.is_empty() {
                self.pods_of.remove(&k);
            }
        }
    }

    /// Puts the pod's endpoint (or its absence) into every pool of `manager`, marking the routes
    /// of the pools it changed.
    fn resync_pod_in_pools(&mut self, pod: &ObjKey, manager: &ObjKey, entry: Option<&PodEntry>) {
        let Some(keys) = self.pools_of.get(manager) else {
            return;
        };
        for pk in keys {
            let Some(pool) = self.pools.get_mut(pk) else {
                continue;
            };
            let want = entry.and_then(|e| e.endpoint_in(pk));
            let have = pool.endpoints.get(&pod.1);
            if want.as_ref() == have {
                continue;
            }
            match want {
                Some(addr) => pool.endpoints.insert(pod.1.clone(), addr),
                None => pool.endpoints.remove(&pod.1),
            };
            for (router, event) in &pool.users {
                self.dirty
                    .entry(router.clone())
                    .or_default()
                    .insert(event.clone());
            }
        }
    }

    /// Keeps only the pods `live` says are (after a relist); the rest were deleted while unwatched.
    pub(crate) fn retain_pods(&mut self, mut live: impl FnMut(&ObjKey) -> bool) {
        let stale: Vec<ObjKey> = self.pods.keys().filter(|k| !live(k)).cloned().collect();
        for k in stale {
            self.delete_pod(&k);
        }
    }

    /// Keeps only the Managers `live` says are (after a relist).
    pub(crate) fn retain_managers(&mut self, mut live: impl FnMut(&ObjKey) -> bool) {
        let stale: Vec<ObjKey> = self.managers.keys().filter(|k| !live(k)).cloned().collect();
        for k in stale {
            self.delete_manager(&k);
        }
    }

    /// Keeps only the Routers `live` says are (after a relist).
    pub(crate) fn retain_routers(&mut self, mut live: impl FnMut(&RouterKey) -> bool) {
        let stale: Vec<RouterKey> = self.routers.iter().filter(|k| !live(k)).cloned().collect();
        for k in stale {
            self.delete_router(&k);
        }
    }

    /// Recomputes one Router's destinations from its Managers and moves the routes that changed
    /// between pools.
    fn recompute(&mut self, key: &RouterKey) {
        let live = self.routers.contains(key);
        let new: BTreeMap<String, Dest> = if live {
            let managers = self
                .managers_of
                .get(key)
                .into_iter()
                .flatten()
                .filter_map(|name| self.managers.get(&(key.namespace.clone(), name.clone())))
                .map(|m| &**m);
            let managers: Vec<&Manager> = managers.collect();
            let subscribers = render::router::subscribers(managers.iter().copied())
                .into_iter()
                .map(|(route_key, sub)| {
                    let d = sub.destination;
                    let dest = Dest {
                        pool_name: render::names::manager_service(&d.manager),
                        manager: d.manager,
                        pool: PoolKey {
                            namespace: key.namespace.clone(),
                            selector: d.pod_selector,
                            port: d.port,
                        },
                        durable: d.durable,
                        subscription: Some(super::table::subscription_wire(&sub.subscription)),
                        push: d.push.iter().map(|e| e.as_str().to_owned()).collect(),
                    };
                    (route_key, dest)
                });
            render::router::destinations(managers.iter().copied())
                .into_iter()
                .map(|(event, d)| {
                    let pool_name = if d.pod_selector.contains_key(meta::EVENT_TYPE) {
                        render::names::manager_per_type(&d.manager, &event)
                    } else {
                        render::names::manager_service(&d.manager)
                    };
                    let dest = Dest {
                        manager: d.manager,
                        pool_name,
                        pool: PoolKey {
                            namespace: key.namespace.clone(),
                            selector: d.pod_selector,
                            port: d.port,
                        },
                        durable: d.durable,
                        subscription: None,
                        push: d.push.iter().map(|e| e.as_str().to_owned()).collect(),
                    };
                    (event.as_str().to_owned(), dest)
                })
                .chain(subscribers)
                .collect()
        } else {
            BTreeMap::new()
        };
        let existed = self.dests.contains_key(key);
        let old = self.dests.remove(key).unwrap_or_default();
        let mut touched = BTreeSet::new();
        for (event, d) in &old {
            if new.get(event) != Some(d) {
                self.unuse(&d.pool, key, event);
                touched.insert(event.clone());
            }
        }
        for (event, d) in &new {
            if old.get(event) != Some(d) {
                self.use_pool(&d.pool, key, event);
                touched.insert(event.clone());
            }
        }
        if live {
            self.dests.insert(key.clone(), new);
            self.gone.remove(key);
            let marks = self.dirty.entry(key.clone()).or_default();
            marks.extend(touched);
            if existed && marks.is_empty() {
                self.dirty.remove(key);
            }
        } else if existed {
            self.dirty.remove(key);
            self.gone.insert(key.clone());
        }
    }

    fn use_pool(&mut self, pk: &PoolKey, router: &RouterKey, event: &str) {
        if !self.pools.contains_key(pk) {
            // A new pool starts with the pods its Manager label already has.
            let manager = pk.manager();
            let endpoints = self
                .pods_of
                .get(&manager)
                .into_iter()
                .flatten()
                .filter_map(|name| {
                    let e = self.pods.get(&(manager.0.clone(), name.clone()))?;
                    Some((name.clone(), e.endpoint_in(pk)?))
                })
                .collect();
            self.pools.insert(
                pk.clone(),
                Pool {
                    endpoints,
                    users: BTreeSet::new(),
                },
            );
            self.pools_of.entry(manager).or_default().insert(pk.clone());
        }
        if let Some(pool) = self.pools.get_mut(pk) {
            pool.users.insert((router.clone(), event.to_owned()));
        }
    }

    fn unuse(&mut self, pk: &PoolKey, router: &RouterKey, event: &str) {
        let Some(pool) = self.pools.get_mut(pk) else {
            return;
        };
        pool.users.remove(&(router.clone(), event.to_owned()));
        if pool.users.is_empty() {
            self.pools.remove(pk);
            let manager = pk.manager();
            if let Some(set) = self.pools_of.get_mut(&manager) {
                set.remove(pk);
                if set.is_empty() {
                    self.pools_of.remove(&manager);
                }
            }
        }
    }

    fn route(&self, event: &str, d: &Dest) -> Route {
        let mut endpoints: Vec<Endpoint> = self
            .pools
            .get(&d.pool)
            .map(|p| {
                p.endpoints
                    .iter()
                    .map(|(pod, addr)| Endpoint {
                        address: addr.clone(),
                        pod: pod.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        endpoints.sort_by(|a, b| a.address.cmp(&b.address));
        Route {
            event_type: event.to_owned(),
            manager: d.manager.clone(),
            pool: d.pool_name.clone(),
            endpoints,
            durable: d.durable.as_ref().map(DurableRoute::to_wire),
            subscription: d.subscription.clone(),
            push: d.push.clone(),
        }
    }

    /// What changed since the last call, per Router: the current value of every route touched
    /// (None: removed), or the Router's removal. Work is proportional to the routes touched.
    pub(crate) fn take(&mut self) -> BTreeMap<RouterKey, RouterChange> {
        let mut out = BTreeMap::new();
        for key in std::mem::take(&mut self.gone) {
            out.insert(key, RouterChange::Removed);
        }
        for (key, events) in std::mem::take(&mut self.dirty) {
            let Some(dests) = self.dests.get(&key) else {
                continue;
            };
            let changes: Changes = events
                .into_iter()
                .map(|e| {
                    let route = dests.get(&e).map(|d| self.route(&e, d));
                    (e, route)
                })
                .collect();
            out.insert(key, RouterChange::Routes(changes));
        }
        out
    }

    /// Every Router's whole table, for the tests that hold it to `table::all_tables`.
    #[cfg(test)]
    pub(crate) fn tables(&self) -> BTreeMap<RouterKey, Vec<Route>> {
        self.dests
            .iter()
            .map(|(k, dests)| {
                let routes = dests.iter().map(|(e, d)| self.route(e, d)).collect();
                (k.clone(), routes)
            })
            .collect()
    }

    /// Routers with a table.
    pub(crate) fn router_count(&self) -> usize {
        self.dests.len()
    }
}

#[cfg(test)]
mod tests;
