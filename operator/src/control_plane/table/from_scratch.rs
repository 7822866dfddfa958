//! Pure: the routing table of each Router from the observed Routers, Managers and manager Pods,
//! computed from scratch, as the index's tests hold the incremental tables to.

use super::{RouterKey, subscription_wire};
use crate::control_plane::index::is_ready;
use crate::render::{self, meta};
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use switchyard_crds::{Manager, Router};
use switchyard_protocol::control::v1::{Endpoint, Route, Subscription};
use switchyard_protocol::durable::DurableRoute;

/// The routes of every Router in `routers`, from the Managers and Pods seen in the cluster.
pub(crate) fn all_tables(
    routers: &[&Router],
    managers: &[&Manager],
    pods: &[&Pod],
) -> BTreeMap<RouterKey, Vec<Route>> {
    routers
        .iter()
        .filter(|r| r.meta().deletion_timestamp.is_none())
        .filter_map(|r| {
            let key = RouterKey {
                namespace: r.namespace()?,
                name: r.name_any(),
            };
            let mine: Vec<Manager> = managers
                .iter()
                .filter(|m| {
                    m.namespace().as_deref() == Some(key.namespace.as_str())
                        && m.spec.router_ref.name == key.name
                        && m.meta().deletion_timestamp.is_none()
                })
                .map(|m| (*m).clone())
                .collect();
            let local: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.namespace().as_deref() == Some(key.namespace.as_str()))
                .copied()
                .collect();
            Some((key, routes(r, &mine, &local)))
        })
        .collect()
}

/// The routes of one Router: per event type its Manager (the same choice as the rendered config:
/// first Manager by name wins a contested type) and the ready pods its destination selects; and
/// per subscription (keyed `<event>@<manager>`) the subscribing Manager and all its ready pods.
/// Sorted by key.
fn routes(router: &Router, managers: &[Manager], pods: &[&Pod]) -> Vec<Route> {
    // render_config only fails without a namespace, which `all_tables` has already required.
    let Ok(config) = render::router::render_config(router, managers) else {
        return Vec::new();
    };
    let handlers = config.destinations.iter().map(|(event, dest)| {
        let pool = if dest.pod_selector.contains_key(meta::EVENT_TYPE) {
            render::names::manager_per_type(&dest.manager, event)
        } else {
            render::names::manager_service(&dest.manager)
        };
        route(event.as_str(), dest, pool, pods, None)
    });
    let subscribers = config.subscribers.iter().map(|(key, sub)| {
        let pool = render::names::manager_service(&sub.destination.manager);
        let wire = subscription_wire(&sub.subscription);
        route(key, &sub.destination, pool, pods, Some(wire))
    });
    let mut routes: Vec<Route> = handlers.chain(subscribers).collect();
    routes.sort_by(|a, b| a.event_type.cmp(&b.event_type));
    routes
}

fn route(
    key: &str,
    dest: &switchyard_protocol::config::Destination,
    pool: String,
    pods: &[&Pod],
    subscription: Option<Subscription>,
) -> Route {
    let mut endpoints: Vec<Endpoint> = pods
        .iter()
        .filter(|p| selects(&dest.pod_selector, p) && is_ready(p))
        .filter_map(|p| {
            let ip: IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            Some(Endpoint {
                address: SocketAddr::new(ip, dest.port).to_string(),
                pod: p.name_any(),
            })
        })
        .collect();
    endpoints.sort_by(|a, b| a.address.cmp(&b.address));
    Route {
        event_type: key.to_owned(),
        manager: dest.manager.clone(),
        pool,
        endpoints,
        durable: dest.durable.as_ref().map(DurableRoute::to_wire),
        subscription,
        push: dest.push.iter().map(|e| e.as_str().to_owned()).collect(),
    }
}

fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.labels();
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(name: &str) -> Router {
        serde_saphyr::from_str(&format!(
            r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {{name: {name}, namespace: shop, uid: u-{name}}}
spec:
  listeners: {{http: {{port: 8080}}}}
  routes: []
"#
        ))
        .expect("router yaml")
    }

    fn manager(name: &str, router: &str, events: &[&str], split: &str) -> Manager {
        serde_saphyr::from_str(&format!(
            r#"
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {{name: {name}, namespace: shop, uid: u-{name}}}
spec:
  routerRef: {{name: {router}}}
  events: [{}]
  scaling: {{split: {split}}}
  app: {{port: 8000}}
  template:
    spec:
      containers: [{{name: app, image: app}}]
"#,
            events.join(", ")
        ))
        .expect("manager yaml")
    }

    fn pod(name: &str, ns: &str, labels: &[(&str, &str)], ip: Option<&str>, ready: bool) -> Pod {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "status": {
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            },
        }))
        .expect("pod json")
    }

    fn manager_pod(name: &str, manager: &str, event: Option<&str>, ip: &str) -> Pod {
        let mut labels = vec![
            (meta::NAME, "switchyard-manager"),
            (meta::INSTANCE, manager),
            (meta::MANAGER, manager),
        ];
        if let Some(e) = event {
            labels.push((meta::EVENT_TYPE, e));
        }
        pod(name, "shop", &labels, Some(ip), true)
    }

    fn addresses(route: &Route) -> Vec<&str> {
        route.endpoints.iter().map(|e| e.address.as_str()).collect()
    }

    #[test]
    fn shared_manager_lists_its_ready_pods_on_the_frame_port_sorted() {
        let r = router("edge");
        let m = manager("orders", "edge", &["orders.create", "orders.get"], "shared");
        let p1 = manager_pod("orders-b", "orders", None, "10.0.0.9");
        let p2 = manager_pod("orders-a", "orders", None, "10.0.0.10");
        let unready = pod(
            "orders-c",
            "shop",
            &[
                (meta::MANAGER, "orders"),
                (meta::NAME, "switchyard-manager"),
                (meta::INSTANCE, "orders"),
            ],
            Some("10.0.0.11"),
            false,
        );
        let no_ip = manager_pod("orders-d", "orders", None, "not-an-ip");
        let routes = routes(&r, &[m], &[&p1, &p2, &unready, &no_ip]);
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0].event_type, "orders.create");
        assert_eq!(routes[0].manager, "orders");
        assert_eq!(routes[0].pool, "orders-manager");
        assert_eq!(addresses(&routes[0]), ["10.0.0.10:7070", "10.0.0.9:7070"]);
        assert_eq!(routes[0].endpoints[0].pod, "orders-a");
        assert_eq!(routes[1].endpoints, routes[0].endpoints);
    }

    #[test]
    fn per_event_type_split_selects_each_types_own_pods() {
        let r = router("edge");
        let m = manager(
            "orders",
            "edge",
            &["orders.create", "orders.get"],
            "perEventType",
        );
        let create = manager_pod("c-1", "orders", Some("orders-create"), "10.0.1.1");
        let get = manager_pod("g-1", "orders", Some("orders-get"), "10.0.2.1");
        let routes = routes(&r, &[m], &[&create, &get]);
        assert_eq!(routes[0].pool, "orders-orders-create");
        assert_eq!(addresses(&routes[0]), ["10.0.1.1:7070"]);
        assert_eq!(routes[1].pool, "orders-orders-get");
        assert_eq!(addresses(&routes[1]), ["10.0.2.1:7070"]);
    }

    #[test]
    fn terminating_pods_and_pods_of_other_managers_are_left_out() {
        let r = router("edge");
        let m = manager("orders", "edge", &["orders.create"], "shared");
        let mut leaving = manager_pod("o-1", "orders", None, "10.0.0.1");
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let other = manager_pod("b-1", "billing", None, "10.0.0.2");
        let routes = routes(&r, &[m], &[&leaving, &other]);
        assert_eq!(
            routes.len(),
            1,
            "the event type is listed even without pods"
        );
        assert!(routes[0].endpoints.is_empty());
    }

    #[test]
    fn ipv6_pods_get_bracketed_addresses() {
        let r = router("edge");
        let m = manager("orders", "edge", &["orders.create"], "shared");
        let p = manager_pod("o-1", "orders", None, "fd00::5");
        assert_eq!(addresses(&routes(&r, &[m], &[&p])[0]), ["[fd00::5]:7070"]);
    }

    #[test]
    fn tables_are_per_router_and_per_namespace() {
        let edge = router("edge");
        let admin = router("admin");
        let orders = manager("orders", "edge", &["orders.create"], "shared");
        let users = manager("users", "admin", &["users.get"], "shared");
        let mut elsewhere = manager("stray", "edge", &["stray.x"], "shared");
        elsewhere.metadata.namespace = Some("other".into());
        let p = manager_pod("o-1", "orders", None, "10.0.0.1");
        let mut foreign = manager_pod("o-2", "orders", None, "10.0.0.2");
        foreign.metadata.namespace = Some("other".into());
        let tables = all_tables(
            &[&edge, &admin],
            &[&orders, &users, &elsewhere],
            &[&p, &foreign],
        );
        let edge_routes = &tables[&RouterKey {
            namespace: "shop".into(),
            name: "edge".into(),
        }];
        assert_eq!(edge_routes.len(), 1);
        assert_eq!(edge_routes[0].event_type, "orders.create");
        assert_eq!(addresses(&edge_routes[0]), ["10.0.0.1:7070"]);
        let admin_routes = &tables[&RouterKey {
            namespace: "shop".into(),
            name: "admin".into(),
        }];
        assert_eq!(admin_routes[0].manager, "users");
    }

    #[test]
    fn a_contested_event_type_goes_to_the_first_manager_by_name() {
        let r = router("edge");
        let a = manager("alpha", "edge", &["x.y"], "shared");
        let b = manager("beta", "edge", &["x.y"], "shared");
        let routes = routes(&r, &[b, a], &[]);
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].manager, "alpha");
    }

    #[test]
    fn a_durable_type_s_route_carries_its_durable_route_and_a_direct_one_none() {
        let r = router("edge");
        let mut m = manager("orders", "edge", &["orders.create", "orders.get"], "shared");
        m.spec.event_delivery.insert(
            "orders.create".into(),
            switchyard_crds::manager::DeliveryMode::Durable,
        );
        m.spec.workers.ordering_key = Some("/customerId".into());
        let plain = routes(&r, std::slice::from_ref(&m), &[]);
        assert_eq!(
            plain[0].durable,
            Some(switchyard_protocol::control::v1::DurableRoute {
                ordering_key: "/customerId".into(),
                duplicate_window_ms: 0,
                max_bytes: 0,
            }),
            "the default window and no byte limit travel as none"
        );
        m.spec.durable.duplicate_window =
            switchyard_crds::common::Duration::from(std::time::Duration::from_secs(5));
        m.spec.durable.max_bytes = Some(1 << 30);
        let routes = routes(&r, &[m], &[]);
        assert_eq!(
            routes[0].durable,
            Some(switchyard_protocol::control::v1::DurableRoute {
                ordering_key: "/customerId".into(),
                duplicate_window_ms: 5_000,
                max_bytes: 1 << 30,
            }),
            "every publisher gives the stream the Manager's window and byte limit"
        );
        assert_eq!(routes[1].durable, None, "orders.get stays direct");
    }
}
