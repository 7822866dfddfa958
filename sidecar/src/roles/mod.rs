//! Wiring of each role: bind, serve, drain. The top of the stack: everything below is composed here.

mod identity;
pub(crate) mod manager;
pub(crate) mod router;

use crate::config::ConfigError;
use crate::otel::OtelError;
use std::net::SocketAddr;

/// How a role run ended badly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// The config is unusable (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A port could not be bound (exit 1).
    #[error("{what} {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The `--ready-file` could not be written (exit 1).
    #[error("--ready-file {}: {source}", path.display())]
    ReadyFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The control-plane URL is unusable (exit 1).
    #[error(transparent)]
    ControlPlane(#[from] crate::net::control_plane::EndpointError),
    /// Mesh TLS cannot start: its trust bundle or its identity service is unusable (exit 2, a
    /// setting to fix).
    #[error(transparent)]
    Identity(#[from] crate::net::identity::IdentityError),
    /// A signal came before the sidecar was ready (exit 0).
    #[error("stopped before start-up finished")]
    Stopped,
    /// Trace export could not start (exit 1).
    #[error(transparent)]
    Tracing(OtelError),
    /// The thread that reloads key files could not start (exit 1).
    #[error("key file reloads: {0}")]
    Reload(std::io::Error),
    /// A drain `/drain` started was not followed by SIGTERM within the wait (exit 3): the pod is
    /// not stopping, and the kubelet's restart brings the sidecar back to serving.
    #[error("drained by /drain, but no SIGTERM followed within {0:?}")]
    DrainNotFollowed(std::time::Duration),
    /// `switchyard-sidecar drain` (the preStop hook) could not drain the manager (exit 1).
    #[error(transparent)]
    DrainCall(#[from] crate::admin::DrainCallError),
    /// The container's memory limit cannot hold what the settings ask (exit 2: a setting to fix).
    #[error("{0}")]
    Memory(switchyard_protocol::memory::Misfit),
    /// gRPC reflection could not be built (exit 1).
    #[error(transparent)]
    Reflection(#[from] crate::listener::grpc::ReflectionError),
}

impl RunError {
    /// The exit status: 2 for a config the user must fix, 3 for a drain no SIGTERM followed, 1 for
    /// other start-up failures.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) | RunError::Identity(_) | RunError::Memory(_) => 2,
            RunError::DrainNotFollowed(_) => 3,
            RunError::Stopped => 0,
            _ => 1,
        }
    }
}

impl From<OtelError> for RunError {
    fn from(e: OtelError) -> RunError {
        match e {
            OtelError::Config(c) => RunError::Config(c),
            other => RunError::Tracing(other),
        }
    }
}

/// Binds `addr` for `what` (with a backlog that takes a burst of new clients), naming both when it
/// fails.
pub(crate) async fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<tokio::net::TcpListener, RunError> {
    switchyard_identity::incoming::bind(addr).map_err(|source| RunError::Bind {
        what,
        addr,
        source,
    })
}

/// The address `listener` is bound to, for the ready line: with port 0 the kernel picked the port,
/// and whoever started the process reads it there. `asked` if the socket cannot tell.
pub(crate) fn local_addr(listener: &tokio::net::TcpListener, asked: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(asked)
}

/// Meters the load of `events` (the metrics' `load`, which the load-aware pick reads) and reports
/// it as `who` to the control plane `cp` for as long as the task lives, each report stream over a
/// fresh connection: both roles report the same way.
pub(crate) fn report_load(
    cp: &crate::net::control_plane::ControlPlane,
    metrics: &crate::metrics::Metrics,
    events: impl IntoIterator<Item = std::sync::Arc<str>>,
    who: crate::load::report::Reporter,
) -> tokio::task::JoinHandle<()> {
    let meters = std::sync::Arc::new(crate::load::meter::LoadMeters::new(events));
    let _ = metrics.load.set(meters.clone());
    let dial = cp.clone();
    tokio::spawn(crate::load::push::run(
        cp.url(),
        move || {
            let dial = dial.clone();
            async move { dial.connect().await }
        },
        meters,
        who,
    ))
}
