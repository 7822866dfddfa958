//! This sidecar's workload identity: it reads the mesh's trust bundle, trades its token (the pod's
//! projected ServiceAccount token, or the one `switchyard up` wrote) and a certificate request for a
//! short-lived certificate at the Identity service, installs it in the store every handshake reads,
//! and renews it at two thirds of what is left of its life, with no restart. A failed renewal is
//! retried with backoff while the current certificate still serves.
//!
//! Between renewals it asks the service what the mesh trusts (`Trust`, every
//! `SWITCHYARD_IDENTITY_TRUST_POLL`): new anchors or issuers go into the trust store every handshake
//! reads, and a new signer means renewing at once, so a CA rotation needs no restart.

use super::control_plane::ControlPlane;
use super::mesh::{HandshakeCounts, MeshTls};
use crate::backoff;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_identity::Trust;
use switchyard_identity::tls::TlsError;
use switchyard_identity::{Kind, ca, peer, pem};
use switchyard_protocol::control::v1::identity_client::IdentityClient;
use switchyard_protocol::control::v1::{CertifyRequest, TrustRequest};
use switchyard_protocol::env;

/// Longest wait for one Certify answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_BASE: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often the trust is asked for by default.
const TRUST_POLL: Duration = Duration::from_secs(10);

/// Where the identity comes from.
#[derive(Clone, Debug)]
pub(crate) struct IdentitySettings {
    /// The Identity service (`https://...`).
    pub(crate) url: String,
    /// The token file, read at every certification.
    pub(crate) token_file: PathBuf,
    /// The trust bundle (PEM).
    pub(crate) trust_file: PathBuf,
    /// How often the trust is asked for.
    pub(crate) trust_poll: Duration,
}

impl IdentitySettings {
    /// From the environment; `None` when `SWITCHYARD_IDENTITY` is unset (mesh TLS off).
    pub(crate) fn from_env() -> Option<IdentitySettings> {
        let url = std::env::var(env::IDENTITY)
            .ok()
            .filter(|u| !u.is_empty())?;
        let path = |name: &str, default: PathBuf| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or(default)
        };
        let trust_poll = std::env::var(env::IDENTITY_TRUST_POLL)
            .ok()
            .filter(|v| !v.is_empty())
            .and_then(|v| match humantime::parse_duration(&v) {
                Ok(d) if d >= Duration::from_millis(100) => Some(d),
                _ => {
                    tracing::warn!(
                        value = %v,
                        "{} is not a duration of at least 100ms; asking every {}s",
                        env::IDENTITY_TRUST_POLL,
                        TRUST_POLL.as_secs()
                    );
                    None
                }
            })
            .unwrap_or(TRUST_POLL);
        Some(IdentitySettings {
            trust_poll,
            url,
            token_file: path(
                env::IDENTITY_TOKEN_FILE,
                Path::new(switchyard_identity::TOKEN_DIR).join(switchyard_identity::TOKEN_FILE),
            ),
            trust_file: path(
                env::IDENTITY_TRUST_FILE,
                Path::new(switchyard_protocol::config::MOUNT_DIR)
                    .join(switchyard_identity::TRUST_FILE),
            ),
        })
    }
}

