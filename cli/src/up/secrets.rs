//! The Secrets a Router references, taken from `kind: Secret` documents of the same file and laid
//! out as the operator mounts them: `<dir>/<secret name>/<key>`. Pure; `mod.rs` writes the files
//! (folders 0700, files 0600).

use anyhow::bail;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use switchyard_crds::Router;

/// The files of the Secrets `router` references: path and content. A Secret missing from `secrets`
/// is an error naming it and the Router.
pub fn files(
    router: &Router,
    secrets: &[Secret],
    dir: &Path,
) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut out = Vec::new();
    for name in switchyard_operator::render::secrets::referenced(&router.spec) {
        let Some(secret) = secrets.iter().find(|s| s.name_any() == name) else {
            bail!(
                "Router {}: Secret {name:?} is referenced but not in the file; add a `kind: Secret` document named {name:?}",
                router.name_any()
            );
        };
        // As the API server does: stringData entries win over data entries of the same key.
        let mut values: BTreeMap<&str, &[u8]> = BTreeMap::new();
        for (k, v) in secret.data.iter().flatten() {
            values.insert(k, &v.0);
        }
        for (k, v) in secret.string_data.iter().flatten() {
            values.insert(k, v.as_bytes());
        }
        for (key, value) in values {
            let safe = !key.is_empty()
                && key != "."
                && key != ".."
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !safe {
                bail!("Secret {name:?}: key {key:?} is not a valid Secret key");
            }
            out.push((dir.join(&name).join(key), value.to_vec()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objs(yaml: &str) -> switchyard_crds::yaml::Objects {
        switchyard_crds::yaml::parse_for_local_run(yaml).expect("yaml")
    }

    const ROUTER: &str = "apiVersion: switchyard.dev/v1alpha1\nkind: Router\nmetadata: {name: edge}\nspec:\n  listeners: {http: {port: 8080}}\n  routes: [{event: a, http: {method: GET, path: /a}}]\n  middleware:\n    - auth: {apiKey: {keysSecretRef: {name: api-keys, key: keys}}}\n";

    #[test]
    fn referenced_secret_becomes_files() {
        let o = objs(&format!(
            "{ROUTER}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: api-keys}}\ndata: {{keys: a2V5LW9uZQo=}}\nstringData: {{extra: x}}\n"
        ));
        let f = files(&o.routers[0], &o.secrets, Path::new("/s")).expect("files");
        assert_eq!(
            f,
            vec![
                (PathBuf::from("/s/api-keys/extra"), b"x".to_vec()),
                (PathBuf::from("/s/api-keys/keys"), b"key-one\n".to_vec()),
            ]
        );
    }

    #[test]
    fn an_oidc_issuer_ca_becomes_a_file() {
        let o = objs(concat!(
            "apiVersion: switchyard.dev/v1alpha1\nkind: Router\nmetadata: {name: edge}\nspec:\n",
            "  listeners: {http: {port: 8080}}\n  routes: [{event: a, http: {method: GET, path: /a}}]\n",
            "  middleware:\n    - auth: {oidc: {issuer: \"https://id.example.com\", audiences: [api],\n",
            "        caSecretRef: {name: issuer-ca, key: ca.crt}}}\n---\n",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: issuer-ca}\nstringData: {ca.crt: pem}\n",
        ));
        let f = files(&o.routers[0], &o.secrets, Path::new("/s")).expect("files");
        assert_eq!(
            f,
            vec![(PathBuf::from("/s/issuer-ca/ca.crt"), b"pem".to_vec())]
        );
    }

    #[test]
    fn a_missing_secret_is_named() {
        let o = objs(ROUTER);
        let err = files(&o.routers[0], &o.secrets, Path::new("/s"))
            .expect_err("missing")
            .to_string();
        assert!(
            err.contains("\"api-keys\"") && err.contains("Router edge"),
            "{err}"
        );
    }
}
