//! The mesh's TLS (rustls, ring, TLS 1.3 only): the workload's current certificate (swapped on
//! renewal, read by every handshake, so renewal needs no restart), the server side that verifies
//! client certificates against the mesh's roots, and the client side that verifies the server's
//! chain and that it is the workload it meant to reach.
//!
//! Which workload a client expects travels as the TLS server name ([`Expect::server_name`]), so
//! rustls's per-name session cache and the verifier agree on it; SNI is not sent.

use crate::peer::{self, Peer};
use crate::spiffe::{Kind, SpiffeId};
use crate::trust::{MeshClientVerifier, Trust, TrustError, TrustStore};
use arc_swap::ArcSwapOption;
use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::sync::Arc;
use std::time::SystemTime;

/// ALPN of the router -> manager frame connections.
pub const FRAMES_ALPN: &[u8] = b"switchyard-frames/1";
/// ALPN of gRPC over the mesh (the control plane).
pub const H2_ALPN: &[u8] = b"h2";
/// Suffix of the server names that carry an expectation.
const NAME_SUFFIX: &str = "id.switchyard";

/// Why a TLS config cannot be built or a certificate installed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No root to trust, or one rustls cannot use.
    #[error("the mesh trust bundle: {0}")]
    Bundle(#[from] TrustError),
    /// A chain without a certificate.
    #[error("the certificate chain is empty")]
    EmptyChain,
    /// rustls refused the settings or the key.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
    /// The certificate names no mesh identity.
    #[error(transparent)]
    Peer(#[from] peer::PeerError),
    /// An expected workload whose name or namespace is not a DNS label.
    #[error("{0:?} does not name a workload (names and namespaces are DNS labels)")]
    Name(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A trust store of the anchors `trust`, issuers not pinned (any chain to them is accepted); every
/// certificate must be usable. [`TrustStore::set`] pins the issuers later.
pub fn roots(trust: &[CertificateDer<'static>]) -> Result<Arc<TrustStore>, TlsError> {
    Ok(Arc::new(TrustStore::new(Trust::anchors_only(
        trust.to_vec(),
    ))?))
}

/// The workload's current certificate and key, and who they say it is.
#[derive(Debug, Default)]
pub struct CertStore {
    current: ArcSwapOption<Installed>,
}

/// What is installed.
#[derive(Debug)]
pub struct Installed {
    /// Chain and key, as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// Who the leaf names.
    pub me: Peer,
    /// End of validity.
    pub not_after: SystemTime,
}

impl CertStore {
    /// Installs a new chain (leaf first) and its key; new handshakes use them at once, open
    /// connections keep theirs.
    pub fn install(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        not_after: SystemTime,
    ) -> Result<(), TlsError> {
        let leaf = chain.first().ok_or(TlsError::EmptyChain)?;
        let me = peer::identity(leaf)?;
        let key = CertifiedKey::from_der(chain, key, &provider())?;
        self.current.store(Some(Arc::new(Installed {
            key: Arc::new(key),
            me,
            not_after,
        })));
        Ok(())
    }

    /// The installed certificate, if any.
    pub fn current(&self) -> Option<Arc<Installed>> {
        self.current.load_full()
    }

    /// This workload's identity, once certified.
    pub fn identity(&self) -> Option<SpiffeId> {
        self.current.load().as_ref().map(|i| i.me.id.clone())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load().as_ref().map(|i| i.key.clone())
    }
}

impl ResolvesClientCert for CertStore {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.current.load().as_ref().map(|i| i.key.clone())
    }

    fn has_certs(&self) -> bool {
        self.current.load().is_some()
    }
}

/// The workload a client means to reach.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expect {
    /// The Router or Manager `name` in `namespace`.
    Workload {
        /// Its namespace.
        namespace: String,
        /// Router or Manager.
        kind: Kind,
        /// Its name.
        name: String,
    },
    /// The operator (control plane, certificate issuer), in any namespace: only the CA's holder has
    /// such a certificate, as no workload is ever certified as one.
    Operator,
    /// The JetStream server of durable delivery, in any namespace: certified by the CA's holder
    /// only, as the operator is.
    JetStream,
}

impl Expect {
    /// The Manager `name` of `namespace`.
    pub fn manager(namespace: &str, name: &str) -> Expect {
        Expect::Workload {
            namespace: namespace.to_owned(),
            kind: Kind::Manager,
            name: name.to_owned(),
        }
    }

    /// The server name that carries this expectation through rustls; a name or namespace that is
    /// not a DNS label is refused.
    pub fn server_name(&self) -> Result<ServerName<'static>, TlsError> {
        let text = match self {
            Expect::Workload {
                namespace,
                kind,
                name,
            } => format!("{name}.{kind}.{namespace}.{NAME_SUFFIX}"),
            Expect::Operator => format!("operator.{NAME_SUFFIX}"),
            Expect::JetStream => format!("jetstream.{NAME_SUFFIX}"),
        };
        let bad = || TlsError::Name(text.clone());
        if let Expect::Workload {
            namespace, name, ..
        } = self
            && (namespace.contains('.') || name.contains('.'))
        {
            return Err(bad());
        }
        ServerName::try_from(text.clone()).map_err(|_| bad())
    }

    fn from_server_name(name: &ServerName<'_>) -> Option<Expect> {
        let ServerName::DnsName(dns) = name else {
            return None;
        };
        let rest = dns.as_ref().strip_suffix(NAME_SUFFIX)?.strip_suffix('.')?;
        let parts: Vec<&str> = rest.split('.').collect();
        match parts.as_slice() {
            ["operator"] => Some(Expect::Operator),
            ["jetstream"] => Some(Expect::JetStream),
            [name, kind, namespace] => {
                let kind = match *kind {
                    "router" => Kind::Router,
                    "manager" => Kind::Manager,
                    _ => return None,
                };
                Some(Expect::Workload {
                    namespace: (*namespace).to_owned(),
                    kind,
                    name: (*name).to_owned(),
                })
            }
            _ => None,
        }
    }

    /// Whether `id` is the expected workload.
    pub fn matches(&self, id: &SpiffeId) -> bool {
        match self {
            Expect::Operator => id.kind == Kind::Operator,
            Expect::JetStream => id.kind == Kind::JetStream,
            Expect::Workload {
                namespace,
                kind,
                name,
            } => id.kind == *kind && &id.namespace == namespace && &id.name == name,
        }
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Operator => f.write_str("the operator"),
            Expect::JetStream => f.write_str("the JetStream server"),
            Expect::Workload {
                namespace,
                kind,
                name,
            } => write!(f, "{kind} {namespace}/{name}"),
        }
    }
}

