//! A mesh identity service in the test process: the local one `switchyard up` runs (an ephemeral
//! CA, the `Identity` gRPC service over TLS, tokens made here). Sidecars get a token file, the trust
//! bundle and the service's URL in their environment and certify themselves as in a cluster.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use switchyard_identity::ca::{Ca, Subject, key_and_request};
use switchyard_identity::issuing::Issuing;
use switchyard_identity::local::LocalIdentity;
use switchyard_identity::service::Observer;
use switchyard_identity::{CertStore, Kind, SpiffeId};

pub const TRUST_DOMAIN: &str = "test.local";

/// Counts issued certificates, and keeps the issuer of each pod's latest.
#[derive(Default)]
pub struct Issued(pub AtomicUsize, pub Mutex<HashMap<String, Vec<u8>>>);

impl Observer for Issued {
    fn issued(&self, _id: &SpiffeId) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn leaf(
        &self,
        subject: &Subject,
        _not_after: SystemTime,
        signer: &rustls_pki_types::CertificateDer<'_>,
    ) {
        self.1
            .lock()
            .unwrap()
            .insert(subject.pod.clone(), signer.to_vec());
    }
}

impl Issued {
    /// The issuer (DER) of `pod`'s latest certificate.
    pub fn signer_of(&self, pod: &str) -> Option<Vec<u8>> {
        self.1.lock().unwrap().get(pod).cloned()
    }
}

/// A workload to make a token for.
pub struct Workload {
    pub kind: Kind,
    pub name: &'static str,
}

/// The running service and what sidecars need to use it.
pub struct TestIdentity {
    pub url: String,
    pub trust_file: PathBuf,
    /// A JetStream server's certificate chain and key from the same CA (PEM files), as
    /// `switchyard up` gives its nats-server.
    pub nats_cert: PathBuf,
    pub nats_key: PathBuf,
    pub ca: Arc<Ca>,
    pub issued: Arc<Issued>,
    /// The CA the service signs with, its own certificate and trust: a test rotates through it.
    pub issuing: Arc<Issuing>,
    tokens: Vec<(Kind, String, PathBuf)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestIdentity {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A store certified by `ca` as `kind/name` in namespace `default`, for test clients.
pub fn certified(ca: &Ca, kind: Kind, name: &str) -> Arc<CertStore> {
    let subject = Subject {
        id: SpiffeId::new(TRUST_DOMAIN, "default", kind, name).unwrap(),
        pod: format!("{name}-test"),
    };
    let (key, csr) = key_and_request().unwrap();
    let issued = ca
        .issue(&csr, &subject, Duration::from_secs(3600), SystemTime::now())
        .unwrap();
    let store = Arc::new(CertStore::default());
    store
        .install(
            issued.chain,
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            issued.not_after,
        )
        .unwrap();
    store
}

impl TestIdentity {
    /// Starts the service in `dir` with certificates valid for `lifetime`, and a token for each of
    /// `workloads` (namespace `default`).
    pub async fn start(dir: &Path, lifetime: Duration, workloads: &[Workload]) -> TestIdentity {
        let local = LocalIdentity::new(TRUST_DOMAIN).unwrap();
        TestIdentity::start_with(dir, lifetime, workloads, local).await
    }

    /// As [`TestIdentity::start`], with the service `local` (its own CA, its activation delay).
    pub async fn start_with(
        dir: &Path,
        lifetime: Duration,
        workloads: &[Workload],
        mut local: LocalIdentity,
    ) -> TestIdentity {
        let trust_file = dir.join("ca.crt");
        std::fs::write(&trust_file, local.trust_pem()).unwrap();
        let mut tokens = Vec::new();
        for w in workloads {
            let token = local
                .token(w.kind, "default", w.name, &format!("{}-0", w.name))
                .unwrap();
            let file = dir.join(format!("{}-{}.token", w.kind, w.name));
            std::fs::write(&file, token).unwrap();
            tokens.push((w.kind, w.name.to_owned(), file));
        }
        let server = local.jetstream_server(Duration::from_secs(3600)).unwrap();
        let nats_cert = dir.join("nats.crt");
        let nats_key = dir.join("nats.key");
        std::fs::write(&nats_cert, server.chain).unwrap();
        std::fs::write(&nats_key, server.key).unwrap();
        let ca = local.ca().clone();
        let issued = Arc::new(Issued::default());
        let running = local
            .serve("127.0.0.1:0".parse().unwrap(), lifetime, issued.clone())
            .await
            .unwrap();
        TestIdentity {
            url: running.url,
            trust_file,
            nats_cert,
            nats_key,
            ca,
            issued,
            issuing: running.issuing,
            tokens,
            task: running.task,
        }
    }

    /// The environment of the sidecar of `kind` `name`.
    pub fn env(&self, kind: Kind, name: &str) -> Vec<(String, String)> {
        let file = &self
            .tokens
            .iter()
            .find(|(k, n, _)| *k == kind && n == name)
            .unwrap_or_else(|| panic!("no token for {kind} {name}"))
            .2;
        vec![
            ("SWITCHYARD_IDENTITY".into(), self.url.clone()),
            (
                "SWITCHYARD_IDENTITY_TOKEN_FILE".into(),
                file.display().to_string(),
            ),
            (
                "SWITCHYARD_IDENTITY_TRUST_FILE".into(),
                self.trust_file.display().to_string(),
            ),
        ]
    }
}
