//! The Secret the chart's JetStream servers mount (pure): their TLS certificate from the mesh CA,
//! the trust bundle they check clients against, and the `authorization` block of users. The
//! servers' reloader signals nats-server when the kubelet updates the mounted files.

use crate::render::meta;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_identity::ca::IssueError;
use switchyard_identity::{Ca, Kind, SpiffeId, Subject};

/// The server's certificate chain (PEM), as nats-server's `cert_file`.
pub const CERT_KEY: &str = "tls.crt";
/// Its private key (PEM), as `key_file`.
pub const KEY_KEY: &str = "tls.key";
/// The mesh's trust bundle (PEM), as `ca_file`: clients' certificates must chain to it.
pub const TRUST_KEY: &str = "ca.crt";
/// The included `authorization` block.
pub const ACCESS_KEY: &str = "access.conf";
/// When the certificate is to be renewed (Unix seconds): a new leader keeps a certificate that
/// is not due, rather than re-keying the servers on every failover.
const RENEW_AT: &str = "switchyard.dev/renew-at";
/// Which trust bundle issued it: a rotated CA means a new certificate at once.
const TRUST: &str = "switchyard.dev/trust";
/// Which DNS names it carries: a changed list of servers means a new certificate at once.
const NAMES: &str = "switchyard.dev/server-names";
/// Name of the servers in their identity, `spiffe://<td>/ns/<namespace>/jetstream/nats`.
pub(crate) const SERVER_NAME: &str = "nats";

/// The servers' certificate and when to renew it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCert {
    /// Leaf first, PEM.
    pub chain: String,
    /// Private key, PEM.
    pub key: String,
    /// When to renew: two thirds into its life.
    pub renew_at: SystemTime,
    /// The DNS names it carries besides the servers' SPIFFE identity.
    pub names: Vec<String>,
}

/// A new certificate for the JetStream servers of `namespace`, naming their SPIFFE identity and
/// the DNS `names` their cluster routes dial each other by, valid from `now` for `lifetime`.
pub fn issue(
    ca: &Ca,
    trust_domain: &str,
    namespace: &str,
    names: &[String],
    lifetime: Duration,
    now: SystemTime,
) -> Result<ServerCert, IssueError> {
    let id = SpiffeId::new(trust_domain, namespace, Kind::JetStream, SERVER_NAME)
        .map_err(|e| IssueError::Sign(e.to_string()))?;
    let subject = Subject {
        id,
        pod: "switchyard-nats".into(),
    };
    let (issued, key) = ca.issue_with_new_key_and_names(&subject, names, lifetime, now)?;
    Ok(ServerCert {
        chain: switchyard_identity::pem::certs(&issued.chain),
        key: key.serialize_pem(),
        renew_at: now + switchyard_identity::renew_in(now, issued.not_after),
        names: names.to_vec(),
    })
}

/// The certificate kept in `existing` when it was issued under `trust` for `names` and is not due
/// at `now`.
pub(super) fn reusable(
    existing: &Secret,
    trust: &str,
    names: &[String],
    now: SystemTime,
) -> Option<ServerCert> {
    let notes = existing.metadata.annotations.as_ref()?;
    if notes.get(TRUST).map(String::as_str) != Some(meta::hash(trust).as_str()) {
        return None;
    }
    if notes.get(NAMES).map(String::as_str) != Some(names.join(",").as_str()) {
        return None;
    }
    let renew_at = UNIX_EPOCH + Duration::from_secs(notes.get(RENEW_AT)?.parse().ok()?);
    if renew_at <= now {
        return None;
    }
    let data = existing.data.as_ref()?;
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Some(ServerCert {
        chain: text(CERT_KEY)?,
        key: text(KEY_KEY)?,
        renew_at,
        names: names.to_vec(),
    })
}

/// The Secret `namespace/name` holding `cert`, the `trust` bundle and the `access` block.
pub(super) fn secret(
    namespace: &str,
    name: &str,
    cert: &ServerCert,
    trust: &str,
    access: &str,
) -> Secret {
    let renew_at = cert
        .renew_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let data: BTreeMap<String, ByteString> = [
        (CERT_KEY, cert.chain.as_str()),
        (KEY_KEY, cert.key.as_str()),
        (TRUST_KEY, trust),
        (ACCESS_KEY, access),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [
                    ("app.kubernetes.io/managed-by", crate::FIELD_MANAGER),
                    ("app.kubernetes.io/component", "jetstream-access"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            annotations: Some(
                [
                    (RENEW_AT.to_owned(), renew_at.to_string()),
                    (TRUST.to_owned(), meta::hash(trust)),
                    (NAMES.to_owned(), cert.names.join(",")),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> Ca {
        Ca::generate("td", SystemTime::now()).expect("ca").0
    }

    #[test]
    fn the_servers_certificate_names_them_as_the_sidecars_expect() {
        let ca = ca();
        let now = SystemTime::now();
        let cert =
            issue(&ca, "td", "switchyard", &[], Duration::from_secs(3600), now).expect("cert");
        let chain = switchyard_identity::pem::parse_certs(cert.chain.as_bytes()).expect("pem");
        let peer = switchyard_identity::peer::identity(&chain[0]).expect("spiffe id");
        assert!(
            switchyard_identity::tls::Expect::JetStream.matches(&peer.id),
            "{peer:?}"
        );
        assert_eq!(cert.renew_at, now + Duration::from_secs(2400));
    }

    #[test]
    fn a_kept_certificate_is_reused_until_due_or_until_the_ca_or_the_names_change() {
        let ca = ca();
        let now = SystemTime::now();
        let names = vec!["sy-nats-0.sy-nats.sy.svc".to_owned()];
        let cert = issue(
            &ca,
            "td",
            "switchyard",
            &names,
            Duration::from_secs(3600),
            now,
        )
        .expect("cert");
        let s = secret(
            "switchyard",
            "switchyard-nats-access",
            &cert,
            "TRUST",
            "authorization: {}\n",
        );
        let kept = reusable(&s, "TRUST", &names, now).expect("kept");
        assert_eq!(kept.chain, cert.chain);
        assert_eq!(kept.key, cert.key);
        assert_eq!(kept.names, names);
        assert!(reusable(&s, "TRUST", &names, now + Duration::from_secs(2401)).is_none());
        assert!(reusable(&s, "OTHER", &names, now).is_none());
        let more = vec![names[0].clone(), "sy-nats-1.sy-nats.sy.svc".to_owned()];
        assert!(reusable(&s, "TRUST", &more, now).is_none());
        let data = s.data.expect("data");
        assert_eq!(data[ACCESS_KEY].0, b"authorization: {}\n");
        assert_eq!(data[TRUST_KEY].0, b"TRUST");
    }
}
