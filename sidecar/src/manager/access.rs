//! Who may open frame connections to this manager sidecar (pure): by default its Router and every
//! Manager of its namespace (their relays and dead letters); `spec.allowFrom` replaces that list.
//! Checked on the identity of the client's certificate, after the mTLS handshake proved it.

use switchyard_crds::manager::{AllowFrom, WorkloadKind};
use switchyard_identity::{Kind, SpiffeId};

/// One allowed workload, or every workload of a kind (`name: None`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    kind: Kind,
    namespace: String,
    name: Option<String>,
}

/// The allowed workloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    rules: Vec<Rule>,
}

impl Access {
    /// The access of a Manager in `namespace` whose Router is `router`, with its `allowFrom`.
    pub(crate) fn new(namespace: &str, router: &str, allow_from: Option<&[AllowFrom]>) -> Access {
        let rules = match allow_from {
            None => vec![
                Rule {
                    kind: Kind::Router,
                    namespace: namespace.to_owned(),
                    name: Some(router.to_owned()),
                },
                Rule {
                    kind: Kind::Manager,
                    namespace: namespace.to_owned(),
                    name: None,
                },
            ],
            Some(list) => list
                .iter()
                .map(|a| Rule {
                    kind: match a.kind {
                        WorkloadKind::Router => Kind::Router,
                        WorkloadKind::Manager => Kind::Manager,
                    },
                    namespace: a.namespace.clone().unwrap_or_else(|| namespace.to_owned()),
                    name: (a.name != "*").then(|| a.name.clone()),
                })
                .collect(),
        };
        Access { rules }
    }

    /// Whether `peer` may connect, this sidecar being in `trust_domain`.
    pub(crate) fn allows(&self, peer: &SpiffeId, trust_domain: &str) -> bool {
        peer.trust_domain == trust_domain
            && self.rules.iter().any(|r| {
                r.kind == peer.kind
                    && r.namespace == peer.namespace
                    && r.name.as_ref().is_none_or(|n| *n == peer.name)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ns: &str, kind: Kind, name: &str) -> SpiffeId {
        SpiffeId::new("td", ns, kind, name).expect("id")
    }

    #[test]
    fn by_default_the_router_and_the_namespaces_managers() {
        let a = Access::new("shop", "edge", None);
        assert!(a.allows(&id("shop", Kind::Router, "edge"), "td"));
        assert!(a.allows(&id("shop", Kind::Manager, "billing"), "td"));
        assert!(!a.allows(&id("shop", Kind::Router, "other"), "td"));
        assert!(!a.allows(&id("prod", Kind::Manager, "billing"), "td"));
        assert!(!a.allows(&id("prod", Kind::Router, "edge"), "td"));
        assert!(!a.allows(&id("shop", Kind::Operator, "x"), "td"));
        assert!(!a.allows(&id("shop", Kind::Router, "edge"), "other.td"));
    }

    #[test]
    fn allow_from_narrows_and_widens() {
        let list: Vec<AllowFrom> = serde_json::from_value(serde_json::json!([
            {"kind": "Router", "name": "edge"},
            {"kind": "Manager", "name": "*", "namespace": "jobs"},
        ]))
        .expect("list");
        let a = Access::new("shop", "edge", Some(&list));
        assert!(a.allows(&id("shop", Kind::Router, "edge"), "td"));
        assert!(
            !a.allows(&id("shop", Kind::Manager, "billing"), "td"),
            "narrowed"
        );
        assert!(
            a.allows(&id("jobs", Kind::Manager, "runner"), "td"),
            "widened"
        );
        assert!(
            !Access::new("shop", "edge", Some(&[])).allows(&id("shop", Kind::Router, "edge"), "td")
        );
    }
}
