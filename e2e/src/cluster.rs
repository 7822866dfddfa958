//! The shared cluster: started once per test process with `e2e/cluster/up` (idempotent, and
//! serialised across processes by the script's own lock), with both charts installed once.

use crate::cmd::Cmd;
use crate::lock::FileLock;
use crate::{CRD_RELEASE, RELEASE, SYSTEM_NAMESPACE};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;

/// The running cluster with the charts installed.
#[derive(Debug)]
pub struct Cluster {
    /// Admin kubeconfig (group system:masters) written by `e2e/cluster/up`.
    pub kubeconfig: PathBuf,
    operator_kubeconfig: OnceCell<Result<PathBuf, String>>,
}

static CLUSTER: OnceCell<Result<Cluster, String>> = OnceCell::const_new();

/// The cluster, brought up and with the charts installed on first use. A failure is kept, so every
/// later test fails at once with the same message instead of retrying a slow start.
pub async fn cluster() -> Result<&'static Cluster> {
    let result = CLUSTER
        .get_or_init(|| async { bring_up().await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .as_ref()
        .map_err(|e| anyhow!("the e2e cluster is not available: {e}"))
}

/// Deadline of `e2e/cluster/up`: a cold run builds the control plane from source (tens of minutes
/// on two cores). `SWITCHYARD_E2E_UP_TIMEOUT` in seconds, 90 minutes by default.
fn up_timeout() -> Duration {
    let secs = std::env::var("SWITCHYARD_E2E_UP_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(90 * 60);
    Duration::from_secs(secs)
}

async fn bring_up() -> Result<Cluster> {
    let repo = crate::repo_root();
    let up = repo.join("e2e/cluster/up");
    let out = Cmd::new(&up)
        .env("KUBECTL", crate::kubectl_bin())
        .timeout(up_timeout())
        .output()
        .await?;
    if !out.success() {
        bail!(
            "`{}` failed (exit {:?}); its output ends with:\n{}\n(component logs: {}/logs)",
            up.display(),
            out.code,
            crate::tail(&out.stderr, 80),
            crate::cluster_dir().display()
        );
    }
    // The script prints `export KUBECONFIG=...`; fall back to the documented location.
    let kubeconfig = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(|p| PathBuf::from(p.trim()))
        .unwrap_or_else(|| crate::cluster_dir().join("kubeconfig"));
    if !kubeconfig.is_file() {
        bail!(
            "`e2e/cluster/up` succeeded but wrote no kubeconfig at {}; stderr:\n{}",
            kubeconfig.display(),
            crate::tail(&out.stderr, 40)
        );
    }
    Cmd::kubectl(&kubeconfig)
        .args(["get", "--raw=/readyz"])
        .ok()
        .await
        .context("the API server is not ready after `e2e/cluster/up`")?;

    install_charts(&kubeconfig).await?;
    Ok(Cluster {
        kubeconfig,
        operator_kubeconfig: OnceCell::new(),
    })
}

/// `helm upgrade --install` of both charts into switchyard-system, idempotent; waits for the CRDs
/// to be Established and the operator's ServiceAccount to exist.
async fn install_charts(kubeconfig: &Path) -> Result<()> {
    // Two test processes (nextest) must not run helm on the same release at once.
    let _lock = FileLock::acquire("charts").await?;
    let charts = crate::charts_dir();
    // The CRD chart holds only cluster-scoped objects, so its release may live anywhere; one that
    // something else (e.g. `e2e/cluster/demo`) installed elsewhere is upgraded where it is,
    // since helm refuses to adopt its CRDs into a second release.
    let crd_namespace = release_namespace(kubeconfig, CRD_RELEASE)
        .await?
        .unwrap_or_else(|| SYSTEM_NAMESPACE.to_string());
    // The shared release is never uninstalled, so a ValidatingAdmissionPolicy of it would outlive
    // every test and hold each operator run on this cluster to it, those of other chart versions
    // too; the policy is checked by releases that come and go with their test
    // (tests/owner_references.rs, and the pods release with the chart's defaults).
    for (release, chart, namespace, values) in [
        (CRD_RELEASE, "switchyard-crds", crd_namespace.as_str(), None),
        (
            RELEASE,
            "switchyard",
            SYSTEM_NAMESPACE,
            Some("admissionPolicy.enabled=false"),
        ),
    ] {
        let chart = charts.join(chart);
        let chart = chart.display();
        let mut helm = Cmd::helm(kubeconfig);
        if let Some(values) = values {
            helm = helm.args(["--set", values]);
        }
        helm.args(["upgrade", "--install", release])
            .arg(chart.to_string())
            .args([
                "--namespace",
                namespace,
                "--create-namespace",
                "--wait=false",
            ])
            .timeout(Duration::from_secs(300))
            .ok()
            .await
            .with_context(|| format!("installing chart {chart} as release {release}"))?;
        if release == CRD_RELEASE {
            // Retried: right after the install a CRD may have no status.conditions yet, and
            // `kubectl wait` then fails at once ("accessor error: <nil>") instead of waiting.
            crate::eventually("the CRDs to be Established", crate::timeout(), || async {
                Cmd::kubectl(kubeconfig)
                    .args([
                        "wait",
                        "--for=condition=Established",
                        "crd/routers.switchyard.dev",
                        "crd/managers.switchyard.dev",
                        "--timeout=20s",
                    ])
                    .timeout(Duration::from_secs(30))
                    .ok()
                    .await
            })
            .await
            .context("the CRDs did not become Established")?;
        }
    }
    crate::eventually(
        "the operator ServiceAccount to exist",
        crate::timeout(),
        || async {
            Cmd::kubectl(kubeconfig)
                .args(["-n", SYSTEM_NAMESPACE, "get", "serviceaccount", RELEASE])
                .ok()
                .await
        },
    )
    .await?;
    Ok(())
}

/// Namespace of the helm release `name`, if it is installed anywhere.
pub async fn release_namespace(kubeconfig: &Path, name: &str) -> Result<Option<String>> {
    let out = Cmd::helm(kubeconfig)
        .args(["list", "--all-namespaces", "--all", "--output", "json"])
        .ok()
        .await?;
    let releases: Vec<serde_json::Value> =
        serde_json::from_str(&out.stdout).context("parsing `helm list --output json`")?;
    Ok(releases
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["namespace"].as_str())
        .map(str::to_string))
}

impl Cluster {
    /// A kube-rs client with the admin kubeconfig. Make one per tokio runtime (a client's
    /// background task lives on the runtime that created it).
    pub async fn client(&self) -> Result<kube::Client> {
        client_from(&self.kubeconfig).await
    }

    /// kubectl as the admin.
    pub fn kubectl(&self) -> Cmd {
        Cmd::kubectl(&self.kubeconfig)
    }

    /// helm as the admin.
    pub fn helm(&self) -> Cmd {
        Cmd::helm(&self.kubeconfig)
    }

    /// `helm uninstall RELEASE` in `namespace`, without waiting for its objects to be gone
    /// (callers that need them gone wait on that themselves).
    pub async fn helm_uninstall(&self, release: &str, namespace: &str) -> Result<()> {
        self.helm()
            .args([
                "uninstall",
                release,
                "--namespace",
                namespace,
                "--wait=false",
            ])
            .timeout(Duration::from_secs(120))
            .ok()
            .await
            .with_context(|| format!("helm uninstall {release} in {namespace}"))?;
        Ok(())
    }

    /// A kubeconfig that authenticates as the chart's ServiceAccount (`switchyard` in
    /// switchyard-system) with a 2-hour token, server and CA taken from the admin kubeconfig.
    /// Made once per process.
    pub async fn operator_kubeconfig(&self) -> Result<&Path> {
        let result = self
            .operator_kubeconfig
            .get_or_init(|| async {
                self.make_operator_kubeconfig()
                    .await
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        result
            .as_deref()
            .map_err(|e| anyhow!("cannot make the operator's token kubeconfig: {e}"))
    }

    async fn make_operator_kubeconfig(&self) -> Result<PathBuf> {
        self.token_kubeconfig(SYSTEM_NAMESPACE, RELEASE, "operator.kubeconfig")
            .await
    }

    /// A kubeconfig that authenticates as ServiceAccount `namespace/name` (another release of the
    /// operator chart, say) with a 2-hour token, server and CA taken from the admin kubeconfig.
    /// Made anew at each call.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> Result<PathBuf> {
        self.token_kubeconfig(namespace, name, &format!("{namespace}.{name}.kubeconfig"))
            .await
            .with_context(|| format!("a token kubeconfig of ServiceAccount {namespace}/{name}"))
    }

    async fn token_kubeconfig(&self, namespace: &str, name: &str, file: &str) -> Result<PathBuf> {
        let token = self
            .kubectl()
            .args(["-n", namespace, "create", "token", name, "--duration=2h"])
            .ok()
            .await?
            .stdout
            .trim()
            .to_string();
        if token.is_empty() {
            bail!("`kubectl create token` printed no token");
        }
        let admin = std::fs::read_to_string(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let admin: serde_json::Value = serde_saphyr::from_str(&admin)
            .with_context(|| format!("parsing {}", self.kubeconfig.display()))?;
        let cluster = admin["clusters"][0]["cluster"].clone();
        if cluster["server"].as_str().is_none() {
            bail!(
                "no clusters[0].cluster.server in {}",
                self.kubeconfig.display()
            );
        }
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "switchyard-e2e", "cluster": cluster}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "operator", "context": {
                "cluster": "switchyard-e2e",
                "user": name,
            }}],
            "current-context": "operator",
        });
        // One file per cluster, replaced atomically: parallel test processes each write a valid
        // token, and a reader always sees a whole file. In the cluster's own folder, not the shared
        // scratch one: tests against another cluster (another SWITCHYARD_CLUSTER_DIR) must not
        // hand their operators this cluster's server. JSON is YAML: kubectl and kube-rs read it.
        let dir = crate::cluster_dir();
        let path = dir.join(file);
        let tmp = dir.join(format!("{file}.{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading kubeconfig {}", kubeconfig.display()))?;
    kube::Client::try_from(config).context("building the kube client")
}
