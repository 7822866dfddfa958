//! Every Router's table as versions and deltas (`delta::TableState`), and its watchers. A change
//! costs one state update and one wake-up per watched Router; each watcher then builds its own
//! message when its stream is polled, so a slow one holds no backlog: it skips to the latest state
//! (one merged delta, or the whole table when too far behind). Nothing is queued per watcher.

use super::delta::{Changes, Next, PART_BYTES, TableState, Whole};
use super::table::RouterKey;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use switchyard_protocol::control::v1::RoutingTable;
use tokio::sync::watch;

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubscribeError {
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

/// What happens to one Router's table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RouterChange {
    /// Routes set or removed (a new Router's table starts with them).
    Routes(Changes),
    /// The Router is gone: its watchers' streams end.
    Removed,
}

type State = Arc<Mutex<TableState>>;

/// One Router: its state, and the version signal its watchers wait on (dropped with the Router).
struct Channel {
    state: State,
    tx: watch::Sender<u64>,
}

fn lock(state: &State) -> std::sync::MutexGuard<'_, TableState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every Router's current table.
#[derive(Default)]
pub(crate) struct Hub {
    routers: Mutex<HashMap<RouterKey, Channel>>,
    synced: AtomicBool,
    closed: AtomicBool,
}

impl Hub {
    fn routers(&self) -> std::sync::MutexGuard<'_, HashMap<RouterKey, Channel>> {
        self.routers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `changes`; each Router whose table changed gets the next version and wakes its
    /// watchers. Returns how many tables changed.
    pub(crate) fn publish(&self, changes: BTreeMap<RouterKey, RouterChange>) -> usize {
        if self.closed.load(Ordering::Acquire) {
            return 0;
        }
        let mut map = self.routers();
        let mut changed = 0;
        for (key, change) in changes {
            match change {
                RouterChange::Removed => {
                    // Dropping the sender ends every watcher's stream.
                    changed += usize::from(map.remove(&key).is_some());
                }
                RouterChange::Routes(routes) => match map.get(&key) {
                    Some(ch) => {
                        let version = {
                            let mut st = lock(&ch.state);
                            st.apply(routes).then(|| st.version())
                        };
                        if let Some(v) = version {
                            ch.tx.send_replace(v);
                            changed += 1;
                        }
                    }
                    None => {
                        let st = TableState::new(
                            key.name.clone(),
                            key.namespace.clone(),
                            routes.into_values().flatten().collect(),
                        );
                        let (tx, _) = watch::channel(st.version());
                        map.insert(
                            key,
                            Channel {
                                state: Arc::new(Mutex::new(st)),
                                tx,
                            },
                        );
                        changed += 1;
                    }
                },
            }
        }
        changed
    }

    /// Marks the first complete view of the cluster as published: from now on "no such Router" is
    /// an answer.
    pub(crate) fn mark_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Whether the first complete view of the cluster has been published.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// A watcher of the Router's table; `deltas` false sends whole tables only, `parts` true sends
    /// whole tables in parts of about [`PART_BYTES`].
    pub(crate) fn subscribe(
        &self,
        key: &RouterKey,
        deltas: bool,
        parts: bool,
    ) -> Result<Subscription, SubscribeError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SubscribeError::Closed);
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err(SubscribeError::NotSynced);
        }
        let map = self.routers();
        let ch = map.get(key).ok_or_else(|| SubscribeError::NotFound {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        })?;
        Ok(Subscription {
            state: ch.state.clone(),
            rx: ch.tx.subscribe(),
            sent: None,
            deltas,
            parts,
            sending: None,
        })
    }

    /// Ends every stream and refuses new ones, so a graceful server shutdown does not wait on them.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.routers().clear();
    }
}

/// One watcher: what it was sent last, the whole table it is being sent part by part, and the
/// signal of new versions.
pub(crate) struct Subscription {
    state: State,
    rx: watch::Receiver<u64>,
    sent: Option<u64>,
    deltas: bool,
    parts: bool,
    sending: Option<Whole>,
}

impl Subscription {
    /// The next message: the whole table first, then what changed since the last one sent, built
    /// from the state as it is now. None once the Router is gone or the hub closed.
    pub(crate) async fn next(&mut self) -> Option<RoutingTable> {
        loop {
            if let Some(m) = self.ready() {
                return Some(m);
            }
            self.rx.changed().await.ok()?;
        }
    }

