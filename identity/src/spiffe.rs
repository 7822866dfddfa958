//! SPIFFE-style workload identities (pure): `spiffe://<trust domain>/ns/<namespace>/<kind>/<name>`,
//! the one URI SAN of every certificate the mesh issues. The kind says what the workload is (a Router's
//! pods, a Manager's pods, the operator), the name which one; the pod itself is the certificate's
//! subject common name, so the control plane can tell pods of one Manager apart.

use std::fmt;

/// What a workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A Router's sidecars (router role).
    Router,
    /// A Manager's sidecars (manager role).
    Manager,
    /// The operator (control plane and certificate issuer).
    Operator,
    /// The JetStream server of durable delivery: a server the sidecars connect to, never a
    /// workload the identity service certifies.
    JetStream,
}

impl Kind {
    /// The path segment: `router`, `manager`, `operator`, `jetstream`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Router => "router",
            Kind::Manager => "manager",
            Kind::Operator => "operator",
            Kind::JetStream => "jetstream",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        match s {
            "router" => Some(Kind::Router),
            "manager" => Some(Kind::Manager),
            "operator" => Some(Kind::Operator),
            "jetstream" => Some(Kind::JetStream),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One workload identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpiffeId {
    /// The trust domain, e.g. `cluster.local`.
    pub trust_domain: String,
    /// Namespace of the workload.
    pub namespace: String,
    /// What it is.
    pub kind: Kind,
    /// The Router's, Manager's or operator's name.
    pub name: String,
}

/// A string that is not a mesh identity; the message says which part is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{uri:?} is not a mesh identity: {why}")]
pub struct ParseError {
    /// The input.
    pub uri: String,
    /// What is wrong.
    pub why: &'static str,
}

/// Longest identity URI accepted (SPIFFE's own limit is 2048).
pub const MAX_URI: usize = 2048;

/// Whether `s` is a DNS-1123 label (namespaces, Router and Manager names) or, with dots, a
/// subdomain (trust domains).
fn dns(s: &str, dots: bool) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        && (dots || !s.contains('.'))
}

impl SpiffeId {
    /// An identity; the parts are checked so that [`SpiffeId::uri`] always parses back.
    pub fn new(
        trust_domain: &str,
        namespace: &str,
        kind: Kind,
        name: &str,
    ) -> Result<SpiffeId, ParseError> {
        let id = SpiffeId {
            trust_domain: trust_domain.to_owned(),
            namespace: namespace.to_owned(),
            kind,
            name: name.to_owned(),
        };
        id.check()?;
        Ok(id)
    }

    fn check(&self) -> Result<(), ParseError> {
        let bad = |why| ParseError {
            uri: self.uri(),
            why,
        };
        if !dns(&self.trust_domain, true) {
            return Err(bad(
                "the trust domain must be a lowercase DNS name (e.g. cluster.local)",
            ));
        }
        if !dns(&self.namespace, false) {
            return Err(bad("the namespace must be a DNS label"));
        }
        if !dns(&self.name, false) {
            return Err(bad("the name must be a DNS label"));
        }
        Ok(())
    }

    /// `spiffe://<trust domain>/ns/<namespace>/<kind>/<name>`.
    pub fn uri(&self) -> String {
        format!(
            "spiffe://{}/ns/{}/{}/{}",
            self.trust_domain, self.namespace, self.kind, self.name
        )
    }

    /// Parses an identity URI.
    pub fn parse(uri: &str) -> Result<SpiffeId, ParseError> {
        let bad = |why| ParseError {
            uri: uri.chars().take(MAX_URI).collect(),
            why,
        };
        if uri.len() > MAX_URI {
            return Err(bad("longer than 2048 bytes"));
        }
        let rest = uri
            .strip_prefix("spiffe://")
            .ok_or_else(|| bad("it does not start with spiffe://"))?;
        let mut parts = rest.split('/');
        let (Some(td), Some("ns"), Some(ns), Some(kind), Some(name), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad(
                "the path must be /ns/<namespace>/<router|manager|operator|jetstream>/<name>",
            ));
        };
        let kind = Kind::parse(kind)
            .ok_or_else(|| bad("the kind must be router, manager, operator or jetstream"))?;
        let id = SpiffeId {
            trust_domain: td.to_owned(),
            namespace: ns.to_owned(),
            kind,
            name: name.to_owned(),
        };
        id.check().map_err(|e| bad(e.why))?;
        Ok(id)
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        let id = SpiffeId::new("cluster.local", "shop", Kind::Manager, "handlers").expect("valid");
        assert_eq!(id.uri(), "spiffe://cluster.local/ns/shop/manager/handlers");
        assert_eq!(SpiffeId::parse(&id.uri()), Ok(id));
        let op =
            SpiffeId::parse("spiffe://td/ns/switchyard-system/operator/switchyard").expect("op");
        assert_eq!(op.kind, Kind::Operator);
    }

    #[test]
    fn bad_uris_say_what_is_wrong() {
        for (uri, part) in [
            ("https://cluster.local/ns/a/router/b", "spiffe://"),
            ("spiffe://cluster.local/ns/a/router", "path"),
            ("spiffe://cluster.local/ns/a/router/b/c", "path"),
            ("spiffe://cluster.local/ns/a/pod/b", "kind"),
            ("spiffe://cluster.local/ns/A/router/b", "namespace"),
            ("spiffe://cluster.local/ns/a/router/b.c", "name"),
            ("spiffe://Cluster/ns/a/router/b", "trust domain"),
            ("spiffe:///ns/a/router/b", "trust domain"),
        ] {
            let e = SpiffeId::parse(uri).expect_err(uri);
            assert!(e.to_string().contains(part), "{uri}: {e}");
        }
        assert!(SpiffeId::parse(&"a".repeat(3000)).is_err());
        assert!(SpiffeId::new("cluster.local", "a", Kind::Router, "-x").is_err());
    }
}
