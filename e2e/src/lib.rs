//! Shared helpers of the Switchyard end-to-end tests.
//!
//! The tests drive a real local control plane (`e2e/cluster/up`: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok with fake nodes) the way a user would: `helm`
//! and `kubectl` as child processes, the operator binary as a local process authenticated with a
//! token of the chart's ServiceAccount. Assertions read the cluster through kube-rs with the admin
//! kubeconfig.
//!
//! Nothing here skips: when the cluster cannot start, the charts cannot be installed or the
//! operator cannot be built, every test that needs them fails with the reason and the log tail.

pub mod ca_secret;
pub mod client;
pub mod cluster;
pub mod cmd;
pub mod dashboard;
pub mod fixtures;
pub mod identity;
pub mod images;
pub mod k8s;
pub mod lock;
pub mod loopback;
pub mod memcg;
pub mod mesh_nats;
pub mod mesh_release;
pub mod module_crds;
pub mod nats;
pub mod node;
pub mod operator;
pub mod otlp;
pub mod pod_operator;
pub mod pods;
pub mod poll;
pub mod previous;
pub mod prometheus;
pub mod release;
pub mod replicas;
pub mod scale;
pub mod sidecar;
pub mod tutorial;
pub mod upgrade_release;

pub use cluster::{Cluster, cluster};
pub use cmd::{Cmd, Output};
pub use k8s::TestNamespace;
pub use operator::{Metrics, Operator, OperatorOpts};
pub use poll::{eventually, timeout};
pub use replicas::Replicas;

use std::path::{Path, PathBuf};

/// Namespace the charts are installed into.
pub const SYSTEM_NAMESPACE: &str = "switchyard-system";
/// Helm release of the operator chart (its ServiceAccount, ClusterRole and Deployment share the name).
pub const RELEASE: &str = "switchyard";
/// Helm release of the CRD chart.
pub const CRD_RELEASE: &str = "switchyard-crds";
/// Namespace (and Helm release) of the operator pod on the real node (`pod_operator`).
pub const NODE_NAMESPACE: &str = "switchyard-node";
/// Namespace (and Helm release) of the upgrade test's operator pod (`upgrade_release`).
pub const UPGRADE_NAMESPACE: &str = "switchyard-upgrade";
/// Kubernetes version passed to `helm template --kube-version`.
pub const KUBE_VERSION: &str = "1.34.4";
/// Sidecar image the tests pass to the operator (`--sidecar-image`); never pulled, pods run on kwok.
pub const SIDECAR_IMAGE: &str = "ghcr.io/switchyard-dev/switchyard-sidecar:0.1.0";
/// Label every child of a Router or Manager carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "switchyard-operator");

/// Root of the repository (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the repository")
        .to_path_buf()
}

/// The cargo target folder the binaries are built into.
pub fn target_dir() -> PathBuf {
    let repo = repo_root();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => repo.join(dir), // join keeps an absolute path as is
        _ => repo.join("target"),
    }
}

/// Tool folder: `SWITCHYARD_TOOLS` or `<repo>/.tools` (the same rule as `e2e/cluster/up`).
pub fn tools_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_TOOLS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join(".tools"),
    }
}

/// State folder of the cluster: `SWITCHYARD_CLUSTER_DIR` or `<tools>/cluster`.
pub fn cluster_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_CLUSTER_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => tools_dir().join("cluster"),
    }
}

/// Scratch folder of the tests (locks, operator logs): `<tools>/e2e`, shared by every cluster.
pub fn work_dir() -> PathBuf {
    let dir = tools_dir().join("e2e");
    // Errors surface later, when something is written there, with a better message.
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Folder holding the `switchyard-crds` and `switchyard` charts: `SWITCHYARD_E2E_CHARTS`, by
/// default `<repo>/charts`. (The override is for testing a packaged or patched copy.)
pub fn charts_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_E2E_CHARTS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join("charts"),
    }
}

/// The helm binary built by `e2e/cluster/build-tools`.
pub fn helm_bin() -> PathBuf {
    tools_dir().join("bin").join("helm")
}

/// kubectl: `KUBECTL` or `kubectl` on PATH.
pub fn kubectl_bin() -> PathBuf {
    match std::env::var_os("KUBECTL") {
        Some(k) if !k.is_empty() => PathBuf::from(k),
        _ => PathBuf::from("kubectl"),
    }
}

/// The last `n` lines of a file, for failure messages ("" when unreadable).
pub fn tail_file(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => tail(&text, n),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A short suffix unique to this process and call, for namespace and Lease names: four
/// characters from the pid and clock (different across runs and processes), then a counter
/// (different within the process).
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let seed =
        (u64::from(std::process::id()) ^ (nanos >> 10)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
    format!("{}{}", base36(seed, 4), base36(n, 2))
}

fn base36(mut x: u64, width: usize) -> String {
    let mut s = String::new();
    for _ in 0..width {
        s.push(std::char::from_digit((x % 36) as u32, 36).unwrap_or('x'));
        x /= 36;
    }
    s
}
