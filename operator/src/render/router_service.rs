//! The Service in front of a Router's pods, from `spec.service`: ClusterIP by default, or NodePort
//! or LoadBalancer with the node ports, annotations, load balancer class and external traffic
//! policy the spec names.

use super::meta;
use crate::Error;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use switchyard_crds::Router;

/// The Service named `name` selecting `selector`, with one port per `(name, port)` listener.
pub(crate) fn build(
    router: &Router,
    name: String,
    labels: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
    serving: &[(&str, i32)],
) -> Result<Service, Error> {
    let spec = &router.spec.service;
    let mut metadata = meta::child_meta(router, name, labels)?;
    if !spec.annotations.is_empty() {
        metadata.annotations = Some(spec.annotations.clone());
    }
    let has_node_ports = spec.type_.has_node_ports();
    let node_port = |listener: &str| {
        let ports = spec.node_ports.as_ref().filter(|_| has_node_ports)?;
        match listener {
            "grpc" => ports.grpc,
            _ => ports.http,
        }
    };
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(spec.type_.as_str().to_owned()),
            selector: Some(selector),
            ports: Some(
                serving
                    .iter()
                    .map(|(port_name, port)| ServicePort {
                        name: Some((*port_name).to_owned()),
                        port: *port,
                        target_port: Some(IntOrString::String((*port_name).to_owned())),
                        node_port: node_port(port_name),
                        protocol: Some("TCP".into()),
                        // h2c on the http port, gRPC on grpc: tells meshes and gateways the protocol.
                        app_protocol: Some(
                            if *port_name == "grpc" {
                                "kubernetes.io/h2c"
                            } else {
                                "http"
                            }
                            .into(),
                        ),
                    })
                    .collect(),
            ),
            // The API server refuses both on a ClusterIP Service; the CRD's rules refuse them
            // there too, and this keeps an object that slipped past them (an old CRD) applicable.
            external_traffic_policy: spec
                .external_traffic_policy
                .filter(|_| has_node_ports)
                .map(|p| p.as_str().to_owned()),
            load_balancer_class: spec.load_balancer_class.clone().filter(|_| {
                spec.type_ == switchyard_crds::router_service::ServiceType::LoadBalancer
            }),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_crds::router_service::{
        ExternalTrafficPolicy, NodePorts, RouterService, ServiceType,
    };

    fn router(service: RouterService) -> Router {
        let mut r: Router = serde_json::from_value(serde_json::json!({
            "apiVersion": "switchyard.dev/v1alpha1",
            "kind": "Router",
            "metadata": {"name": "edge", "namespace": "shop", "uid": "u-1"},
            "spec": {
                "listeners": {"http": {"port": 8080}, "grpc": {"port": 9090}},
                "routes": [{"event": "noop", "http": {"method": "GET", "path": "/noop"}}]
            }
        }))
        .expect("router");
        r.spec.service = service;
        r
    }

    fn render(service: RouterService) -> Service {
        let r = router(service);
        build(
            &r,
            "edge-router".into(),
            BTreeMap::new(),
            BTreeMap::from([("switchyard.dev/router".into(), "edge".into())]),
            &[("http", 8080), ("grpc", 9090)],
        )
        .expect("renders")
    }

    #[test]
    fn without_the_field_it_is_a_cluster_ip_service() {
        let s = render(RouterService::default());
        let spec = s.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.external_traffic_policy, None);
        assert!(s.metadata.annotations.is_none());
        let ports = spec.ports.expect("ports");
        assert!(ports.iter().all(|p| p.node_port.is_none()), "{ports:?}");
    }

    #[test]
    fn a_node_port_service_takes_its_ports_policy_and_annotations() {
        let s = render(RouterService {
            type_: ServiceType::NodePort,
            annotations: BTreeMap::from([("example.com/lb".into(), "internal".into())]),
            external_traffic_policy: Some(ExternalTrafficPolicy::Local),
            node_ports: Some(NodePorts {
                http: Some(30080),
                grpc: None,
            }),
            ..RouterService::default()
        });
        assert_eq!(
            s.metadata.annotations,
            Some(BTreeMap::from([(
                "example.com/lb".into(),
                "internal".into()
            )]))
        );
        assert!(s.metadata.owner_references.is_some());
        let spec = s.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(spec.load_balancer_class, None);
        let ports: Vec<_> = spec
            .ports
            .expect("ports")
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.node_port))
            .collect();
        assert_eq!(
            ports,
            [("http".to_owned(), Some(30080)), ("grpc".to_owned(), None)]
        );
    }

    #[test]
    fn a_load_balancer_service_takes_its_class() {
        let s = render(RouterService {
            type_: ServiceType::LoadBalancer,
            load_balancer_class: Some("example.com/lb".into()),
            node_ports: Some(NodePorts {
                http: None,
                grpc: Some(30090),
            }),
            ..RouterService::default()
        });
        let spec = s.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.load_balancer_class.as_deref(), Some("example.com/lb"));
        let grpc = spec
            .ports
            .expect("ports")
            .into_iter()
            .find(|p| p.name.as_deref() == Some("grpc"))
            .expect("grpc port");
        assert_eq!(grpc.node_port, Some(30090));
    }

    #[test]
    fn node_ports_and_policies_are_left_off_a_cluster_ip_service() {
        // What the CRD's rules refuse, rendered anyway (say from before the rules): the API server
        // would refuse the whole Service, so these fields are dropped instead.
        let s = render(RouterService {
            type_: ServiceType::ClusterIP,
            external_traffic_policy: Some(ExternalTrafficPolicy::Local),
            load_balancer_class: Some("example.com/lb".into()),
            node_ports: Some(NodePorts {
                http: Some(30080),
                grpc: None,
            }),
            ..RouterService::default()
        });
        let spec = s.spec.expect("spec");
        assert_eq!(spec.external_traffic_policy, None);
        assert_eq!(spec.load_balancer_class, None);
        assert!(
            spec.ports
                .expect("ports")
                .iter()
                .all(|p| p.node_port.is_none())
        );
    }
}
