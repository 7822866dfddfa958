//! Workload identity in the operator: the mesh CA (from a Secret, made on first start or given by
//! the user, watched so a rotation applies without a restart), the `Identity` service next to the
//! control plane (a TokenReview of the sidecar's projected token, then its pod and owner), and the
//! operator's own serving certificate, renewed at two thirds of its life and re-signed when another
//! issuer signs.
//!
//! `owner` is the pure core (review status, pod, owners -> who), `review` the API shell,
//! `throttle` what keeps it cheap (rate limits per caller, reviews cached by token hash),
//! `ca_secret` the CA's storage, `rotation` the watch of it, `leaves` the certificates in use and
//! `gone_pods` what forgets those of deleted pods, `expiry` what the `MeshTrust` condition says and
//! `condition` its writer.

pub(crate) mod ca_secret;
pub(crate) mod condition;
pub(crate) mod expiry;
pub(crate) mod gone_pods;
pub(crate) mod leaves;
pub(crate) mod owner;
pub(crate) mod review;
pub(crate) mod rotation;
pub(crate) mod throttle;

use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::issuing::{Issuing, RotateError};
use switchyard_identity::service::{IdentityService, Observer, Refusal};
use switchyard_identity::tls::{self, ClientAuth, Expect, TlsError};
use switchyard_identity::{Authority, Ca, CertStore, Kind, SpiffeId, Subject};

/// Name of the operator in its own identity, `spiffe://<td>/ns/<namespace>/operator/switchyard`.
pub(crate) const OPERATOR_NAME: &str = "switchyard";

/// A refusal of a certificate request.
pub(crate) fn service_refusal(
    code: tonic::Code,
    reason: &'static str,
    message: impl Into<String>,
) -> Refusal {
    Refusal {
        code,
        reason,
        message: message.into(),
    }
}

/// What the Identity service reports: counters in the metrics, leaves in the book.
struct ServiceObserver {
    metrics: Arc<Metrics>,
    leaves: Arc<leaves::LeafBook>,
}

impl Observer for ServiceObserver {
    fn issued(&self, id: &SpiffeId) {
        self.metrics.certificate_issued(id.kind.as_str());
    }

    fn leaf(
        &self,
        subject: &Subject,
        not_after: SystemTime,
        signer: &rustls_pki_types::CertificateDer<'_>,
    ) {
        self.leaves.issued(subject, not_after, signer);
    }

    fn refused(&self, reason: &'static str) {
        self.metrics.identity_refused(reason);
    }
}

