//! The operator chart with mesh TLS on, as a release of its own: `switchyard-mtls` in namespace
//! `switchyard-mtls`, with no operator pods (`replicaCount: 0`; the tests run the operator as local
//! processes under its ServiceAccount). Its ClusterRole and Role are what the chart grants for
//! certifying sidecars (TokenReview; pods and ReplicaSets get; the CA Secret in its namespace), so
//! an operator run as it has exactly those rights, while the shared release in switchyard-system
//! keeps the values the other tests check.

use crate::cluster::Cluster;
use crate::operator::{OperatorLock, RunAs};
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use std::time::Duration;

/// Helm release (and full name of its objects, its ServiceAccount among them).
pub const RELEASE: &str = "switchyard-mtls";
/// Its namespace, where the operators run and keep the CA Secret and their Lease.
pub const NAMESPACE: &str = "switchyard-mtls";
/// The CA Secret the operator makes on first start (operator `DEFAULT_SECRET`).
pub const CA_SECRET: &str = "switchyard-ca";

/// The installed release; [`MeshRelease::uninstall`] removes it.
#[derive(Debug)]
pub struct MeshRelease {
    _private: (),
}

/// The chart values that differ from its defaults.
const VALUES: &str = "replicaCount=0,meshTLS.enabled=true";

impl MeshRelease {
    /// Installs (or upgrades) the release and deletes the CA Secret an earlier run left, so the
    /// operators started next make the CA themselves. Only under the operator lock: no operator of
    /// another test may be using that CA.
    pub async fn install(cluster: &Cluster, _lock: &OperatorLock) -> Result<MeshRelease> {
        cluster
            .helm()
            .args(["upgrade", "--install", RELEASE])
            .arg(crate::charts_dir().join("switchyard"))
            .args(["--namespace", NAMESPACE, "--create-namespace"])
            .args(["--set", VALUES, "--wait=false"])
            .timeout(Duration::from_secs(180))
            .ok()
            .await
            .context("helm install of the operator chart with meshTLS.enabled=true")?;
        let secrets: Api<Secret> = Api::namespaced(cluster.client().await?, NAMESPACE);
        match secrets.delete(CA_SECRET, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("deleting the CA Secret {NAMESPACE}/{CA_SECRET} of an earlier run")
                });
            }
        }
        crate::eventually("the old CA Secret to be gone", crate::timeout(), || async {
            anyhow::ensure!(
                secrets.get_opt(CA_SECRET).await?.is_none(),
                "{CA_SECRET} still exists"
            );
            Ok(())
        })
        .await?;
        Ok(MeshRelease { _private: () })
    }

    /// The release an operator runs under.
    pub fn run_as(&self) -> RunAs {
        RunAs {
            namespace: NAMESPACE.into(),
            service_account: RELEASE.into(),
        }
    }

    /// `helm uninstall` (its ClusterRole and binding go with it; the namespace and the CA Secret
    /// stay until the next run's install).
    pub async fn uninstall(self, cluster: &Cluster) -> Result<()> {
        cluster.helm_uninstall(RELEASE, NAMESPACE).await
    }
}
