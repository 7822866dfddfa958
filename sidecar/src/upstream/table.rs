//! Pure: following the control plane's stream (a whole table, then deltas against it: [`Held`]),
//! and turning a routing table into pools (sets of endpoints), an event -> pool map and the durable
//! types' routes, dropping what a sidecar cannot use and saying why.

use super::subscribers::Spec;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use switchyard_crds::EventType;
use switchyard_crds::subscription::{Filter, Observe};
use switchyard_protocol::control::v1::{Route, RoutingTable};
use switchyard_protocol::durable::DurableRoute;

/// The table as the stream has built it so far: deltas apply to it. A whole table sent in parts
/// (`more`) is assembled apart and replaces the held one only once complete, so routing never
/// sees half a table.
#[derive(Debug, Default)]
pub(super) struct Held {
    version: u64,
    router: String,
    namespace: String,
    routes: BTreeMap<String, Route>,
    /// The parts of a whole table received so far: its version, routes and encoded bytes.
    assembling: Option<(u64, BTreeMap<String, Route>, usize)>,
}

/// Most encoded bytes of one whole table, whether it comes as one message or in parts (a stream
/// that keeps sending parts cannot grow the sidecar without bound).
pub(super) const MAX_TABLE: usize = 8 << 20;

/// A message that does not follow what is held: something was missed, and only a resubscription
/// (which starts with a whole table) can repair it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Gap {
    /// A delta against another version than the one held.
    #[error("a delta from version {base} arrived while holding version {held}; resubscribing")]
    Delta {
        /// Version held.
        held: u64,
        /// Version the delta applies to.
        base: u64,
    },
    /// A part of another table, or a delta, while a table's parts were still coming.
    #[error(
        "a message of version {got} (base {base}) arrived while the parts of whole table version {assembling} were still coming; resubscribing"
    )]
    Parts {
        /// Version being assembled.
        assembling: u64,
        /// Version of the message that arrived.
        got: u64,
        /// Its base.
        base: u64,
    },
    /// The parts of one table add up to more than [`MAX_TABLE`].
    #[error("a whole table sent in parts passed {MAX_TABLE} bytes; resubscribing")]
    TooLarge,
}

impl Held {
    /// Applies one message of the stream and returns the whole table as of it, or `None` while a
    /// whole table's parts are still coming.
    pub(super) fn apply(&mut self, msg: RoutingTable) -> Result<Option<RoutingTable>, Gap> {
        if let Some((version, _, _)) = &self.assembling
            && (msg.base != 0 || msg.version != *version)
        {
            return Err(Gap::Parts {
                assembling: *version,
                got: msg.version,
                base: msg.base,
            });
        }
        if msg.base == 0 && (msg.more || self.assembling.is_some()) {
            let len = prost::Message::encoded_len(&msg);
            let (_, routes, bytes) = self
                .assembling
                .get_or_insert_with(|| (msg.version, BTreeMap::new(), 0));
            *bytes += len;
            if *bytes > MAX_TABLE {
                self.assembling = None;
                return Err(Gap::TooLarge);
            }
            insert_routes(routes, msg.routes);
            if msg.more {
                return Ok(None);
            }
            let (_, routes, _) = self.assembling.take().unwrap_or_default();
            self.routes = routes;
        } else if msg.base == 0 {
            self.routes.clear();
            insert_routes(&mut self.routes, msg.routes);
        } else if msg.base != self.version || self.version == 0 {
            return Err(Gap::Delta {
                held: self.version,
                base: msg.base,
            });
        } else {
            for event in &msg.removed {
                self.routes.remove(event);
            }
            insert_routes(&mut self.routes, msg.routes);
        }
        self.version = msg.version;
        self.router = msg.router;
        self.namespace = msg.namespace;
        Ok(Some(RoutingTable {
            version: self.version,
            router: self.router.clone(),
            namespace: self.namespace.clone(),
            routes: self.routes.values().cloned().collect(),
            base: 0,
            removed: Vec::new(),
            more: false,
        }))
    }
}

