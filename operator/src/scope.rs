//! Which namespaces the operator watches and writes in (`--watch-namespaces`): every namespace, or a
//! list. Pure: it parses the flag and hands out the `Api`s each watch, list and write goes through.
//!
//! A list gets one `Api` (so one watcher, one reflector store) per namespace, never one store fed by
//! several namespaces' watchers: a watcher's relist (`Init` .. `InitDone`) replaces its whole store,
//! so a merged store would lose the other namespaces' objects at every relist. [`Stores`] is the read
//! view over the per-namespace stores.

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;

/// The namespaces watched.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every namespace (cluster-wide watches; the default).
    #[default]
    All,
    /// Only these (never empty), in name order.
    Namespaces(BTreeSet<String>),
}

/// Where one watcher looks: every namespace, or one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Every namespace.
    All,
    /// One namespace.
    Namespace(String),
}

impl Scope {
    /// Parses `--watch-namespaces`: comma-separated namespace names, blanks around them ignored;
    /// empty means every namespace.
    pub fn parse(text: &str) -> Result<Scope, NotANamespace> {
        let mut names = BTreeSet::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            check_name(name)?;
            names.insert(name.to_owned());
        }
        Ok(if names.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(names)
        })
    }

    /// One target per watcher to run: `All` alone, or each namespace.
    pub fn targets(&self) -> Vec<Target> {
        match self {
            Scope::All => vec![Target::All],
            Scope::Namespaces(names) => names.iter().cloned().map(Target::Namespace).collect(),
        }
    }

    /// Whether objects in `namespace` are watched.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(names) => names.contains(namespace),
        }
    }

    /// One `Api` per target.
    pub fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        self.targets()
            .iter()
            .map(|t| t.api(client.clone()))
            .collect()
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::All => f.write_str("all namespaces"),
            Scope::Namespaces(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                write!(f, "namespaces {}", names.join(","))
            }
        }
    }
}

impl Target {
    /// The `Api` of this target: cluster-wide, or namespaced.
    pub fn api<K>(&self, client: Client) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        match self {
            Target::All => Api::all(client),
            Target::Namespace(ns) => Api::namespaced(client, ns),
        }
    }

    /// Whether an object in `namespace` is seen by this target's watcher.
    pub fn holds(&self, namespace: &str) -> bool {
        match self {
            Target::All => true,
            Target::Namespace(ns) => ns == namespace,
        }
    }
}

/// A `--watch-namespaces` entry that is not a namespace name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a namespace name (lower-case letters, digits and '-', at most 63, not starting or ending with '-')"
)]
pub struct NotANamespace(String);

/// A namespace name is a DNS label (RFC 1123): what the API server would refuse anyway, refused at
/// start with the name in the message.
fn check_name(name: &str) -> Result<(), NotANamespace> {
    let ok = name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(NotANamespace(name.to_owned()))
    }
}

/// A read view over one reflector store per target (see the module doc).
#[derive(Clone)]
pub(crate) struct Stores<K: Resource<DynamicType = ()> + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    stores: Vec<(Target, Store<K>)>,
}

