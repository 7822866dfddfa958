//! The latest table of every Router, one watch channel each: a subscriber holds one slot, never a
//! backlog, and a slow one simply skips to the newest table.

use super::table::RouterKey;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use switchyard_protocol::control::v1::{Route, RoutingTable};
use tokio::sync::watch;

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// The caches have not been listed once yet, so "no such Router" could be wrong.
    #[error("the control plane has not synced its caches yet; retry shortly")]
    NotSynced,
    /// No Router of that name in that namespace.
    #[error("no Router {namespace}/{name}")]
    NotFound {
        /// Namespace asked for.
        namespace: String,
        /// Name asked for.
        name: String,
    },
    /// The operator is shutting down.
    #[error("the operator is shutting down")]
    Closed,
}

/// Every Router's current table.
#[derive(Default)]
pub struct Hub {
    tables: Mutex<HashMap<RouterKey, watch::Sender<Arc<RoutingTable>>>>,
    synced: AtomicBool,
    closed: AtomicBool,
}

impl Hub {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<RouterKey, watch::Sender<Arc<RoutingTable>>>> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the hub hold exactly `tables`: a changed table gets the next version and reaches every
    /// subscriber; an unchanged one sends nothing; a Router gone ends its subscribers' streams.
    /// Returns how many tables changed.
    pub fn publish(&self, tables: BTreeMap<RouterKey, Vec<Route>>) -> usize {
        if self.closed.load(Ordering::Acquire) {
            return 0;
        }
        let mut map = self.lock();
        map.retain(|k, _| tables.contains_key(k));
        let mut changed = 0;
        for (key, routes) in tables {
            match map.get(&key) {
                Some(tx) => {
                    let modified = tx.send_if_modified(|current| {
                        if current.routes == routes {
                            return false;
                        }
                        *current = Arc::new(RoutingTable {
                            version: current.version + 1,
                            router: key.name.clone(),
                            namespace: key.namespace.clone(),
                            routes,
                        });
                        true
                    });
                    changed += usize::from(modified);
                }
                None => {
                    let table = RoutingTable {
                        version: 1,
                        router: key.name.clone(),
                        namespace: key.namespace.clone(),
                        routes,
                    };
                    map.insert(key, watch::Sender::new(Arc::new(table)));
                    changed += 1;
                }
            }
        }
        self.synced.store(true, Ordering::Release);
        changed
    }

    /// A receiver whose current value is the Router's table, marked changed so the first read sees it.
    pub fn subscribe(
        &self,
        key: &RouterKey,
    ) -> Result<watch::Receiver<Arc<RoutingTable>>, SubscribeError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SubscribeError::Closed);
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err(SubscribeError::NotSynced);
        }
        let map = self.lock();
        let tx = map.get(key).ok_or_else(|| SubscribeError::NotFound {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        })?;
        let mut rx = tx.subscribe();
        rx.mark_changed();
        Ok(rx)
    }

    /// Ends every stream and refuses new ones, so a graceful server shutdown does not wait on them.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::control::v1::Endpoint;

    fn key(name: &str) -> RouterKey {
        RouterKey {
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    fn route(event: &str, addrs: &[&str]) -> Route {
        Route {
            event_type: event.into(),
            manager: "m".into(),
            pool: "m-manager".into(),
            endpoints: addrs
                .iter()
                .map(|a| Endpoint {
                    address: (*a).into(),
                    pod: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn refuses_before_the_first_publish_and_for_unknown_routers() {
        let hub = Hub::default();
        assert_eq!(
            hub.subscribe(&key("edge")).err(),
            Some(SubscribeError::NotSynced)
        );
        hub.publish(BTreeMap::new());
        assert!(matches!(
            hub.subscribe(&key("edge")),
            Err(SubscribeError::NotFound { .. })
        ));
    }

    #[test]
    fn versions_move_only_when_the_routes_change() {
        let hub = Hub::default();
        let t = |addrs: &[&str]| BTreeMap::from([(key("edge"), vec![route("a.b", addrs)])]);
        assert_eq!(hub.publish(t(&["10.0.0.1:7070"])), 1);
        let mut rx = hub.subscribe(&key("edge")).expect("subscribed");
        assert!(
            rx.has_changed().expect("open"),
            "the current table is delivered first"
        );
        assert_eq!(rx.borrow_and_update().version, 1);
        assert_eq!(hub.publish(t(&["10.0.0.1:7070"])), 0);
        assert!(!rx.has_changed().expect("open"));
        assert_eq!(hub.publish(t(&["10.0.0.1:7070", "10.0.0.2:7070"])), 1);
        let table = rx.borrow_and_update().clone();
        assert_eq!(table.version, 2);
        assert_eq!(table.router, "edge");
        assert_eq!(table.routes[0].endpoints.len(), 2);
    }

    #[test]
    fn a_slow_subscriber_sees_only_the_latest_table() {
        let hub = Hub::default();
        for n in 1..=5 {
            let addrs: Vec<String> = (0..n).map(|i| format!("10.0.0.{i}:7070")).collect();
            let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            hub.publish(BTreeMap::from([(key("edge"), vec![route("a.b", &addrs)])]));
        }
        let mut rx = hub.subscribe(&key("edge")).expect("subscribed");
        assert_eq!(rx.borrow_and_update().version, 5);
        assert!(!rx.has_changed().expect("open"));
    }

    #[test]
    fn a_deleted_router_ends_its_streams_and_close_ends_all() {
        let hub = Hub::default();
        hub.publish(BTreeMap::from([
            (key("edge"), vec![]),
            (key("admin"), vec![]),
        ]));
        let edge = hub.subscribe(&key("edge")).expect("edge");
        let admin = hub.subscribe(&key("admin")).expect("admin");
        hub.publish(BTreeMap::from([(key("admin"), vec![])]));
        assert!(edge.has_changed().is_err(), "sender dropped");
        assert!(admin.has_changed().is_ok());
        hub.close();
        assert!(admin.has_changed().is_err());
        assert_eq!(
            hub.subscribe(&key("admin")).err(),
            Some(SubscribeError::Closed)
        );
    }
}
