//! The index against the reference: after every step of random churn (pods flipping, moving,
//! vanishing; Managers changing events, split, delivery and Router; Routers coming and going), the
//! incrementally kept tables equal `table::all_tables` computed from scratch, and the deltas handed
//! out, applied in order, rebuild the same tables.

use super::*;
use crate::control_plane::delta::TableState;
use crate::control_plane::table;
use std::collections::BTreeMap;

const EVENTS: [&str; 3] = ["a.x", "b.y", "c.z"];

fn router(name: &str) -> Router {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "Router",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"listeners": {"http": {"port": 8080}}, "routes": []},
    }))
    .expect("router")
}

fn manager(name: &str, router: &str, events: &[&str], per_type: bool) -> Manager {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "Manager",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "routerRef": {"name": router},
            "events": events,
            "scaling": {"split": if per_type { "perEventType" } else { "shared" }},
            "app": {"port": 8000},
            "template": {"spec": {"containers": [{"name": "app", "image": "app"}]}},
        },
    }))
    .expect("manager")
}

fn pod(name: &str, manager: &str, event: Option<&str>, ip: &str, ready: bool) -> Pod {
    let mut labels = serde_json::json!({
        meta::NAME: "switchyard-manager", meta::INSTANCE: manager, meta::MANAGER: manager,
        "unrelated": "x",
    });
    if let Some(e) = event {
        labels[meta::EVENT_TYPE] = serde_json::Value::from(e.replace('.', "-"));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "shop", "labels": labels},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    }))
    .expect("pod")
}

/// Durable or direct, for the whole Manager or per type, with or without an ordering key.
fn randomize_delivery(rng: &mut fastrand::Rng, m: &mut Manager, events: &[&str]) {
    use switchyard_crds::manager::DeliveryMode::{Direct, Durable};
    let mode = |rng: &mut fastrand::Rng| if rng.bool() { Durable } else { Direct };
    m.spec.delivery = mode(rng);
    for e in events {
        if rng.u8(..3) == 0 {
            m.spec.event_delivery.insert((*e).to_owned(), mode(rng));
        }
    }
    if rng.bool() {
        m.spec.workers.ordering_key = Some(pick(rng, &["/customerId", "/orderId"]).to_owned());
    }
}

/// None, or subscriptions to a type or a pattern, some durable (left out of the tables).
fn randomize_subscriptions(rng: &mut fastrand::Rng, m: &mut Manager) {
    for event in ["a.x", "b.*", "*"] {
        if rng.u8(..3) == 0 {
            let durable = rng.u8(..4) == 0;
            m.spec.subscriptions.push(
                serde_json::from_value(serde_json::json!({
                    "event": event,
                    "observe": if rng.bool() { vec!["published"] } else { vec!["requests", "responses"] },
                    "delivery": if durable { "durable" } else { "direct" },
                }))
                .expect("subscription"),
            );
        }
    }
}

/// The objects as they are in the "cluster".
#[derive(Default)]
struct World {
    routers: BTreeMap<String, Router>,
    managers: BTreeMap<String, Manager>,
    pods: BTreeMap<String, Pod>,
}

impl World {
    fn reference(&self) -> BTreeMap<RouterKey, Vec<Route>> {
        let r: Vec<&Router> = self.routers.values().collect();
        let m: Vec<&Manager> = self.managers.values().collect();
        let p: Vec<&Pod> = self.pods.values().collect();
        table::all_tables(&r, &m, &p)
    }
}

fn pick<'a>(rng: &mut fastrand::Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.usize(..xs.len())]
}

/// One random change to the world, mirrored into the index.
fn step(rng: &mut fastrand::Rng, w: &mut World, ix: &mut Index) {
    let routers = ["edge", "admin"];
    let managers = ["m1", "m2", "m3", "m4"];
    match rng.u8(..10) {
        0 => {
            let name = pick(rng, &routers);
            if w.routers.remove(name).is_some() {
                ix.delete_router(&RouterKey {
                    namespace: "shop".into(),
                    name: name.into(),
                });
            } else {
                let r = router(name);
                ix.apply_router(&r);
                w.routers.insert(name.into(), r);
            }
        }
        1 | 2 => {
            let name = pick(rng, &managers);
            if rng.u8(..4) == 0 {
                w.managers.remove(name);
                ix.delete_manager(&("shop".into(), name.into()));
            } else {
                let events: Vec<&str> = EVENTS.iter().copied().filter(|_| rng.bool()).collect();
                let mut m = manager(name, pick(rng, &routers), &events, rng.bool());
                randomize_delivery(rng, &mut m, &events);
                randomize_subscriptions(rng, &mut m);
                ix.apply_manager(Arc::new(m.clone()));
                w.managers.insert(name.into(), m);
            }
        }
        _ => {
            let name = format!("p{}", rng.u8(..12));
            if rng.u8(..5) == 0 {
                w.pods.remove(&name);
                ix.delete_pod(&("shop".into(), name));
            } else {
                let event = if rng.bool() {
                    Some(pick(rng, &EVENTS))
                } else {
                    None
                };
                let ip = format!("10.0.0.{}", rng.u8(1..9));
                let p = pod(&name, pick(rng, &managers), event, &ip, rng.u8(..3) > 0);
                ix.apply_pod(&p);
                w.pods.insert(name, p);
            }
        }
    }
}

