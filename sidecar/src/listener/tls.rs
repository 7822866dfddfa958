//! TLS for the HTTP and gRPC listeners: rustls (ring provider) with the cert and key of a
//! `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`, PEM), ALPN offering h2 and HTTP/1.1.
//!
//! Every handshake takes the certificate from one swappable store ([`EdgeCert`]), which both
//! listeners share; when the Secret's files change, the new pair is checked (PEM, a key that fits
//! the certificate) and swapped in, so new connections get it with no restart and open ones keep
//! theirs. A bad pair keeps the old one (`secrets::reload` logs and counts it).

use crate::config::{ConfigError, field_error};
use crate::secrets::Secrets;
use crate::secrets::reload::{Reloads, Source};
use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// Spec field the TLS errors are reported against.
const FIELD: &str = "spec.listeners.tls.secretName";

/// ALPN protocols of the HTTP listener (HTTP/2 preferred) and of the gRPC one (HTTP/2 only).
pub(crate) const HTTP_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN protocols of the gRPC listener.
pub(crate) const GRPC_ALPN: &[&[u8]] = &[b"h2"];

/// The edge's certificate chain and key, shared by both listeners and swapped at a reload.
#[derive(Debug)]
pub(crate) struct EdgeCert {
    current: ArcSwap<CertifiedKey>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

/// Why a `tls.crt` and a `tls.key` cannot serve (at start-up a config error, at a reload logged
/// with the old pair kept).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PairError {
    /// `tls.crt` is not PEM.
    #[error("tls.crt is not PEM certificates: {0}")]
    CrtNotPem(rustls_pki_types::pem::Error),
    /// `tls.crt` is PEM without a certificate.
    #[error("tls.crt holds no certificate")]
    NoCertificate,
    /// `tls.key` is not a PEM private key.
    #[error("tls.key is not a PEM private key: {0}")]
    KeyNotPem(rustls_pki_types::pem::Error),
    /// The key does not fit the certificate, or is of a kind the provider cannot sign with.
    #[error("the certificate and key cannot serve TLS: {0}")]
    Unusable(rustls::Error),
}

/// The chain and key of a `tls.crt` and a `tls.key`, checked to fit each other, or why not.
pub(crate) fn certified_key(
    crt: &[u8],
    key: &[u8],
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, PairError> {
    let certs = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(PairError::CrtNotPem)?;
    if certs.is_empty() {
        return Err(PairError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(PairError::KeyNotPem)?;
    CertifiedKey::from_der(certs, key, provider).map_err(PairError::Unusable)
}

impl EdgeCert {
    /// Reads `tls.crt` and `tls.key` of Secret `secret_name` and registers them for reloads.
    pub(crate) fn read(
        secrets: &Secrets,
        secret_name: &str,
        reloads: &mut Reloads,
    ) -> Result<Arc<EdgeCert>, ConfigError> {
        let (crt_path, crt) = secrets.file(FIELD, secret_name, "tls.crt")?;
        let (key_path, key) = secrets.file(FIELD, secret_name, "tls.key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pair = certified_key(&crt, &key, &provider).map_err(|why| {
            field_error(
                &secrets.config_file,
                FIELD,
                format!("Secret {secret_name:?}: {why}"),
            )
        })?;
        let cert = Arc::new(EdgeCert {
            current: ArcSwap::from_pointee(pair),
            provider,
        });
        let c = cert.clone();
        reloads.add(Source {
            secret: secret_name.to_owned(),
            field: FIELD.to_owned(),
            files: vec![crt_path, key_path],
            loaded: vec![crt, key],
            load: Box::new(move |contents| Ok(c.reload(&contents[0], &contents[1])?)),
        });
        Ok(cert)
    }

    /// Swaps in a new pair, or says why it cannot serve (the old pair stays).
    pub(crate) fn reload(&self, crt: &[u8], key: &[u8]) -> Result<(), PairError> {
        let pair = certified_key(crt, key, &self.provider)?;
        self.current.store(Arc::new(pair));
        Ok(())
    }

    /// An acceptor offering `alpn`, serving whatever pair is current at each handshake.
    pub(crate) fn acceptor(
        self: &Arc<Self>,
        secrets: &Secrets,
        alpn: &[&[u8]],
    ) -> Result<TlsAcceptor, ConfigError> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map(|b| b.with_no_client_auth().with_cert_resolver(self.clone()))
            .map_err(|e| {
                field_error(
                    &secrets.config_file,
                    FIELD,
                    format!("TLS cannot be served: {e}"),
                )
            })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

impl ResolvesServerCert for EdgeCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let ck = rcgen::generate_simple_self_signed(vec![name.into()]).expect("cert");
        (ck.cert.pem(), ck.signing_key.serialize_pem())
    }

    #[test]
    fn a_pair_must_be_pem_and_fit_together() {
        let provider = rustls::crypto::ring::default_provider();
        let (crt, key) = pair("a.example");
        let (_, other_key) = pair("b.example");
        assert!(certified_key(crt.as_bytes(), key.as_bytes(), &provider).is_ok());
        let err = |c: &str, k: &str| {
            certified_key(c.as_bytes(), k.as_bytes(), &provider)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err("junk", &key).contains("tls.crt holds no certificate"));
        assert!(err(&crt, "junk").contains("tls.key is not a PEM private key"));
        assert!(
            err(&crt, &other_key).contains("the certificate and key cannot serve TLS"),
            "{}",
            err(&crt, &other_key)
        );
    }

    #[test]
    fn a_reload_swaps_the_served_pair_and_a_bad_one_keeps_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (crt, key) = pair("a.example");
        std::fs::create_dir(dir.path().join("edge")).expect("mkdir");
        std::fs::write(dir.path().join("edge/tls.crt"), &crt).expect("write");
        std::fs::write(dir.path().join("edge/tls.key"), &key).expect("write");
        let secrets = Secrets {
            dir: dir.path().to_owned(),
            config_file: "r.json".into(),
        };
        let mut reloads = Reloads::default();
        let cert = EdgeCert::read(&secrets, "edge", &mut reloads).expect("read");
        assert!(!reloads.is_empty());
        let first = cert.current.load_full();
        let (crt2, key2) = pair("b.example");
        assert!(cert.reload(crt2.as_bytes(), key.as_bytes()).is_err());
        assert!(Arc::ptr_eq(&first, &cert.current.load_full()));
        assert!(cert.reload(crt2.as_bytes(), key2.as_bytes()).is_ok());
        assert_ne!(first.cert, cert.current.load_full().cert);
    }
}
