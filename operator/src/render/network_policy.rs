//! The NetworkPolicies of a Router's and a Manager's pods (pure). A Manager's frame port takes
//! connections only from the pods its sidecar would accept anyway (its Router's and the
//! namespace's Managers', or what `allowFrom` lists), so a network policy engine refuses the rest
//! before mTLS has to; every other port of the pod stays open (the app's own ports are the user's
//! business). A Router's pods take their edge ports, the admin port and the probe port. The
//! Router's `networkPolicy.enabled: false` turns both off.

use super::meta::{self, MANAGER, ROUTER};
use crate::Error;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::collections::BTreeMap;
use switchyard_crds::manager::{AllowFrom, WorkloadKind};
use switchyard_crds::{Manager, Router};
use switchyard_protocol::ports;

/// The label Kubernetes puts on every namespace, naming it.
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

/// Whether `router` (the Router itself, or a Manager's Router; absent counts as the default)
/// wants generated policies.
pub(crate) fn enabled(router: Option<&Router>) -> bool {
    router.is_none_or(|r| r.spec.network_policy.enabled)
}

fn port(protocol: &str, from: i32, to: Option<i32>) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(from)),
        end_port: to,
    }
}

fn selector(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    }
}

fn policy(
    owner_meta: impl FnOnce(
        String,
    )
        -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, Error>,
    name: String,
    pods: BTreeMap<String, String>,
    ingress: Vec<NetworkPolicyIngressRule>,
) -> Result<NetworkPolicy, Error> {
    Ok(NetworkPolicy {
        metadata: owner_meta(name)?,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(pods)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    })
}

/// The policy of a Router's pods: `serving` (the edge ports), admin and probes, from anywhere.
pub(crate) fn router(
    router: &Router,
    serving: &[(&str, i32)],
) -> Result<Option<NetworkPolicy>, Error> {
    if !enabled(Some(router)) {
        return Ok(None);
    }
    let name = router.name_any();
    let mut open: Vec<NetworkPolicyPort> =
        serving.iter().map(|(_, p)| port("TCP", *p, None)).collect();
    open.push(port("TCP", i32::from(ports::ADMIN), None));
    open.push(port("TCP", i32::from(ports::PROBES), None));
    policy(
        |n| meta::child_meta(router, n, meta::labels(ROUTER, &name)),
        super::names::router_workload(&name),
        meta::selector(ROUTER, &name),
        vec![NetworkPolicyIngressRule {
            ports: Some(open),
            from: None,
        }],
    )
    .map(Some)
}

/// Who may open frame connections, as network peers: the same list the sidecar checks.
fn frame_peers(
    namespace: &str,
    router: &str,
    allow_from: Option<&[AllowFrom]>,
) -> Vec<NetworkPolicyPeer> {
    let any_manager = BTreeMap::from([(meta::NAME.to_owned(), "switchyard-manager".to_owned())]);
    let Some(list) = allow_from else {
        return vec![
            NetworkPolicyPeer {
                pod_selector: Some(selector(meta::selector(ROUTER, router))),
                ..NetworkPolicyPeer::default()
            },
            NetworkPolicyPeer {
                pod_selector: Some(selector(any_manager)),
                ..NetworkPolicyPeer::default()
            },
        ];
    };
    list.iter()
        .map(|a| {
            let (kind_label, component) = match a.kind {
                WorkloadKind::Router => (ROUTER, "switchyard-router"),
                WorkloadKind::Manager => (MANAGER, "switchyard-manager"),
            };
            let pods = if a.name == "*" {
                BTreeMap::from([(meta::NAME.to_owned(), component.to_owned())])
            } else {
                meta::selector(kind_label, &a.name)
            };
            let ns = a.namespace.as_deref().unwrap_or(namespace);
            NetworkPolicyPeer {
                pod_selector: Some(selector(pods)),
                // Without a namespace selector a pod selector means this namespace.
                namespace_selector: (ns != namespace).then(|| {
                    selector(BTreeMap::from([(NAMESPACE_NAME.to_owned(), ns.to_owned())]))
                }),
                ..NetworkPolicyPeer::default()
            }
        })
        .collect()
}