/// Checks a server's chain against the mesh's current trust (anchors and issuers) and its identity
/// against the expectation in the server name (and, once this workload is certified, its trust
/// domain against ours).
#[derive(Debug)]
struct MeshServerVerifier {
    trust: Arc<TrustStore>,
    me: Option<Arc<CertStore>>,
    /// The expectation of a client whose server names are host names (the NATS client's); none:
    /// the server name carries it.
    fixed: Option<Expect>,
}

/// A refusal with a message for logs.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refused(msg: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        Refused(msg),
    ))))
}

impl ServerCertVerifier for MeshServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.trust.verify_server(end_entity, intermediates, now)?;
        let expect = match &self.fixed {
            Some(e) => e.clone(),
            None => Expect::from_server_name(server_name)
                .ok_or_else(|| refused(format!("{server_name:?} carries no expected identity")))?,
        };
        let peer = peer::identity(end_entity).map_err(|e| refused(e.to_string()))?;
        if !expect.matches(&peer.id) {
            return Err(refused(format!("the server is {}, not {expect}", peer.id)));
        }
        if let Some(mine) = self.me.as_ref().and_then(|m| m.identity())
            && mine.trust_domain != peer.id.trust_domain
        {
            return Err(refused(format!(
                "the server {} is outside trust domain {}",
                peer.id, mine.trust_domain
            )));
        }
        Ok(ServerCertVerified::assertion())
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

