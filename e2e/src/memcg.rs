//! A container's memory cgroup on the real node, read from this host: the limit the kernel
//! enforces on it, the most it ever used, and the processes the kernel OOM-killed in it. The node
//! runs cgroup v1 with the cgroupfs driver under its own root (`e2e/cluster/node-up`), so the
//! kubelet puts a container at `<root>/kubepods[/<qos>]/pod<uid>/<container id>` under the memory
//! controller's mount, and runc writes the container's `resources.limits.memory` there.

use crate::node::Node;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::path::{Path, PathBuf};

/// Where the host mounts cgroup v1's memory controller.
const MOUNT: &str = "/sys/fs/cgroup/memory";

/// The memory cgroup of one container.
#[derive(Debug, Clone)]
pub struct MemCgroup {
    dir: PathBuf,
}

impl MemCgroup {
    /// The cgroup of container `name` of `pod` (a regular or an init container) on `node`, as it
    /// runs now: the container id comes from the pod's status.
    pub fn of_container(node: &Node, pod: &Pod, name: &str) -> Result<MemCgroup> {
        let status = pod.status.clone().unwrap_or_default();
        let id = status
            .container_statuses
            .iter()
            .chain(status.init_container_statuses.iter())
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.container_id.clone())
            .with_context(|| format!("pod {} has no id of container {name}", pod.name_any()))?;
        let id = id
            .strip_prefix("containerd://")
            .with_context(|| format!("container id {id:?} is not containerd's"))?;
        let uid = pod.uid().context("the pod has no uid")?;
        let pods = Path::new(MOUNT)
            .join(node.cgroup_root.trim_start_matches('/'))
            .join("kubepods");
        // Guaranteed pods sit right under kubepods, the others under their QoS class.
        for qos in ["", "burstable", "besteffort"] {
            let dir = pods.join(qos).join(format!("pod{uid}")).join(id);
            if dir.join("memory.limit_in_bytes").exists() {
                return Ok(MemCgroup { dir });
            }
        }
        bail!(
            "no memory cgroup of container {name} ({id}) of pod {} under {} (does this host mount cgroup v1's memory controller at {MOUNT}?)",
            pod.name_any(),
            pods.display()
        )
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn number(&self, file: &str) -> Result<u64> {
        let path = self.dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} is not a number: {text:?}", path.display()))
    }

    /// `memory.limit_in_bytes`: the limit the kernel enforces.
    pub fn limit(&self) -> Result<u64> {
        self.number("memory.limit_in_bytes")
    }

    /// `memory.max_usage_in_bytes`: the most it used since it was made.
    pub fn peak(&self) -> Result<u64> {
        self.number("memory.max_usage_in_bytes")
    }

    /// `memory.failcnt`: how often a charge hit the limit (the kernel reclaimed page cache then).
    pub fn failcnt(&self) -> Result<u64> {
        self.number("memory.failcnt")
    }

    /// `oom_kill` of `memory.oom_control`: processes the kernel killed for this cgroup's limit.
    pub fn oom_kills(&self) -> Result<u64> {
        let path = self.dir.join("memory.oom_control");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .with_context(|| format!("{} has no oom_kill line: {text:?}", path.display()))
    }
}
