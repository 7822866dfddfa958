//! mTLS of the mesh inside this sidecar: the frame listener's acceptor (a client certificate from
//! the mesh's CA required), the frame connections' connector (this workload's certificate, and the
//! Manager it meant to reach checked in the handshake), and the control plane's connector (the
//! operator checked). Every handshake reads the certificate store, so a renewal applies to the next
//! connection without a restart; open connections keep the certificate they started with.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::tls::{self, ClientAuth, TlsError};
use switchyard_identity::{CertStore, Expect, Peer, SpiffeId, TrustStore};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

/// Time a peer has to finish a handshake, either side.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes by side (`client`, `server`) and result (`ok`, `failed`, `timeout`).
pub(crate) type HandshakeCounts = Family<Vec<(&'static str, &'static str)>, Counter>;

/// This sidecar's mesh TLS.
pub(crate) struct MeshTls {
    store: Arc<CertStore>,
    trust: Arc<TrustStore>,
    frames_server: TlsAcceptor,
    frames_client: TlsConnector,
    control_client: Arc<rustls::ClientConfig>,
    jetstream_client: rustls::ClientConfig,
    handshakes: HandshakeCounts,
}

impl MeshTls {
    /// The configs over `store`, trusting the anchors `trust` until the Identity service says
    /// more (every config reads the trust store at each handshake); handshakes are counted in
    /// `handshakes`.
    pub(crate) fn new(
        store: Arc<CertStore>,
        trust: &[rustls_pki_types::CertificateDer<'static>],
        handshakes: HandshakeCounts,
    ) -> Result<MeshTls, TlsError> {
        let roots = tls::roots(trust)?;
        let trust = roots.clone();
        let frames_server = tls::server_config(
            store.clone(),
            roots.clone(),
            ClientAuth::Required,
            &[tls::FRAMES_ALPN],
        )?;
        let frames_client =
            tls::client_config(Some(store.clone()), roots.clone(), &[tls::FRAMES_ALPN])?;
        let control_client =
            tls::client_config(Some(store.clone()), roots.clone(), &[tls::H2_ALPN])?;
        let jetstream_client = tls::jetstream_client_config(store.clone(), roots)?;
        Ok(MeshTls {
            store,
            trust,
            frames_server: TlsAcceptor::from(Arc::new(frames_server)),
            frames_client: TlsConnector::from(Arc::new(frames_client)),
            control_client: Arc::new(control_client),
            jetstream_client,
            handshakes,
        })
    }

    /// The certificate store (the identity loop installs into it).
    pub(crate) fn store(&self) -> &Arc<CertStore> {
        &self.store
    }

    /// What every handshake checks peers against (the identity loop updates it).
    pub(crate) fn trust(&self) -> &Arc<TrustStore> {
        &self.trust
    }

    /// The client config of the connection to the JetStream server (the NATS client takes its own
    /// copy).
    pub(crate) fn jetstream_client(&self) -> rustls::ClientConfig {
        self.jetstream_client.clone()
    }

    /// This workload's identity, once certified.
    pub(crate) fn identity(&self) -> Option<SpiffeId> {
        self.store.identity()
    }

    fn count(&self, side: &'static str, result: &'static str) {
        self.handshakes
            .get_or_create(&vec![("side", side), ("result", result)])
            .inc();
    }

    /// Runs the client handshake of a frame connection on `tcp`, expecting `expect`.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        expect: &Expect,
    ) -> io::Result<client::TlsStream<TcpStream>> {
        let name = expect
            .server_name()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.frames_client.connect(name, tcp)).await {
            Ok(Ok(s)) => {
                self.count("client", "ok");
                Ok(s)
            }
            Ok(Err(e)) => {
                self.count("client", "failed");
                Err(e)
            }
            Err(_) => {
                self.count("client", "timeout");
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ))
            }
        }
    }

    /// Runs the server handshake of a frame connection on `tcp`; returns the stream and the
    /// client's identity (its certificate chained to the mesh's CA, or the handshake failed).
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
    ) -> io::Result<(server::TlsStream<TcpStream>, Option<Peer>)> {
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.frames_server.accept(tcp)).await {
            Ok(Ok(s)) => {
                self.count("server", "ok");
                let peer = tls::peer_of(s.get_ref().1.peer_certificates());
                Ok((s, peer))
            }
            Ok(Err(e)) => {
                self.count("server", "failed");
                Err(e)
            }
            Err(_) => {
                self.count("server", "timeout");
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ))
            }
        }
    }

    /// A connector to the operator's control plane (its certificate must be the operator's).
    pub(crate) fn control_plane(&self) -> MeshConnector {
        MeshConnector::new(self.control_client.clone(), Expect::Operator)
    }
}
