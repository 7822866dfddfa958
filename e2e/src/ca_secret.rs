//! A mesh CA Secret as a platform team rotates it (docs/ca-rotation.md): an issuer made under a
//! root, as cert-manager keeps one, and entries written into the Secret the operator follows.

use anyhow::{Context, Result};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::time::{Duration, SystemTime};
use switchyard_identity::ca::CaPem;

/// An issuer under `root` valid for `days`: certificate and key, PEM.
pub fn issuer_for(root: &CaPem, days: u64) -> Result<(String, String)> {
    let root_issuer = rcgen::Issuer::from_ca_cert_pem(&root.cert, KeyPair::from_pem(&root.key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "switchyard issuer (e2e)");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + Duration::from_secs(days * 24 * 3600)).into();
    let cert = params.signed_by(&key, &root_issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Entry `key` of Secret `name`, as text.
pub async fn entry(secrets: &Api<Secret>, name: &str, key: &str) -> Result<Option<String>> {
    let s = secrets
        .get(name)
        .await
        .with_context(|| format!("reading the CA Secret {name}"))?;
    Ok(s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
}

/// Writes `entries` into Secret `name` (the others kept).
pub async fn write(secrets: &Api<Secret>, name: &str, entries: &[(&str, &str)]) -> Result<()> {
    let mut s = secrets
        .get(name)
        .await
        .with_context(|| format!("reading the CA Secret {name}"))?;
    let data = s.data.get_or_insert_default();
    for (k, v) in entries {
        data.insert((*k).to_owned(), ByteString(v.as_bytes().to_vec()));
    }
    secrets
        .replace(name, &PostParams::default(), &s)
        .await
        .with_context(|| format!("writing the CA Secret {name}"))?;
    Ok(())
}
