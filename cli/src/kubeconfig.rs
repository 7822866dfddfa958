//! The API client of the cluster commands (`check`, `tap`, `top`), made as kubectl makes it:
//! `--kubeconfig`, else the files `KUBECONFIG` lists (merged in order, first value wins; a listed
//! file that does not exist is skipped, as kubectl skips it), else (KUBECONFIG unset)
//! `~/.kube/config`; inside a pod with none of those, the pod's service account. `--context` picks a
//! context other than the current one.

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// An API client, and the kubeconfig context it uses when a kubeconfig named one.
pub(crate) async fn client(
    explicit: Option<&Path>,
    context: Option<String>,
) -> anyhow::Result<(kube::Client, Option<String>)> {
    let options = KubeConfigOptions {
        context: context.clone(),
        ..KubeConfigOptions::default()
    };
    let kubeconfig = match explicit {
        Some(path) => Some((
            Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?,
            format!("--kubeconfig {}", path.display()),
        )),
        None => from_env_or_home(
            std::env::var_os("KUBECONFIG"),
            home_kubeconfig(),
            context.is_none() && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        )?,
    };
    let (config, current) = match kubeconfig {
        Some((kc, origin)) => {
            let current = kc.current_context.clone();
            let config = kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| origin.clone())?;
            (config, current)
        }
        None => (
            kube::Config::incluster().context(
                "no kubeconfig (none of KUBECONFIG's files, or no ~/.kube/config), and the pod's \
                 service account cannot be used",
            )?,
            None,
        ),
    };
    let client = kube::Client::try_from(config).context("building the API client")?;
    Ok((client, context.or(current)))
}

/// The kubeconfig of `KUBECONFIG` (its value `kubeconfig_env`) or of `home` (`~/.kube/config`),
/// with a name for errors; `None` only where kubectl would use the pod's service account (no
/// kubeconfig at all, `in_pod` with no context asked for).
fn from_env_or_home(
    kubeconfig_env: Option<OsString>,
    home: Option<PathBuf>,
    in_pod: bool,
) -> anyhow::Result<Option<(Kubeconfig, String)>> {
    // A set KUBECONFIG replaces ~/.kube/config, as for kubectl, even when none of its files exists.
    if let Some(list) = kubeconfig_env.filter(|l| !l.is_empty()) {
        return match from_list(&list)? {
            Some(kc) => Ok(Some((kc, "the kubeconfig of KUBECONFIG".to_owned()))),
            None if in_pod => Ok(None),
            None => anyhow::bail!(
                "KUBECONFIG ({}) lists no file that exists; pass --kubeconfig",
                list.to_string_lossy()
            ),
        };
    }
    match home.as_deref() {
        Some(path) if path.exists() => Ok(Some((
            Kubeconfig::read_from(path).with_context(|| path.display().to_string())?,
            path.display().to_string(),
        ))),
        _ if in_pod => Ok(None),
        _ => anyhow::bail!(
            "no kubeconfig: KUBECONFIG is not set and {} does not exist; pass --kubeconfig",
            home.map_or_else(|| "~/.kube/config".to_owned(), |p| p.display().to_string())
        ),
    }
}

/// The files a `KUBECONFIG` value lists that exist, merged in order; `None` when it lists none.
fn from_list(list: &OsStr) -> anyhow::Result<Option<Kubeconfig>> {
    let mut merged: Option<Kubeconfig> = None;
    for path in std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()) {
        if !path.exists() {
            continue;
        }
        let next = Kubeconfig::read_from(&path)
            .with_context(|| format!("{} (listed in KUBECONFIG)", path.display()))?;
        merged = Some(match merged {
            None => next,
            Some(m) => m
                .merge(next)
                .with_context(|| format!("merging {} (listed in KUBECONFIG)", path.display()))?,
        });
    }
    Ok(merged)
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube").join("config"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(context: &str, namespace: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Config
current-context: {context}
clusters:
  - name: c-{context}
    cluster: {{server: "https://127.0.0.1:1"}}
users:
  - name: u-{context}
    user: {{token: "t"}}
