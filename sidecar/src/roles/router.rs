//! Router role: HTTP listener -> broker -> router, plus admin; drains on SIGTERM.

use super::RunError;
use crate::admin::{self, Readiness};
use crate::broker::Broker;
use crate::listener::{Edge, http};
use crate::metrics::{EventLabel, Metrics};
use crate::router::Router;
use crate::routes::RouteTable;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs the router role until a drain completes.
pub async fn run(config_file: &Path, bind: IpAddr, admin_addr: SocketAddr) -> Result<(), RunError> {
    let settings = crate::config::load_router(config_file)?;
    let table = RouteTable::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    for route in table.routes() {
        if !settings
            .config
            .destinations
            .keys()
            .any(|e| e.as_str() == &*route.event)
        {
            tracing::warn!(event = %route.event, "no Manager handles this event type yet; its requests get 503");
        }
    }
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let admin = admin::bind(admin_addr)
        .await
        .map_err(|e| RunError::Startup(format!("admin {admin_addr}: {e}")))?;
    tokio::spawn(admin::serve(admin, metrics.clone(), ready.clone()));

    let http_addr = SocketAddr::new(bind, settings.http_port);
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|e| RunError::Startup(format!("HTTP listener {http_addr}: {e}")))?;
    let edge = Arc::new(Edge {
        table,
        broker: Broker::new(settings.queue_capacity, metrics.clone()),
        router: Router::start(&settings.config, metrics.clone()),
        metrics,
        unmatched: EventLabel(Arc::from("unmatched")),
    });
    let drain = CancellationToken::new();
    let server = tokio::spawn(http::serve(listener, edge, drain.clone()));
    ready.set(true);
    tracing::info!(http = %http_addr, admin = %admin_addr, router = %settings.config.name, "router ready");

    crate::shutdown::signal().await;
    ready.set(false);
    drain.cancel();
    let _ = server.await;
    tracing::info!("router drained");
    Ok(())
}
