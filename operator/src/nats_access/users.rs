//! Who the JetStream server lets in (pure): one NATS user per Manager whose sidecars use JetStream,
//! named by their SPIFFE URI (nats-server's `verify_and_map` maps the client certificate to it),
//! with what its Router's routing table lets it store and consume
//! (`switchyard_protocol::nats_access`), and one for the operator, which only reads backlogs.

use kube::ResourceExt;
use std::collections::{BTreeMap, BTreeSet};
use switchyard_crds::Manager;
use switchyard_identity::{Kind, SpiffeId};
use switchyard_protocol::durable;
use switchyard_protocol::nats_access::{self, Party, Permissions};

/// The users of the JetStream server, and the Managers left out with the reason.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Users {
    /// `(SPIFFE URI, permissions)`, sorted by URI: the same Managers give the same block.
    pub users: Vec<(String, Permissions)>,
    /// `namespace/name: reason` of each Manager that gets no user (its name cannot be a subject).
    pub refused: Vec<String>,
}

/// The users for `managers` in `trust_domain`, the operator (`operator`) included.
pub fn users<'a>(
    managers: impl IntoIterator<Item = &'a Manager>,
    trust_domain: &str,
    operator: &SpiffeId,
) -> Users {
    let mut out = Users::default();
    for ((namespace, _router), group) in by_router(managers) {
        let routed = durable_routes(&group);
        for m in group {
            let name = m.name_any();
            let party = party(&namespace, &name, m, &routed);
            if party.stores.is_empty() && !party.consumes {
                // Its sidecars never open a JetStream connection.
                continue;
            }
            let granted = SpiffeId::new(trust_domain, &namespace, Kind::Manager, &name)
                .map_err(|e| e.to_string())
                .and_then(|id| {
                    nats_access::permissions(&party)
                        .map(|p| (id.uri(), p))
                        .map_err(|e| e.to_string())
                });
            match granted {
                Ok(user) => out.users.push(user),
                Err(e) => out.refused.push(format!("{namespace}/{name}: {e}")),
            }
        }
    }
    out.users
        .push((operator.uri(), nats_access::operator_permissions()));
    out.users.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The Managers of each Router, by `(namespace, Router)`: a Router's table is shared by all of them.
fn by_router<'a>(
    managers: impl IntoIterator<Item = &'a Manager>,
) -> BTreeMap<(String, String), Vec<&'a Manager>> {
    let mut groups: BTreeMap<(String, String), Vec<&Manager>> = BTreeMap::new();
    for m in managers {
        if let Some(ns) = m.namespace() {
            groups
                .entry((ns, m.spec.router_ref.name.clone()))
                .or_default()
                .push(m);
        }
    }
    groups
}

/// The durable types of one Router's table, by the Manager whose stream keeps them, and its
/// durable subscriptions' subject tokens: the same computation the control plane sends the
/// sidecars (`render::router::destinations` and `subscribers`).
fn durable_routes(group: &[&Manager]) -> BTreeMap<String, BTreeSet<String>> {
    let mut routed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (event, dest) in crate::render::router::destinations(group.iter().copied()) {
        if dest.durable.is_some() {
            routed
                .entry(dest.manager)
                .or_default()
                .insert(event.as_str().to_owned());
        }
    }
    for sub in crate::render::router::subscribers(group.iter().copied()).into_values() {
        if sub.destination.durable.is_some() {
            routed
                .entry(sub.destination.manager)
                .or_default()
                .insert(durable::subscription_token(&sub.subscription.event));
        }
    }
    routed
}

/// What `m`'s sidecars do with JetStream: store what the table routes durably (and its own durable
/// types, which it stores even where another Manager won the type in the table), consume its own.
fn party(
    namespace: &str,
    name: &str,
    m: &Manager,
    routed: &BTreeMap<String, BTreeSet<String>>,
) -> Party {
    let own = m.spec.durable_events();
    let mut stores = routed.clone();
    for event in &own {
        stores
            .entry(name.to_owned())
            .or_default()
            .insert(event.as_str().to_owned());
    }
    Party {
        namespace: namespace.to_owned(),
        manager: name.to_owned(),
        consumes: m.spec.consumes_durably(),
        stores,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(ns: &str, name: &str, router: &str, events: &str, durable: bool) -> Manager {
        let delivery = if durable { "durable" } else { "direct" };
        serde_saphyr::from_str(&format!(
            r#"
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {{name: {name}, namespace: {ns}}}
spec:
  routerRef: {{name: {router}}}
  events: [{events}]
  delivery: {delivery}
  app: {{port: 8000}}
  template:
    spec:
      containers: [{{name: app, image: app}}]
"#
        ))
        .expect("manager yaml")
    }

    fn operator() -> SpiffeId {
        SpiffeId::new("td", "switchyard", Kind::Operator, "switchyard").expect("id")
    }

    fn user<'a>(u: &'a Users, uri: &str) -> Option<&'a Permissions> {
        u.users.iter().find(|(n, _)| n == uri).map(|(_, p)| p)
    }

    #[test]
    fn each_manager_may_store_what_its_routers_table_routes_durably_and_consume_its_own() {
        let ms = [
            manager("shop", "orders", "edge", "order.created", true),
            manager("shop", "web", "edge", "page.view", false),
            manager("shop", "audit", "other", "audit.log", false),
        ];
        let u = users(&ms, "td", &operator());
        let orders = user(&u, "spiffe://td/ns/shop/manager/orders").expect("orders");
        assert!(
            orders
                .publish
                .contains(&"sy.shop.orders.order.created.*".to_owned())
        );
        assert!(
            orders
                .publish
                .iter()
                .any(|s| s.starts_with("$JS.ACK.SY_shop_orders"))
        );
        // A direct Manager of the same Router publishes into orders' stream, and consumes nothing.
        let web = user(&u, "spiffe://td/ns/shop/manager/web").expect("web");
        assert!(
            web.publish
                .contains(&"sy.shop.orders.order.created.*".to_owned())
        );
        assert!(
            !web.publish
                .iter()
                .any(|s| s.contains("CONSUMER") || s.contains("$JS.ACK"))
        );
        // Another Router's table routes nothing durable: that Manager never connects.
        assert!(
            user(&u, "spiffe://td/ns/shop/manager/audit").is_none(),
            "{u:?}"
        );
        assert!(u.refused.is_empty());
    }

    #[test]
    fn no_grant_crosses_a_namespace_and_the_operator_only_reads() {
        let ms = [
            manager("a", "orders", "edge", "order.created", true),
            manager("b", "orders", "edge", "order.created", true),
        ];
        let u = users(&ms, "td", &operator());
        for ns in ["a", "b"] {
            let p = user(&u, &format!("spiffe://td/ns/{ns}/manager/orders")).expect("user");
            let other = if ns == "a" { "b" } else { "a" };
            assert!(
                p.publish
                    .iter()
                    .chain(&p.subscribe)
                    .all(|s| !s.contains(&format!(".{other}."))
                        && !s.contains(&format!("_{other}_"))),
                "{ns}: {p:?}"
            );
        }
        let op = user(&u, "spiffe://td/ns/switchyard/operator/switchyard").expect("operator");
        assert_eq!(op, &nats_access::operator_permissions());
        // Sorted: the same Managers always give the same block, so nothing is rewritten.
        let again = users(ms.iter().rev(), "td", &operator());
        assert_eq!(u, again);
    }
}
