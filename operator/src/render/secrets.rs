//! The Secrets a Router spec references (JWT key, OIDC issuer CA, API keys, TLS), mounted read-only into the router
//! pod at `<SECRETS_DIR>/<secret name>`, where the sidecar reads `<key>` files.

use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume, VolumeMount};
use std::collections::BTreeSet;
use switchyard_crds::router::RouterSpec;
use switchyard_protocol::config::SECRETS_DIR;

/// Names of the Secrets `spec` references, sorted and without repeats.
pub fn referenced(spec: &RouterSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    if let Some(tls) = &spec.listeners.tls {
        names.insert(tls.secret_name.clone());
    }
    for auth in spec.middleware.iter().filter_map(|m| m.auth.as_ref()) {
        if let Some(j) = &auth.jwt {
            names.insert(j.key_secret_ref.name.clone());
        }
        if let Some(ca) = auth.oidc.as_ref().and_then(|o| o.ca_secret_ref.as_ref()) {
            names.insert(ca.name.clone());
        }
        if let Some(k) = &auth.api_key {
            names.insert(k.keys_secret_ref.name.clone());
        }
    }
    names
}

/// One volume and one read-only mount per referenced Secret. Volume names are by position in the
/// sorted list, so they stay valid DNS labels whatever the Secret is called.
pub(crate) fn volumes(spec: &RouterSpec) -> (Vec<Volume>, Vec<VolumeMount>) {
    referenced(spec)
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let volume = format!("switchyard-secret-{i}");
            (
                Volume {
                    name: volume.clone(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(name.clone()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                VolumeMount {
                    name: volume,
                    mount_path: format!("{SECRETS_DIR}/{name}"),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
            )
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_reference_once() {
        let spec: RouterSpec = serde_json::from_value(json!({
            "listeners": {"http": {"port": 8080}, "tls": {"secretName": "edge-tls"}},
            "routes": [{"event": "a", "http": {"method": "GET", "path": "/a"}}],
            "middleware": [
                {"auth": {"jwt": {"algorithm": "HS256", "keySecretRef": {"name": "auth", "key": "hmac"}}}},
                {"auth": {"apiKey": {"keysSecretRef": {"name": "auth", "key": "keys"}}}},
                {"auth": {"oidc": {"issuer": "https://id.example.com", "audiences": ["api"],
                    "caSecretRef": {"name": "issuer-ca", "key": "ca.crt"}}}},
            ],
        }))
        .expect("spec");
        let (vols, mounts) = volumes(&spec);
        assert_eq!(vols.len(), 3);
        assert_eq!(mounts[0].mount_path, format!("{SECRETS_DIR}/auth"));
        assert_eq!(mounts[1].mount_path, format!("{SECRETS_DIR}/edge-tls"));
        assert_eq!(mounts[2].mount_path, format!("{SECRETS_DIR}/issuer-ca"));
        assert_eq!(
            vols[1]
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref()),
            Some("edge-tls")
        );
        assert!(mounts.iter().all(|m| m.read_only == Some(true)));
    }
}
