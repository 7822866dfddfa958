//! This sidecar's mesh identity at start-up: with `SWITCHYARD_IDENTITY` set, the first
//! certificate is obtained before any listener serves (the frame connections and the control plane
//! are then mTLS), and a task renews it; unset, the mesh runs on plain TCP and a warning says so.

use super::RunError;
use crate::metrics::Metrics;
use crate::net::identity::{self, Expected, IdentityMetrics, IdentitySettings};
use crate::net::mesh::MeshTls;
use std::sync::Arc;
use switchyard_identity::Kind;
use tokio::task::JoinHandle;

/// The mesh TLS and its renewal task, or `None` without an identity service.
pub(crate) struct MeshIdentity {
    /// The TLS every internal hop uses.
    pub(crate) mesh: Arc<MeshTls>,
    /// Renews the certificate; aborted at shutdown.
    pub(crate) renewal: JoinHandle<()>,
}

/// Certifies this sidecar as `kind` `namespace/name`; waits (retrying) for the first certificate,
/// or returns `Ok(None)` early when a signal asks to stop before one came.
pub(crate) async fn start(
    kind: Kind,
    namespace: &str,
    name: &str,
    metrics: &Metrics,
) -> Result<Option<MeshIdentity>, RunError> {
    let Some(settings) = IdentitySettings::from_env() else {
        tracing::warn!(
            "mesh TLS is off (SWITCHYARD_IDENTITY is unset): frame connections and the control plane are plain TCP"
        );
        return Ok(None);
    };
    let url = settings.url.clone();
    let (mesh, certifier) = identity::prepare(
        settings,
        Expected {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        },
        IdentityMetrics {
            not_after: metrics.mesh.not_after.clone(),
            certifications: metrics.mesh.certifications.clone(),
            handshakes: metrics.mesh.handshakes.clone(),
            trust_updates: metrics.mesh.trust_updates.clone(),
        },
    )?;
    tracing::info!(identity_service = %url, "getting a mesh certificate");
    let wait = tokio::select! {
        w = certifier.first() => w,
        () = crate::shutdown::signal() => return Err(RunError::Stopped),
    };
    let renewal = tokio::spawn(certifier.renew_forever(wait));
    Ok(Some(MeshIdentity { mesh, renewal }))
}
