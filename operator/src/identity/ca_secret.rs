//! The mesh CA's key material in a Secret: one the user names (for instance cert-manager's, with
//! `tls.crt` and `tls.key` the issuer, `ca.crt` the trust anchors, several roots allowed), or
//! `switchyard-ca` in the operator's namespace, made on first start (a self-signed root that is
//! anchor and issuer at once). Replicas racing to make it converge on the first one written; a
//! deleted `switchyard-ca` is written back with the CA every replica holds, never a new one.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::time::SystemTime;
use switchyard_identity::Ca;

/// Name of the Secret the operator makes when none is given.
pub const DEFAULT_SECRET: &str = "switchyard-ca";

/// Why the CA cannot be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CaSecretError {
    /// The API call failed.
    #[error("CA Secret {namespace}/{name}: {source}")]
    Api {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The error.
        source: kube::Error,
    },
    /// A given Secret does not exist.
    #[error(
        "CA Secret {namespace}/{name} (--ca-secret) does not exist; create it (e.g. with cert-manager) or leave --ca-secret unset to have one made"
    )]
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The Secret's content is unusable.
    #[error("CA Secret {namespace}/{name}: {why}")]
    Content {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong.
        why: String,
    },
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// The CA in `secret` (`namespace/name`, for messages).
pub(crate) fn ca_of(secret: &Secret, namespace: &str, name: &str) -> Result<Ca, CaSecretError> {
    let bad = |why: String| CaSecretError::Content {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        why,
    };
    let cert = text(secret, "tls.crt").ok_or_else(|| bad("it has no tls.crt".into()))?;
    let key = text(secret, "tls.key").ok_or_else(|| bad("it has no tls.key".into()))?;
    let trust = text(secret, "ca.crt");
    Ca::from_pem(&cert, &key, trust.as_deref()).map_err(|e| bad(e.to_string()))
}

/// Loads the CA from Secret `namespace/name`; when `given` is false and it does not exist, makes
/// a root for `trust_domain` and stores it there first.
pub(crate) async fn load_or_create(
    client: &Client,
    namespace: &str,
    name: &str,
    given: bool,
    trust_domain: &str,
) -> Result<Ca, CaSecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api_err = |source| CaSecretError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    if let Some(s) = api.get_opt(name).await.map_err(api_err)? {
        return ca_of(&s, namespace, name);
    }
    if given {
        return Err(CaSecretError::Missing {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    let (ca, pem) =
        Ca::generate(trust_domain, SystemTime::now()).map_err(|e| CaSecretError::Content {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            why: e.to_string(),
        })?;
    let secret = made(
        namespace,
        name,
        BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(pem.cert.into_bytes())),
            ("tls.key".to_owned(), ByteString(pem.key.into_bytes())),
        ]),
    );
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "mesh CA made and stored");
            Ok(ca)
        }
        // Another replica stored one first: everyone uses that one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api.get_opt(name).await.map_err(api_err)?.ok_or_else(|| {
                CaSecretError::Missing {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                }
            })?;
            ca_of(&s, namespace, name)
        }
        Err(e) => Err(api_err(e)),
    }
}

/// The Secret the operator makes, holding `data`.
fn made(namespace: &str, name: &str, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                switchyard_protocol::labels::MANAGED_BY.to_owned(),
                crate::FIELD_MANAGER.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Writes back a deleted Secret the operator made, with `data` as it last held it (the CA every
/// replica signs with): a conflict means another replica did so first.
pub(crate) async fn restore(
    client: &Client,
    namespace: &str,
    name: &str,
    data: BTreeMap<String, ByteString>,
) -> Result<(), CaSecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api
        .create(&PostParams::default(), &made(namespace, name, data))
        .await
    {
        Ok(_) => {
            tracing::warn!(secret = %format!("{namespace}/{name}"), "the mesh CA Secret was deleted; written back with the CA in use");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(CaSecretError::Api {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    use switchyard_identity::ca::CaPem;

    fn secret(entries: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn issuer_under(root: &CaPem) -> (String, String) {
        let root_issuer = rcgen::Issuer::from_ca_cert_pem(
            &root.cert,
            KeyPair::from_pem(&root.key).expect("root key"),
        )
        .expect("root");
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.signed_by(&key, &root_issuer).expect("issuer");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_cert_manager_secret_is_an_issuer_with_several_anchors() {
        let now = SystemTime::now();
        let (_, old) = Ca::generate("td", now).expect("old root");
        let (_, new) = Ca::generate("td", now).expect("new root");
        let (cert, key) = issuer_under(&new);
        let bundle = format!("{}{}", old.cert, new.cert);
        let ca = ca_of(
            &secret(&[("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &bundle)]),
            "ns",
            "issuer",
        )
        .expect("ca");
        assert_eq!(ca.trust().len(), 2, "both roots are anchors");
        assert!(
            !ca.trust().contains(ca.issuer_cert()),
            "the issuer is no anchor"
        );
        // The operator's own kind: a self-signed root without ca.crt, anchor and issuer at once.
        let own = ca_of(
            &secret(&[("tls.crt", &old.cert), ("tls.key", &old.key)]),
            "ns",
            "switchyard-ca",
        )
        .expect("own");
        assert_eq!(own.trust(), std::slice::from_ref(own.issuer_cert()));
        let e = ca_of(&secret(&[("tls.crt", &cert)]), "ns", "issuer").expect_err("no key");
        assert!(
            e.to_string().contains("ns/issuer: it has no tls.key"),
            "{e}"
        );
    }
}