/// Why identity cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    /// The CA Secret.
    #[error(transparent)]
    Ca(#[from] ca_secret::CaSecretError),
    /// The operator's own identity is not valid.
    #[error("the operator's identity: {0}")]
    Id(#[from] switchyard_identity::spiffe::ParseError),
    /// Its certificate or trust could not be set up.
    #[error("the operator's certificate: {0}")]
    Issue(#[from] RotateError),
    /// TLS setup failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Where the CA is and what certificates say.
#[derive(Clone, Debug)]
pub(crate) struct IdentitySettings {
    /// Trust domain of every identity.
    pub trust_domain: String,
    /// The CA Secret's name, and whether the user gave it (then it is never made here).
    pub ca_secret: (String, bool),
    /// The operator's namespace (the CA Secret's, and the operator's own identity).
    pub namespace: String,
    /// The operator's pod name (its certificate's common name).
    pub pod: String,
    /// Lifetime of the certificates issued.
    pub lifetime: Duration,
    /// How long a new issuer is announced before it signs.
    pub activation_delay: Duration,
}

/// The operator's identity state.
pub(crate) struct MeshIdentity {
    /// The CA that signs, the operator's own certificate and the trust its TLS checks.
    pub issuing: Arc<Issuing>,
    /// Settings.
    pub settings: IdentitySettings,
    /// The certificates issued that are still in use.
    pub leaves: Arc<leaves::LeafBook>,
    /// Bumped when the trust (anchors or issuers) changes: the controllers re-render every
    /// sidecar ConfigMap's `ca.crt` at once, so a pod that starts during a rotation trusts the
    /// new root from its first call (the operator's own certificate moves to the new issuer).
    trust_changes: tokio::sync::watch::Sender<u64>,
}

impl MeshIdentity {
    /// Says that the trust changed (the rotation watch calls it).
    pub(crate) fn trust_changed(&self) {
        self.trust_changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Follows the changes [`MeshIdentity::trust_changed`] says.
    pub(crate) fn trust_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.trust_changes.subscribe()
    }

    /// Loads (or makes) the CA and certifies the operator itself.
    pub(crate) async fn start(
        client: &kube::Client,
        settings: IdentitySettings,
    ) -> Result<Arc<MeshIdentity>, IdentityError> {
        let (secret, given) = &settings.ca_secret;
        let ca = ca_secret::load_or_create(
            client,
            &settings.namespace,
            secret,
            *given,
            &settings.trust_domain,
        )
        .await?;
        Ok(Arc::new(MeshIdentity::with_ca(ca, settings)?))
    }

    fn with_ca(ca: Ca, settings: IdentitySettings) -> Result<MeshIdentity, IdentityError> {
        let subject = Subject {
            id: SpiffeId::new(
                &settings.trust_domain,
                &settings.namespace,
                Kind::Operator,
                OPERATOR_NAME,
            )?,
            pod: settings.pod.clone(),
        };
        let authority = Arc::new(Authority::new(ca, settings.activation_delay));
        Ok(MeshIdentity {
            issuing: Arc::new(Issuing::new(authority, subject, settings.lifetime)?),
            settings,
            leaves: Arc::default(),
            trust_changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The CA that signs now.
    pub(crate) fn ca(&self) -> Arc<Ca> {
        self.issuing.authority.ca()
    }

    /// The operator's own certificate, served by the control plane.
    pub(crate) fn store(&self) -> &Arc<CertStore> {
        &self.issuing.store
    }

    /// Renews the operator's own certificate at two thirds of what is left, forever.
    pub(crate) async fn renew_forever(self: Arc<Self>) {
        loop {
            let not_after = self
                .store()
                .current()
                .map_or_else(SystemTime::now, |c| c.not_after);
            tokio::time::sleep(switchyard_identity::renew_in(SystemTime::now(), not_after)).await;
            // A rotation may have re-signed it meanwhile: renew only what is due.
            let due = self.store().current().is_none_or(|c| {
                switchyard_identity::renew_in(SystemTime::now(), c.not_after)
                    <= Duration::from_secs(1)
            });
            if !due {
                continue;
            }
            match self.issuing.certify_self() {
                Ok(_) => tracing::info!("control-plane certificate renewed"),
                Err(e) => tracing::error!(error = %e, "control-plane certificate renewal failed"),
            }
        }
    }

    /// The operator's own identity (its NATS user's name, among others).
    pub(crate) fn operator_id(&self) -> &SpiffeId {
        &self.issuing.subject().id
    }

    /// A client config for the JetStream servers: the operator's certificate shown, the server
    /// checked to be the one the mesh CA certified as JetStream.
    pub(crate) fn jetstream_client(&self) -> Result<rustls::ClientConfig, TlsError> {
        tls::jetstream_client_config(self.store().clone(), self.issuing.trust.clone())
    }

    /// The roots the mesh trusts now, PEM (rendered into every sidecar's config map).
    pub(crate) fn trust_pem(&self) -> String {
        switchyard_identity::pem::certs(&self.issuing.authority.trust().anchors)
    }

    /// The control plane's TLS: the operator's certificate; client certificates required and
    /// checked against the CA (a client without one fails the handshake).
    pub(crate) fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        tls::server_config(
            self.store().clone(),
            self.issuing.trust.clone(),
            ClientAuth::Required,
            &[tls::H2_ALPN],
        )
    }

    /// The Identity listener's TLS: the operator's certificate; client certificates optional (a
    /// sidecar asking for its first certificate has none), checked against the CA when sent.
    pub(crate) fn identity_server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        tls::server_config(
            self.store().clone(),
            self.issuing.trust.clone(),
            ClientAuth::Optional,
            &[tls::H2_ALPN],
        )
    }

    /// How a standby dials the leader's control plane: this replica's certificate presented, the
    /// other end checked to be the operator.
    pub(crate) fn forward_connector(&self) -> Result<MeshConnector, TlsError> {
        let config = tls::client_config(
            Some(self.store().clone()),
            self.issuing.trust.clone(),
            &[tls::H2_ALPN],
        )?;
        Ok(MeshConnector::new(Arc::new(config), Expect::Operator))
    }

    /// The Identity service, reviewing tokens with `client`.
    pub(crate) fn service(
        &self,
        client: kube::Client,
        metrics: Arc<Metrics>,
        scope: crate::scope::Scope,
    ) -> IdentityService<review::KubeAuthenticator> {
        let observer = Arc::new(ServiceObserver {
            metrics: metrics.clone(),
            leaves: self.leaves.clone(),
        });
        IdentityService::new(
            self.issuing.authority.clone(),
            review::KubeAuthenticator {
                client,
                trust_domain: self.settings.trust_domain.clone(),
                scope,
                throttle: Arc::default(),
                metrics: metrics.clone(),
            },
            self.settings.lifetime,
            observer,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn identity() -> MeshIdentity {
        let (ca, _) = Ca::generate("cluster.local", SystemTime::now()).expect("CA");
        let settings = IdentitySettings {
            trust_domain: "cluster.local".into(),
            ca_secret: (ca_secret::DEFAULT_SECRET.into(), false),
            namespace: "switchyard-system".into(),
            pod: "operator-0".into(),
            lifetime: Duration::from_secs(3600),
            activation_delay: Duration::ZERO,
        };
        MeshIdentity::with_ca(ca, settings).expect("certified")
    }

    /// Whether a client without a certificate gets an answer over `config`: a TLS 1.3 client
    /// finishes its side before the server checks its certificate, so the server's refusal shows
    /// at the first read.
    async fn anonymous_gets_through(me: &MeshIdentity, config: rustls::ServerConfig) -> bool {
        let client = tls::client_config(
            None,
            tls::roots(me.ca().trust()).expect("roots"),
            &[tls::H2_ALPN],
        )
        .expect("client config");
        let (c, s) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut conn = tokio_rustls::TlsAcceptor::from(Arc::new(config))
                .accept(s)
                .await
                .ok()?;
            conn.write_all(b"hello").await.ok()?;
            conn.flush().await.ok()
        });
        let name = Expect::Operator.server_name().expect("name");
        let answered = async {
            let mut conn = tokio_rustls::TlsConnector::from(Arc::new(client))
                .connect(name, c)
                .await
                .ok()?;
            let mut buf = [0u8; 5];
            conn.read_exact(&mut buf).await.ok()?;
            Some(buf == *b"hello")
        }
        .await;
        let _ = server.await;
        answered == Some(true)
    }

    #[tokio::test]
    async fn the_control_plane_refuses_a_client_without_a_certificate_and_the_identity_port_takes_it()
     {
        let me = identity();
        let control_plane = me.server_config().expect("control-plane config");
        assert!(
            !anonymous_gets_through(&me, control_plane).await,
            "the control plane answered a client without a certificate"
        );
        let identity = me.identity_server_config().expect("identity config");
        assert!(
            anonymous_gets_through(&me, identity).await,
            "the Identity port refused a client without a certificate"
        );
    }
}
