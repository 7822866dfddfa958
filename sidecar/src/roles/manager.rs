//! Manager role: frame listener -> workers -> app, the app's local API -> outbound router, plus
//! admin; drains on SIGTERM with GOAWAY.

use super::{RunError, bind, local_addr};
use crate::admin::{self, Readiness};
use crate::load::LoadMeters;
use crate::load::report::Reporter;
use crate::manager::delivery::grpc::GrpcDelivery;
use crate::manager::delivery::http::HttpDelivery;
use crate::manager::inbound;
use crate::manager::local_api::{self, LocalApi};
use crate::manager::routers::Routers;
use crate::manager::worker::{Delivery, Settings, Worker};
use crate::metrics::Metrics;
use crate::shutdown::DRAIN_LIMIT;
use crate::upstream::{Upstream, follow};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use switchyard_crds::manager::AppProtocol;
use switchyard_protocol::env;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs the manager role until a drain completes.
pub(crate) async fn run(
    config_file: &Path,
    listen: SocketAddr,
    admin_addr: SocketAddr,
    app_addr: Option<SocketAddr>,
    local_api_addr: SocketAddr,
    event_types: Option<&str>,
) -> Result<(), RunError> {
    let s = crate::config::load_manager(config_file, event_types)?;
    let c = &s.config;
    let app = app_addr.unwrap_or(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), s.app_port));
    let source = format!("/switchyard/{}/{}", c.namespace, c.name);
    let delivery = match c.app.protocol {
        AppProtocol::Grpc => {
            Delivery::Grpc(Box::new(GrpcDelivery::new(app, &source).map_err(|e| {
                crate::config::field_error(config_file, "app.port", e.to_string())
            })?))
        }
        AppProtocol::Http => Delivery::Http(Box::new(
            HttpDelivery::new(app, &c.app.path, &source, s.max_in_flight)
                .map_err(|e| crate::config::field_error(config_file, "app.path", e.to_string()))?,
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
    // The app's outgoing events and dead letters leave through the same router stage as client requests.
    // In a cluster the table comes from the operator's control plane (the operator sets the variable on
    // both sidecars); locally `switchyard up` puts the Router's table in the config.
    let control_plane = std::env::var(env::CONTROL_PLANE)
        .ok()
        .filter(|u| !u.is_empty())
        .map(|url| follow::endpoint(&url).map(|ep| (url, ep)))
        .transpose()?;
    let pod = std::env::var(env::POD_NAME).unwrap_or_default();
    // No WebSocket clients here: these connections take no pushes.
    let mut router = Upstream::start(
        &c.router,
        &c.namespace,
        &c.destinations,
        &c.static_endpoints,
        None,
        metrics.clone(),
    );
    if let Some((url, _)) = &control_plane {
        router = router.with_control_plane(url.clone());
    }
    let router = Arc::new(router);
    let reporter = control_plane.as_ref().map(|(_, ep)| {
        let meters = Arc::new(LoadMeters::new(
            events.iter().map(|e| Arc::<str>::from(e.as_str())),
        ));
        let _ = metrics.load.set(meters.clone());
        let who = Reporter {
            pod: pod.clone(),
            namespace: c.namespace.clone(),
            role: "manager",
            owner: c.name.clone(),
        };
        tokio::spawn(crate::load::push::run(ep.clone(), meters, who))
    });
    let follower = control_plane.map(|(_, ep)| tokio::spawn(follow::run(ep, router.clone(), pod)));
    if let Some(dl) = &c.workers.dead_letter
        && router.pool_of(dl.as_str()).is_none()
    {
        tracing::warn!(dead_letter = %dl, "no Manager handles the dead-letter event type yet; dead letters are counted as unrouted");
    }
    let mut worker = Worker::new(
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
    .with_tracing(otel.clone());
    if let Some(key) = &c.workers.ordering_key {
        worker = worker.with_ordering_key(key.clone());
    }
    if let Some(dl) = &c.workers.dead_letter {
        worker = worker.with_dead_letter(dl.as_str(), router.clone());
    }
    let worker = Arc::new(worker);
    let routers = Arc::new(Routers::default());
    let ready = Readiness::default();
    let admin = bind("admin", admin_addr).await?;
    let admin_addr = local_addr(&admin, admin_addr);
    // `/routes` shows the outbound table the app's events and dead letters use.
    tokio::spawn(admin::serve_router(
        admin,
        metrics.clone(),
        ready.clone(),
        router.clone(),
    ));
    let listener = bind("frame listener", listen).await?;
    let listen = local_addr(&listener, listen);
    let local_listener = bind("local API", local_api_addr).await?;
    let local_api_addr = local_addr(&local_listener, local_api_addr);
    let drain = CancellationToken::new();
    // The app may still publish while its last deliveries run: the local API closes after them.
    let local_drain = CancellationToken::new();
    let local = LocalApi::new(router, routers.clone(), metrics);
    let local_server = tokio::spawn(local_api::serve(
        local_listener,
        Arc::new(local),
        local_drain.clone(),
    ));
    let connections = TaskTracker::new();
    let acceptor = tokio::spawn(inbound::serve(
        listener,
        worker,
        routers,
        drain.clone(),
        connections.clone(),
    ));
    ready.set(true);
    tracing::info!(listen = %listen, admin = %admin_addr, app = %app, local_api = %local_api_addr, events = ?events, manager = %c.name, "manager ready");

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
    local_drain.cancel();
    let _ = local_server.await;
    if let Some(f) = follower {
        f.abort();
    }
    if let Some(r) = reporter {
        r.abort();
    }
    tracing::info!("manager drained");
    if let Some(o) = &otel {
        o.shutdown().await;
    }
    Ok(())
}