    /// The message that would be sent now, without waiting (None: up to date).
    pub(crate) fn ready(&mut self) -> Option<RoutingTable> {
        if let Some(whole) = self.sending.as_mut() {
            let part = whole.next_part(PART_BYTES);
            if !part.more {
                self.sending = None;
            }
            return Some(part);
        }
        // Marked seen before reading, so a change landing in between wakes the next wait.
        self.rx.borrow_and_update();
        if !self.parts {
            let message = lock(&self.state).since(self.sent, self.deltas)?;
            self.sent = Some(message.version);
            return Some(message);
        }
        let next = lock(&self.state).next_for(self.sent, self.deltas, PART_BYTES)?;
        match next {
            Next::Delta(d) => {
                self.sent = Some(d.version);
                Some(d)
            }
            Next::Whole(whole) => {
                // The parts carry this version; what changes meanwhile follows as a delta.
                self.sent = Some(whole.version());
                self.sending = Some(whole);
                self.ready()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::fixtures::route;

    fn key(name: &str) -> RouterKey {
        RouterKey {
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    fn routes(pairs: &[(&str, &[&str])]) -> RouterChange {
        RouterChange::Routes(
            pairs
                .iter()
                .map(|(e, a)| ((*e).to_owned(), Some(route(e, a))))
                .collect(),
        )
    }

    fn one(name: &str, change: RouterChange) -> BTreeMap<RouterKey, RouterChange> {
        BTreeMap::from([(key(name), change)])
    }

    #[test]
    fn refuses_before_sync_and_for_unknown_routers() {
        let hub = Hub::default();
        assert_eq!(
            hub.subscribe(&key("edge"), true, false).err(),
            Some(SubscribeError::NotSynced)
        );
        hub.mark_synced();
        assert!(matches!(
            hub.subscribe(&key("edge"), true, false),
            Err(SubscribeError::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn whole_table_first_then_deltas_and_only_on_change() {
        let hub = Hub::default();
        hub.publish(one(
            "edge",
            routes(&[("a.b", &["10.0.0.1:7070"]), ("c.d", &[])]),
        ));
        hub.mark_synced();
        let mut sub = hub
            .subscribe(&key("edge"), true, false)
            .expect("subscribed");
        let first = sub.next().await.expect("first");
        assert_eq!((first.version, first.base, first.routes.len()), (1, 0, 2));
        assert!(sub.ready().is_none());
        assert_eq!(
            hub.publish(one("edge", routes(&[("c.d", &[])]))),
            0,
            "no change"
        );
        assert_eq!(
            hub.publish(one(
                "edge",
                routes(&[("a.b", &["10.0.0.1:7070", "10.0.0.2:7070"])])
            )),
            1
        );
        let d = sub.next().await.expect("delta");
        assert_eq!((d.version, d.base, d.routes.len()), (2, 1, 1));
        assert_eq!(d.routes[0].endpoints.len(), 2);
    }

    #[tokio::test]
    async fn a_watcher_taking_parts_gets_the_whole_table_in_parts_then_what_changed_meanwhile() {
        let hub = Hub::default();
        let ten: Vec<String> = (0..10).map(|i| format!("10.0.0.{i}:7070")).collect();
        let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
        let events: Vec<String> = (0..200).map(|i| format!("e{i:03}")).collect();
        let all: Vec<(&str, &[&str])> = events.iter().map(|e| (e.as_str(), &ten[..])).collect();
        hub.publish(one("edge", routes(&all)));
        hub.mark_synced();
        let mut sub = hub.subscribe(&key("edge"), true, true).expect("subscribed");
        let first = sub.next().await.expect("first part");
        assert!(
            first.more,
            "200 routes of 10 endpoints take more than one part"
        );
        // A change while the parts go out: the parts stay at version 1, the change follows.
        hub.publish(one("edge", routes(&[("e000", &["10.0.9.9:7070"])])));
        let mut got = first.routes.len();
        loop {
            let p = sub.ready().expect("the next part, without waiting");
            assert_eq!((p.version, p.base), (1, 0));
            got += p.routes.len();
            if !p.more {
                break;
            }
        }
        assert_eq!(got, 200);
        let d = sub.next().await.expect("the change after the table");
        assert_eq!(
            (d.version, d.base, d.routes.len(), d.more),
            (2, 1, 1, false)
        );
        assert!(sub.ready().is_none());
    }

    #[tokio::test]
    async fn a_slow_watcher_skips_to_the_latest_state() {
        let hub = Hub::default();
        hub.publish(one(
            "edge",
            routes(&[("a.b", &[]), ("c.d", &[]), ("e.f", &[])]),
        ));
        hub.mark_synced();
        let mut sub = hub
            .subscribe(&key("edge"), true, false)
            .expect("subscribed");
        sub.next().await.expect("first");
        for i in 1..=50 {
            let addr = format!("10.0.0.{i}:7070");
            hub.publish(one("edge", routes(&[("a.b", &[addr.as_str()])])));
        }
        let d = sub.next().await.expect("merged");
        assert_eq!((d.base, d.version), (1, 51));
        assert_eq!(d.routes.len(), 1);
        assert_eq!(d.routes[0].endpoints[0].address, "10.0.0.50:7070");
        assert!(sub.ready().is_none(), "nothing queued behind it");
    }

    #[tokio::test]
    async fn watchers_without_deltas_get_whole_tables() {
        let hub = Hub::default();
        hub.publish(one("edge", routes(&[("a.b", &[]), ("c.d", &[])])));
        hub.mark_synced();
        let mut sub = hub
            .subscribe(&key("edge"), false, false)
            .expect("subscribed");
        sub.next().await.expect("first");
        hub.publish(one("edge", routes(&[("a.b", &["10.0.0.1:7070"])])));
        let t = sub.next().await.expect("table");
        assert_eq!((t.base, t.routes.len()), (0, 2));
    }

    #[tokio::test]
    async fn a_deleted_router_ends_its_streams_and_close_ends_all() {
        let hub = Hub::default();
        hub.publish(one("edge", routes(&[])));
        hub.publish(one("admin", routes(&[])));
        hub.mark_synced();
        let mut edge = hub.subscribe(&key("edge"), true, false).expect("edge");
        let mut admin = hub.subscribe(&key("admin"), true, false).expect("admin");
        edge.next().await.expect("first");
        admin.next().await.expect("first");
        hub.publish(one("edge", RouterChange::Removed));
        assert!(edge.next().await.is_none(), "stream ended");
        hub.close();
        assert!(admin.next().await.is_none());
        assert_eq!(
            hub.subscribe(&key("admin"), true, false).err(),
            Some(SubscribeError::Closed)
        );
    }
}