/// Adds or replaces `routes` in `into`, by event type.
fn insert_routes(into: &mut BTreeMap<String, Route>, routes: Vec<Route>) {
    for route in routes {
        into.insert(route.event_type.clone(), route);
    }
}

/// Most endpoints kept per pool, as for DNS discovery.
pub(super) const MAX_ENDPOINTS: usize = 1024;
/// Longest ordering-key pointer taken (the Manager spec's limit).
const MAX_POINTER: usize = 256;

/// The endpoints of one pool and the Manager they belong to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct PoolPlan {
    /// Manager name, for logs and `/routes`.
    pub manager: String,
    /// `ip:port` of its ready pods.
    pub addrs: BTreeSet<String>,
}

/// What the router should hold after a table arrives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Plan {
    /// Pools by name.
    pub pools: BTreeMap<String, PoolPlan>,
    /// Event type -> (Manager, pool name).
    pub events: BTreeMap<String, (String, String)>,
    /// Event type -> its durable route, for the types delivered durably.
    pub durable: BTreeMap<String, DurableRoute>,
    /// Subscribers by route key (`<event>@<manager>`), each with its pool's name.
    pub subscribers: BTreeMap<String, (Spec, String)>,
    /// Manager -> the types its pods may push: those it handles and those its routes list in
    /// `push`.
    pub pushable: BTreeMap<String, BTreeSet<String>>,
    /// Entries left out, each with the reason.
    pub rejected: Vec<String>,
}

/// Plans the pools and routes of `table`. Routes naming the same pool share (the union of) their
/// endpoints; an event type listed twice keeps its first route.
pub(super) fn plan(table: &RoutingTable) -> Plan {
    let mut out = Plan::default();
    for route in &table.routes {
        if route.event_type.is_empty() {
            out.rejected.push("a route without an event type".into());
            continue;
        }
        if out.events.contains_key(&route.event_type) {
            out.rejected.push(format!(
                "a second route for event type {}",
                route.event_type
            ));
            continue;
        }
        let sub = match &route.subscription {
            None => None,
            Some(wire) => match subscription(&route.event_type, &route.manager, wire) {
                Ok(spec) => Some(spec),
                Err(reason) => {
                    out.rejected.push(reason.to_string());
                    continue;
                }
            },
        };
        let durable = route.durable.as_ref().map(DurableRoute::from_wire);
        if let Some(key) = durable.as_ref().and_then(|d| d.ordering_key.as_deref())
            && (!key.starts_with('/') || key.len() > MAX_POINTER)
        {
            // Publishing it unordered would break the order its Manager promises.
            out.rejected.push(format!(
                "event type {}: its ordering key {key:?} is not a JSON pointer",
                route.event_type
            ));
            continue;
        }
        add_pushable(&mut out, route, sub.is_none());
        let pool_name = if route.pool.is_empty() {
            route.manager.clone()
        } else {
            route.pool.clone()
        };
        add_endpoints(&mut out, route, &pool_name);
        if let Some(mut spec) = sub {
            spec.durable = durable;
            out.subscribers
                .insert(route.event_type.clone(), (spec, pool_name));
            continue;
        }
        out.events
            .insert(route.event_type.clone(), (route.manager.clone(), pool_name));
        if let Some(d) = durable {
            out.durable.insert(route.event_type.clone(), d);
        }
    }
    out
}

/// The types `route`'s Manager may push: the route's own (unless it is a subscriber's) and those
/// it lists in `push`.
fn add_pushable(out: &mut Plan, route: &Route, handled: bool) {
    let may_push = out.pushable.entry(route.manager.clone()).or_default();
    if handled {
        may_push.insert(route.event_type.clone());
    }
    for event in &route.push {
        match EventType::check(event) {
            Ok(()) => {
                may_push.insert(event.clone());
            }
            Err(e) => out
                .rejected
                .push(format!("Manager {}: a push type {e}", route.manager)),
        }
    }
}