/// The policy of a Manager's pods (every Deployment of it): the frame port only from the allowed
/// workloads' pods, every other port open. `None` when its Router turns policies off.
pub(crate) fn manager(
    manager: &Manager,
    router: Option<&Router>,
) -> Result<Option<NetworkPolicy>, Error> {
    if !enabled(router) {
        return Ok(None);
    }
    let name = manager.name_any();
    let namespace = manager
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let frames = i32::from(ports::MANAGER_INBOUND);
    let peers = frame_peers(
        &namespace,
        &manager.spec.router_ref.name,
        manager.spec.allow_from.as_deref(),
    );
    let mut ingress = vec![NetworkPolicyIngressRule {
        ports: Some(vec![
            port("TCP", 1, Some(frames - 1)),
            port("TCP", frames + 1, Some(65535)),
            port("UDP", 1, Some(65535)),
            port("SCTP", 1, Some(65535)),
        ]),
        from: None,
    }];
    // An empty allowFrom admits nobody: no rule for the frame port at all.
    if !peers.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            ports: Some(vec![port("TCP", frames, None)]),
            from: Some(peers),
        });
    }
    policy(
        |n| meta::child_meta(manager, n, meta::labels(MANAGER, &name)),
        super::names::manager_service(&name),
        meta::selector(MANAGER, &name),
        ingress,
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager_of(yaml: serde_json::Value) -> Manager {
        let mut m: Manager = serde_json::from_value(serde_json::json!({
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Manager",
            "metadata": {"name": "handlers", "namespace": "shop", "uid": "u-1"},
            "spec": {
                "routerRef": {"name": "edge"},
                "events": ["noop"],
                "template": {"spec": {"containers": [{"name": "app", "image": "app"}]}}
            }
        }))
        .expect("manager");
        if let Some(list) = yaml.get("allowFrom") {
            m.spec.allow_from = serde_json::from_value(list.clone()).expect("allowFrom");
        }
        m
    }

    fn router_of(enabled: bool) -> Router {
        let mut r: Router = serde_json::from_value(serde_json::json!({
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Router",
            "metadata": {"name": "edge", "namespace": "shop", "uid": "u-2"},
            "spec": {
                "listeners": {"http": {"port": 8080}},
                "routes": [{"event": "noop", "http": {"method": "GET", "path": "/noop"}}]
            }
        }))
        .expect("router");
        r.spec.network_policy.enabled = enabled;
        r
    }

    #[test]
    fn a_managers_frame_port_is_open_to_its_router_and_the_namespaces_managers_only() {
        let np = manager(&manager_of(serde_json::json!({})), None)
            .expect("built")
            .expect("enabled");
        let spec = np.spec.expect("spec");
        let ingress = spec.ingress.expect("ingress");
        assert_eq!(ingress.len(), 2);
        let others = ingress[0].ports.as_ref().expect("ports");
        assert_eq!(others[0].end_port, Some(7069));
        assert_eq!(others[1].port, Some(IntOrString::Int(7071)));
        assert!(ingress[0].from.is_none(), "the app's ports stay open");
        let frames = &ingress[1];
        assert_eq!(
            frames.ports.as_ref().expect("ports")[0].port,
            Some(IntOrString::Int(7070))
        );
        let peers = frames.from.as_ref().expect("peers");
        let router = peers[0].pod_selector.as_ref().expect("sel");
        assert_eq!(
            router.match_labels.as_ref().expect("labels").get(ROUTER),
            Some(&"edge".to_owned())
        );
        assert!(peers.iter().all(|p| p.namespace_selector.is_none()));
        assert_eq!(np.metadata.name.as_deref(), Some("handlers-manager"));
    }

    #[test]
    fn allow_from_shapes_the_peers_and_the_router_can_turn_policies_off() {
        let m = manager_of(serde_json::json!({"allowFrom": [
            {"kind": "Manager", "name": "*", "namespace": "jobs"},
            {"kind": "Router", "name": "edge"}
        ]}));
        let np = manager(&m, Some(&router_of(true)))
            .expect("built")
            .expect("on");
        let ingress = np.spec.expect("spec").ingress.expect("ingress");
        let peers = ingress[1].from.clone().expect("peers");
        assert_eq!(
            peers[0]
                .namespace_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .and_then(|l| l.get(NAMESPACE_NAME)),
            Some(&"jobs".to_owned())
        );
        assert!(peers[1].namespace_selector.is_none());
        let none = manager_of(serde_json::json!({"allowFrom": []}));
        let np = manager(&none, None).expect("built").expect("on");
        assert_eq!(np.spec.expect("spec").ingress.expect("ingress").len(), 1);
        assert_eq!(manager(&m, Some(&router_of(false))).expect("built"), None);
        assert_eq!(
            router(&router_of(false), &[("http", 8080)]).expect("built"),
            None
        );
        let rp = router(&router_of(true), &[("http", 8080)])
            .expect("built")
            .expect("on");
        let open = rp.spec.expect("spec").ingress.expect("ingress")[0]
            .ports
            .clone()
            .expect("ports");
        let open: Vec<_> = open.iter().filter_map(|p| p.port.clone()).collect();
        assert_eq!(
            open,
            vec![
                IntOrString::Int(8080),
                IntOrString::Int(9901),
                IntOrString::Int(9902)
            ]
        );
    }
}
