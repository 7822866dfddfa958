//! Manager role: frame listener -> workers -> app, plus admin; drains on SIGTERM with GOAWAY.

use super::RunError;
use crate::admin::{self, Readiness};
use crate::manager::delivery_grpc::GrpcDelivery;
use crate::manager::delivery_http::HttpDelivery;
use crate::manager::inbound;
use crate::manager::worker::{Delivery, Settings, Worker};
use crate::metrics::Metrics;
use crate::shutdown::DRAIN_LIMIT;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use switchyard_crds::manager::AppProtocol;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs the manager role until a drain completes.
pub async fn run(
    config_file: &Path,
    listen: SocketAddr,
    admin_addr: SocketAddr,
    app_addr: Option<SocketAddr>,
    event_types: Option<&str>,
) -> Result<(), RunError> {
    let s = crate::config::load_manager(config_file, event_types)?;
    let c = &s.config;
    let app = app_addr.unwrap_or(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), s.app_port));
    let source = format!("/switchyard/{}/{}", c.namespace, c.name);
    let delivery = match c.app.protocol {
        AppProtocol::Grpc => Delivery::Grpc(Box::new(
            GrpcDelivery::new(app, &source)
                .map_err(|e| crate::config::field_error(config_file, "app.port", e))?,
        )),
        AppProtocol::Http => Delivery::Http(Box::new(
            HttpDelivery::new(app, &c.app.path, &source, s.max_in_flight)
                .map_err(|e| crate::config::field_error(config_file, "app.path", e))?,
        )),
    };
    let otel = crate::otel::configure(
        c.tracing.as_ref(),
        "tracing",
        crate::otel::Role::Manager,
        config_file,
    )?
    .map(Arc::new);
    let metrics = Metrics::new();
    let events: Vec<String> = s.events.iter().map(|e| e.as_str().to_owned()).collect();
    let worker = Arc::new(
        Worker::new(
            Settings {
                max_in_flight: s.max_in_flight,
                queue_capacity: s.queue_capacity,
                attempt_timeout: c.workers.timeout.into(),
                attempts: s.attempts,
                backoff: c.workers.retries.backoff.into(),
                max_backoff: c.workers.retries.max_backoff.into(),
                dead_letter: c.workers.dead_letter.is_some(),
            },
            &events,
            delivery,
            metrics.clone(),
        )
        .with_tracing(otel.clone()),
    );
    let ready = Readiness::default();
    let admin = admin::bind(admin_addr)
        .await
        .map_err(|e| RunError::Startup(format!("admin {admin_addr}: {e}")))?;
    tokio::spawn(admin::serve(admin, metrics, ready.clone()));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| RunError::Startup(format!("frame listener {listen}: {e}")))?;
    let drain = CancellationToken::new();
    let connections = TaskTracker::new();
    let acceptor = tokio::spawn(inbound::serve(
        listener,
        worker,
        drain.clone(),
        connections.clone(),
    ));
    ready.set(true);
    tracing::info!(listen = %listen, admin = %admin_addr, app = %app, events = ?events, manager = %c.name, "manager ready");

    crate::shutdown::signal().await;
    ready.set(false);
    drain.cancel();
    let _ = acceptor.await;
    connections.close();
    if tokio::time::timeout(DRAIN_LIMIT, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("drain limit reached with deliveries still open");
    }
    tracing::info!("manager drained");
    if let Some(o) = &otel {
        o.shutdown().await;
    }
    Ok(())
}