/// Applies the index's deltas to hub-like table states.
fn follow(
    mirror: &mut BTreeMap<RouterKey, TableState>,
    changes: BTreeMap<RouterKey, RouterChange>,
) {
    for (key, change) in changes {
        match change {
            RouterChange::Removed => {
                mirror.remove(&key);
            }
            RouterChange::Routes(routes) => match mirror.get_mut(&key) {
                Some(st) => {
                    st.apply(routes);
                }
                None => {
                    let st = TableState::new(
                        key.name.clone(),
                        key.namespace.clone(),
                        routes.into_values().flatten().collect(),
                    );
                    mirror.insert(key, st);
                }
            },
        }
    }
}

#[test]
fn random_churn_matches_the_reference_and_its_deltas_rebuild_it() {
    for seed in 0..40 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (mut w, mut ix) = (World::default(), Index::default());
        let mut mirror = BTreeMap::new();
        for i in 0..300 {
            step(&mut rng, &mut w, &mut ix);
            let want = w.reference();
            assert_eq!(ix.tables(), want, "seed {seed}, step {i}");
            follow(&mut mirror, ix.take());
            let rebuilt: BTreeMap<RouterKey, Vec<Route>> = mirror
                .iter()
                .map(|(k, st)| (k.clone(), st.full().routes))
                .collect();
            assert_eq!(rebuilt, want, "deltas: seed {seed}, step {i}");
        }
    }
}

#[test]
fn a_pod_change_touches_only_the_routes_that_use_its_pool() {
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    ix.apply_router(&router("admin"));
    ix.apply_manager(Arc::new(manager("m1", "edge", &["a.x", "b.y"], false)));
    ix.apply_manager(Arc::new(manager("m2", "edge", &["c.z"], false)));
    ix.apply_manager(Arc::new(manager("m3", "admin", &[], false)));
    ix.apply_pod(&pod("p1", "m1", None, "10.0.0.1", true));
    ix.apply_pod(&pod("p2", "m2", None, "10.0.0.2", true));
    ix.take();
    ix.apply_pod(&pod("p1", "m1", None, "10.0.0.1", false));
    let changes = ix.take();
    assert_eq!(changes.len(), 1, "only edge: {changes:?}");
    let Some(RouterChange::Routes(routes)) = changes.values().next() else {
        panic!("routes expected: {changes:?}");
    };
    let events: Vec<&String> = routes.keys().collect();
    assert_eq!(events, ["a.x", "b.y"], "m2's route is untouched");
    assert!(
        routes
            .values()
            .all(|r| r.as_ref().is_some_and(|r| r.endpoints.is_empty()))
    );
}

#[test]
fn status_only_updates_change_nothing() {
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    let mut m = manager("m1", "edge", &["a.x"], false);
    ix.apply_manager(Arc::new(m.clone()));
    let mut p = pod("p1", "m1", None, "10.0.0.1", true);
    ix.apply_pod(&p);
    ix.take();
    m.spec.replicas = 7;
    m.status = Some(Default::default());
    ix.apply_manager(Arc::new(m));
    p.metadata.resource_version = Some("99".into());
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("pod-template-hash".into(), "abc".into());
    ix.apply_pod(&p);
    assert!(ix.take().is_empty());
}

#[test]
fn a_relist_drops_what_vanished_unseen() {
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    ix.apply_manager(Arc::new(manager("m1", "edge", &["a.x"], false)));
    ix.apply_pod(&pod("p1", "m1", None, "10.0.0.1", true));
    ix.apply_pod(&pod("p2", "m1", None, "10.0.0.2", true));
    ix.take();
    ix.retain_pods(|k| k == &("shop".to_owned(), "p2".to_owned()));
    let t = ix.tables();
    let routes = t.values().next().expect("edge");
    assert_eq!(routes[0].endpoints.len(), 1);
    assert_eq!(routes[0].endpoints[0].pod, "p2");
    ix.retain_routers(|_| false);
    assert_eq!(
        ix.take().into_values().collect::<Vec<_>>(),
        vec![RouterChange::Removed]
    );
}

