//! The trust a handshake checks, over real sockets: a new bundle applies to the next handshake of
//! configs built before it (no restart), and a peer must be signed by a mesh issuer, not merely
//! chain to a root the mesh trusts.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_identity::ca::{Ca, CaPem, Subject, key_and_request};
use switchyard_identity::tls::{self, ClientAuth, Expect};
use switchyard_identity::{CertStore, Kind, SpiffeId, Trust, TrustStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn subject(kind: Kind, name: &str) -> Subject {
    Subject {
        id: SpiffeId::new("test.local", "shop", kind, name).expect("id"),
        pod: format!("{name}-pod"),
    }
}

fn certified(ca: &Ca, subject: &Subject) -> Arc<CertStore> {
    let (key, csr) = key_and_request().expect("csr");
    let issued = ca
        .issue(&csr, subject, Duration::from_secs(3600), SystemTime::now())
        .expect("issued");
    let store = Arc::new(CertStore::default());
    store
        .install(
            issued.chain,
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            issued.not_after,
        )
        .expect("install");
    store
}

/// An issuer under `root`, as cert-manager keeps one (tls.crt, tls.key, ca.crt).
fn intermediate(root: &CaPem) -> Ca {
    let root_issuer = rcgen::Issuer::from_ca_cert_pem(
        &root.cert,
        KeyPair::from_pem(&root.key).expect("root key"),
    )
    .expect("root");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "issuer");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.signed_by(&key, &root_issuer).expect("intermediate");
    Ca::from_pem(&cert.pem(), &key.serialize_pem(), Some(&root.cert)).expect("issuer")
}

/// A server on a real socket, its config built once over `trust`; each accepted connection answers
/// the client's identity, or closes when the handshake fails.
async fn server(store: Arc<CertStore>, trust: Arc<TrustStore>) -> std::net::SocketAddr {
    let config = tls::server_config(store, trust, ClientAuth::Required, &[tls::FRAMES_ALPN])
        .expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(tcp).await {
                    let who = tls::peer_of(s.get_ref().1.peer_certificates())
                        .map(|p| p.id.uri())
                        .unwrap_or_default();
                    let _ = s.write_all(who.as_bytes()).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    addr
}

/// One connection through `connector` expecting `expect`: the identity the server saw, or why the
/// handshake failed (either side's refusal shows at the first read).
async fn call(
    connector: &TlsConnector,
    addr: std::net::SocketAddr,
    expect: &Expect,
) -> Result<String, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut s = connector
        .connect(expect.server_name().expect("name"), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    if out.is_empty() {
        return Err("the server closed without an answer".into());
    }
    Ok(out)
}

fn client(store: Arc<CertStore>, trust: Arc<TrustStore>) -> TlsConnector {
    TlsConnector::from(Arc::new(
        tls::client_config(Some(store), trust, &[tls::FRAMES_ALPN]).expect("client config"),
    ))
}

#[tokio::test]
async fn a_new_bundle_applies_to_the_next_handshake_of_configs_built_before_it() {
    let now = SystemTime::now();
    let (r1, _) = Ca::generate("test.local", now).expect("r1");
    let (r2, _) = Ca::generate("test.local", now).expect("r2");
    let manager = Expect::manager("shop", "handlers");
    let server_trust = tls::roots(r1.trust()).expect("trust");
    let addr = server(
        certified(&r1, &subject(Kind::Manager, "handlers")),
        server_trust.clone(),
    )
    .await;
    let client_trust = tls::roots(r1.trust()).expect("trust");
    let old = client(
        certified(&r1, &subject(Kind::Router, "edge")),
        client_trust.clone(),
    );
    let new = client(
        certified(&r2, &subject(Kind::Router, "edge")),
        client_trust.clone(),
    );
    assert!(call(&old, addr, &manager).await.is_ok());
    let e = call(&new, addr, &manager)
        .await
        .expect_err("r2 not trusted yet");
    assert!(!e.is_empty());

    // Stage 1: both roots. The configs above are not rebuilt.
    let both = Trust::anchors_only([r1.trust(), r2.trust()].concat());
    assert!(server_trust.set(both.clone()).expect("set"));
    assert!(
        !server_trust.set(both).expect("same"),
        "an unchanged bundle is no change"
    );
    assert!(call(&old, addr, &manager).await.is_ok());
    assert_eq!(
        call(&new, addr, &manager).await.expect("r2 trusted"),
        subject(Kind::Router, "edge").id.uri()
    );

    // Stage 3: the old root leaves; its certificates are refused from the next handshake on.
    server_trust
        .set(Trust::anchors_only(r2.trust().to_vec()))
        .expect("set");
    assert!(call(&new, addr, &manager).await.is_ok());
    assert!(call(&old, addr, &manager).await.is_err());
}

#[tokio::test]
async fn a_peer_under_the_shared_root_but_from_another_issuer_is_refused() {
    let now = SystemTime::now();
    let (_, root) = Ca::generate("test.local", now).expect("root");
    // The mesh's issuer and another team's, both under one shared root.
    let mesh = intermediate(&root);
    let other = intermediate(&root);
    let pinned = || {
        Arc::new(
            TrustStore::new(Trust {
                anchors: mesh.trust().to_vec(),
                issuers: Some(vec![mesh.issuer_cert().clone()]),
            })
            .expect("trust"),
        )
    };
    let manager = Expect::manager("shop", "handlers");
    let addr = server(
        certified(&mesh, &subject(Kind::Manager, "handlers")),
        pinned(),
    )
    .await;
    // A client certificate naming a mesh workload, from the other issuer: refused by the server.
    let forged = client(certified(&other, &subject(Kind::Router, "edge")), pinned());
    let e = call(&forged, addr, &manager)
        .await
        .expect_err("forged client");
    assert!(!e.is_empty());
    let genuine = client(certified(&mesh, &subject(Kind::Router, "edge")), pinned());
    assert!(call(&genuine, addr, &manager).await.is_ok());

    // A server calling itself the operator, from the other issuer: refused by the client.
    let operator = SpiffeId::new("test.local", "system", Kind::Operator, "switchyard").expect("id");
    let impostor = server(
        certified(
            &other,
            &Subject {
                id: operator,
                pod: "impostor".into(),
            },
        ),
        pinned(),
    )
    .await;
    let e = call(&genuine, impostor, &Expect::Operator)
        .await
        .expect_err("impostor");
    assert!(e.contains("not signed by a mesh issuer"), "{e}");
}
