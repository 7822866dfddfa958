//! Who is who in the mesh, as the control plane's authorization needs it (pure): each Router's
//! event types (its routes), and each Manager's Router and event types. Built from the same caches
//! as the routing tables, and swapped whole after a batch of changes to Routers or Managers.

use super::table::RouterKey;
use kube::ResourceExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use switchyard_crds::{Manager, Router};

/// A Manager as the control plane sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ManagerEntry {
    /// The Router it names (same namespace).
    pub router: String,
    /// Its event types.
    pub events: BTreeSet<String>,
    /// Its subscriptions' events (types or patterns), which its pods report load under.
    pub subscribed: BTreeSet<String>,
}

impl ManagerEntry {
    /// Whether its pods report load under `key`: a type it handles or a subscription's event.
    pub(crate) fn reports(&self, key: &str) -> bool {
        self.events.contains(key) || self.subscribed.contains(key)
    }
}

/// The mesh's Routers and Managers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Directory {
    /// Event types of each Router's routes.
    pub routers: HashMap<RouterKey, BTreeSet<String>>,
    /// Each Manager, by namespace and name.
    pub managers: HashMap<RouterKey, ManagerEntry>,
}

impl Directory {
    /// The directory of `routers` and `managers` (objects without a namespace are skipped).
    pub(crate) fn build(routers: &[&Router], managers: &[&Manager]) -> Directory {
        let mut dir = Directory::default();
        for r in routers {
            let Some(namespace) = r.namespace() else {
                continue;
            };
            let events = r
                .spec
                .routes
                .iter()
                .map(|route| route.event.as_str().to_owned())
                .collect();
            dir.routers.insert(
                RouterKey {
                    namespace,
                    name: r.name_any(),
                },
                events,
            );
        }
        for m in managers {
            let Some(namespace) = m.namespace() else {
                continue;
            };
            dir.managers.insert(
                RouterKey {
                    namespace,
                    name: m.name_any(),
                },
                ManagerEntry {
                    router: m.spec.router_ref.name.clone(),
                    events: m
                        .spec
                        .events
                        .iter()
                        .map(|e| e.as_str().to_owned())
                        .collect(),
                    subscribed: m
                        .spec
                        .subscriptions
                        .iter()
                        .map(|s| s.event.clone())
                        .collect(),
                },
            );
        }
        dir
    }
}

/// The current directory, replaced whole by the observer and read by every call.
#[derive(Default)]
pub(crate) struct Current {
    inner: RwLock<Arc<Directory>>,
}

impl Current {
    /// The directory now.
    pub(crate) fn get(&self) -> Arc<Directory> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces it.
    pub(crate) fn set(&self, dir: Directory) {
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(dir);
    }
}
