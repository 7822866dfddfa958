//! The identity flow and mTLS over real sockets: a sidecar-like client gets a certificate from the
//! Identity service with a token, then two certified workloads talk mTLS, and every wrong peer is
//! refused in the handshake.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_identity::ca::{Ca, Subject, key_and_request};
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::service::{IdentityService, Quiet, StaticTokens};
use switchyard_identity::tls::{self, ClientAuth, Expect};
use switchyard_identity::{Authority, CertStore, Kind, SpiffeId, TrustStore};
use switchyard_protocol::control::v1::CertifyRequest;
use switchyard_protocol::control::v1::identity_client::IdentityClient;
use switchyard_protocol::control::v1::identity_server::IdentityServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn subject(kind: Kind, name: &str) -> Subject {
    Subject {
        id: SpiffeId::new("test.local", "shop", kind, name).expect("id"),
        pod: format!("{name}-pod"),
    }
}

/// A store certified directly by `ca` for `subject`.
fn certified(ca: &Ca, subject: &Subject) -> Arc<CertStore> {
    let store = Arc::new(CertStore::default());
    certify(ca, subject, &store);
    store
}

/// Installs a certificate of `ca` for `subject` in `store`.
fn certify(ca: &Ca, subject: &Subject, store: &CertStore) {
    let (key, csr) = key_and_request().expect("csr");
    let issued = ca
        .issue(&csr, subject, Duration::from_secs(3600), SystemTime::now())
        .expect("issued");
    store
        .install(
            issued.chain,
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            issued.not_after,
        )
        .expect("install");
}

#[tokio::test]
async fn a_token_buys_a_certificate_over_tls_and_a_wrong_token_does_not() {
    let (ca, _) = Ca::generate("test.local", SystemTime::now()).expect("ca");
    let ca = Arc::new(ca);
    let roots = tls::roots(ca.trust()).expect("roots");
    let operator = certified(
        &ca,
        &Subject {
            id: SpiffeId::new("test.local", "system", Kind::Operator, "switchyard").expect("id"),
            pod: "operator-0".into(),
        },
    );
    let mut tokens = StaticTokens::default();
    let token = tokens.add(subject(Kind::Router, "edge")).expect("token");
    let service = IdentityService::new(
        Arc::new(Authority::new(ca.clone(), Duration::ZERO)),
        tokens,
        Duration::from_secs(600),
        Arc::new(Quiet),
    );
    let server_config = tls::server_config(
        operator,
        roots.clone(),
        ClientAuth::Optional,
        &[tls::H2_ALPN],
    )
    .expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let incoming = switchyard_identity::incoming::incoming(
        listener,
        TlsAcceptor::from(Arc::new(server_config)),
        || {},
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IdentityServer::new(service))
            .serve_with_incoming(incoming),
    );

    let client_config =
        Arc::new(tls::client_config(None, roots.clone(), &[tls::H2_ALPN]).expect("client"));
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .expect("url")
        .connect_with_connector(MeshConnector::new(client_config.clone(), Expect::Operator))
        .await
        .expect("connect");
    let mut client = IdentityClient::new(channel);
    let (_key, csr) = key_and_request().expect("csr");
    let reply = client
        .certify(CertifyRequest {
            token: token.clone(),
            csr: csr.clone(),
        })
        .await
        .expect("certified")
        .into_inner();
    assert_eq!(reply.identity, "spiffe://test.local/ns/shop/router/edge");
    assert_eq!(reply.trust_bundle.len(), 1);
    let life = reply.not_after_ms - reply.not_before_ms;
    assert_eq!(life, 660_000, "600 s plus the 60 s backdate");

    let refused = client
        .certify(CertifyRequest {
            token: "wrong".into(),
            csr: csr.clone(),
        })
        .await
        .expect_err("a wrong token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let refused = client
        .certify(CertifyRequest {
            token,
            csr: b"garbage".to_vec(),
        })
        .await
        .expect_err("a bad request");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    // A server that is a workload, not the operator, is refused by a client expecting the operator.
    let impostor = certified(&ca, &subject(Kind::Manager, "handlers"));
    let err = handshake(&ca, impostor, None, Expect::Operator)
        .await
        .expect_err("impostor");
    assert!(err.contains("not the operator"), "{err}");
}

/// Runs one handshake between a server certified as `server` and a client with `client` (or no
/// certificate), expecting `expect`; returns the identity the server saw, or the client's error.
async fn handshake(
    ca: &Ca,
    server: Arc<CertStore>,
    client: Option<Arc<CertStore>>,
    expect: Expect,
) -> Result<Option<SpiffeId>, String> {
    let roots = tls::roots(ca.trust()).expect("roots");
    handshake_with_roots(roots.clone(), roots, server, client, expect).await
}