contexts:
  - name: {context}
    context: {{cluster: c-{context}, user: u-{context}, namespace: {namespace}}}
"#
        )
    }

    #[test]
    fn a_kubeconfig_list_skips_missing_files_and_merges_the_rest_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, config("first", "ns-a")).expect("write");
        std::fs::write(&b, config("second", "ns-b")).expect("write");
        let missing = dir.path().join("missing");
        let list = std::env::join_paths([&missing, &a, &b]).expect("joins");
        let kc = from_list(&list).expect("reads").expect("two files exist");
        assert_eq!(kc.current_context.as_deref(), Some("first"), "first wins");
        let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
        let none = std::env::join_paths([&missing]).expect("joins");
        assert!(from_list(&none).expect("reads").is_none());
        assert!(from_list(OsStr::new("")).expect("reads").is_none());
    }

    #[test]
    fn a_listed_file_that_is_not_a_kubeconfig_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "clusters: [not, a, kubeconfig").expect("write");
        let list = std::env::join_paths([&bad]).expect("joins");
        let e = from_list(&list).expect_err("unparsable");
        assert!(
            format!("{e:#}").contains("bad (listed in KUBECONFIG)"),
            "{e:#}"
        );
    }

    const TWO_CONTEXTS: &str = r#"apiVersion: v1
kind: Config
current-context: first
clusters:
  - name: c
    cluster: {server: "https://127.0.0.1:1"}
users:
  - name: u
    user: {token: "t"}
contexts:
  - name: first
    context: {cluster: c, user: u, namespace: ns-first}
  - name: second
    context: {cluster: c, user: u, namespace: ns-second}
"#;

    #[tokio::test]
    async fn the_context_is_the_current_one_or_the_one_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, TWO_CONTEXTS).expect("write");
        let (api, context) = client(Some(&path), None).await.expect("a client");
        assert_eq!(context.as_deref(), Some("first"));
        assert_eq!(api.default_namespace(), "ns-first");
        let (api, context) = client(Some(&path), Some("second".into()))
            .await
            .expect("a client");
        assert_eq!(context.as_deref(), Some("second"));
        assert_eq!(api.default_namespace(), "ns-second");
        let Err(e) = client(Some(&path), Some("third".into())).await else {
            panic!("a context the kubeconfig does not have was taken");
        };
        assert!(format!("{e:#}").contains("third"), "{e:#}");
        let Err(e) = client(Some(&dir.path().join("missing")), None).await else {
            panic!("a kubeconfig that does not exist was taken");
        };
        assert!(format!("{e:#}").contains("missing"), "{e:#}");
    }

    #[test]
    fn a_set_kubeconfig_replaces_the_home_one_even_when_its_files_are_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home-config");
        std::fs::write(&home, config("home", "ns-home")).expect("write");
        let listed = dir.path().join("listed");
        std::fs::write(&listed, config("listed", "ns-listed")).expect("write");
        let list = |paths: &[&Path]| Some(std::env::join_paths(paths).expect("joins"));
        let (kc, _) = from_env_or_home(list(&[&listed]), Some(home.clone()), false)
            .expect("reads")
            .expect("a kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("listed"));
        let missing = dir.path().join("missing");
        let e = from_env_or_home(list(&[&missing]), Some(home.clone()), false)
            .expect_err("KUBECONFIG set, none of its files there");
        assert!(format!("{e:#}").contains("KUBECONFIG"), "{e:#}");
        assert!(
            from_env_or_home(list(&[&missing]), Some(home.clone()), true)
                .expect("in a pod")
                .is_none(),
            "the service account"
        );
        let (kc, _) = from_env_or_home(None, Some(home.clone()), false)
            .expect("reads")
            .expect("the home kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("home"));
        let (kc, _) = from_env_or_home(Some(OsString::new()), Some(home), false)
            .expect("reads")
            .expect("an empty KUBECONFIG is unset");
        assert_eq!(kc.current_context.as_deref(), Some("home"));
        assert!(from_env_or_home(None, Some(missing), false).is_err());
    }
}