/// `route`'s endpoints into its pool `pool_name` (up to [`MAX_ENDPOINTS`] a pool); the others
/// are rejected with the reason.
fn add_endpoints(out: &mut Plan, route: &Route, pool_name: &str) {
    let pool = out
        .pools
        .entry(pool_name.to_owned())
        .or_insert_with(|| PoolPlan {
            manager: route.manager.clone(),
            addrs: BTreeSet::new(),
        });
    for ep in &route.endpoints {
        if ep.address.parse::<SocketAddr>().is_err() {
            out.rejected.push(format!(
                "endpoint {:?} of event type {}: not an ip:port",
                ep.address, route.event_type
            ));
        } else if pool.addrs.len() >= MAX_ENDPOINTS && !pool.addrs.contains(&ep.address) {
            out.rejected.push(format!(
                "endpoint {} of pool {pool_name}: more than {MAX_ENDPOINTS} endpoints",
                ep.address
            ));
        } else {
            pool.addrs.insert(ep.address.clone());
        }
    }
}

/// Why a subscriber's route from the control plane cannot be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum SubscriptionError {
    #[error("subscription {key}: observes nothing this sidecar knows ({observe:?})")]
    ObservesNothingKnown { key: String, observe: Vec<String> },
    #[error("subscription {key}: its filter is not one: {reason}")]
    NotAFilter { key: String, reason: String },
    #[error("subscription {key}: {reason}")]
    BadFilter { key: String, reason: String },
}

