//! How the sidecar dials the operator's control plane: `https://` through the mesh's TLS (this
//! workload's certificate presented, the operator's checked), or `http://` when mesh TLS is off.

use super::mesh::MeshTls;
use std::time::Duration;
use switchyard_identity::connect::MeshConnector;
use tonic::transport::{Channel, Endpoint};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An unusable control-plane URL; the message names it and the fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    /// Neither `http://` nor `https://`.
    #[error("--control-plane {0:?} must start with https:// (or http:// with mesh TLS off)")]
    Scheme(String),
    /// `https://` without an identity to present.
    #[error(
        "--control-plane {0:?} is https:// but this sidecar has no mesh identity; set SWITCHYARD_IDENTITY"
    )]
    NoIdentity(String),
    /// Not a URL.
    #[error("--control-plane {url:?} is not a valid URL: {source}")]
    Invalid {
        /// The URL given.
        url: String,
        /// Why it does not parse.
        source: tonic::transport::Error,
    },
}

/// The control plane's address and how to reach it.
#[derive(Clone)]
pub(crate) struct ControlPlane {
    url: String,
    endpoint: Endpoint,
    tls: Option<MeshConnector>,
}

impl ControlPlane {
    /// Checks `url` before mesh TLS exists: a scheme, and an identity to present for `https://`.
    pub(crate) fn precheck(url: &str, identity: bool) -> Result<(), EndpointError> {
        if url.starts_with("https://") && !identity {
            return Err(EndpointError::NoIdentity(url.to_owned()));
        }
        if !url.starts_with("https://") && !url.starts_with("http://") {
            return Err(EndpointError::Scheme(url.to_owned()));
        }
        Endpoint::from_shared(url.to_owned())
            .map(|_| ())
            .map_err(|source| EndpointError::Invalid {
                url: url.to_owned(),
                source,
            })
    }

    /// Checks `url`; `https://` dials through `mesh`.
    pub(crate) fn new(url: &str, mesh: Option<&MeshTls>) -> Result<ControlPlane, EndpointError> {
        let tls = if url.starts_with("https://") {
            Some(
                mesh.ok_or_else(|| EndpointError::NoIdentity(url.to_owned()))?
                    .control_plane(),
            )
        } else if url.starts_with("http://") {
            if mesh.is_some() {
                tracing::warn!(
                    control_plane = url,
                    "the control plane is plain http:// while mesh TLS is on; routing tables and load reports travel unencrypted"
                );
            }
            None
        } else {
            return Err(EndpointError::Scheme(url.to_owned()));
        };
        let endpoint =
            Endpoint::from_shared(url.to_owned()).map_err(|source| EndpointError::Invalid {
                url: url.to_owned(),
                source,
            })?;
        let endpoint = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            // Finds a vanished operator (node loss, partition) that never closes the stream.
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        Ok(ControlPlane {
            url: url.to_owned(),
            endpoint,
            tls,
        })
    }

    /// The URL as given, for logs and `/routes`.
    pub(crate) fn url(&self) -> String {
        self.url.clone()
    }

    /// Connects now.
    pub(crate) async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        match &self.tls {
            Some(c) => self.endpoint.connect_with_connector(c.clone()).await,
            None => self.endpoint.connect().await,
        }
    }

    /// A channel that connects on first use (and reconnects after failures).
    pub(crate) fn connect_lazy(&self) -> Channel {
        match &self.tls {
            Some(c) => self.endpoint.connect_with_connector_lazy(c.clone()),
            None => self.endpoint.connect_lazy(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_a_scheme_and_https_needs_an_identity() {
        assert!(ControlPlane::new("http://switchyard.system.svc:7443", None).is_ok());
        let e = ControlPlane::new("switchyard.system.svc:7443", None)
            .err()
            .expect("no scheme");
        assert!(e.to_string().contains("https://"), "{e}");
        let e = ControlPlane::new("https://x:1", None)
            .err()
            .expect("no identity");
        assert!(e.to_string().contains("SWITCHYARD_IDENTITY"), "{e}");
        assert!(ControlPlane::new("http://bad host:1", None).is_err());
        assert!(ControlPlane::precheck("https://x:1", true).is_ok());
        assert!(ControlPlane::precheck("https://x:1", false).is_err());
        assert!(ControlPlane::precheck("ftp://x:1", true).is_err());
    }
}
