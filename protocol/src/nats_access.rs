//! Who may do what on the JetStream server of durable delivery (pure): each Manager's sidecars are
//! one NATS user, named by their mesh identity (the certificate's SPIFFE URI, which nats-server's
//! `verify_and_map` maps to the user), with permissions that allow exactly what their routing table
//! needs and nothing else:
//!
//! | what | subjects | who |
//! |---|---|---|
//! | store an event | `sy.<ns>.<manager>.<type>.*` | a sidecar whose table routes `<type>` durably to `<manager>` (its own types included) |
//! | store a subscriber's copy | `sy.<ns>.<manager>.<subscription token>.*` (`durable::subscription_token`) | a sidecar whose table has `<manager>`'s durable subscription |
//! | create, update, read a stream; read one stored event (a duplicate's comparison) | `$JS.API.STREAM.{INFO,CREATE,UPDATE,MSG.GET}.SY_<ns>_<manager>` | the same |
//! | create, read and pull its consumers; ack, progress-ack or nak what it pulled | `$JS.API.CONSUMER.{INFO,CREATE,DURABLE.CREATE,MSG.NEXT}.SY_<ns>_<own>…`, `$JS.ACK.SY_<ns>_<own>.>` | the Manager whose stream it is |
//! | receive answers (PubAcks, pulled events, API replies) | `_SY_INBOX.<ns>.<own>.>` | that Manager only (its client's inbox prefix) |
//!
//! Everything else is refused by the server: other Managers' consumers and acks, other namespaces
//! (every subject names one, and no permission crosses it), stream deletion or purge, account
//! information, other clients' inboxes. Each grant names one stream; no wildcard covers a Manager
//! or a namespace that is not the user's own.

use std::collections::{BTreeMap, BTreeSet};

/// What a Manager's sidecars do with JetStream, from their routing table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Party {
    /// Namespace of the Manager.
    pub namespace: String,
    /// The Manager's name.
    pub manager: String,
    /// Whether it consumes a stream of its own (some type it handles is durable).
    pub consumes: bool,
    /// The durable types its table routes, by the Manager whose stream keeps them (its own
    /// included: a publish routed to it is stored by it).
    pub stores: BTreeMap<String, BTreeSet<String>>,
}

/// A NATS user's allow lists; anything not listed is refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects it may publish to (including JetStream API requests and acks).
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
}

/// A name that would widen a grant past what it names: NATS subjects are split at `.`, and `*` and
/// `>` are wildcards.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} cannot name a JetStream permission: {why}")]
pub struct AccessError {
    /// A namespace, Manager or event type.
    pub what: &'static str,
    /// The value.
    pub value: String,
    /// Which rule it breaks.
    pub why: &'static str,
}

/// The inbox prefix of a Manager's NATS client: replies to it (PubAcks, pulled events) arrive under
/// it, and only it may subscribe there.
pub fn inbox_prefix(namespace: &str, manager: &str) -> String {
    format!("_SY_INBOX.{namespace}.{manager}")
}

