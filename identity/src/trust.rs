//! What the mesh trusts, swappable at run time: the trust anchors (one or more roots, so a rotation
//! can add the new root before anything is signed under it) and the issuers (the CAs that sign
//! workload certificates). A peer's certificate must chain to an anchor *and* be signed directly by
//! a listed issuer, so a certificate from another issuer under a shared root (a cluster-wide
//! cert-manager CA, say) is refused even when it names a mesh identity.
//!
//! [`TrustStore`] holds the current [`Trust`] behind an `ArcSwap`; the verifiers of
//! [`crate::tls`] read it at every handshake, so a new bundle applies to the next handshake without
//! rebuilding any rustls config, and open connections keep going.

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why a trust bundle is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// No anchor at all.
    #[error("the trust bundle holds no root")]
    Empty,
    /// A certificate rustls cannot use as an anchor.
    #[error("the trust bundle's certificate {index} is unusable: {why}")]
    Unusable {
        /// Its position (0 is the first).
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// rustls refused to build a verifier over it.
    #[error("cannot verify clients against the trust bundle: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The anchors and issuers the mesh trusts now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    /// The roots a peer's chain must end in.
    pub anchors: Vec<CertificateDer<'static>>,
    /// The CAs a peer's certificate must be signed by directly; `None` while they are not known (a
    /// sidecar before its first answer from the identity service): then any chain to an anchor.
    pub issuers: Option<Vec<CertificateDer<'static>>>,
}

impl Trust {
    /// Trust in `anchors` with the issuers not pinned.
    pub fn anchors_only(anchors: Vec<CertificateDer<'static>>) -> Trust {
        Trust {
            anchors,
            issuers: None,
        }
    }
}

fn store(certs: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, TrustError> {
    let mut store = RootCertStore::empty();
    for (index, c) in certs.iter().enumerate() {
        store.add(c.clone()).map_err(|e| TrustError::Unusable {
            index,
            why: e.to_string(),
        })?;
    }
    if store.is_empty() {
        return Err(TrustError::Empty);
    }
    Ok(Arc::new(store))
}

/// A [`Trust`] made ready for handshakes.
struct Checks {
    trust: Trust,
    anchors: Arc<RootCertStore>,
    issuers: Option<Arc<RootCertStore>>,
    client_anchors: Arc<dyn ClientCertVerifier>,
    client_issuers: Option<Arc<dyn ClientCertVerifier>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Checks {
    fn new(trust: Trust) -> Result<Checks, TrustError> {
        let anchors = store(&trust.anchors)?;
        let issuers = trust.issuers.as_deref().map(store).transpose()?;
        let client = |roots: Arc<RootCertStore>| {
            WebPkiClientVerifier::builder_with_provider(roots, provider()).build()
        };
        Ok(Checks {
            client_anchors: client(anchors.clone())?,
            client_issuers: issuers.clone().map(client).transpose()?,
            anchors,
            issuers,
            trust,
        })
    }
}

/// The current trust, read by every handshake's verifier.
pub struct TrustStore {
    current: ArcSwap<Checks>,
    algs: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.current.load();
        f.debug_struct("TrustStore")
            .field("anchors", &c.trust.anchors.len())
            .field("issuers", &c.trust.issuers.as_ref().map(Vec::len))
            .finish()
    }
}

impl TrustStore {
    /// A store trusting `trust`.
    pub fn new(trust: Trust) -> Result<TrustStore, TrustError> {
        Ok(TrustStore {
            current: ArcSwap::from_pointee(Checks::new(trust)?),
            algs: provider().signature_verification_algorithms,
        })
    }

    /// Trusts `trust` from the next handshake on; returns whether it differs from what was
    /// trusted. A bundle that is unusable leaves the current one in place.
    pub fn set(&self, trust: Trust) -> Result<bool, TrustError> {
        if self.current.load().trust == trust {
            return Ok(false);
        }
        self.current.store(Arc::new(Checks::new(trust)?));
        Ok(true)
    }

    /// What is trusted now.
    pub fn trust(&self) -> Trust {
        self.current.load().trust.clone()
    }

    /// Checks a server's certificate: its chain ends in an anchor and an issuer signed it.
    pub(crate) fn verify_server(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let checks = self.current.load();
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &checks.anchors,
            intermediates,
            now,
            self.algs.all,
        )?;
        if let Some(issuers) = &checks.issuers {
            verify_server_cert_signed_by_trust_anchor(&parsed, issuers, &[], now, self.algs.all)
                .map_err(|_| not_by_issuer())?;
        }
        Ok(())
    }

    fn verify_client(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let checks = self.current.load();
        let verified = checks
            .client_anchors
            .verify_client_cert(end_entity, intermediates, now)?;
        if let Some(issuers) = &checks.client_issuers {
            issuers
                .verify_client_cert(end_entity, &[], now)
                .map_err(|_| not_by_issuer())?;
        }
        Ok(verified)
    }

    pub(crate) fn algs(&self) -> &WebPkiSupportedAlgorithms {
        &self.algs
    }
}

/// The refusal of a certificate that chains to an anchor but was not signed by a mesh issuer.
fn not_by_issuer() -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
        Arc::new(NotByIssuer),
    )))
}

struct NotByIssuer;

impl std::fmt::Display for NotByIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the certificate chains to a trusted root but was not signed by a mesh issuer")
    }
}

// rustls shows the cause with `Debug`: the sentence, not the type's name.
impl std::fmt::Debug for NotByIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for NotByIssuer {}

/// The server side's check of client certificates against a [`TrustStore`].
#[derive(Debug)]
pub(crate) struct MeshClientVerifier {
    pub(crate) trust: Arc<TrustStore>,
    pub(crate) mandatory: bool,
}

impl ClientCertVerifier for MeshClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The anchors change at run time and this answer borrows from self; mesh clients show their
        // one certificate whatever the hints say.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.trust.verify_client(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, self.trust.algs())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, self.trust.algs())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.trust.algs().supported_schemes()
    }
}

/// The end of `cert`'s validity, when it parses.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert).ok()?;
    let secs = u64::try_from(x509.validity().not_after.timestamp()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Seconds since the epoch of `t` (for gauges).
pub fn epoch_seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
