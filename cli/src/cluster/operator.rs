//! The installed operator, as its Deployment says: which replicas are ready, and the settings the
//! other checks need (the chart passes them as `--flag=value` arguments; unset ones take the
//! operator's defaults).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// The chart's label on the operator's Deployment and pods (NATS carries other names).
const SELECTOR: &str = "app.kubernetes.io/name=switchyard";
/// The operator's container in the chart.
const CONTAINER: &str = "operator";

/// What the checks read of the operator's Deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorDeployment {
    pub name: String,
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// The operator's image.
    pub image: String,
    /// Names of its pods that are Ready (the Lease holder should be one).
    pub ready_pods: Vec<String>,
    /// `--sidecar-image`.
    pub sidecar_image: String,
    pub leader_election: bool,
    pub lease_name: String,
    pub mesh_tls: bool,
    /// `--ca-secret`, or the Secret the operator makes.
    pub ca_secret: String,
}

/// The value of `--name` in `args` (`--name=value` or `--name value`).
pub fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix(name) {
            if let Some(v) = v.strip_prefix('=') {
                return Some(v);
            }
            if v.is_empty() {
                return it.next().map(String::as_str);
            }
        }
    }
    None
}

/// Reads the operator's settings from its Deployment (`None` when it has no operator container).
pub fn from_deployment(d: &Deployment, ready_pods: Vec<String>) -> Option<OperatorDeployment> {
    let spec = d.spec.as_ref()?;
    let container = spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?;
    let args = container.args.clone().unwrap_or_default();
    let on = |name: &str| flag(&args, name).is_none_or(|v| v != "false");
    Some(OperatorDeployment {
        name: d.name_any(),
        desired: spec.replicas.unwrap_or(1),
        ready: d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        image: container.image.clone().unwrap_or_default(),
        ready_pods,
        sidecar_image: flag(&args, "--sidecar-image")
            .unwrap_or("ghcr.io/switchyard-dev/switchyard-sidecar:0.1.0")
            .to_owned(),
        leader_election: on("--leader-election"),
        lease_name: flag(&args, "--lease-name")
            .unwrap_or("switchyard-operator")
            .to_owned(),
        mesh_tls: on("--mesh-tls"),
        ca_secret: flag(&args, "--ca-secret")
            .unwrap_or(switchyard_operator::DEFAULT_SECRET)
            .to_owned(),
    })
}

/// The operator Deployment in `namespace`, with its ready pods; `Err` with the API's message.
pub async fn find_operator(
    client: &Client,
    namespace: &str,
) -> Result<Option<OperatorDeployment>, String> {
    let params = ListParams::default().labels(SELECTOR);
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(|e| e.to_string())?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(|e| e.to_string())?;
    let ready_pods: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .map(ResourceExt::name_any)
        .collect();
    Ok(deployments
        .items
        .iter()
        .find_map(|d| from_deployment(d, ready_pods.clone())))
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn flags_are_read_in_both_spellings_and_not_by_prefix() {
        let a = args(&[
            "--lease-name=ops",
            "--sidecar-image",
            "reg/sidecar:0.2.0",
            "--mesh-tls-extra=x",
        ]);
        assert_eq!(flag(&a, "--lease-name"), Some("ops"));
        assert_eq!(flag(&a, "--sidecar-image"), Some("reg/sidecar:0.2.0"));
        assert_eq!(
            flag(&a, "--mesh-tls"),
            None,
            "a longer flag is not this one"
        );
    }

    #[test]
    fn the_charts_deployment_is_read_with_the_operators_defaults_for_what_it_leaves_out() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "switchyard"},
            "spec": {
                "replicas": 2,
                "selector": {},
                "template": {"spec": {"containers": [{
                    "name": "operator",
                    "image": "reg/operator:0.1.0",
                    "args": ["--sidecar-image=reg/sidecar:0.1.0", "--leader-election=true", "--mesh-tls=false"],
                }]}},
            },
            "status": {"readyReplicas": 1},
        }))
        .expect("deployment");
        let op = from_deployment(&d, vec!["switchyard-abc".into()]).expect("an operator");
        assert_eq!((op.desired, op.ready), (2, 1));
        assert_eq!(op.sidecar_image, "reg/sidecar:0.1.0");
        assert!(op.leader_election);
        assert!(!op.mesh_tls);
        assert_eq!(op.lease_name, "switchyard-operator");
        assert_eq!(op.ca_secret, "switchyard-ca");
    }
}
