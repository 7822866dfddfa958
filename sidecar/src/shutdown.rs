//! SIGTERM / SIGINT: the start of a drain.

/// How long a drain may take before the process exits anyway (Kubernetes' default grace is 30 s).
pub const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT drains");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM: draining"),
        r = tokio::signal::ctrl_c() => match r {
            Ok(()) => tracing::info!("SIGINT: draining"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        },
    }
}
