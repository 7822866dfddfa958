//! SIGTERM / SIGINT: the start of a drain, or (after a drain the preStop hook started) its end.

use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal as listen_for};

/// How long a drain may take before the process exits anyway (Kubernetes' default grace is 30 s).
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// How long a manager drained by its preStop hook waits for the SIGTERM that should follow, by
/// default: above the drain limit plus the app's own stop (the operator's default grace period is
/// 52 s), so a pod that is really stopping is killed by the kubelet first. The operator passes the
/// pod's own grace period plus a margin.
pub(crate) const SIGNAL_WAIT: Duration = Duration::from_secs(DRAIN_LIMIT.as_secs() + 30);

/// SIGTERM and SIGINT, listened for once for the whole life of a role: a signal that arrives while
/// the role is busy (in the middle of a drain) is kept for the next [`Signals::recv`] instead of
/// being lost, as it would be between two listeners.
pub(crate) struct Signals {
    term: Option<Signal>,
    int: Option<Signal>,
}

impl Signals {
    /// Starts listening. A signal that cannot be listened for is logged; the other still drains.
    pub(crate) fn listen() -> Signals {
        let open = |kind: SignalKind, name: &str| match listen_for(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, signal = name, "cannot listen for the signal");
                None
            }
        };
        Signals {
            term: open(SignalKind::terminate(), "SIGTERM"),
            int: open(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Resolves on the next SIGTERM or SIGINT (never, when neither can be listened for), with its
    /// name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        async fn next(s: Option<&mut Signal>) {
            match s {
                Some(s) => {
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = next(self.term.as_mut()) => "SIGTERM",
            () = next(self.int.as_mut()) => "SIGINT",
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT.
pub(crate) async fn signal() {
    let which = Signals::listen().recv().await;
    tracing::info!("{which}: draining");
}
