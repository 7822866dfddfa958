//! Pure: one Router's routing table as versions and deltas. Each change bumps the version and
//! records which event types it touched; a watcher at version `base` gets one delta with the
//! current value of every route touched since `base` (several changes merged: a slow watcher skips
//! straight to the latest state), or the whole table when `base` is older than the log keeps, when
//! the merged delta would be no smaller than the table, or when it never had one.
//!
//! Memory is bounded by the table plus [`LOG`] entries of event-type names; nothing is kept per
//! watcher.

use prost::Message;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use switchyard_protocol::control::v1::{Route, RoutingTable};

/// Changes remembered for composing deltas; a watcher further behind gets the whole table.
pub(crate) const LOG: usize = 256;

/// Most bytes of routes in one part of a whole table (a part holds at least one route), for
/// watchers that take whole tables in parts.
pub(crate) const PART_BYTES: usize = 16 * 1024;

/// A route's new value (`Some`) or its removal (`None`), by event type.
pub(crate) type Changes = BTreeMap<String, Option<Route>>;

/// The table of one Router at its current version, and the recent changes.
#[derive(Debug, Clone)]
pub(crate) struct TableState {
    router: String,
    namespace: String,
    version: u64,
    routes: BTreeMap<String, Arc<Route>>,
    /// (version, event types it touched), oldest first.
    log: VecDeque<(u64, Vec<String>)>,
}

impl TableState {
    /// The table at version 1 with `routes`.
    pub(crate) fn new(router: String, namespace: String, routes: Vec<Route>) -> TableState {
        TableState {
            router,
            namespace,
            version: 1,
            routes: routes
                .into_iter()
                .map(|r| (r.event_type.clone(), Arc::new(r)))
                .collect(),
            log: VecDeque::new(),
        }
    }

    /// Current version.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Applies `changes`; entries equal to what is held are dropped. Bumps the version and returns
    /// true when anything was left.
    pub(crate) fn apply(&mut self, changes: Changes) -> bool {
        let mut touched = Vec::new();
        for (event, route) in changes {
            match route {
                Some(r) => {
                    if self.routes.get(&event).is_some_and(|cur| **cur == r) {
                        continue;
                    }
                    self.routes.insert(event.clone(), Arc::new(r));
                }
                None => {
                    if self.routes.remove(&event).is_none() {
                        continue;
                    }
                }
            }
            touched.push(event);
        }
        if touched.is_empty() {
            return false;
        }
        self.version += 1;
        self.log.push_back((self.version, touched));
        while self.log.len() > LOG {
            self.log.pop_front();
        }
        true
    }

    /// The whole table (the tests compare it with the deltas joined).
    #[cfg(test)]
    pub(crate) fn full(&self) -> RoutingTable {
        self.whole().into_table()
    }

    /// The whole table as parts to send one after the other (see [`Whole`]).
    pub(crate) fn whole(&self) -> Whole {
        Whole {
            version: self.version,
            router: self.router.clone(),
            namespace: self.namespace.clone(),
            routes: self.routes.values().cloned().collect(),
            next: 0,
        }
    }

    /// What a watcher holding version `base` needs (None: a whole table), or nothing when it is up
    /// to date. `deltas` false: always the whole table.
    pub(crate) fn since(&self, base: Option<u64>, deltas: bool) -> Option<RoutingTable> {
        match self.next_for(base, deltas, usize::MAX)? {
            Next::Delta(d) => Some(d),
            Next::Whole(w) => Some(w.into_table()),
        }
    }

    /// [`TableState::since`] for a watcher that takes whole tables in parts: a whole table comes
    /// as a [`Whole`] to send part by part, and so does a delta that would be larger than
    /// `max_delta` bytes (a watcher far behind), so no message is much larger than a part.
    pub(crate) fn next_for(
        &self,
        base: Option<u64>,
        deltas: bool,
        max_delta: usize,
    ) -> Option<Next> {
        let Some(base) = base else {
            return Some(Next::Whole(self.whole()));
        };
        if base == self.version {
            return None;
        }
        if !deltas || base > self.version {
            return Some(Next::Whole(self.whole()));
        }
        // The log must hold every version after `base`.
        let covered = self.log.front().is_some_and(|(v, _)| *v <= base + 1);
        if !covered {
            return Some(Next::Whole(self.whole()));
        }
        let touched: BTreeSet<&String> = self
            .log
            .iter()
            .filter(|(v, _)| *v > base)
            .flat_map(|(_, events)| events)
            .collect();
        if touched.len() >= self.routes.len().max(1) {
            return Some(Next::Whole(self.whole()));
        }
        let mut routes = Vec::new();
        let mut removed = Vec::new();
        for event in touched {
            match self.routes.get(event) {
                Some(r) => routes.push(Route::clone(r)),
                None => removed.push(event.clone()),
            }
        }
        let delta = RoutingTable {
            version: self.version,
            router: self.router.clone(),
            namespace: self.namespace.clone(),
            routes,
            base,
            removed,
            more: false,
        };
        if delta.encoded_len() > max_delta {
            return Some(Next::Whole(self.whole()));
        }
        Some(Next::Delta(delta))
    }
}

