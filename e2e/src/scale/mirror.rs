//! Pure: a router stream's table as built from a whole table and the deltas after it (what the
//! sidecar's follower does, kept apart so the benchmark needs no sidecar code).

use std::collections::{BTreeMap, BTreeSet};
use switchyard_protocol::control::v1::RoutingTable;

/// Event type -> endpoint addresses, at `version`.
#[derive(Debug, Default)]
pub struct Mirror {
    version: u64,
    routes: BTreeMap<String, BTreeSet<String>>,
    /// A whole table whose parts are still coming (`more`): its version and routes so far.
    assembling: Option<(u64, BTreeMap<String, BTreeSet<String>>)>,
}

/// A delta that does not apply to the version held.
#[derive(Debug, thiserror::Error)]
#[error("delta from version {base} while holding {held}")]
pub struct Gap {
    held: u64,
    base: u64,
}

impl Mirror {
    /// Applies one message; false while a whole table's parts are still coming (the table held
    /// is then the one before it).
    pub fn apply(&mut self, msg: RoutingTable) -> Result<bool, Gap> {
        if let Some((version, _)) = &self.assembling
            && (msg.base != 0 || msg.version != *version)
        {
            return Err(Gap {
                held: *version,
                base: msg.base,
            });
        }
        if msg.base == 0 && (msg.more || self.assembling.is_some()) {
            let (_, routes) = self
                .assembling
                .get_or_insert_with(|| (msg.version, BTreeMap::new()));
            for r in msg.routes {
                let addrs = r.endpoints.into_iter().map(|e| e.address).collect();
                routes.insert(r.event_type, addrs);
            }
            if msg.more {
                return Ok(false);
            }
            let (_, routes) = self.assembling.take().unwrap_or_default();
            self.routes = routes;
            self.version = msg.version;
            return Ok(true);
        }
        if msg.base == 0 {
            self.routes.clear();
        } else if msg.base != self.version {
            return Err(Gap {
                held: self.version,
                base: msg.base,
            });
        }
        for e in &msg.removed {
            self.routes.remove(e);
        }
        for r in msg.routes {
            let addrs = r.endpoints.into_iter().map(|e| e.address).collect();
            self.routes.insert(r.event_type, addrs);
        }
        self.version = msg.version;
        Ok(true)
    }

    /// Whether `event` lists `addr`.
    pub fn has(&self, event: &str, addr: &str) -> bool {
        self.routes.get(event).is_some_and(|a| a.contains(addr))
    }

    /// Subscriber routes held (keyed `<event>@<manager>`).
    pub fn subscriber_routes(&self) -> usize {
        self.routes.keys().filter(|k| k.contains('@')).count()
    }

    /// Endpoints listed for `event`.
    pub fn count(&self, event: &str) -> usize {
        self.routes.get(event).map_or(0, BTreeSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::control::v1::{Endpoint, Route};

    fn route(event: &str, addrs: &[&str]) -> Route {
        Route {
            event_type: event.into(),
            endpoints: addrs
                .iter()
                .map(|a| Endpoint {
                    address: (*a).into(),
                    pod: String::new(),
                })
                .collect(),
            ..Route::default()
        }
    }

    #[test]
    fn whole_then_deltas_then_a_gap() {
        let mut m = Mirror::default();
        m.apply(RoutingTable {
            version: 1,
            routes: vec![route("a", &["x:1"]), route("b", &[])],
            ..RoutingTable::default()
        })
        .expect("whole");
        m.apply(RoutingTable {
            version: 2,
            base: 1,
            routes: vec![route("a", &["x:1", "y:1"])],
            removed: vec!["b".into()],
            ..RoutingTable::default()
        })
        .expect("delta");
        assert!(m.has("a", "y:1"));
        assert_eq!(m.count("b"), 0);
        assert_eq!(m.subscriber_routes(), 0);
        m.apply(RoutingTable {
            version: 3,
            base: 2,
            routes: vec![route("a@m1", &["z:1"])],
            ..RoutingTable::default()
        })
        .expect("a subscriber's route");
        assert_eq!(m.subscriber_routes(), 1);
        assert!(
            m.apply(RoutingTable {
                version: 9,
                base: 7,
                ..RoutingTable::default()
            })
            .is_err()
        );
    }

    #[test]
    fn a_table_in_parts_counts_once_complete() {
        let mut m = Mirror::default();
        let part = |event: &str, more: bool| RoutingTable {
            version: 3,
            routes: vec![route(event, &["x:1"])],
            more,
            ..RoutingTable::default()
        };
        assert!(!m.apply(part("a", true)).expect("first part"));
        assert!(!m.has("a", "x:1"), "not before the table is complete");
        assert!(m.apply(part("b", false)).expect("last part"));
        assert!(m.has("a", "x:1") && m.has("b", "x:1"));
    }
}