async fn handshake_with_roots(
    server_roots: Arc<TrustStore>,
    client_roots: Arc<TrustStore>,
    server: Arc<CertStore>,
    client: Option<Arc<CertStore>>,
    expect: Expect,
) -> Result<Option<SpiffeId>, String> {
    let acceptor = TlsAcceptor::from(Arc::new(
        tls::server_config(
            server,
            server_roots,
            ClientAuth::Required,
            &[tls::FRAMES_ALPN],
        )
        .expect("server"),
    ));
    let connector = TlsConnector::from(Arc::new(
        tls::client_config(client, client_roots, &[tls::FRAMES_ALPN]).expect("client"),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        match acceptor.accept(tcp).await {
            Ok(mut s) => {
                let who = tls::peer_of(s.get_ref().1.peer_certificates()).map(|p| p.id);
                let _ = s.write_all(b"ok").await;
                let _ = s.flush().await;
                Ok(who)
            }
            Err(e) => Err(e.to_string()),
        }
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = expect.server_name().expect("name");
    let mut buf = [0u8; 2];
    let client_result = match connector.connect(name, tcp).await {
        // TLS 1.3: the server checks the client's certificate after the client finished, so a
        // refusal shows on the first read.
        Ok(mut s) => s
            .read_exact(&mut buf)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let server_result = server_side.await.expect("server task");
    client_result?;
    server_result
}

#[tokio::test]
async fn mtls_lets_the_expected_peers_in_and_refuses_the_rest() {
    let (ca, _) = Ca::generate("test.local", SystemTime::now()).expect("ca");
    let manager = certified(&ca, &subject(Kind::Manager, "handlers"));
    let router = certified(&ca, &subject(Kind::Router, "edge"));

    let seen = handshake(
        &ca,
        manager.clone(),
        Some(router.clone()),
        Expect::manager("shop", "handlers"),
    )
    .await
    .expect("mTLS");
    assert_eq!(seen, Some(subject(Kind::Router, "edge").id));

    // The client expected another Manager.
    let err = handshake(
        &ca,
        manager.clone(),
        Some(router.clone()),
        Expect::manager("shop", "billing"),
    )
    .await
    .expect_err("wrong server");
    assert!(err.contains("not manager shop/billing"), "{err}");

    // No client certificate: the frame server requires one.
    handshake(
        &ca,
        manager.clone(),
        None,
        Expect::manager("shop", "handlers"),
    )
    .await
    .expect_err("no client certificate");

    // A client certified by another CA.
    let (other, _) = Ca::generate("test.local", SystemTime::now()).expect("other ca");
    let stranger = certified(&other, &subject(Kind::Router, "edge"));
    handshake(
        &ca,
        manager.clone(),
        Some(stranger),
        Expect::manager("shop", "handlers"),
    )
    .await
    .expect_err("foreign client");

    // A server certified by another CA.
    let foreign_server = certified(&other, &subject(Kind::Manager, "handlers"));
    let err = handshake_with_roots(
        tls::roots(other.trust()).expect("roots"),
        tls::roots(ca.trust()).expect("roots"),
        foreign_server,
        Some(router),
        Expect::manager("shop", "handlers"),
    )
    .await
    .expect_err("foreign server");
    // Both roots carry the same name, so the chain is found and its signature fails.
    assert!(
        err.contains("BadSignature") || err.contains("UnknownIssuer"),
        "{err}"
    );
}

/// A sidecar's first connection to the operator has no client certificate (it is asking for one);
/// the next, once certified, must present it. A resumed TLS 1.3 session would carry the first
/// connection's (absent) client identity instead: seen in real pods, where the Identity service
/// and the control plane are one address, as every control-plane call refused UNAUTHENTICATED.
#[tokio::test]
async fn a_connection_after_certification_presents_the_certificate_not_a_resumed_session() {
    let (ca, _) = Ca::generate("test.local", SystemTime::now()).expect("ca");
    let roots = tls::roots(ca.trust()).expect("roots");
    let operator = certified(&ca, &subject(Kind::Operator, "switchyard"));
    let acceptor = TlsAcceptor::from(Arc::new(
        tls::server_config(
            operator,
            roots.clone(),
            ClientAuth::Optional,
            &[tls::H2_ALPN],
        )
        .expect("server"),
    ));
    // One client config for the sidecar's whole life, its store empty until certified.
    let store = Arc::new(CertStore::default());
    let connector = TlsConnector::from(Arc::new(
        tls::client_config(Some(store.clone()), roots, &[tls::H2_ALPN]).expect("client"),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut s = acceptor.accept(tcp).await.expect("server handshake");
            seen.push(tls::peer_of(s.get_ref().1.peer_certificates()).map(|p| p.id));
            let _ = s.write_all(b"ok").await;
            let _ = s.flush().await;
            // Read until the client closes, so session tickets reach it.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        }
        seen
    });
    let dial = |connector: TlsConnector| async move {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = Expect::Operator.server_name().expect("name");
        let mut s = connector
            .connect(name, tcp)
            .await
            .expect("client handshake");
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).await.expect("read");
        s.shutdown().await.expect("close");
    };
    dial(connector.clone()).await;
    // Certified now (as the Identity service's answer would install it).
    certify(&ca, &subject(Kind::Router, "edge"), &store);
    dial(connector).await;
    let seen = server.await.expect("server task");
    assert_eq!(seen[0], None, "the first connection had no certificate");
    assert_eq!(
        seen[1].as_ref().map(|id| id.uri()),
        Some("spiffe://test.local/ns/shop/router/edge".to_owned()),
        "the second connection must present the new certificate"
    );
}