/// Why mesh TLS cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    /// The trust bundle is missing or unusable.
    #[error("mesh trust bundle {file} ({var}): {why}")]
    Trust {
        /// The file.
        file: PathBuf,
        /// The variable that names it.
        var: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The Identity service URL is unusable.
    #[error("{var} {url:?}: {why}")]
    Url {
        /// The variable.
        var: &'static str,
        /// Its value.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the settings.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// What this sidecar must be certified as: a certificate naming another workload (a token of
/// another pod, a mix-up of configs) is not installed.
#[derive(Clone, Debug)]
pub(crate) struct Expected {
    /// Router or Manager.
    pub(crate) kind: Kind,
    /// The namespace.
    pub(crate) namespace: String,
    /// The Router's or Manager's name.
    pub(crate) name: String,
}

/// The metrics the identity loop keeps.
#[derive(Clone)]
pub(crate) struct IdentityMetrics {
    /// End of the current certificate's validity, seconds since the epoch.
    pub(crate) not_after: Gauge,
    /// Certifications by result (`ok`, `failed`).
    pub(crate) certifications: Family<Vec<(&'static str, &'static str)>, Counter>,
    /// Handshakes of the mesh TLS.
    pub(crate) handshakes: HandshakeCounts,
    /// New trust taken while running.
    pub(crate) trust_updates: Counter,
}

/// Gets and renews the certificate.
pub(crate) struct Certifier {
    settings: IdentitySettings,
    expected: Expected,
    mesh: Arc<MeshTls>,
    issuer: ControlPlane,
    metrics: IdentityMetrics,
    /// The issuer that signed the installed certificate (empty from a service that does not say).
    signer: std::sync::Mutex<Vec<u8>>,
}

/// Reads the trust bundle and builds the mesh TLS, with no certificate yet.
pub(crate) fn prepare(
    settings: IdentitySettings,
    expected: Expected,
    metrics: IdentityMetrics,
) -> Result<(Arc<MeshTls>, Certifier), IdentityError> {
    let trust_err = |why: String| IdentityError::Trust {
        file: settings.trust_file.clone(),
        var: env::IDENTITY_TRUST_FILE,
        why,
    };
    let text = std::fs::read(&settings.trust_file).map_err(|e| trust_err(e.to_string()))?;
    let trust = pem::parse_certs(&text).map_err(trust_err)?;
    let mesh = Arc::new(MeshTls::new(
        Arc::default(),
        &trust,
        metrics.handshakes.clone(),
    )?);
    if !settings.url.starts_with("https://") {
        return Err(IdentityError::Url {
            var: env::IDENTITY,
            url: settings.url.clone(),
            why: "must start with https://".into(),
        });
    }
    let issuer = ControlPlane::new(&settings.url, Some(&mesh)).map_err(|e| IdentityError::Url {
        var: env::IDENTITY,
        url: settings.url.clone(),
        why: e.to_string(),
    })?;
    let certifier = Certifier {
        settings,
        expected,
        mesh: mesh.clone(),
        issuer,
        metrics,
        signer: std::sync::Mutex::default(),
    };
    Ok((mesh, certifier))
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Certifier {
    /// Gets the first certificate, retrying with backoff until one is installed; returns when
    /// renewal is due.
    pub(crate) async fn first(&self) -> Duration {
        self.until_certified(true).await
    }

    /// Renews forever, starting `wait` from now, and asks for the trust every poll interval,
    /// renewing at once when another issuer signs (the task is dropped at shutdown).
    pub(crate) async fn renew_forever(self, wait: Duration) {
        let channel = self.issuer.connect_lazy();
        let mut due = tokio::time::Instant::now() + wait;
        let mut poll = tokio::time::interval_at(
            tokio::time::Instant::now() + self.settings.trust_poll,
            self.settings.trust_poll,
        );
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                _ = poll.tick() => match self.refresh_trust(channel.clone()).await {
                    Ok(false) => continue,
                    Ok(true) => tracing::info!("another mesh issuer signs now; renewing the certificate early"),
                    Err(why) => {
                        tracing::debug!(identity_service = %self.settings.url, reason = %why, "cannot ask the mesh trust; asking again later");
                        continue;
                    }
                },
            }
            let wait = self.until_certified(false).await;
            due = tokio::time::Instant::now() + wait;
        }
    }

    /// Asks what the mesh trusts now and applies it; returns whether another issuer signs than
    /// the one that signed this sidecar's certificate.
    async fn refresh_trust(&self, channel: tonic::transport::Channel) -> Result<bool, String> {
        let mut client = IdentityClient::new(channel);
        let reply = tokio::time::timeout(CALL_TIMEOUT, client.trust(TrustRequest {}))
            .await
            .map_err(|_| "the identity service did not answer in time".to_owned())?
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
            .into_inner();
        self.apply_trust(reply.anchors, reply.issuers);
        let mine = self.signer.lock().map(|s| s.clone()).unwrap_or_default();
        Ok(!reply.signer.is_empty() && !mine.is_empty() && reply.signer != mine)
    }

    /// Trusts `anchors` and `issuers` (DER, as the service sent them) from the next handshake on.
    /// No anchors: the service said nothing (an older one), the trust stays. No issuers: it pins
    /// none, any chain to an anchor is accepted, as before issuers were listed.
    fn apply_trust(&self, anchors: Vec<Vec<u8>>, issuers: Vec<Vec<u8>>) {
        if anchors.is_empty() {
            return;
        }
        let der = |v: Vec<Vec<u8>>| -> Vec<CertificateDer<'static>> {
            v.into_iter().map(CertificateDer::from).collect()
        };
        let trust = Trust {
            anchors: der(anchors),
            issuers: (!issuers.is_empty()).then(|| der(issuers)),
        };
        let (roots, pinned) = (
            trust.anchors.len(),
            trust.issuers.as_ref().map_or(0, Vec::len),
        );
        match self.mesh.trust().set(trust) {
            Ok(false) => {}
            Ok(true) => {
                self.metrics.trust_updates.inc();
                tracing::info!(
                    anchors = roots,
                    issuers = pinned,
                    "mesh trust updated; new handshakes check peers against it"
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "the identity service sent an unusable trust bundle; keeping the current one")
            }
        }
    }

    async fn until_certified(&self, first: bool) -> Duration {
        let mut failures = 0u32;
        loop {
            match self.certify().await {
                Ok(not_after) => {
                    let wait = switchyard_identity::renew_in(SystemTime::now(), not_after);
                    tracing::info!(
                        identity = %self.mesh.identity().map(|i| i.uri()).unwrap_or_default(),
                        renew_in_s = wait.as_secs(),
                        "mesh certificate installed"
                    );
                    return wait;
                }
                Err(why) => {
                    self.count("failed");
                    let current = self.mesh.store().current();
                    let expired = current
                        .as_ref()
                        .is_none_or(|c| c.not_after <= SystemTime::now());
                    if failures == 0 || (expired && failures.is_multiple_of(10)) {
                        if first {
                            tracing::warn!(identity_service = %self.settings.url, reason = %why, "cannot get a mesh certificate yet; retrying");
                        } else if expired {
                            tracing::error!(identity_service = %self.settings.url, reason = %why, "mesh certificate expired and renewal fails; new connections fail until it succeeds");
                        } else {
                            tracing::warn!(identity_service = %self.settings.url, reason = %why, "mesh certificate renewal failed; retrying while the current one serves");
                        }
                    }
                    let wait = backoff::delay(RETRY_BASE, RETRY_MAX, failures, fastrand::f64());
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .certifications
            .get_or_create(&vec![("result", result)])
            .inc();
    }

    /// One certification; returns the end of the new certificate's validity.
    async fn certify(&self) -> Result<SystemTime, String> {
        // A small local file, read once per certification: not worth a blocking-pool hop.
        let token = std::fs::read_to_string(&self.settings.token_file).map_err(|e| {
            format!(
                "cannot read the token {}: {e}",
                self.settings.token_file.display()
            )
        })?;
        let token = token.trim().to_owned();
        if token.is_empty() {
            return Err(format!(
                "the token file {} is empty",
                self.settings.token_file.display()
            ));
        }
        let (key, csr) = ca::key_and_request().map_err(|e| e.to_string())?;
        let channel = self
            .issuer
            .connect()
            .await
            .map_err(|e| format!("cannot reach the identity service: {}", error_chain(&e)))?;
        let mut client = IdentityClient::new(channel);
        let reply =
            tokio::time::timeout(CALL_TIMEOUT, client.certify(CertifyRequest { token, csr }))
                .await
                .map_err(|_| "the identity service did not answer in time".to_owned())?
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
                .into_inner();
        let chain: Vec<CertificateDer<'static>> =
            reply.chain.into_iter().map(CertificateDer::from).collect();
        let leaf = chain.first().ok_or("the reply holds no certificate")?;
        let me = peer::identity(leaf).map_err(|e| e.to_string())?;
        let e = &self.expected;
        if me.id.kind != e.kind || me.id.namespace != e.namespace || me.id.name != e.name {
            return Err(format!(
                "the certificate names {}, but this sidecar is {} {}/{}; not installed",
                me.id, e.kind, e.namespace, e.name
            ));
        }
        // The trust first: peers certified by a new issuer are accepted before this sidecar shows
        // a certificate of it.
        self.apply_trust(reply.trust_bundle, reply.issuers);
        let not_after = from_ms(reply.not_after_ms);
        self.mesh
            .store()
            .install(
                chain,
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                not_after,
            )
            .map_err(|e| e.to_string())?;
        if let Ok(mut signer) = self.signer.lock() {
            *signer = reply.signer;
        }
        self.count("ok");
        let secs = not_after
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.metrics.not_after.set(secs);
        Ok(not_after)
    }
}

/// An error with its sources, e.g. `transport error: tls handshake: invalid peer certificate`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}
