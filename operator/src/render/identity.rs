//! A pod's mesh identity (pure): the projected ServiceAccount token the sidecar proves itself with
//! (audience `switchyard-identity`, an hour long, rotated by the kubelet), the Identity service's
//! URL, and the mesh's trust bundle next to the sidecar's config. The pod mounts no default API
//! token: nothing in it needs the API server unless the user's template says so.

use super::RenderSettings;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PodSpec, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use std::sync::Arc;
use switchyard_identity::{TOKEN_AUDIENCE, TOKEN_DIR, TOKEN_FILE};
use switchyard_protocol::env;

/// Name of the token volume; reserved in Manager templates.
pub const TOKEN_VOLUME: &str = "switchyard-identity";
/// Lifetime of the projected token; the kubelet rotates it at 80 %.
pub(crate) const TOKEN_SECONDS: i64 = 3600;

/// What the operator's mesh TLS gives every sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshRender {
    /// The Identity service (the control plane's URL).
    pub identity_url: String,
    /// The roots the mesh trusts, PEM: `ca.crt` in each sidecar's ConfigMap.
    pub trust_bundle: TrustBundle,
}

/// The roots the mesh trusts as each render sees them: after a rotation the next reconcile writes
/// the new bundle, so pods started later trust it from their first call. It is not part of the
/// config hash: running sidecars take a new bundle from the Identity service's `Trust` answer, and
/// a rotation restarts no pod.
#[derive(Clone)]
pub struct TrustBundle(Arc<dyn Fn() -> String + Send + Sync>);

impl TrustBundle {
    /// The bundle `read` gives at each render.
    pub fn live(read: impl Fn() -> String + Send + Sync + 'static) -> TrustBundle {
        TrustBundle(Arc::new(read))
    }

    /// The PEM now.
    pub(crate) fn pem(&self) -> String {
        (self.0)()
    }
}

impl From<&str> for TrustBundle {
    fn from(pem: &str) -> TrustBundle {
        let pem = pem.to_owned();
        TrustBundle::live(move || pem.clone())
    }
}

impl PartialEq for TrustBundle {
    fn eq(&self, other: &TrustBundle) -> bool {
        self.pem() == other.pem()
    }
}

impl Eq for TrustBundle {}

impl std::fmt::Debug for TrustBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TrustBundle").field(&self.pem()).finish()
    }
}

/// Makes `pod` mount no default ServiceAccount token unless its template asks for one.
pub(crate) fn no_default_token(pod: &mut PodSpec) {
    pod.automount_service_account_token.get_or_insert(false);
}

/// Adds the token volume to `pod`, and its mount and the identity environment to `sidecar`, when
/// mesh TLS is on.
pub(crate) fn apply(settings: &RenderSettings, pod: &mut PodSpec, sidecar: &mut Container) {
    let Some(mesh) = &settings.mesh else {
        return;
    };
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: TOKEN_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(TOKEN_AUDIENCE.into()),
                    expiration_seconds: Some(TOKEN_SECONDS),
                    path: TOKEN_FILE.into(),
                }),
                ..VolumeProjection::default()
            }]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    });
    sidecar
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: TOKEN_VOLUME.into(),
            mount_path: TOKEN_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    // The token and trust files are where the sidecar looks by default.
    sidecar.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: env::IDENTITY.into(),
        value: Some(mesh.identity_url.clone()),
        ..EnvVar::default()
    });
}

/// The trust bundle entry of a sidecar ConfigMap, when mesh TLS is on.
pub(crate) fn trust_entry(settings: &RenderSettings) -> Option<(String, String)> {
    settings.mesh.as_ref().map(|m| {
        (
            switchyard_identity::TRUST_FILE.to_owned(),
            m.trust_bundle.pem(),
        )
    })
}
