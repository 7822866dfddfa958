//! A real OpenID provider for the OIDC tests: Ory Hydra, built from the Go module proxy into
//! `.tools/bin` by `e2e/cluster/build-hydra` on first use (cached afterwards), run with its
//! in-memory store, JWT access tokens, and its public (issuer) endpoint on HTTPS from a test CA.
//! Its admin endpoint stays plain HTTP on loopback.

use super::poll;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// The hydra binary, built once per test process (the script caches it across runs).
pub fn hydra() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/cluster/build-hydra");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(out.status.success(), "{} failed", script.display());
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// A test CA and a server certificate it signed for 127.0.0.1 and localhost.
pub struct TestCa {
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// The server certificate (PEM).
    pub cert_pem: String,
    /// Its key (PEM).
    pub key_pem: String,
}

impl TestCa {
    pub fn new() -> TestCa {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "switchyard oidc test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        TestCa {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A loopback port nothing listens on right now (the kernel's pick; Hydra needs its ports, and
/// the issuer URL its public one, before it starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One Hydra server; killed when dropped.
pub struct Hydra {
    /// The issuer URL (`https://127.0.0.1:<public port>`), as Hydra puts it in `iss`.
    pub issuer: String,
    /// The admin API's base URL (plain HTTP).
    pub admin: String,
    /// The CA its HTTPS certificate chains to (PEM).
    pub ca_pem: String,
    child: Child,
    pub log: PathBuf,
}

impl Drop for Hydra {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client allowed the client-credentials grant.
pub struct Client {
    pub id: String,
    pub secret: String,
}

impl Hydra {
    /// Starts Hydra in `dir` serving HTTPS with `ca`'s server certificate; returns once its
    /// admin API says it is ready.
    pub async fn start(dir: &Path, ca: &TestCa) -> Hydra {
        std::fs::create_dir_all(dir).unwrap();
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, &ca.cert_pem).unwrap();
        std::fs::write(&key, &ca.key_pem).unwrap();
        let (public, admin) = (free_port(), free_port());
        let issuer = format!("https://127.0.0.1:{public}");
        let log = dir.join("hydra.log");
        let child = Command::new(hydra())
            .args(["serve", "all"])
            .env_clear()
            .env("DSN", "memory")
            .env("URLS_SELF_ISSUER", &issuer)
            .env("STRATEGIES_ACCESS_TOKEN", "jwt")
            .env("SECRETS_SYSTEM", "switchyard-oidc-test-system-secret")
            .env("SERVE_PUBLIC_HOST", "127.0.0.1")
            .env("SERVE_PUBLIC_PORT", public.to_string())
            .env("SERVE_ADMIN_HOST", "127.0.0.1")
            .env("SERVE_ADMIN_PORT", admin.to_string())
            .env("SERVE_TLS_ENABLED", "true")
            .env("SERVE_TLS_CERT_PATH", &cert)
            .env("SERVE_TLS_KEY_PATH", &key)
            .env("SERVE_ADMIN_TLS_ENABLED", "false")
            .env("LOG_LEVEL", "info")
            .env("SQA_OPT_OUT", "true")
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .unwrap();
        let mut h = Hydra {
            issuer,
            admin: format!("http://127.0.0.1:{admin}"),
            ca_pem: ca.ca_pem.clone(),
            child,
            log,
        };
        let http = super::Http::new();
        let ready = format!("{}/health/ready", h.admin);
        poll(Duration::from_secs(60), "hydra ready", || {
            if let Ok(Some(status)) = h.child.try_wait() {
                panic!(
                    "hydra exited with {status}:\n{}",
                    std::fs::read_to_string(&h.log).unwrap_or_default()
                );
            }
            let http = http.clone();
            let ready = ready.clone();
            async move { (http.get(&ready).await.ok()?.status == 200).then_some(()) }
        })
        .await;
        // The public (HTTPS) side answers the discovery document too.
        let doc = h.public_get("/.well-known/openid-configuration").await;
        assert_eq!(doc.0, 200, "discovery: {}", String::from_utf8_lossy(&doc.1));
        let _ = &mut h;
        h
    }

    /// Registers a client-credentials client that may ask for `audiences`.
    pub async fn client(&self, audiences: &[&str]) -> Client {
        let r = super::Http::new()
            .post(
                &format!("{}/admin/clients", self.admin),
                "application/json",
                json!({
                    "grant_types": ["client_credentials"],
                    "token_endpoint_auth_method": "client_secret_post",
                    "audience": audiences,
                    "access_token_strategy": "jwt",
                })
                .to_string(),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        Client {
            id: v["client_id"].as_str().unwrap().into(),
            secret: v["client_secret"].as_str().unwrap().into(),
        }
    }

    /// An access token (a JWT) for `audience`, from the token endpoint over HTTPS.
    pub async fn token(&self, client: &Client, audience: &str) -> String {
        let form = format!(
            "grant_type=client_credentials&audience={audience}&client_id={}&client_secret={}",
            client.id, client.secret
        );
        let (status, body) = self
            .https(
                Request::post(format!("{}/oauth2/token", self.issuer))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(Full::new(Bytes::from(form)))
                    .unwrap(),
            )
            .await;
        assert_eq!(status, 200, "token: {}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).unwrap();
        v["access_token"].as_str().unwrap().to_owned()
    }

    /// Adds a new signing key to the access-token key set (what Hydra signs new tokens with);
    /// returns its kid.
    pub async fn rotate(&self, kid: &str, alg: &str) -> String {
        let r = super::Http::new()
            .post(
                &format!("{}/admin/keys/hydra.jwt.access-token", self.admin),
                "application/json",
                json!({"alg": alg, "use": "sig", "kid": kid}).to_string(),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        v["keys"][0]["kid"].as_str().unwrap().to_owned()
    }

    /// GET on the public (HTTPS) side.
    pub async fn public_get(&self, path: &str) -> (u16, Bytes) {
        self.https(
            Request::get(format!("{}{path}", self.issuer))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
    }

    /// One request over HTTPS, trusting only the test CA.
    async fn https(&self, req: Request<Full<Bytes>>) -> (u16, Bytes) {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let authority = req.uri().authority().unwrap().clone();
        let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                ServerName::try_from(authority.host().to_owned()).unwrap(),
                tcp,
            )
            .await
            .unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let (mut parts, body) = req.into_parts();
        parts
            .headers
            .insert("host", authority.as_str().parse().unwrap());
        parts.uri = parts
            .uri
            .path_and_query()
            .unwrap()
            .as_str()
            .parse()
            .unwrap();
        let resp = send
            .send_request(Request::from_parts(parts, body))
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        driver.abort();
        (status, body)
    }
}

/// The `kid` in a JWT's header.
pub fn kid(token: &str) -> String {
    jsonwebtoken::decode_header(token)
        .unwrap()
        .kid
        .unwrap_or_default()
}
