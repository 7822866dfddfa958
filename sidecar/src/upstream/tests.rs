//! Table swaps: what `apply` keeps, replaces and retires. Endpoints are unreachable on purpose; only
//! the pools and the view are checked, never a connection.

#![allow(clippy::unwrap_used)]

use super::*;
use switchyard_protocol::config::RouterConfig;
use switchyard_protocol::control::v1::{Endpoint, Route};

fn config() -> RouterConfig {
    serde_json::from_value(serde_json::json!({
        "name": "edge",
        "namespace": "shop",
        "spec": {
            "listeners": {"http": {"port": 8080}},
            "routes": [{"event": "a", "http": {"method": "GET", "path": "/a"}}],
        },
        "destinations": {
            "a": {"manager": "m", "service": "m-manager", "port": 7070, "podSelector": {}},
        },
        "staticEndpoints": {"m": ["127.0.0.1:9"]},
    }))
    .unwrap()
}

fn start() -> Upstream {
    let c = config();
    Upstream::start(
        &c.name,
        &c.namespace,
        Reach {
            destinations: &c.destinations,
            subscribers: &c.subscribers,
            static_endpoints: &c.static_endpoints,
        },
        None,
        None,
        Metrics::new(crate::metrics::Role::Router),
    )
}

fn table(version: u64, routes: &[(&str, &str, &[&str])]) -> RoutingTable {
    RoutingTable {
        version,
        router: "edge".into(),
        namespace: "shop".into(),
        routes: routes
            .iter()
            .map(|(event, pool, addrs)| Route {
                event_type: (*event).into(),
                manager: "m".into(),
                pool: (*pool).into(),
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
            })
            .collect(),
        ..RoutingTable::default()
    }
}

fn addrs(pool: &Pool) -> Vec<String> {
    let mut v: Vec<String> = pool.snapshot().iter().map(|p| p.addr.clone()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn control_plane_tables_replace_the_config_table_and_keep_pools_by_name() {
    let router = start().with_control_plane("http://cp:1".into());
    let from_config = router.pool_of("a").unwrap();
    assert_eq!(addrs(&from_config), ["127.0.0.1:9"]);
    let view = router.view();
    assert_eq!(view.source, TableSource::Config);
    assert_eq!(view.version, 0);

    router.apply(&table(1, &[("a", "m-manager", &["127.0.0.1:10"])]));
    let first = router.pool_of("a").unwrap();
    assert!(from_config.is_retired(), "the config's pool retires");
    assert!(addrs(&from_config).is_empty());
    assert_eq!(addrs(&first), ["127.0.0.1:10"]);

    // Same pool name, more endpoints, a new event type: the pool object (and its connections) stays.
    router.apply(&table(
        2,
        &[
            ("a", "m-manager", &["127.0.0.1:10", "127.0.0.1:11"]),
            ("b", "m-manager", &[]),
        ],
    ));
    let second = router.pool_of("a").unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert!(Arc::ptr_eq(&second, &router.pool_of("b").unwrap()));
    assert_eq!(addrs(&second), ["127.0.0.1:10", "127.0.0.1:11"]);
    let view = router.view();
    assert_eq!(view.source, TableSource::ControlPlane);
    assert_eq!(view.version, 2);
    assert_eq!(view.routes.len(), 2);
    assert_eq!(view.routes[0].endpoints.len(), 2);
    assert_eq!(view.control_plane.as_ref().unwrap().tables_received, 2);

    // The event type moves to another pool; the old one drains; an event type dropped is unrouted.
    router.apply(&table(3, &[("b", "m-b", &["127.0.0.1:12"])]));
    assert!(router.pool_of("a").is_none());
    assert!(second.is_retired());
    assert_eq!(addrs(&router.pool_of("b").unwrap()), ["127.0.0.1:12"]);
}

#[tokio::test]
async fn the_view_says_whether_the_stream_is_connected() {
    let router = start().with_control_plane("http://cp:1".into());
    assert!(!router.view().control_plane.unwrap().connected);
    router.set_connected(true);
    assert!(router.view().control_plane.unwrap().connected);
    let plain = start();
    assert!(plain.view().control_plane.is_none());
}