/// The allow lists of `party`.
pub fn permissions(party: &Party) -> Result<Permissions, AccessError> {
    token("namespace", &party.namespace)?;
    token("Manager", &party.manager)?;
    let ns = &party.namespace;
    let mut publish = Vec::new();
    for (manager, events) in &party.stores {
        token("Manager", manager)?;
        let stream = super::durable::stream_name(ns, manager);
        for event in events {
            event_type(event)?;
            publish.push(format!("sy.{ns}.{manager}.{event}.*"));
        }
        for call in ["INFO", "CREATE", "UPDATE", "MSG.GET"] {
            publish.push(format!("$JS.API.STREAM.{call}.{stream}"));
        }
    }
    if party.consumes {
        let own = super::durable::stream_name(ns, &party.manager);
        if !party.stores.contains_key(&party.manager) {
            // Its consumers are created over its stream, which it ensures first.
            for call in ["INFO", "CREATE", "UPDATE"] {
                publish.push(format!("$JS.API.STREAM.{call}.{own}"));
            }
        }
        publish.extend([
            format!("$JS.API.CONSUMER.INFO.{own}.*"),
            format!("$JS.API.CONSUMER.CREATE.{own}.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{own}.*"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{own}.*"),
            format!("$JS.ACK.{own}.>"),
        ]);
    }
    Ok(Permissions {
        publish,
        subscribe: vec![format!("{}.>", inbox_prefix(ns, &party.manager))],
    })
}

/// The inbox prefix of the operator's NATS client. No namespace can make a Manager's inbox
/// (`_SY_INBOX.<ns>.<manager>`) start with it, so the operator's grant covers no Manager's replies.
pub const OPERATOR_INBOX: &str = "_SY_OPERATOR_INBOX";

/// The allow lists of the operator, which reads every durable Manager's backlog (stream and
/// consumer info, across namespaces) to scale it, and does nothing else: no event is published,
/// pulled, acked or deleted under its name.
pub fn operator_permissions() -> Permissions {
    Permissions {
        publish: vec![
            "$JS.API.STREAM.INFO.*".to_owned(),
            "$JS.API.CONSUMER.INFO.*.*".to_owned(),
        ],
        subscribe: vec![format!("{OPERATOR_INBOX}.>")],
    }
}

/// The `authorization` block of a nats-server configuration: one user per `(name, permissions)`,
/// `name` being the SPIFFE URI `verify_and_map` maps the client certificate to. JSON, which the
/// server's configuration syntax includes, so every string is escaped as the server reads it.
pub fn authorization_block(users: &[(String, Permissions)]) -> String {
    let users: Vec<serde_json::Value> = users
        .iter()
        .map(|(name, p)| {
            serde_json::json!({
                "user": name,
                "permissions": {
                    "publish": only(&p.publish),
                    "subscribe": only(&p.subscribe),
                },
            })
        })
        .collect();
    let block = serde_json::json!({ "users": users });
    format!(
        "authorization: {}\n",
        serde_json::to_string_pretty(&block).unwrap_or_default()
    )
}

/// A NATS permission that allows exactly `subjects`. An empty allow list means no restriction to
/// nats-server, so nothing allowed is written as everything denied.
fn only(subjects: &[String]) -> serde_json::Value {
    if subjects.is_empty() {
        serde_json::json!({ "deny": [">"] })
    } else {
        serde_json::json!({ "allow": subjects })
    }
}

fn token(what: &'static str, value: &str) -> Result<(), AccessError> {
    let bad = |why| AccessError {
        what,
        value: value.to_owned(),
        why,
    };
    if value.is_empty() {
        return Err(bad("it is empty"));
    }
    if value.contains('.') {
        return Err(bad("it contains `.`, which splits a subject"));
    }
    no_wildcards(value).map_err(bad)
}

fn event_type(value: &str) -> Result<(), AccessError> {
    let bad = |why| AccessError {
        what: "event type",
        value: value.to_owned(),
        why,
    };
    if value.is_empty() || value.split('.').any(str::is_empty) {
        return Err(bad("it has an empty part between dots"));
    }
    no_wildcards(value).map_err(bad)
}

fn no_wildcards(value: &str) -> Result<(), &'static str> {
    if value.contains(['*', '>']) {
        return Err("`*` and `>` are subject wildcards");
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains white space or a control character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn party(consumes: bool, stores: &[(&str, &[&str])]) -> Party {
        Party {
            namespace: "shop".into(),
            manager: "orders".into(),
            consumes,
            stores: stores
                .iter()
                .map(|(m, es)| {
                    (
                        (*m).to_owned(),
                        es.iter().map(|e| (*e).to_owned()).collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_consumer_gets_its_own_stream_consumers_acks_and_inbox_only() {
        let p = permissions(&party(true, &[("orders", &["order.created"])])).expect("ok");
        assert_eq!(
            p.publish,
            [
                "sy.shop.orders.order.created.*",
                "$JS.API.STREAM.INFO.SY_shop_orders",
                "$JS.API.STREAM.CREATE.SY_shop_orders",
                "$JS.API.STREAM.UPDATE.SY_shop_orders",
                "$JS.API.STREAM.MSG.GET.SY_shop_orders",
                "$JS.API.CONSUMER.INFO.SY_shop_orders.*",
                "$JS.API.CONSUMER.CREATE.SY_shop_orders.>",
                "$JS.API.CONSUMER.DURABLE.CREATE.SY_shop_orders.*",
                "$JS.API.CONSUMER.MSG.NEXT.SY_shop_orders.*",
                "$JS.ACK.SY_shop_orders.>",
            ]
        );
        assert_eq!(p.subscribe, ["_SY_INBOX.shop.orders.>"]);
        assert!(
            p.publish.iter().all(|s| !s.contains("DELETE")
                && !s.contains("PURGE")
                && s != "$JS.API.>"
                && s != ">"),
            "{p:?}"
        );
    }

    #[test]
    fn a_publisher_may_store_only_the_types_its_table_routes_and_consume_nothing() {
        let p = permissions(&party(false, &[("billing", &["invoice.due", "dead"])])).expect("ok");
        assert!(p.publish.contains(&"sy.shop.billing.dead.*".to_owned()));
        assert!(
            p.publish
                .contains(&"sy.shop.billing.invoice.due.*".to_owned())
        );
        assert!(
            !p.publish
                .iter()
                .any(|s| s.contains("CONSUMER") || s.contains("$JS.ACK"))
        );
        assert!(!p.publish.iter().any(|s| s.contains("SY_shop_orders")));
        // Its own stream exists only for its consumers: none here.
        let c = permissions(&party(true, &[])).expect("ok");
        assert!(
            c.publish
                .contains(&"$JS.API.STREAM.CREATE.SY_shop_orders".to_owned())
        );
        assert!(!c.publish.iter().any(|s| s.starts_with("sy.")));
    }

    #[test]
    fn names_that_would_widen_a_grant_are_refused() {
        for (ns, m, e) in [
            ("sh*p", "orders", "a"),
            ("shop", "or.ders", "a"),
            ("shop", "orders", "a.>"),
            ("shop", "orders", "a..b"),
            ("shop", "orders", "a b"),
            ("", "orders", "a"),
        ] {
            let p = Party {
                namespace: ns.into(),
                manager: m.into(),
                consumes: true,
                stores: [(m.to_owned(), [e.to_owned()].into())].into(),
            };
            assert!(permissions(&p).is_err(), "{ns} {m} {e}");
        }
    }

    #[test]
    fn the_block_names_each_user_by_its_identity() {
        let p = permissions(&party(true, &[])).expect("ok");
        let block = authorization_block(&[("spiffe://td/ns/shop/manager/orders".into(), p)]);
        assert!(block.starts_with("authorization: {"), "{block}");
        assert!(
            block.contains("\"user\": \"spiffe://td/ns/shop/manager/orders\""),
            "{block}"
        );
        assert!(block.contains("\"$JS.ACK.SY_shop_orders.>\""), "{block}");
        assert!(block.contains("\"_SY_INBOX.shop.orders.>\""), "{block}");
    }

    #[test]
    fn the_operator_reads_info_only_and_its_inbox_is_no_managers() {
        let p = operator_permissions();
        assert!(
            p.publish.iter().all(|s| s.contains(".INFO.")),
            "the operator may only read: {p:?}"
        );
        assert!(
            !p.subscribe.iter().any(|s| s.starts_with("_SY_INBOX")),
            "{p:?}"
        );
        assert!(!inbox_prefix("x", "y").starts_with(OPERATOR_INBOX));
    }

    #[test]
    fn a_user_with_nothing_to_publish_is_denied_everything_not_unrestricted() {
        // nats-server reads an empty allow list as no restriction at all.
        let p = permissions(&party(false, &[])).expect("ok");
        assert!(p.publish.is_empty());
        let block = authorization_block(&[("u".into(), p)]);
        let v: serde_json::Value =
            serde_json::from_str(block.trim_start_matches("authorization: ")).expect("json");
        let publish = &v["users"][0]["permissions"]["publish"];
        assert_eq!(publish, &serde_json::json!({ "deny": [">"] }), "{block}");
    }
}
