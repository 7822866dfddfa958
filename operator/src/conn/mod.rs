//! What every server of the operator does with its connections: caps (`switchyard_identity::limit`,
//! admitted at accept), an idle timeout (`idle`: a connection with no request in progress is
//! closed), and the plain HTTP accept loop of the admin and probe servers (`http`).

pub(crate) mod http;
pub(crate) mod idle;

use std::time::Duration;
use switchyard_identity::limit::Limits;

/// The control plane's listener: sidecars hold one long stream each (a Router pod one, a Manager
/// pod one or two), so the global cap is far above any mesh the operator serves
/// (docs/performance-log.md measures 500 router streams and 1,000 Managers), and the per-peer cap far
/// above what one pod opens, while one pod cannot hold more than a small share.
pub(crate) const CONTROL_PLANE: Limits = Limits {
    max_connections: 8192,
    max_per_peer: 64,
    handshake_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(60),
};

/// The Identity listener: a sidecar certifies once at start and then at two thirds of its
/// certificate's life; a connection does one call.
pub(crate) const IDENTITY: Limits = Limits {
    max_connections: 1024,
    max_per_peer: 16,
    handshake_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(30),
};

/// The admin server (`/metrics`): Prometheus scrapes with one or two connections.
pub(crate) const ADMIN: Limits = Limits {
    max_connections: 64,
    max_per_peer: 8,
    handshake_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(30),
};

/// The probe server (`/healthz`, `/readyz`): the kubelet, from the node's address.
pub(crate) const PROBES: Limits = Limits {
    max_connections: 32,
    max_per_peer: 8,
    handshake_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(30),
};