/// A subscriber's route as the sidecar holds it, or why it cannot be used.
pub(super) fn subscription(
    key: &str,
    manager: &str,
    wire: &switchyard_protocol::control::v1::Subscription,
) -> Result<Spec, SubscriptionError> {
    let observe: Vec<Observe> = wire
        .observe
        .iter()
        .filter_map(|o| match o.as_str() {
            "published" => Some(Observe::Published),
            "requests" => Some(Observe::Requests),
            "responses" => Some(Observe::Responses),
            // A kind a newer operator knows: the rest of the subscription still works.
            _ => None,
        })
        .collect();
    if observe.is_empty() {
        return Err(SubscriptionError::ObservesNothingKnown {
            key: key.to_owned(),
            observe: wire.observe.clone(),
        });
    }
    let filter = if wire.filter.is_empty() {
        None
    } else {
        let f: Filter =
            serde_json::from_str(&wire.filter).map_err(|e| SubscriptionError::NotAFilter {
                key: key.to_owned(),
                reason: e.to_string(),
            })?;
        f.check("filter")
            .map_err(|e| SubscriptionError::BadFilter {
                key: key.to_owned(),
                reason: e.to_string(),
            })?;
        Some(f)
    };
    Ok(Spec {
        key: Arc::from(key),
        manager: Arc::from(manager),
        event: wire.event.clone(),
        observe,
        filter,
        durable: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::control::v1::{Endpoint, Route};

    fn route(event: &str, pool: &str, addrs: &[&str]) -> Route {
        Route {
            event_type: event.into(),
            manager: "orders".into(),
            pool: pool.into(),
            endpoints: addrs
                .iter()
                .map(|a| Endpoint {
                    address: (*a).into(),
                    pod: String::new(),
                })
                .collect(),
            durable: None,
            subscription: None,
            push: Vec::new(),
        }
    }

    fn table(routes: Vec<Route>) -> RoutingTable {
        RoutingTable {
            version: 1,
            router: "edge".into(),
            namespace: "shop".into(),
            routes,
            ..RoutingTable::default()
        }
    }

    fn delta(base: u64, version: u64, routes: Vec<Route>, removed: &[&str]) -> RoutingTable {
        RoutingTable {
            version,
            base,
            routes,
            removed: removed.iter().map(|r| (*r).to_owned()).collect(),
            ..table(vec![])
        }
    }

    #[test]
    fn deltas_apply_over_the_whole_table_and_a_gap_is_refused() {
        let mut held = Held::default();
        let first = held
            .apply(table(vec![
                route("a.b", "m", &["10.0.0.1:7070"]),
                route("c.d", "m", &[]),
            ]))
            .expect("whole table")
            .expect("complete");
        assert_eq!(first.routes.len(), 2);
        let t = held
            .apply(delta(
                1,
                2,
                vec![
                    route("a.b", "m", &["10.0.0.1:7070", "10.0.0.2:7070"]),
                    route("e.f", "x", &[]),
                ],
                &["c.d"],
            ))
            .expect("delta")
            .expect("complete");
        assert_eq!(t.version, 2);
        let events: Vec<&str> = t.routes.iter().map(|r| r.event_type.as_str()).collect();
        assert_eq!(events, ["a.b", "e.f"], "sorted, c.d removed");
        assert_eq!(t.routes[0].endpoints.len(), 2);
        assert_eq!(
            held.apply(delta(5, 6, vec![], &[])),
            Err(Gap::Delta { held: 2, base: 5 })
        );
        // A whole table replaces everything, whatever was held.
        let t = held
            .apply(RoutingTable {
                version: 9,
                ..table(vec![])
            })
            .expect("resync")
            .expect("complete");
        assert!(t.routes.is_empty());
        assert_eq!(t.version, 9);
    }

    #[test]
    fn a_table_in_parts_replaces_the_held_one_only_when_complete() {
        let mut held = Held::default();
        held.apply(table(vec![route("old", "m", &[])]))
            .expect("whole")
            .expect("complete");
        let part = |version: u64, event: &str, more: bool| RoutingTable {
            version,
            more,
            ..table(vec![route(event, "m", &["10.0.0.1:7070"])])
        };
        assert_eq!(held.apply(part(4, "a.b", true)), Ok(None), "first part");
        assert_eq!(held.apply(part(4, "c.d", true)), Ok(None), "second part");
        let t = held
            .apply(part(4, "e.f", false))
            .expect("last part")
            .expect("complete");
        let events: Vec<&str> = t.routes.iter().map(|r| r.event_type.as_str()).collect();
        assert_eq!((t.version, events), (4, vec!["a.b", "c.d", "e.f"]));
        // Deltas apply to the assembled table.
        let t = held
            .apply(delta(4, 5, vec![], &["c.d"]))
            .expect("delta")
            .expect("complete");
        assert_eq!(t.routes.len(), 2);
    }

    #[test]
    fn a_message_out_of_place_among_parts_is_a_gap() {
        let part = |version: u64, more: bool| RoutingTable {
            version,
            more,
            ..table(vec![route("a.b", "m", &[])])
        };
        let mut held = Held::default();
        held.apply(part(3, true)).expect("first part");
        assert_eq!(
            held.apply(part(4, false)),
            Err(Gap::Parts {
                assembling: 3,
                got: 4,
                base: 0
            })
        );
        let mut held = Held::default();
        held.apply(part(3, true)).expect("first part");
        assert!(matches!(
            held.apply(delta(3, 4, vec![], &[])),
            Err(Gap::Parts { .. })
        ));
    }

    #[test]
    fn parts_past_the_table_limit_are_refused() {
        let mut held = Held::default();
        let big = "x".repeat(1 << 20);
        let mut refused = false;
        for _ in 0..10 {
            let msg = RoutingTable {
                version: 1,
                more: true,
                ..table(vec![route(&big, "m", &[])])
            };
            match held.apply(msg) {
                Ok(None) => {}
                Err(Gap::TooLarge) => {
                    refused = true;
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(refused, "8 MiB of parts must be refused");
    }

    #[test]
    fn a_delta_before_any_table_is_a_gap() {
        assert!(Held::default().apply(delta(1, 2, vec![], &[])).is_err());
    }

    #[test]
    fn routes_of_one_pool_share_it_and_split_pools_stay_apart() {
        let p = plan(&table(vec![
            route("orders.create", "orders-manager", &["10.0.0.1:7070"]),
            route(
                "orders.get",
                "orders-manager",
                &["10.0.0.1:7070", "10.0.0.2:7070"],
            ),
            route("orders.pay", "orders-orders-pay", &["10.0.1.1:7070"]),
        ]));
        assert_eq!(p.pools.len(), 2);
        assert_eq!(p.pools["orders-manager"].addrs.len(), 2);
        assert_eq!(p.pools["orders-orders-pay"].manager, "orders");
        assert_eq!(
            p.events["orders.pay"],
            ("orders".to_owned(), "orders-orders-pay".to_owned())
        );
        assert!(p.rejected.is_empty());
    }

    #[test]
    fn bad_entries_are_dropped_with_a_reason() {
        let p = plan(&table(vec![
            route("", "x", &["10.0.0.1:7070"]),
            route("a.b", "", &["10.0.0.1:7070", "nonsense", "10.0.0.1"]),
            route("a.b", "other", &["10.0.0.9:7070"]),
        ]));
        assert_eq!(p.events.len(), 1);
        assert_eq!(
            p.events["a.b"].1, "orders",
            "an empty pool name falls back to the manager"
        );
        assert_eq!(p.pools["orders"].addrs.len(), 1);
        assert!(!p.pools.contains_key("other"));
        assert_eq!(p.rejected.len(), 4, "{:?}", p.rejected);
        assert!(p.rejected.iter().any(|r| r.contains("\"nonsense\"")));
    }

    #[test]
    fn an_event_type_without_ready_pods_keeps_its_route() {
        let p = plan(&table(vec![route("a.b", "m", &[])]));
        assert!(p.pools["m"].addrs.is_empty());
        assert!(p.events.contains_key("a.b"));
    }

    #[test]
    fn durable_routes_are_kept_per_type_and_a_bad_pointer_drops_the_route() {
        use switchyard_protocol::control::v1::DurableRoute as Wire;
        let mut ordered = route("a.b", "m", &["10.0.0.1:7070"]);
        ordered.durable = Some(Wire {
            ordering_key: "/customerId".into(),
            duplicate_window_ms: 5_000,
            max_bytes: 1 << 30,
        });
        let mut unordered = route("c.d", "m", &[]);
        unordered.durable = Some(Wire::default());
        let mut bad = route("e.f", "m", &[]);
        bad.durable = Some(Wire {
            ordering_key: "customerId".into(),
            ..Wire::default()
        });
        let p = plan(&table(vec![
            ordered,
            unordered,
            bad,
            route("g.h", "m", &[]),
        ]));
        assert_eq!(
            p.durable["a.b"].ordering_key.as_deref(),
            Some("/customerId")
        );
        assert_eq!(
            p.durable["a.b"].duplicate_window(),
            std::time::Duration::from_secs(5),
            "the Manager's window reaches the publisher"
        );
        assert_eq!(
            p.durable["a.b"].stream_limits().max_bytes,
            Some(1 << 30),
            "and its byte limit"
        );
        assert_eq!(p.durable["c.d"], DurableRoute::default());
        assert!(!p.durable.contains_key("g.h"), "direct");
        assert!(!p.events.contains_key("e.f"));
        assert_eq!(p.rejected.len(), 1, "{:?}", p.rejected);
        assert!(p.rejected[0].contains("not a JSON pointer"));
    }

    #[test]
    fn endpoints_are_capped_per_pool() {
        let addrs: Vec<String> = (0..MAX_ENDPOINTS + 3)
            .map(|i| format!("10.{}.{}.1:7070", i / 256, i % 256))
            .collect();
        let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        let p = plan(&table(vec![route("a.b", "m", &refs)]));
        assert_eq!(p.pools["m"].addrs.len(), MAX_ENDPOINTS);
        assert_eq!(p.rejected.len(), 3);
    }
}
