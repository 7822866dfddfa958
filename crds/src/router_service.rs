//! `spec.service` of a Router: how its Service is exposed (ClusterIP, NodePort or LoadBalancer), so
//! clients outside the cluster reach the Router without a port-forward.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The Service in front of the router pods. Absent: a ClusterIP Service, reachable inside the
/// cluster only (or through a Gateway or an Ingress that points at it).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.nodePorts) || (has(self.type) && self.type != 'ClusterIP')",
        "message": "nodePorts needs type NodePort or LoadBalancer (a ClusterIP Service has no node ports)",
        "fieldPath": ".nodePorts",
    },
    {
        "rule": "!has(self.externalTrafficPolicy) || (has(self.type) && self.type != 'ClusterIP')",
        "message": "externalTrafficPolicy needs type NodePort or LoadBalancer (it applies to traffic from outside the cluster)",
        "fieldPath": ".externalTrafficPolicy",
    },
    {
        "rule": "!has(self.loadBalancerClass) || (has(self.type) && self.type == 'LoadBalancer')",
        "message": "loadBalancerClass needs type LoadBalancer",
        "fieldPath": ".loadBalancerClass",
    },
]))]
pub struct RouterService {
    /// `ClusterIP` (the default), `NodePort` (every node forwards `nodePorts` to the routers) or
    /// `LoadBalancer` (the cluster's load balancer controller gives the Service an address; it
    /// has node ports as well).
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service, e.g. a cloud load balancer's settings
    /// (`service.beta.kubernetes.io/aws-load-balancer-type: nlb`). The operator's own labels and
    /// owner reference are kept; these are merged into the Service's annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
    /// The load balancer implementation that provisions this Service (`spec.loadBalancerClass` of
    /// the Service); the cluster's default when absent. Only with type `LoadBalancer`. Kubernetes
    /// does not let it change once set: delete the Router's Service to change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub load_balancer_class: Option<String>,
    /// Where a node sends traffic from outside the cluster; see [`ExternalTrafficPolicy`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<ExternalTrafficPolicy>,
    /// Fixed node ports per listener; a free one is chosen by Kubernetes for a listener not named.
    /// Each must lie in the cluster's node port range (30000-32767 unless the API server's
    /// `--service-node-port-range` says otherwise). Only with type `NodePort` or `LoadBalancer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ports: Option<NodePorts>,
}

/// The kind of Service (`spec.type` of a core/v1 Service).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    /// A cluster-internal address only.
    #[default]
    ClusterIP,
    /// A port on every node as well.
    NodePort,
    /// An external load balancer as well (and node ports).
    LoadBalancer,
}

impl ServiceType {
    /// The value of a core/v1 Service's `spec.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }

    /// Whether the Service has node ports (NodePort and LoadBalancer).
    pub fn has_node_ports(self) -> bool {
        self != ServiceType::ClusterIP
    }
}

/// Where a node sends traffic from outside the cluster (`spec.externalTrafficPolicy` of the
/// Service). `Cluster` (Kubernetes' default): to any router pod, and the router sees the forwarding
/// node's address as the client. `Local`: only to router pods on the receiving node, so the client's
/// own address reaches the router's rate limit (`key: clientIp`) and access log. Only with type
/// `NodePort` or `LoadBalancer`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExternalTrafficPolicy {
    /// To any ready router pod; the client's address is replaced by the node's.
    Cluster,
    /// To router pods on the receiving node only; the client's address is kept.
    Local,
}

impl ExternalTrafficPolicy {
    /// The value of a core/v1 Service's `spec.externalTrafficPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalTrafficPolicy::Cluster => "Cluster",
            ExternalTrafficPolicy::Local => "Local",
        }
    }
}

/// Node ports of the router's listeners.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.http) || !has(self.grpc) || self.http != self.grpc",
    "message": "nodePorts.grpc must differ from nodePorts.http",
    "fieldPath": ".grpc",
}]))]
pub struct NodePorts {
    /// Node port of the HTTP listener (HTTP/1.1, h2c and WebSocket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub http: Option<i32>,
    /// Node port of the gRPC listener; needs `listeners.grpc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub grpc: Option<i32>,
}

impl RouterService {
    /// Whether this is the Service a Router gets without the field.
    pub fn is_default(&self) -> bool {
        *self == RouterService::default()
    }
}
