//! TLS for the HTTP and gRPC listeners: rustls (ring provider) with the cert and key of a
//! `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`, PEM), ALPN offering h2 and HTTP/1.1.

use crate::config::{ConfigError, field_error};
use crate::secrets::Secrets;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// Spec field the TLS errors are reported against.
const FIELD: &str = "spec.listeners.tls.secretName";

/// ALPN protocols of the HTTP listener (HTTP/2 preferred) and of the gRPC one (HTTP/2 only).
pub const HTTP_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN protocols of the gRPC listener.
pub const GRPC_ALPN: &[&[u8]] = &[b"h2"];

/// The certificate chain and key, read once and shared by both listeners.
pub struct TlsFiles {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl TlsFiles {
    /// Reads `tls.crt` and `tls.key` of Secret `secret_name`.
    pub fn read(secrets: &Secrets, secret_name: &str) -> Result<TlsFiles, ConfigError> {
        let bad = |msg: String| field_error(&secrets.config_file, FIELD, msg);
        let crt = secrets.read(FIELD, secret_name, "tls.crt")?;
        let key = secrets.read(FIELD, secret_name, "tls.key")?;
        let certs = CertificateDer::pem_slice_iter(&crt)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                bad(format!(
                    "Secret {secret_name:?} tls.crt is not PEM certificates: {e}"
                ))
            })?;
        if certs.is_empty() {
            return Err(bad(format!(
                "Secret {secret_name:?} tls.crt holds no certificate"
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
            bad(format!(
                "Secret {secret_name:?} tls.key is not a PEM private key: {e}"
            ))
        })?;
        Ok(TlsFiles { certs, key })
    }

    /// An acceptor offering `alpn`; errors (a key that does not fit the cert) name the field.
    pub fn acceptor(&self, secrets: &Secrets, alpn: &[&[u8]]) -> Result<TlsAcceptor, ConfigError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(self.certs.clone(), self.key.clone_key())
            })
            .map_err(|e| {
                field_error(
                    &secrets.config_file,
                    FIELD,
                    format!("the certificate and key cannot serve TLS: {e}"),
                )
            })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