/// What a watcher is sent next.
#[derive(Debug)]
pub(crate) enum Next {
    /// One message: the routes changed since the watcher's version.
    Delta(RoutingTable),
    /// The whole table, as one message or in parts.
    Whole(Whole),
}

/// A whole table at one version, handed out in parts. It holds the routes' `Arc`s, not copies:
/// a part's routes are copied only when it is sent, so a watcher being sent a table holds at most
/// one part's worth of bytes of its own.
#[derive(Debug, Clone)]
pub(crate) struct Whole {
    version: u64,
    router: String,
    namespace: String,
    routes: Vec<Arc<Route>>,
    next: usize,
}

impl Whole {
    /// The version of the table.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The next part: routes in order while they fit in `max_bytes` (always at least one), with
    /// `more` set when routes are left. A table without routes is one empty part.
    pub(crate) fn next_part(&mut self, max_bytes: usize) -> RoutingTable {
        let mut routes = Vec::new();
        let mut bytes = 0usize;
        while let Some(r) = self.routes.get(self.next) {
            let len = r.encoded_len();
            if !routes.is_empty() && bytes + len > max_bytes {
                break;
            }
            bytes += len;
            routes.push(Route::clone(r));
            self.next += 1;
        }
        RoutingTable {
            version: self.version,
            router: self.router.clone(),
            namespace: self.namespace.clone(),
            routes,
            base: 0,
            removed: Vec::new(),
            more: self.next < self.routes.len(),
        }
    }

