//! The `switchyard.v1.Identity` service: checks a token with an [`Authenticator`] (TokenReview in
//! the operator, the tokens it wrote in `switchyard up`), then signs the caller's certificate
//! request for what the token proved. One implementation for both modes, so local runs take the
//! same path as a cluster.

use crate::authority::Authority;
use crate::ca::{IssueError, MAX_CSR, Subject};
use crate::incoming::PeerInfo;
use crate::spiffe::SpiffeId;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq as _;
use switchyard_protocol::control::v1::identity_server::Identity;
use switchyard_protocol::control::v1::{CertifyReply, CertifyRequest, TrustReply, TrustRequest};
use tonic::{Code, Request, Response, Status};

/// Longest token accepted (a ServiceAccount token is about a kilobyte).
pub const MAX_TOKEN: usize = 16 * 1024;
/// Largest Certify message the server decodes.
pub const MAX_MESSAGE: usize = MAX_TOKEN + MAX_CSR + 1024;
/// Default certificate lifetime.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Why a token proves nothing: a gRPC code, a metric label and a message for the caller.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// UNAUTHENTICATED (the token), PERMISSION_DENIED (the pod is not a mesh workload),
    /// UNAVAILABLE (the check could not run).
    pub code: Code,
    /// Short label for metrics, e.g. `token`, `pod`, `owner`.
    pub reason: &'static str,
    /// What is wrong, for the caller's log.
    pub message: String,
}

/// Turns a token into the subject it proves.
#[tonic::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The pod `token` proves, and its identity; `remote` is the connection's source, for limits
    /// per caller.
    async fn authenticate(
        &self,
        token: &str,
        remote: Option<std::net::SocketAddr>,
    ) -> Result<Subject, Refusal>;
}

/// Hears what the service did, for metrics.
pub trait Observer: Send + Sync + 'static {
    /// A certificate was issued.
    fn issued(&self, _id: &SpiffeId) {}
    /// A certificate for `subject`, valid until `not_after`, was signed by `signer` (for the age
    /// of the leaves still in use, per issuer).
    fn leaf(
        &self,
        _subject: &Subject,
        _not_after: SystemTime,
        _signer: &rustls_pki_types::CertificateDer<'_>,
    ) {
    }
    /// A request was refused; `reason` is a metric label.
    fn refused(&self, _reason: &'static str) {}
}

/// An observer that does nothing.
pub struct Quiet;
impl Observer for Quiet {}

/// The service.
pub struct IdentityService<A> {
    authority: Arc<Authority>,
    auth: A,
    lifetime: Duration,
    observer: Arc<dyn Observer>,
}

impl<A: Authenticator> IdentityService<A> {
    /// A service signing with whatever CA `authority` holds at each request, certificates valid
    /// for `lifetime`.
    pub fn new(
        authority: Arc<Authority>,
        auth: A,
        lifetime: Duration,
        observer: Arc<dyn Observer>,
    ) -> Self {
        IdentityService {
            authority,
            auth,
            lifetime,
            observer,
        }
    }

    fn refuse(&self, reason: &'static str, status: Status) -> Status {
        self.observer.refused(reason);
        status
    }
}

fn der(certs: &[rustls_pki_types::CertificateDer<'_>]) -> Vec<Vec<u8>> {
    certs.iter().map(|c| c.to_vec()).collect()
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[tonic::async_trait]
impl<A: Authenticator> Identity for IdentityService<A> {
    async fn certify(
        &self,
        request: Request<CertifyRequest>,
    ) -> Result<Response<CertifyReply>, Status> {
        let info = request.extensions().get::<PeerInfo>();
        let remote = info.map(|p| p.remote).or_else(|| request.remote_addr());
        let presented = info.and_then(|p| p.peer.clone());
        let req = request.into_inner();
        if req.token.is_empty() {
            return Err(self.refuse("request", Status::invalid_argument("token is required")));
        }
        if req.token.len() > MAX_TOKEN {
            return Err(self.refuse(
                "request",
                Status::invalid_argument(format!("token is longer than {MAX_TOKEN} bytes")),
            ));
        }
        let subject = self
            .auth
            .authenticate(&req.token, remote)
            .await
            .map_err(|r| self.refuse(r.reason, Status::new(r.code, r.message)))?;
        // A renewal over a certificate must stay that certificate's workload: a token stolen from
        // another pod does not turn one workload into another on the same connection.
        if let Some(p) = presented
            && p.id != subject.id
        {
            return Err(self.refuse(
                "mismatch",
                Status::permission_denied(format!(
                    "the token proves {}, but the connection's certificate is {}",
                    subject.id, p.id
                )),
            ));
        }
        // One load: the reply's chain, signer and trust are of the same rotation state.
        let ca = self.authority.ca();
        let trust = self.authority.trust();
        let issued = ca
            .issue(&req.csr, &subject, self.lifetime, SystemTime::now())
            .map_err(|e| match e {
                IssueError::BadRequest(_) | IssueError::KeyType => {
                    self.refuse("request", Status::invalid_argument(e.to_string()))
                }
                IssueError::Sign(_) => self.refuse("sign", Status::internal(e.to_string())),
            })?;
        self.observer.issued(&subject.id);
        self.observer
            .leaf(&subject, issued.not_after, ca.issuer_cert());
        tracing::info!(identity = %subject.id, pod = %subject.pod, "certificate issued");
        Ok(Response::new(CertifyReply {
            identity: subject.id.uri(),
            chain: issued.chain.iter().map(|c| c.to_vec()).collect(),
            trust_bundle: der(&trust.anchors),
            not_before_ms: ms(issued.not_before),
            not_after_ms: ms(issued.not_after),
            issuers: der(trust.issuers.as_deref().unwrap_or_default()),
            signer: ca.issuer_cert().to_vec(),
        }))
    }

    async fn trust(&self, _request: Request<TrustRequest>) -> Result<Response<TrustReply>, Status> {
        let trust = self.authority.trust();
        Ok(Response::new(TrustReply {
            anchors: der(&trust.anchors),
            issuers: der(trust.issuers.as_deref().unwrap_or_default()),
            signer: self.authority.signer().to_vec(),
        }))
    }
}

/// Tokens made here, each standing for one subject: how `switchyard up` (and tests) prove who a
/// local process is, where there is no API server to review tokens.
#[derive(Default)]
pub struct StaticTokens {
    tokens: Vec<(Vec<u8>, Subject)>,
}

impl StaticTokens {
    /// A new random token for `subject`; `None` when the system has no randomness.
    pub fn add(&mut self, subject: Subject) -> Option<String> {
        let token = crate::random::token()?;
        self.tokens.push((token.as_bytes().to_vec(), subject));
        Some(token)
    }
}

#[tonic::async_trait]
impl Authenticator for StaticTokens {
    async fn authenticate(
        &self,
        token: &str,
        _remote: Option<std::net::SocketAddr>,
    ) -> Result<Subject, Refusal> {
        // Every entry is compared, in constant time, so timing tells nothing about which is close.
        let mut found = None;
        for (t, s) in &self.tokens {
            if bool::from(t.as_slice().ct_eq(token.as_bytes())) {
                found = Some(s.clone());
            }
        }
        found.ok_or_else(|| Refusal {
            code: Code::Unauthenticated,
            reason: "token",
            message: "the token is not one this identity service issued".into(),
        })
    }
}