#[test]
fn a_routes_durable_setting_travels_and_its_change_touches_only_that_route() {
    use switchyard_crds::manager::DeliveryMode::Durable;
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    let mut m = manager("m1", "edge", &["a.x", "b.y"], false);
    ix.apply_manager(Arc::new(m.clone()));
    ix.take();
    let durable_of = |t: &BTreeMap<RouterKey, Vec<Route>>| -> Vec<Option<String>> {
        t.values()
            .next()
            .expect("edge")
            .iter()
            .map(|r| r.durable.as_ref().map(|d| d.ordering_key.clone()))
            .collect()
    };
    assert_eq!(durable_of(&ix.tables()), [None, None], "direct by default");

    // One type turns durable: only its route changes, and it carries the stream's route.
    m.spec.event_delivery.insert("b.y".into(), Durable);
    ix.apply_manager(Arc::new(m.clone()));
    let changes = ix.take();
    let Some(RouterChange::Routes(routes)) = changes.values().next() else {
        panic!("routes expected: {changes:?}");
    };
    assert_eq!(routes.keys().collect::<Vec<_>>(), ["b.y"]);
    let route = routes["b.y"].as_ref().expect("b.y");
    assert_eq!(
        route.durable.as_ref().map(|d| d.ordering_key.as_str()),
        Some("")
    );

    // The whole Manager with an ordering key: both routes say so.
    m.spec.delivery = Durable;
    m.spec.workers.ordering_key = Some("/customerId".into());
    ix.apply_manager(Arc::new(m.clone()));
    let changes = ix.take();
    let Some(RouterChange::Routes(routes)) = changes.values().next() else {
        panic!("routes expected: {changes:?}");
    };
    assert_eq!(routes.len(), 2);
    assert_eq!(
        durable_of(&ix.tables()),
        [
            Some("/customerId".to_owned()),
            Some("/customerId".to_owned())
        ]
    );

    // And back to direct: the next table says so.
    m.spec.delivery = switchyard_crds::manager::DeliveryMode::Direct;
    m.spec.event_delivery.clear();
    ix.apply_manager(Arc::new(m));
    assert_eq!(ix.take().len(), 1);
    assert_eq!(durable_of(&ix.tables()), [None, None]);
}

#[test]
fn a_subscriber_gets_a_route_keyed_by_event_and_manager_with_all_its_pods() {
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    ix.apply_manager(Arc::new(manager("m1", "edge", &["a.x"], false)));
    let mut sub = manager("m2", "edge", &["c.z"], true);
    sub.spec.subscriptions = serde_json::from_value(serde_json::json!([
        {"event": "a.x", "filter": {"prefix": {"source": "/switchyard/shop/"}}},
        {"event": "b.*", "delivery": "durable"},
    ]))
    .expect("subscriptions");
    ix.apply_manager(Arc::new(sub));
    ix.apply_pod(&pod("p1", "m2", Some("c.z"), "10.0.0.2", true));
    let tables = ix.tables();
    let routes = &tables[&RouterKey {
        namespace: "shop".into(),
        name: "edge".into(),
    }];
    let keys: Vec<&str> = routes.iter().map(|r| r.event_type.as_str()).collect();
    assert_eq!(keys, ["a.x", "a.x@m2", "b.*@m2", "c.z"]);
    // The durable subscription's route says publishers store its copies in m2's stream.
    assert!(routes[1].durable.is_none(), "a.x@m2 is direct");
    let durable = routes[2].durable.as_ref().expect("b.*@m2 is durable");
    assert_eq!(durable.ordering_key, "", "m2 orders by no key");
    assert_eq!(
        routes[2].subscription.as_ref().map(|s| s.event.as_str()),
        Some("b.*")
    );
    let r = &routes[1];
    assert_eq!(r.manager, "m2");
    assert_eq!(
        r.pool, "m2-manager",
        "all the Manager's pods, whatever their split"
    );
    assert_eq!(r.endpoints.len(), 1);
    let s = r.subscription.as_ref().expect("a subscriber's route");
    assert_eq!(s.event, "a.x");
    assert_eq!(s.observe, ["published"]);
    assert_eq!(s.filter, r#"{"prefix":{"source":"/switchyard/shop/"}}"#);
    assert!(routes[0].subscription.is_none() && routes[3].subscription.is_none());
}

#[test]
fn every_route_of_a_manager_carries_what_it_may_push() {
    let mut ix = Index::default();
    ix.apply_router(&router("edge"));
    let mut m = manager("m1", "edge", &["a.x", "a.y"], false);
    m.spec.push = vec!["alerts.fired".into()];
    m.spec.subscriptions =
        serde_json::from_value(serde_json::json!([{"event": "b.*"}])).expect("subscriptions");
    ix.apply_manager(Arc::new(m.clone()));
    ix.apply_manager(Arc::new(manager("m2", "edge", &["c.z"], false)));
    let tables = ix.tables();
    let routes = &tables[&RouterKey {
        namespace: "shop".into(),
        name: "edge".into(),
    }];
    for r in routes {
        let want: &[&str] = if r.manager == "m1" {
            &["alerts.fired"]
        } else {
            &[]
        };
        assert_eq!(r.push, want, "{}", r.event_type);
    }
    assert_eq!(routes.len(), 4, "a.x, a.y, b.*@m1, c.z");
    // A change of spec.push alone is a change of the Manager's routes.
    ix.take();
    m.spec.push.clear();
    ix.apply_manager(Arc::new(m));
    assert_eq!(ix.take().len(), 1, "one Router's routes changed");
    assert!(ix.tables().values().flatten().all(|r| r.push.is_empty()));
}
