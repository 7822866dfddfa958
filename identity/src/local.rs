//! The identity service of a local run (`switchyard up`, tests): an ephemeral CA made at start, a
//! token per process written to a private file, and the same `Identity` service a cluster's operator
//! serves, on a loopback port. Sidecars certify themselves through it exactly as in a cluster.

use crate::authority::Authority;
use crate::ca::{Ca, CaError, Subject};
use crate::issuing::{Issuing, RotateError};
use crate::service::{IdentityService, Observer, StaticTokens};
use crate::spiffe::{Kind, ParseError, SpiffeId};
use crate::tls::{self, ClientAuth, TlsError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_protocol::control::v1::identity_server::IdentityServer;
use tokio_rustls::TlsAcceptor;

/// Trust domain of local runs.
pub const LOCAL_TRUST_DOMAIN: &str = "local";

/// Why the local identity service cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The CA could not be made.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// Its own certificate could not be made.
    #[error("cannot certify the identity service: {0}")]
    Issue(String),
    /// Its own certificate or trust could not follow the CA.
    #[error("the identity service: {0}")]
    Rotate(#[from] RotateError),
    /// A workload name is not an identity.
    #[error(transparent)]
    Id(#[from] ParseError),
    /// TLS setup failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// No randomness for a token.
    #[error("the system has no randomness for tokens")]
    Random,
    /// The port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The CA and the tokens, before the service runs.
pub struct LocalIdentity {
    ca: Arc<Ca>,
    activation_delay: Duration,
    trust_domain: String,
    tokens: StaticTokens,
}

/// A server's certificate chain and private key, PEM, as a server program reads them from files.
pub struct ServerPem {
    /// The leaf first.
    pub chain: String,
    /// The private key (PKCS#8).
    pub key: String,
}

/// The running service.
pub struct Running {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The server task; abort it to stop.
    pub task: tokio::task::JoinHandle<()>,
    /// The CA it signs with and its own certificate and trust: a test rotates the CA through
    /// [`Issuing::offer`] as the operator does when its Secret changes.
    pub issuing: Arc<Issuing>,
}

impl LocalIdentity {
    /// A fresh CA for `trust_domain`.
    pub fn new(trust_domain: &str) -> Result<LocalIdentity, LocalError> {
        let (ca, _) = Ca::generate(trust_domain, SystemTime::now())?;
        Ok(LocalIdentity::with_ca(trust_domain, ca))
    }

    /// A service for `trust_domain` signing with `ca` (an issuer under roots of the caller's, as
    /// cert-manager would keep one).
    pub fn with_ca(trust_domain: &str, ca: Ca) -> LocalIdentity {
        LocalIdentity {
            ca: Arc::new(ca),
            activation_delay: Duration::ZERO,
            trust_domain: trust_domain.to_owned(),
            tokens: StaticTokens::default(),
        }
    }

    /// Announces a new issuer for `delay` before it signs (see [`Authority`]); none by default.
    pub fn with_activation_delay(mut self, delay: Duration) -> LocalIdentity {
        self.activation_delay = delay;
        self
    }

    /// The CA (tests sign their own clients with it).
    pub fn ca(&self) -> &Arc<Ca> {
        &self.ca
    }

    /// The trust bundle, PEM.
    pub fn trust_pem(&self) -> String {
        crate::pem::certs(self.ca.trust())
    }

    /// A certificate and key (PEM) for the run's JetStream server, valid from now for `lifetime`:
    /// the identity sidecars expect of it ([`crate::tls::Expect::JetStream`]).
    pub fn jetstream_server(&self, lifetime: Duration) -> Result<ServerPem, LocalError> {
        let subject = Subject {
            id: SpiffeId::new(&self.trust_domain, "local", Kind::JetStream, "nats")?,
            pod: "nats-server".into(),
        };
        let (issued, key) = self
            .ca
            .issue_with_new_key(&subject, lifetime, SystemTime::now())
            .map_err(|e| LocalError::Issue(e.to_string()))?;
        Ok(ServerPem {
            chain: crate::pem::certs(&issued.chain),
            key: key.serialize_pem(),
        })
    }

    /// A token for the workload `kind` `namespace/name`, running as `pod`.
    pub fn token(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        pod: &str,
    ) -> Result<String, LocalError> {
        let subject = Subject {
            id: SpiffeId::new(&self.trust_domain, namespace, kind, name)?,
            pod: pod.to_owned(),
        };
        self.tokens.add(subject).ok_or(LocalError::Random)
    }

    /// Serves on `addr` (port 0 picks one), certificates valid for `lifetime`.
    pub async fn serve(
        self,
        addr: SocketAddr,
        lifetime: Duration,
        observer: Arc<dyn Observer>,
    ) -> Result<Running, LocalError> {
        let own = Subject {
            id: SpiffeId::new(&self.trust_domain, "local", Kind::Operator, "identity")?,
            pod: "identity".into(),
        };
        let authority = Arc::new(Authority::new(self.ca, self.activation_delay));
        let issuing = Arc::new(Issuing::new(
            authority.clone(),
            own,
            lifetime.max(Duration::from_secs(24 * 3600)),
        )?);
        let config = tls::server_config(
            issuing.store.clone(),
            issuing.trust.clone(),
            ClientAuth::Optional,
            &[tls::H2_ALPN],
        )?;
        let listener =
            crate::incoming::bind(addr).map_err(|source| LocalError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| LocalError::Bind { addr, source })?;
        let service = IdentityService::new(authority, self.tokens, lifetime, observer);
        let incoming =
            crate::incoming::incoming(listener, TlsAcceptor::from(Arc::new(config)), || {});
        let task = tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(
                    IdentityServer::new(service)
                        .max_decoding_message_size(crate::service::MAX_MESSAGE),
                )
                .serve_with_incoming(incoming)
                .await
            {
                tracing::warn!(error = %e, "local identity service stopped");
            }
        });
        Ok(Running {
            url: format!("https://{bound}"),
            task,
            issuing,
        })
    }
}
