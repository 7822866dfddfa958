//! The subscribers of a routing table (Managers that observe a type beside its handler) and which
//! of them an event reaches. The choice is pure ([`Spec::wants`], [`pick`]); the pools are the
//! table's.

use super::pool::Pool;
use std::sync::Arc;
use switchyard_crds::subscription::{Filter, Observe, pattern_matches};
use switchyard_protocol::durable::DurableRoute;

/// One subscription as the sidecar holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The route's key, `<event>@<manager>`: the subscription's name in metrics and `/routes`.
    pub key: Arc<str>,
    /// The subscribing Manager.
    pub manager: Arc<str>,
    /// The type or pattern observed.
    pub event: String,
    /// What is observed.
    pub observe: Vec<Observe>,
    /// The attribute filter; `None`: every event of the type.
    pub filter: Option<Filter>,
    /// Set for a durable subscription: its copies are stored in the subscriber's stream, with the
    /// subscriber Manager's ordering key and stream limits.
    pub durable: Option<DurableRoute>,
}

/// A subscriber: its subscription and the pool of its Manager's pods.
pub(crate) struct Sub {
    /// The subscription.
    pub spec: Spec,
    /// Its Manager's pods.
    pub pool: Arc<Pool>,
}

/// The CloudEvents attributes a filter sees of an event on its way: `type`, `id`, `source` (the
/// sidecar it leaves from, `/switchyard/<namespace>/<Router or Manager>`) and `datacontenttype`
/// when it is not JSON's default.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attrs<'a> {
    /// `type`.
    pub event: &'a str,
    /// `id`.
    pub id: &'a str,
    /// `source`.
    pub source: &'a str,
    /// `datacontenttype`, when set.
    pub content_type: Option<&'a str>,
}

impl<'a> Attrs<'a> {
    /// The attribute named `name`, if the event carries it.
    pub(crate) fn get(&self, name: &str) -> Option<&'a str> {
        match name {
            "type" => Some(self.event),
            "id" => Some(self.id),
            "source" => Some(self.source),
            "datacontenttype" => self.content_type,
            _ => None,
        }
    }
}

impl Spec {
    /// Whether this subscription takes `what` of an event with attributes `attrs`.
    pub(crate) fn wants(&self, what: Observe, attrs: &Attrs<'_>) -> bool {
        self.observe.contains(&what)
            && pattern_matches(&self.event, attrs.event)
            && self
                .filter
                .as_ref()
                .is_none_or(|f| f.matches(&|name| attrs.get(name)))
    }
}

/// The indices of `specs` that take `what` of the event, one per Manager (the first of its
/// matching subscriptions), leaving out `handler` (the type's handling Manager, which gets the
/// event as its handler: a publish reaches every Manager once).
pub(crate) fn pick(
    specs: impl IntoIterator<Item = impl std::ops::Deref<Target = Spec>>,
    what: Observe,
    attrs: &Attrs<'_>,
    handler: Option<&str>,
) -> Vec<usize> {
    let mut seen: Vec<Arc<str>> = Vec::new();
    let mut out = Vec::new();
    for (i, s) in specs.into_iter().enumerate() {
        if handler == Some(&*s.manager) || seen.contains(&s.manager) || !s.wants(what, attrs) {
            continue;
        }
        seen.push(s.manager.clone());
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(manager: &str, event: &str, observe: &[Observe], filter: serde_json::Value) -> Spec {
        Spec {
            key: Arc::from(format!("{event}@{manager}")),
            manager: Arc::from(manager),
            event: event.into(),
            observe: observe.to_vec(),
            filter: (!filter.is_null()).then(|| serde_json::from_value(filter).expect("filter")),
            durable: None,
        }
    }

    const ATTRS: Attrs<'static> = Attrs {
        event: "orders.created",
        id: "abc",
        source: "/switchyard/shop/web",
        content_type: None,
    };

    fn picked(specs: &[Spec], what: Observe, handler: Option<&str>) -> Vec<String> {
        pick(specs.iter(), what, &ATTRS, handler)
            .into_iter()
            .map(|i| specs[i].key.to_string())
            .collect()
    }

    #[test]
    fn every_matching_manager_once_and_never_the_handler() {
        let p = [Observe::Published];
        let specs = [
            spec("billing", "orders.created", &p, serde_json::Value::Null),
            spec("billing", "orders.*", &p, serde_json::Value::Null),
            spec("shipping", "orders.*", &p, serde_json::Value::Null),
            spec("orders", "orders.created", &p, serde_json::Value::Null),
            spec("audit", "payments.*", &p, serde_json::Value::Null),
        ];
        assert_eq!(
            picked(&specs, Observe::Published, Some("orders")),
            ["orders.created@billing", "orders.*@shipping"]
        );
    }

    #[test]
    fn filters_and_what_is_observed_narrow_the_choice() {
        let specs = [
            spec(
                "eu",
                "orders.created",
                &[Observe::Published],
                serde_json::json!({"suffix": {"source": "/web"}}),
            ),
            spec(
                "us",
                "orders.created",
                &[Observe::Published],
                serde_json::json!({"exact": {"source": "/switchyard/shop/app"}}),
            ),
            spec(
                "watch",
                "*",
                &[Observe::Requests, Observe::Responses],
                serde_json::Value::Null,
            ),
        ];
        assert_eq!(
            picked(&specs, Observe::Published, None),
            ["orders.created@eu"]
        );
        assert_eq!(picked(&specs, Observe::Requests, None), ["*@watch"]);
        assert_eq!(picked(&specs, Observe::Responses, None), ["*@watch"]);
    }

    #[test]
    fn a_filter_on_an_attribute_the_event_lacks_matches_nothing() {
        let specs = [spec(
            "x",
            "orders.created",
            &[Observe::Published],
            serde_json::json!({"exact": {"subject": "a"}}),
        )];
        assert!(picked(&specs, Observe::Published, None).is_empty());
    }
}
