//! The client half for gRPC over the mesh: a connector tonic dials through, which opens TCP to the
//! URL's host and port and runs the TLS handshake expecting the given workload.

use crate::tls::Expect;
use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Dials `https://host:port` URLs with TLS, expecting `expect` on the other end.
#[derive(Clone)]
pub struct MeshConnector {
    tls: TlsConnector,
    expect: Expect,
}

impl MeshConnector {
    /// A connector using `config` (see [`crate::tls::client_config`]).
    pub fn new(config: Arc<rustls::ClientConfig>, expect: Expect) -> MeshConnector {
        MeshConnector {
            tls: TlsConnector::from(config),
            expect,
        }
    }
}

impl tower::Service<http::Uri> for MeshConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<Self::Response>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (tls, expect) = (self.tls.clone(), self.expect.clone());
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "the URL has no host")
            })?;
            // `[::1]` in a URL is `::1` to connect to.
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(443);
            let tcp = TcpStream::connect((host, port)).await?;
            let _ = tcp.set_nodelay(true);
            let name = expect
                .server_name()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tls = tls.connect(name, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}
