//! The admin HTTP server (`/metrics`, and `/healthz`, `/readyz` for scrapers that read them there)
//! and the probe server (`/healthz`, `/readyz` only), each on a listener of its own under
//! `conn::http`'s caps, so that clients holding every admin connection cannot fail the probes.

use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared admin state.
#[derive(Clone)]
pub(crate) struct Admin {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// False until the API server was reached once, and again while shutting down.
    pub ready: Arc<AtomicBool>,
}

/// The admin routes.
pub(crate) fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(admin.clone())
        .merge(probes(admin))
}

/// The probe routes.
pub(crate) fn probes(admin: Admin) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(admin)
}

async fn metrics(State(a): State<Admin>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        a.metrics.encode(),
    )
}

// A standby replica (not leader) is ready: it serves metrics and can take over, and rolling updates of
// the operator Deployment must not wait on an election.
async fn readyz(State(a): State<Admin>) -> impl IntoResponse {
    if a.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