impl<K> Stores<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The view over these stores.
    pub(crate) fn new(stores: Vec<(Target, Store<K>)>) -> Self {
        Stores { stores }
    }

    /// Every cached object of every store.
    pub(crate) fn state(&self) -> Vec<Arc<K>> {
        self.stores.iter().flat_map(|(_, s)| s.state()).collect()
    }

    /// The cached object `obj`, from the store of its namespace.
    pub(crate) fn get(&self, obj: &ObjectRef<K>) -> Option<Arc<K>> {
        let ns = obj.namespace.as_deref().unwrap_or_default();
        self.stores
            .iter()
            .find(|(t, _)| t.holds(ns))
            .and_then(|(_, s)| s.get(obj))
    }

    /// Waits until every store has been listed once; an error once one is dropped unlisted.
    pub(crate) async fn wait_until_ready(
        &self,
    ) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        for (_, s) in &self.stores {
            s.wait_until_ready().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use switchyard_crds::Manager;

    fn set(names: &[&str]) -> Scope {
        Scope::Namespaces(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn the_flag_is_a_comma_separated_list_and_empty_means_all() {
        assert_eq!(Scope::parse(""), Ok(Scope::All));
        assert_eq!(Scope::parse(" , "), Ok(Scope::All));
        assert_eq!(Scope::parse("team-a"), Ok(set(&["team-a"])));
        assert_eq!(
            Scope::parse("team-b, team-a,team-b,"),
            Ok(set(&["team-a", "team-b"]))
        );
        let e = Scope::parse("team-a,Team_B").expect_err("not a DNS label");
        assert!(e.to_string().contains("\"Team_B\""), "{e}");
        assert!(Scope::parse("-a").is_err());
        assert!(Scope::parse(&"a".repeat(64)).is_err());
        assert!(Scope::parse("a/b").is_err());
    }

    #[test]
    fn all_is_one_cluster_wide_target_and_a_list_one_target_per_namespace() {
        assert_eq!(Scope::All.targets(), vec![Target::All]);
        assert_eq!(
            set(&["b", "a"]).targets(),
            vec![Target::Namespace("a".into()), Target::Namespace("b".into())]
        );
        assert!(Scope::All.contains("anything"));
        assert!(set(&["a"]).contains("a"));
        assert!(!set(&["a"]).contains("b"));
        assert_eq!(Scope::All.to_string(), "all namespaces");
        assert_eq!(set(&["b", "a"]).to_string(), "namespaces a,b");
    }

    #[tokio::test]
    async fn the_apis_are_cluster_wide_or_namespaced() {
        // A client that is never called: building an `Api` does no I/O.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let urls = |s: &Scope| -> Vec<String> {
            s.apis::<Manager>(&client)
                .iter()
                .map(|a| a.resource_url().to_owned())
                .collect()
        };
        assert_eq!(
            urls(&Scope::All),
            ["/apis/switchyard.dev/v1alpha1/managers"]
        );
        assert_eq!(
            urls(&set(&["a", "b"])),
            [
                "/apis/switchyard.dev/v1alpha1/namespaces/a/managers",
                "/apis/switchyard.dev/v1alpha1/namespaces/b/managers"
            ]
        );
    }

    fn manager(ns: &str, name: &str) -> Manager {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "switchyard.dev/v1alpha1", "kind": "Manager",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "routerRef": {"name": "r"},
                "events": ["a.b"],
                "app": {"port": 8000},
                "template": {"spec": {"containers": [{"name": "app", "image": "app"}]}},
            },
        }))
        .expect("manager")
    }

    #[test]
    fn a_relist_of_one_namespace_keeps_the_other_namespaces_objects() {
        let (a, mut wa) = reflector::store::<Manager>();
        let (b, mut wb) = reflector::store::<Manager>();
        for (w, ns) in [(&mut wa, "a"), (&mut wb, "b")] {
            w.apply_watcher_event(&Event::Init);
            w.apply_watcher_event(&Event::InitApply(manager(ns, "m")));
            w.apply_watcher_event(&Event::InitDone);
        }
        let stores = Stores::new(vec![
            (Target::Namespace("a".into()), a),
            (Target::Namespace("b".into()), b),
        ]);
        assert_eq!(stores.state().len(), 2);
        // Namespace a relists empty: only its own Manager goes.
        wa.apply_watcher_event(&Event::Init);
        wa.apply_watcher_event(&Event::InitDone);
        let left = stores.state();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].metadata.namespace.as_deref(), Some("b"));
        assert!(stores.get(&ObjectRef::new("m").within("b")).is_some());
        assert!(stores.get(&ObjectRef::new("m").within("a")).is_none());
        assert!(stores.get(&ObjectRef::new("m").within("c")).is_none());
    }
}
