//! Which sidecars a tap reads, and the connection to each: admin addresses on this machine (a
//! running `switchyard up`'s state file, or given), or a cluster's Router or Manager pods through
//! the API server's `pods/portforward` (as `kubectl port-forward`: RBAC decides who may, and the
//! connection reaches the sidecar on the pod's loopback, the only clients its `/tap` serves).

use super::stream::{Msg, follow};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::net::SocketAddr;
use tokio::sync::mpsc;

/// Pods tapped at once, at most: each is a port-forward through the API server.
const MAX_PODS: usize = 16;
/// How long a failed port-forward's reason is waited for.
const FORWARD_ERROR_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Pod labels naming a Router's and a Manager's pods (`switchyard_operator::render::meta`).
const ROUTER_LABEL: &str = "switchyard.dev/router";
const MANAGER_LABEL: &str = "switchyard.dev/manager";

/// One sidecar to tap.
pub enum Sidecar {
    /// On this machine.
    Local {
        /// How the lines name it: `router edge`.
        name: String,
        /// Its admin address.
        admin: SocketAddr,
    },
    /// A pod of a cluster.
    Pod {
        /// Pods of its namespace (boxed: a client is large beside an address).
        api: Box<Api<Pod>>,
        /// `ns/pod`.
        name: String,
        /// The pod's name.
        pod: String,
    },
}

impl Sidecar {
    /// How the output names it.
    pub fn name(&self) -> &str {
        match self {
            Sidecar::Local { name, .. } | Sidecar::Pod { name, .. } => name,
        }
    }

    /// Reads its tap into `tx` until it ends, then says so.
    pub async fn tap(self, path_and_query: String, tx: mpsc::Sender<Msg>) {
        let name = self.name().to_owned();
        let result = match self {
            Sidecar::Local { admin, .. } => match tokio::net::TcpStream::connect(admin).await {
                Ok(s) => follow(s, &path_and_query, &name, &tx).await,
                Err(e) => Err(anyhow::anyhow!("connecting to {admin}: {e}")),
            },
            Sidecar::Pod { api, pod, .. } => {
                forwarded(&api, &pod, &path_and_query, &name, &tx).await
            }
        };
        let _ = tx.send(Msg::Ended(name, result)).await;
    }
}

async fn forwarded(
    api: &Api<Pod>,
    pod: &str,
    path_and_query: &str,
    name: &str,
    tx: &mpsc::Sender<Msg>,
) -> anyhow::Result<()> {
    let port = switchyard_protocol::ports::ADMIN;
    let mut forward = api
        .portforward(pod, &[port])
        .await
        .map_err(|e| forward_error(name, port, e))?;
    let stream = forward
        .take_stream(port)
        .with_context(|| format!("port-forward to {name} has no stream for {port}"))?;
    let refused = forward.take_error(port);
    let result = follow(stream, path_and_query, name, tx).await;
    // A port the pod does not serve closes the stream; the kubelet says why on the error channel.
    let result = match (result, refused) {
        (Err(e), Some(refused)) => match tokio::time::timeout(FORWARD_ERROR_WAIT, refused).await {
            Ok(Some(why)) => Err(e.context(format!("the port-forward says: {why}"))),
            _ => Err(e),
        },
        (r, _) => r,
    };
    forward.abort();
    result
}

/// What tapping a pod needs of RBAC beside `list` on pods. kube's port-forward is a WebSocket
/// upgrade, a GET, which the API server authorizes as `get` on pods/portforward, and from
/// Kubernetes 1.35 as `create` too (what `kubectl port-forward` over SPDY always needed).
const FORWARD_RBAC: &str = "get and create on pods/portforward";

/// Why a port-forward did not open: the API server's refusal in its own words (it names the user and
/// the verb missing) with what a tap needs, its other answers by code and message (not kube's dump
/// of the whole Status), and transport failures with their chain.
fn forward_error(name: &str, port: u16, e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => anyhow::anyhow!(
            "port-forward to {name}:{port} refused: {}; a tap needs {FORWARD_RBAC} in the pod's namespace",
            s.message.trim()
        ),
        kube::Error::Api(s) => anyhow::anyhow!(
            "port-forward to {name}:{port}: the API server answered {} {}: {}",
            s.code,
            s.reason,
            s.message.trim()
        ),
        e => anyhow::Error::new(e).context(format!("port-forward to {name}:{port}")),
    }
}