/// Whether a server asks every client for a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Handshakes without a valid client certificate fail (frame listeners).
    Required,
    /// A client may come without one (the control plane, where a sidecar gets its first
    /// certificate); the handlers then decide what it may do.
    Optional,
}

/// A server config serving `store`'s certificate, verifying client certificates against what
/// `trust` holds at each handshake.
pub fn server_config(
    store: Arc<CertStore>,
    trust: Arc<TrustStore>,
    client_auth: ClientAuth,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let verifier = Arc::new(MeshClientVerifier {
        trust,
        mandatory: client_auth == ClientAuth::Required,
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(store);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // No resumption: a resumed session keeps the client identity of the session it resumes, so a
    // sidecar that asked for its first certificate over one connection would be anonymous on the
    // next. Mesh connections live long (one per pod pair), so a full handshake costs nothing.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// A client config presenting `store`'s certificate (none with `None`: a sidecar asking for its
/// first one), verifying servers against `roots` and the expectation in the server name.
pub fn client_config(
    store: Option<Arc<CertStore>>,
    trust: Arc<TrustStore>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    mesh_client(store, trust, alpn, None)
}

/// A client config for the JetStream server of durable delivery: presents `store`'s certificate
/// (nats-server maps its identity to the NATS user with that workload's permissions) and accepts
/// only a server the mesh's CA certified as [`Expect::JetStream`], whatever host name the NATS URL
/// gives (NATS clients send it as the server name; a mesh certificate names no host).
pub fn jetstream_client_config(
    store: Arc<CertStore>,
    trust: Arc<TrustStore>,
) -> Result<ClientConfig, TlsError> {
    mesh_client(Some(store), trust, &[], Some(Expect::JetStream))
}

/// The mesh's client side: TLS 1.3, the server checked against `roots` and `fixed` (or the
/// expectation its server name carries), `store`'s certificate shown, never a resumed session.
fn mesh_client(
    store: Option<Arc<CertStore>>,
    trust: Arc<TrustStore>,
    alpn: &[&[u8]],
    fixed: Option<Expect>,
) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let verifier = Arc::new(MeshServerVerifier {
        trust,
        me: store.clone(),
        fixed,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match store {
        Some(s) => builder.with_client_cert_resolver(s),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.enable_sni = false;
    // Never resume (see `server_config`): every connection shows the certificate installed now.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// The identity in a verified peer chain (the first certificate), if it names one.
pub fn peer_of(certs: Option<&[CertificateDer<'_>]>) -> Option<Peer> {
    certs
        .and_then(|c| c.first())
        .and_then(|leaf| peer::identity(leaf).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_travel_as_server_names() {
        for e in [
            Expect::manager("shop", "handlers"),
            Expect::Workload {
                namespace: "a".into(),
                kind: Kind::Router,
                name: "edge".into(),
            },
            Expect::Operator,
            Expect::JetStream,
        ] {
            assert_eq!(
                Expect::from_server_name(&e.server_name().expect("name")),
                Some(e)
            );
        }
        assert!(Expect::manager("a.b", "x").server_name().is_err());
        let other = ServerName::try_from("example.com").expect("name");
        assert_eq!(Expect::from_server_name(&other), None);
        let id = SpiffeId::new("td", "shop", Kind::Manager, "handlers").expect("id");
        assert!(Expect::manager("shop", "handlers").matches(&id));
        assert!(!Expect::manager("shop", "other").matches(&id));
        assert!(!Expect::manager("prod", "handlers").matches(&id));
        assert!(!Expect::Operator.matches(&id));
        assert!(!Expect::JetStream.matches(&id));
        let js = SpiffeId::new("td", "switchyard", Kind::JetStream, "nats").expect("id");
        assert!(Expect::JetStream.matches(&js));
        assert!(!Expect::Operator.matches(&js));
    }
}
