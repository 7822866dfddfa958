//! Router role: HTTP and gRPC listeners -> broker -> router, plus admin; drains on SIGTERM.

use super::RunError;
use crate::admin::{self, Readiness};
use crate::broker::Broker;
use crate::listener::grpc::GrpcRoutes;
use crate::listener::{Edge, grpc, http};
use crate::metrics::{EventLabel, Metrics};
use crate::router::{Router, follow};
use crate::routes::RouteTable;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs the router role until a drain completes.
pub async fn run(
    config_file: &Path,
    bind: IpAddr,
    admin_addr: SocketAddr,
    control_plane: Option<&str>,
) -> Result<(), RunError> {
    let settings = crate::config::load_router(config_file)?;
    let control_plane = control_plane
        .map(|url| {
            follow::endpoint(url)
                .map(|ep| (url.to_owned(), ep))
                .map_err(RunError::Startup)
        })
        .transpose()?;
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
    let grpc_routes = GrpcRoutes::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    let grpc_port = match &settings.config.spec.listeners.grpc {
        None => {
            if grpc_routes.iter().next().is_some() {
                tracing::warn!(
                    "the spec has gRPC routes but no listeners.grpc; they are not served"
                );
            }
            None
        }
        Some(g) => Some(
            u16::try_from(g.port)
                .ok()
                .filter(|p| *p != 0 && *p != settings.http_port)
                .ok_or_else(|| {
                    crate::config::field_error(
                        config_file,
                        "spec.listeners.grpc.port",
                        format!(
                            "{} is not a TCP port (1 to 65535) other than the HTTP port",
                            g.port
                        ),
                    )
                })?,
        ),
    };
    for route in grpc_routes.iter() {
        if !settings
            .config
            .destinations
            .keys()
            .any(|e| e.as_str() == &*route.event)
        {
            tracing::warn!(event = %route.event, method = %route.method, "no Manager handles this event type yet; its gRPC calls get UNAVAILABLE");
        }
    }
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let mut router = Router::start(&settings.config, metrics.clone());
    if let Some((url, _)) = &control_plane {
        router = router.with_control_plane(url.clone());
    }
    let router = Arc::new(router);
    let admin = admin::bind(admin_addr)
        .await
        .map_err(|e| RunError::Startup(format!("admin {admin_addr}: {e}")))?;
    tokio::spawn(admin::serve_router(
        admin,
        metrics.clone(),
        ready.clone(),
        router.clone(),
    ));
    // Until the first table arrives (and whenever the operator is away) the config's table or the
    // last streamed one serves.
    let follower = control_plane.map(|(_, ep)| {
        let pod = std::env::var("POD_NAME").unwrap_or_default();
        tokio::spawn(follow::run(ep, router.clone(), pod))
    });

    let http_addr = SocketAddr::new(bind, settings.http_port);
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|e| RunError::Startup(format!("HTTP listener {http_addr}: {e}")))?;
    let grpc_addr = grpc_port.map(|p| SocketAddr::new(bind, p));
    let grpc_listener = match grpc_addr {
        None => None,
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .map_err(|e| RunError::Startup(format!("gRPC listener {a}: {e}")))?,
        ),
    };
    let edge = Arc::new(Edge {
        table,
        broker: Broker::new(settings.queue_capacity, metrics.clone()),
        router,
        metrics,
        unmatched: EventLabel(Arc::from("unmatched")),
    });
    let drain = CancellationToken::new();
    let grpc_server = match grpc_listener {
        None => None,
        Some(l) => {
            let svc = grpc::service(edge.clone(), Arc::new(grpc_routes), drain.clone())
                .map_err(RunError::Startup)?;
            Some(tokio::spawn(grpc::serve(l, svc, drain.clone())))
        }
    };
    let server = tokio::spawn(http::serve(listener, edge, drain.clone()));
    ready.set(true);
    let grpc_shown = grpc_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "off".to_owned());
    tracing::info!(http = %http_addr, grpc = %grpc_shown, admin = %admin_addr, router = %settings.config.name, "router ready");

    crate::shutdown::signal().await;
    ready.set(false);
    drain.cancel();
    let _ = server.await;
    if let Some(g) = grpc_server {
        let _ = g.await;
    }
    if let Some(f) = follower {
        f.abort();
    }
    tracing::info!("router drained");
    Ok(())
}
