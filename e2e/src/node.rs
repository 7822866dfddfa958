//! The real node of the e2e cluster (`e2e/cluster/node-up`): kubelet, containerd and kube-proxy in a
//! network namespace of their own. Its pods' IPs are reachable from this host through one route into
//! that namespace, which [`Node::check_route`] confirms before a test sends anything there (nothing
//! may go to a 10.x address that is not ours). Its containerd pulls every image from the cluster's OCI
//! registry ([`Node::registry`], configured in its `hosts.toml`), as a user's node would: nothing is
//! imported into it.

use crate::cmd::Cmd;
use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// What `node-up` wrote (`<cluster>/node/node.env`) and what the scripts share (`e2e/cluster/node.env`).
#[derive(Clone, Debug)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Its InternalIP (the node end of the veth).
    pub ip: Ipv4Addr,
    /// Pod subnet (`a.b.c.0/24`) routed from this host into the node.
    pub pod_cidr: (Ipv4Addr, u8),
    /// Host end of the veth: the route to the pods goes through it.
    pub host_interface: String,
    /// containerd's socket.
    pub containerd_socket: PathBuf,
    /// Label (key, value) selecting the node.
    pub label: (String, String),
    /// Key of the NoSchedule taint that keeps other pods off it.
    pub taint_key: String,
    /// `host:port` of the cluster's OCI registry (plain HTTP on the host end of the veth), which the
    /// node's containerd pulls from.
    pub registry: String,
    /// The kubelet's cgroup root (`/switchyard-N`), under each cgroup v1 controller's mount.
    pub cgroup_root: String,
}

fn read_env(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (is the kubelet node up? e2e/cluster/up starts it)",
            path.display()
        )
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

fn get<'a>(env: &'a BTreeMap<String, String>, key: &str, file: &Path) -> Result<&'a str> {
    env.get(key)
        .map(String::as_str)
        .with_context(|| format!("{} has no {key}", file.display()))
}

impl Node {
    /// The node of the running cluster.
    pub fn load() -> Result<Node> {
        let state = crate::cluster_dir().join("node/node.env");
        let shared = crate::repo_root().join("e2e/cluster/node.env");
        let (s, c) = (read_env(&state)?, read_env(&shared)?);
        let cidr = get(&s, "POD_CIDR", &state)?;
        let (net, bits) = cidr
            .split_once('/')
            .with_context(|| format!("POD_CIDR {cidr:?} is not a.b.c.d/n"))?;
        Ok(Node {
            name: get(&s, "NODE_NAME", &state)?.to_string(),
            ip: get(&s, "NODE_IP", &state)?
                .parse()
                .context("NODE_IP is not an IPv4 address")?,
            pod_cidr: (
                net.parse().context("POD_CIDR address")?,
                bits.parse().context("POD_CIDR prefix")?,
            ),
            host_interface: get(&s, "HOST_INTERFACE", &state)?.to_string(),
            containerd_socket: get(&s, "CONTAINERD_SOCKET", &state)?.into(),
            label: (
                get(&c, "NODE_LABEL_KEY", &shared)?.to_string(),
                get(&c, "NODE_LABEL_VALUE", &shared)?.to_string(),
            ),
            taint_key: get(&c, "NODE_TAINT_KEY", &shared)?.to_string(),
            registry: get(&s, "REGISTRY", &state)?.to_string(),
            cgroup_root: get(&s, "CGROUP_ROOT", &state)?.to_string(),
        })
    }

    /// Ok when `ip` is in the node's pod subnet or is the node itself, and this host routes it into
    /// the node's veth: only then may a test send it a packet.
    pub async fn check_route(&self, ip: Ipv4Addr) -> Result<()> {
        let (net, bits) = self.pod_cidr;
        let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
        ensure!(
            u32::from(ip) & mask == u32::from(net) & mask || ip == self.ip,
            "{ip} is neither in the node's pod subnet {net}/{bits} nor the node's address {}: \
             refusing to send it anything",
            self.ip
        );
        let out = Cmd::new("ip")
            .args(["-o", "route", "get"])
            .arg(ip.to_string())
            .ok()
            .await?;
        ensure!(
            out.stdout
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w == ["dev", self.host_interface.as_str()]),
            "this host does not route {ip} into the node (via {}): `ip route get` says {:?}; \
             refusing to send it anything",
            self.host_interface,
            out.stdout.trim()
        );
        Ok(())
    }

    /// The namespace annotations that send every pod of the namespace to this node (the API
    /// server's PodNodeSelector and PodTolerationRestriction admission plugins), so manifests
    /// apply unchanged.
    pub fn namespace_annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "scheduler.alpha.kubernetes.io/node-selector".to_string(),
                format!("{}={}", self.label.0, self.label.1),
            ),
            (
                "scheduler.alpha.kubernetes.io/defaultTolerations".to_string(),
                serde_json::json!([{"key": self.taint_key, "operator": "Exists", "effect": "NoSchedule"}])
                    .to_string(),
            ),
        ])
    }

    /// crictl against the node's containerd.
    pub fn crictl(&self) -> Cmd {
        Cmd::new(crate::tools_dir().join("bin/crictl"))
            .arg(format!(
                "--runtime-endpoint=unix://{}",
                self.containerd_socket.display()
            ))
            .arg("--timeout=20s")
    }

    /// Id of the running container `container` of pod `namespace/pod`, from crictl.
    pub async fn container_id(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<String> {
        let out = self
            .crictl()
            .args(["ps", "-q", "--state", "running", "--name"])
            .arg(format!("^{container}$"))
            .args(["--label"])
            .arg(format!("io.kubernetes.pod.namespace={namespace}"))
            .args(["--label"])
            .arg(format!("io.kubernetes.pod.name={pod}"))
            .ok()
            .await?;
        let ids: Vec<&str> = out.stdout.split_whitespace().collect();
        match ids.as_slice() {
            [one] => Ok((*one).to_string()),
            [] => bail!("no running container {container} in pod {namespace}/{pod}"),
            many => bail!(
                "{} containers {container} in pod {namespace}/{pod}",
                many.len()
            ),
        }
    }
}
