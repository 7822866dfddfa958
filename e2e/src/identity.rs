//! A sidecar's side of workload identity, for tests of the certified control plane: a pod-bound
//! ServiceAccount token (what the kubelet projects into the pod), a fresh key and certificate request
//! (`switchyard_identity::ca::key_and_request`, as the sidecar makes them), `Identity.Certify`, and
//! gRPC channels over the mesh's TLS that check the server is the operator (`MeshConnector` with
//! `Expect::Operator`, as the sidecar dials the control plane).

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::tls::{self, Expect};
use switchyard_identity::{CertStore, Peer, ca, peer};
use switchyard_protocol::control::v1::identity_client::IdentityClient;
use switchyard_protocol::control::v1::{CertifyReply, CertifyRequest};
use tonic::transport::{Channel, Endpoint};

/// Lifetime asked for the tokens: the shortest the API server issues.
const TOKEN_SECONDS: i64 = 600;

/// A token of `pod`'s ServiceAccount bound to the pod (its name and uid) for `audience`, made by
/// the TokenRequest API as the kubelet makes a projected one.
pub async fn pod_token(client: &kube::Client, pod: &Pod, audience: &str) -> Result<String> {
    let namespace = pod.namespace().context("the pod has no namespace")?;
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
        },
        ..TokenRequest::default()
    };
    let made = Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .with_context(|| {
            format!(
                "a token of ServiceAccount {namespace}/{account} bound to pod {}",
                pod.name_any()
            )
        })?;
    let token = made.status.map(|s| s.token).unwrap_or_default();
    if token.is_empty() {
        bail!("the TokenRequest for pod {} holds no token", pod.name_any());
    }
    Ok(token)
}

/// A channel to the operator's control plane at `url` (`https://127.0.0.1:PORT`) over the mesh's
/// TLS: the server's chain checked against `trust` and its identity checked to be the operator's;
/// `store`'s certificate presented when given (none: a sidecar asking for its first one).
pub async fn channel(
    url: &str,
    trust: &[CertificateDer<'static>],
    store: Option<Arc<CertStore>>,
) -> Result<Channel> {
    let config = tls::client_config(store, tls::roots(trust)?, &[tls::H2_ALPN])?;
    let connector = MeshConnector::new(Arc::new(config), Expect::Operator);
    Endpoint::from_shared(url.to_owned())
        .with_context(|| format!("control-plane URL {url:?}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(connector)
        .await
        .with_context(|| format!("connecting to {url} over mesh TLS"))
}

/// A certificate the Identity service issued, installed as a sidecar installs it.
pub struct Certified {
    /// The certificate and its key, for channels that present it.
    pub store: Arc<CertStore>,
    /// Who the leaf names (identity and pod).
    pub peer: Peer,
    /// The answer as it came.
    pub reply: CertifyReply,
}

/// `Identity.Certify` over `channel` with `token` and a fresh key's request. The outer error is a
/// failure of the test's own side; the inner one the service's refusal.
pub async fn certify(
    channel: Channel,
    token: &str,
) -> Result<std::result::Result<Certified, tonic::Status>> {
    let (key, csr) = ca::key_and_request().context("a key and certificate request")?;
    let answer = IdentityClient::new(channel)
        .certify(CertifyRequest {
            token: token.to_owned(),
            csr,
        })
        .await;
    let reply = match answer {
        Ok(r) => r.into_inner(),
        Err(status) => return Ok(Err(status)),
    };
    let chain: Vec<CertificateDer<'static>> = reply
        .chain
        .iter()
        .cloned()
        .map(CertificateDer::from)
        .collect();
    let leaf = chain.first().context("the reply holds no certificate")?;
    let peer = peer::identity(leaf).context("the issued certificate names no mesh identity")?;
    let store = Arc::new(CertStore::default());
    store
        .install(
            chain,
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            UNIX_EPOCH + Duration::from_millis(reply.not_after_ms),
        )
        .context("installing the issued certificate")?;
    Ok(Ok(Certified { store, peer, reply }))
}
