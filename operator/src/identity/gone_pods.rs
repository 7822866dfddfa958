//! Forgets the certificates of pods that are gone (the I/O shell of `leaves`). A pod deleted
//! before it renewed from a new issuer (a rollout, a scale-down, an eviction) uses its
//! certificate no more, yet the book would count it as the previous issuer's until the certificate
//! expires, a day by default, and the runbook's wait for
//! `switchyard_operator_mesh_leaves{issuer="previous"}` to be 0 would not end. Every [`EVERY`],
//! the namespaces of those pods are listed (metadata only, one call each, at most
//! [`MAX_NAMESPACES`] a round) and the pods they no longer hold are forgotten. Outside a
//! rotation no pod is the previous issuer's, and nothing is listed.

use super::MeshIdentity;
use super::leaves::PodKey;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often the pods a rotation waits on are looked up.
const EVERY: Duration = Duration::from_secs(5);
/// Most pods looked up a round.
const MAX_PODS: usize = 1_000;
/// Most namespaces listed a round (the rest wait for the next).
const MAX_NAMESPACES: usize = 20;

/// Looks up the previous issuer's pods every [`EVERY`], forever (the task is dropped at exit).
pub(crate) async fn run(client: kube::Client, identity: Arc<MeshIdentity>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let signer = identity.issuing.authority.signer();
        let waiting = by_namespace(identity.leaves.previous_pods(&signer, MAX_PODS));
        for (namespace, pods) in waiting.into_iter().take(MAX_NAMESPACES) {
            match present(&client, &namespace).await {
                Ok(present) => {
                    for pod in pods.into_iter().filter(|p| !present.contains(p)) {
                        tracing::debug!(
                            namespace,
                            pod,
                            "a pod of the previous mesh issuer is gone; its certificate no longer counts"
                        );
                        identity.leaves.forget(&(namespace.clone(), pod));
                    }
                }
                // Seen only during a rotation, every round until it works: the runbook's wait for
                // the previous issuer's leaves to reach 0 depends on it.
                Err(e) => {
                    tracing::warn!(namespace, error = %e, "listing the pods a mesh CA rotation waits on failed; trying again in 5 s");
                }
            }
        }
    }
}

/// The pods grouped by namespace.
fn by_namespace(pods: Vec<PodKey>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (namespace, pod) in pods {
        out.entry(namespace).or_default().push(pod);
    }
    out
}

/// The names of the pods `namespace` holds now.
async fn present(client: &kube::Client, namespace: &str) -> Result<HashSet<String>, kube::Error> {
    let list = Api::<Pod>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_grouped_by_namespace() {
        let key = |n: &str, p: &str| (n.to_owned(), p.to_owned());
        let grouped = by_namespace(vec![key("b", "x"), key("a", "y"), key("b", "z")]);
        assert_eq!(
            grouped.into_iter().collect::<Vec<_>>(),
            vec![
                ("a".to_owned(), vec!["y".to_owned()]),
                ("b".to_owned(), vec!["x".to_owned(), "z".to_owned()])
            ]
        );
    }
}