/// The Running pods of the Router `router` or the Manager `manager` in `namespace`.
pub async fn pods(
    client: &kube::Client,
    namespace: &str,
    router: Option<&str>,
    manager: Option<&str>,
) -> anyhow::Result<Vec<Sidecar>> {
    let (role, selector) = selector(router, manager)?;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .with_context(|| {
            format!("listing the pods of namespace {namespace} matching {selector}")
        })?;
    let running = running(list.items, namespace, &selector)?;
    Ok(running
        .into_iter()
        .map(|pod| Sidecar::Pod {
            api: Box::new(api.clone()),
            name: format!("{role} {namespace}/{pod}"),
            pod,
        })
        .collect())
}

/// The role and the label selector of the pods `--router` or `--manager` names.
fn selector(router: Option<&str>, manager: Option<&str>) -> anyhow::Result<(&'static str, String)> {
    match (router, manager) {
        (Some(r), _) => Ok(("router", format!("{ROUTER_LABEL}={r}"))),
        (None, Some(m)) => Ok(("manager", format!("{MANAGER_LABEL}={m}"))),
        (None, None) => anyhow::bail!(
            "in a cluster, say which sidecars to tap: --router NAME or --manager NAME"
        ),
    }
}

/// The names of the pods of `list` that are Running and not being deleted, at most [`MAX_PODS`];
/// errors say what `selector` matched.
fn running(list: Vec<Pod>, namespace: &str, selector: &str) -> anyhow::Result<Vec<String>> {
    let running: Vec<String> = list
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    if running.is_empty() {
        anyhow::bail!("no Running pod of namespace {namespace} matches {selector}");
    }
    if running.len() > MAX_PODS {
        anyhow::bail!(
            "{} pods match {selector}; a tap reads {MAX_PODS} at most (each is a port-forward)",
            running.len()
        );
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, phase: &str, deleting: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_owned());
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(Default::default()));
        }
        p.status = Some(PodStatus {
            phase: Some(phase.to_owned()),
            ..PodStatus::default()
        });
        p
    }

    #[test]
    fn the_selector_is_the_operators_pod_label() {
        assert_eq!(
            selector(Some("edge"), None).expect("router"),
            ("router", "switchyard.dev/router=edge".to_owned())
        );
        assert_eq!(
            selector(None, Some("handlers")).expect("manager"),
            ("manager", "switchyard.dev/manager=handlers".to_owned())
        );
        let e = selector(None, None).expect_err("neither").to_string();
        assert!(e.contains("--router NAME or --manager NAME"), "{e}");
    }

    #[test]
    fn only_running_pods_not_being_deleted_are_tapped() {
        let list = vec![
            pod("a", "Running", false),
            pod("b", "Pending", false),
            pod("c", "Running", true),
            pod("d", "Running", false),
        ];
        assert_eq!(running(list, "shop", "x=y").expect("running"), ["a", "d"]);
        let e = running(vec![pod("b", "Pending", false)], "shop", "x=y")
            .expect_err("none")
            .to_string();
        assert!(
            e.contains("no Running pod of namespace shop matches x=y"),
            "{e}"
        );
    }

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
        }))
        .expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_refused_port_forward_says_why_and_what_a_tap_needs() {
        let refusal = r#"pods "p" is forbidden: User "u" cannot get resource "pods/portforward" in API group "" in the namespace "shop""#;
        let e = forward_error("manager shop/p", 9901, api_error(403, "Forbidden", refusal));
        assert_eq!(
            format!("{e:#}"),
            format!(
                "port-forward to manager shop/p:9901 refused: {refusal}; a tap needs get and create on pods/portforward in the pod's namespace"
            )
        );
        let e = forward_error(
            "router shop/r",
            9901,
            api_error(404, "NotFound", "pods \"r\" not found"),
        );
        assert_eq!(
            format!("{e:#}"),
            "port-forward to router shop/r:9901: the API server answered 404 NotFound: pods \"r\" not found"
        );
    }

    #[test]
    fn too_many_pods_are_refused_rather_than_forwarded() {
        let list = (0..=MAX_PODS)
            .map(|i| pod(&format!("p{i}"), "Running", false))
            .collect();
        let e = running(list, "shop", "x=y")
            .expect_err("too many")
            .to_string();
        assert!(e.contains("a tap reads 16 at most"), "{e}");
    }
}