    /// The whole table as one message.
    pub(crate) fn into_table(mut self) -> RoutingTable {
        self.next_part(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::fixtures::route;

    fn state(n: usize) -> TableState {
        let routes = (0..n)
            .map(|i| route(&format!("e{i:03}"), &["10.0.0.1:7070"]))
            .collect();
        TableState::new("edge".into(), "shop".into(), routes)
    }

    fn set(event: &str, addrs: &[&str]) -> Changes {
        BTreeMap::from([(event.to_owned(), Some(route(event, addrs)))])
    }

    #[test]
    fn a_change_is_one_small_delta_whatever_the_table_size() {
        for n in [10, 1000] {
            let mut s = state(n);
            assert!(s.apply(set("e005", &["10.0.0.1:7070", "10.0.0.2:7070"])));
            let d = s.since(Some(1), true).expect("a delta");
            assert_eq!((d.base, d.version), (1, 2));
            assert_eq!(d.routes.len(), 1, "n = {n}");
            assert_eq!(d.routes[0].endpoints.len(), 2);
            assert!(d.removed.is_empty());
        }
    }

    #[test]
    fn unchanged_routes_bump_nothing() {
        let mut s = state(3);
        assert!(!s.apply(set("e001", &["10.0.0.1:7070"])));
        assert!(!s.apply(BTreeMap::from([("nope".to_owned(), None)])));
        assert_eq!(s.version(), 1);
        assert!(s.since(Some(1), true).is_none(), "up to date");
    }

    #[test]
    fn a_slow_watcher_gets_one_merged_delta_of_the_latest_values() {
        let mut s = state(10);
        s.apply(set("e001", &["10.0.0.2:7070"]));
        s.apply(set("e001", &["10.0.0.3:7070"]));
        s.apply(BTreeMap::from([("e002".to_owned(), None)]));
        s.apply(set("new", &[]));
        let d = s.since(Some(1), true).expect("delta");
        assert_eq!((d.base, d.version), (1, 5));
        let events: Vec<&str> = d.routes.iter().map(|r| r.event_type.as_str()).collect();
        assert_eq!(events, ["e001", "new"]);
        assert_eq!(d.routes[0].endpoints[0].address, "10.0.0.3:7070");
        assert_eq!(d.removed, ["e002"]);
        // From an intermediate version only the later changes count.
        let d = s.since(Some(4), true).expect("delta");
        assert_eq!(d.routes.len(), 1);
        assert!(d.removed.is_empty());
    }

    #[test]
    fn too_far_behind_or_unknown_versions_get_the_whole_table() {
        let mut s = state(1000);
        for i in 0..LOG + 5 {
            s.apply(set("e001", &[&format!("10.0.1.{}:7070", i % 250)]));
        }
        let v = s.version();
        assert_eq!(
            s.since(Some(1), true).map(|t| t.base),
            Some(0),
            "log trimmed"
        );
        assert_eq!(s.since(Some(v - 3), true).map(|t| t.base), Some(v - 3));
        assert_eq!(
            s.since(Some(v + 7), true).map(|t| t.base),
            Some(0),
            "another replica's version"
        );
        assert_eq!(s.since(None, true).map(|t| t.routes.len()), Some(1000));
        assert_eq!(
            s.since(Some(v - 1), false).map(|t| t.base),
            Some(0),
            "no deltas asked"
        );
    }

    #[test]
    fn a_durable_setting_change_is_a_delta_of_that_route() {
        use switchyard_protocol::control::v1::DurableRoute;
        let mut s = state(10);
        let mut durable = route("e003", &["10.0.0.1:7070"]);
        durable.durable = Some(DurableRoute {
            ordering_key: "/customerId".into(),
            ..Default::default()
        });
        assert!(s.apply(BTreeMap::from([("e003".to_owned(), Some(durable.clone()))])));
        let d = s.since(Some(1), true).expect("a delta");
        assert_eq!(
            d.routes,
            [durable],
            "the route, whole, with its durable route"
        );
        assert!(s.apply(set("e003", &["10.0.0.1:7070"])), "back to direct");
        let d = s.since(Some(2), true).expect("a delta");
        assert_eq!(d.routes[0].durable, None);
        assert!(s.full().routes.iter().all(|r| r.durable.is_none()));
    }

    #[test]
    fn a_delta_touching_everything_is_sent_whole() {
        let mut s = state(2);
        s.apply(set("e000", &[]));
        s.apply(set("e001", &[]));
        let t = s.since(Some(1), true).expect("update");
        assert_eq!(t.base, 0);
        assert_eq!(t.routes.len(), 2);
    }

    #[test]
    fn a_whole_table_in_parts_is_the_table_in_order_each_part_bounded() {
        let ten: Vec<String> = (0..10).map(|i| format!("10.0.1.{i}:7070")).collect();
        let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
        let routes = (0..300).map(|i| route(&format!("e{i:03}"), &ten)).collect();
        let s = TableState::new("edge".into(), "shop".into(), routes);
        let mut w = s.whole();
        let mut parts = Vec::new();
        loop {
            let p = w.next_part(PART_BYTES);
            let more = p.more;
            parts.push(p);
            if !more {
                break;
            }
        }
        assert!(parts.len() > 1, "300 routes do not fit one part");
        for p in &parts {
            assert_eq!((p.version, p.base), (s.version(), 0));
            let routes: usize = p.routes.iter().map(|r| r.encoded_len()).sum();
            assert!(routes <= PART_BYTES, "a part of {routes} bytes");
        }
        let joined: Vec<Route> = parts.into_iter().flat_map(|p| p.routes).collect();
        assert_eq!(joined, s.full().routes);
    }

    #[test]
    fn an_empty_table_is_one_empty_part_and_a_big_route_still_goes() {
        let mut w = state(0).whole();
        let p = w.next_part(PART_BYTES);
        assert!(p.routes.is_empty() && !p.more);
        let mut w = state(2).whole();
        let p = w.next_part(1);
        assert_eq!(
            (p.routes.len(), p.more),
            (1, true),
            "one route per part at least"
        );
    }

    #[test]
    fn a_delta_larger_than_asked_becomes_a_whole_table() {
        let mut s = state(300);
        let ten: Vec<String> = (0..10).map(|i| format!("10.0.1.{i}:7070")).collect();
        let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
        for i in 0..200 {
            s.apply(set(&format!("e{i:03}"), &ten));
        }
        assert!(matches!(
            s.next_for(Some(1), true, usize::MAX),
            Some(Next::Delta(_))
        ));
        assert!(matches!(
            s.next_for(Some(1), true, PART_BYTES),
            Some(Next::Whole(_))
        ));
        assert!(matches!(
            s.next_for(Some(s.version() - 1), true, PART_BYTES),
            Some(Next::Delta(_))
        ));
    }
}
