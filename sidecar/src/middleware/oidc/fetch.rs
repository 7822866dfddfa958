//! One bounded HTTPS GET: the issuer's discovery document and key set. TLS with the system's roots
//! plus the spec's CA; no redirects; a whole-fetch deadline and a cap on the body, so a slow or
//! hostile issuer costs a bounded wait and bounded memory.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::header::{ACCEPT, CACHE_CONTROL, HOST, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Largest accepted discovery document or key set.
pub(super) const MAX_BODY: usize = 256 * 1024;
/// Longest one fetch (connect, TLS, request, body) may take.
pub(super) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a fetch failed (logged and counted; the cached keys stay).
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    /// The URL is not `https://host[:port]/path`.
    #[error("{0:?} is not an https:// URL")]
    NotHttps(String),
    /// Connect, TLS or HTTP failed.
    #[error("{url}: {why}")]
    Transport {
        /// The URL fetched.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The answer was not 200.
    #[error("{url}: answered {status}")]
    Status {
        /// The URL fetched.
        url: String,
        /// Its status.
        status: StatusCode,
    },
    /// The body was over [`MAX_BODY`].
    #[error("{url}: the body is over {MAX_BODY} bytes")]
    TooLarge {
        /// The URL fetched.
        url: String,
    },
    /// The whole fetch took over [`FETCH_TIMEOUT`].
    #[error("{url}: no complete answer within {FETCH_TIMEOUT:?}")]
    Timeout {
        /// The URL fetched.
        url: String,
    },
}

/// Why the TLS client config for the issuer cannot be built (reported against `caSecretRef`).
#[derive(Debug, thiserror::Error)]
pub(super) enum CaError {
    /// The CA file is not PEM.
    #[error("not PEM certificates: {0}")]
    NotPem(rustls_pki_types::pem::Error),
    /// The CA file is PEM without a certificate.
    #[error("holds no PEM certificate")]
    NoCertificate,
    /// A certificate of the CA file cannot be a trust anchor.
    #[error("a certificate is not a usable CA: {0}")]
    NotCa(rustls::Error),
    /// Neither the system nor the spec gives a CA.
    #[error("no CA certificates: the system has none and no caSecretRef is set")]
    NoRoots,
    /// The crypto provider offers no safe protocol version.
    #[error("{0}")]
    Provider(rustls::Error),
}

/// A fetched body and its `Cache-Control` header.
pub(super) struct Fetched {
    /// The body.
    pub body: Bytes,
    /// The `Cache-Control` value, when there was one (as text).
    pub cache_control: Option<String>,
}

/// The HTTPS client for one issuer.
#[derive(Clone)]
pub(super) struct Fetcher {
    tls: TlsConnector,
}

/// The TLS client config: the system's roots plus the certificates of `extra_ca` (PEM). Errors
/// name what is wrong with the CA file; having no system roots is not one when a CA is given.
pub(super) fn client_config(extra_ca: Option<&[u8]>) -> Result<rustls::ClientConfig, CaError> {
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system roots are skipped: a private CA alone may be all an issuer needs.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(pem) = extra_ca {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(CaError::NotPem)?;
        if certs.is_empty() {
            return Err(CaError::NoCertificate);
        }
        for c in certs {
            roots.add(c).map_err(CaError::NotCa)?;
        }
    }
    if roots.is_empty() {
        return Err(CaError::NoRoots);
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(CaError::Provider)?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

impl Fetcher {
    /// A client trusting `config`'s roots.
    pub(super) fn new(config: rustls::ClientConfig) -> Fetcher {
        Fetcher {
            tls: TlsConnector::from(Arc::new(config)),
        }
    }

    /// GETs `url` (https only), within [`FETCH_TIMEOUT`] and [`MAX_BODY`].
    pub(super) async fn get(&self, url: &str) -> Result<Fetched, FetchError> {
        match tokio::time::timeout(FETCH_TIMEOUT, self.get_unbounded(url)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout { url: url.into() }),
        }
    }

    async fn get_unbounded(&self, url: &str) -> Result<Fetched, FetchError> {
        let uri: Uri = url.parse().map_err(|_| FetchError::NotHttps(url.into()))?;
        let (Some("https"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(FetchError::NotHttps(url.into()));
        };
        let transport = |why: String| FetchError::Transport {
            url: url.into(),
            why,
        };
        let host = authority.host();
        // An IPv6 literal comes bracketed in the URL and bare in a server name.
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(443);
        let server = ServerName::try_from(name.to_owned())
            .map_err(|_| transport(format!("{host:?} is not a host name")))?;
        let tcp = TcpStream::connect((name, port))
            .await
            .map_err(|e| transport(format!("connect: {e}")))?;
        let tls = self
            .tls
            .connect(server, tcp)
            .await
            .map_err(|e| transport(format!("TLS: {e}")))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| transport(format!("HTTP: {e}")))?;
        // The connection is driven beside the request and dropped with it.
        let driver = tokio::spawn(conn);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let req = Request::get(path)
            .header(HOST, authority.as_str())
            .header(ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| transport(e.to_string()))?;
        let result = async {
            let resp = send
                .send_request(req)
                .await
                .map_err(|e| transport(format!("HTTP: {e}")))?;
            if resp.status() != StatusCode::OK {
                return Err(FetchError::Status {
                    url: url.into(),
                    status: resp.status(),
                });
            }
            let cache_control = resp
                .headers()
                .get(CACHE_CONTROL)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_owned);
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        FetchError::TooLarge { url: url.into() }
                    } else {
                        transport(format!("body: {e}"))
                    }
                })?
                .to_bytes();
            Ok(Fetched {
                body,
                cache_control,
            })
        }
        .await;
        driver.abort();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_https_urls_are_fetched() {
        let f = Fetcher::new(client_config(Some(TEST_CA)).expect("config"));
        for url in ["http://id.example.com/", "id.example.com", "ftp://x/"] {
            assert!(
                matches!(f.get(url).await, Err(FetchError::NotHttps(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn a_ca_file_that_is_not_pem_is_named() {
        let err = client_config(Some(b"hello"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("PEM"), "{err}");
    }

    const TEST_CA: &[u8] = include_bytes!("../../../tests/fixtures/oidc-test-ca.pem");
}
