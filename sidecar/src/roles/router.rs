//! Router role: HTTP (with WebSocket) and gRPC listeners -> broker -> router, plus admin; drains on
//! SIGTERM.

use super::{RunError, bind, local_addr};
use crate::admin::{self, Readiness};
use crate::dispatch::{Broker, Dispatch};
use crate::listener::tls::{self, EdgeCert};
use crate::listener::ws::WsEdge;
use crate::listener::ws::push::Hub;
use crate::listener::{Edge, grpc, http};
use crate::load::LoadMeters;
use crate::load::report::Reporter;
use crate::metrics::{EventLabel, Metrics};
use crate::middleware::Stack;
use crate::net::accept::Policy;
use crate::net::conn::limits::Tracker;
use crate::net::control_plane::ControlPlane;
use crate::net::identity::IdentitySettings;
use crate::routes::grpc::GrpcRoutes;
use crate::routes::http::RouteTable;
use crate::routes::ws::WsRoutes;
use crate::secrets::Secrets;
use crate::secrets::reload::Reloads;
use crate::shutdown::DRAIN_LIMIT;
use crate::tap::Taps;
use crate::upstream::activate::Activator;
use crate::upstream::pushes::PushSink;
use crate::upstream::{Reach, Upstream, follow};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use switchyard_identity::Kind;
use switchyard_protocol::env;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs the router role until a drain completes.
pub(crate) async fn run(
    config_file: &Path,
    bind_ip: IpAddr,
    admin_addr: SocketAddr,
    probe_addr: Option<SocketAddr>,
    secrets_dir: &Path,
    control_plane: Option<&str>,
    ready_file: Option<&Path>,
) -> Result<(), RunError> {
    let settings = crate::config::load_router(config_file)?;
    if let Some(url) = control_plane {
        ControlPlane::precheck(url, IdentitySettings::from_env().is_some())?;
    }
    let secrets = Secrets {
        dir: secrets_dir.to_owned(),
        config_file: config_file.to_owned(),
    };
    // Every key file read here is polled afterwards and reloaded when it changes.
    let mut reloads = Reloads::default();
    let middleware = Stack::build(&settings.config.spec, &secrets, &mut reloads)?;
    let tls = match &settings.config.spec.listeners.tls {
        None => None,
        Some(t) => Some(EdgeCert::read(&secrets, &t.secret_name, &mut reloads)?),
    };
    let http_tls = tls
        .as_ref()
        .map(|t| t.acceptor(&secrets, tls::HTTP_ALPN))
        .transpose()?;
    let grpc_tls = tls
        .as_ref()
        .map(|t| t.acceptor(&secrets, tls::GRPC_ALPN))
        .transpose()?;
    let table = RouteTable::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    crate::start_checks::body_budget(settings.body_budget, &table)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    let bodies = body_budget_under_limit(settings.body_budget, &table)?;
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
        // 0 binds any free port, as for HTTP; two fixed ports must differ.
        Some(g) => Some(
            crate::start_checks::grpc_port(g.port, settings.http_port)
                .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?,
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
    let mut otel = crate::otel::configure(
        settings.config.spec.tracing.as_ref(),
        "spec.tracing",
        crate::otel::Role::Router,
        crate::otel::settings::Identity {
            name: &settings.config.name,
            namespace: &settings.config.namespace,
        },
        config_file,
    )?;
    if let Some(o) = otel.as_mut() {
        // A timing middleware with `traceId: false` keeps the trace id out of Server-Timing.
        o.trace_in_timing = !settings
            .config
            .spec
            .middleware
            .iter()
            .any(|m| m.timing.as_ref().is_some_and(|t| !t.trace_id));
    }
    let otel = otel.map(Arc::new);
    let mut ws_routes = WsRoutes::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    if let Some(w) = ws_routes.as_mut() {
        if w.subscribe.as_ref().is_some_and(|p| p.needs_token()) && !middleware.has_jwt() {
            return Err(crate::config::field_error(
                config_file,
                "spec.listeners.websocket.subscribe",
                "a subscribe rule with scopes or claims needs an auth middleware with jwt or oidc (the scopes and claims are the token's)",
            )
            .into());
        }
        if middleware.has_jwt() && !w.enable_refresh() {
            tracing::warn!(
                "a WebSocket route names the command `refresh`, so the built-in token refresh is off; sessions end when their token expires"
            );
        }
    }
    match &ws_routes {
        None if settings
            .config
            .spec
            .routes
            .iter()
            .any(|r| r.websocket.is_some()) =>
        {
            tracing::warn!(
                "the spec has WebSocket routes but no listeners.websocket; they are not served"
            );
        }
        None => {}
        Some(w) => {
            for route in w.iter() {
                if !settings
                    .config
                    .destinations
                    .keys()
                    .any(|e| e.as_str() == &*route.event)
                {
                    tracing::warn!(event = %route.event, command = %route.command, "no Manager handles this event type yet; its WebSocket commands get 503");
                }
            }
        }
    }
    // Every client connection is a descriptor: take the whole hard limit, then cap connections
    // below it so the probes, the admin port and the managers always find one.
    let fd_limit = crate::net::conn::fd_limit::raise();
    let limits = crate::listener::connections::resolve(
        &settings.config.spec.listeners.connections,
        fd_limit,
        config_file,
    )?;
    if let Some(asked) = limits.lowered_from {
        tracing::warn!(
            asked,
            cap = limits.caps.total,
            fd_limit,
            "spec.listeners.connections.maxConnections is above what the open-file limit leaves room for; lowered"
        );
    }
    let metrics = Metrics::new(crate::metrics::Role::Router);
    reloads
        .spawn(metrics.sessions.reloads.clone())
        .map_err(RunError::Reload)?;
    let ready = Readiness::default();
    // Probes answer from the start (live, not ready), while the certificate is being fetched.
    let mut probe_shown = "off".to_owned();
    if let Some(addr) = probe_addr {
        let probes = bind("probe listener", addr).await?;
        probe_shown = local_addr(&probes, addr).to_string();
        tokio::spawn(admin::serve_probes(probes, metrics.clone(), ready.clone()));
    }
    let identity = super::identity::start(
        Kind::Router,
        &settings.config.namespace,
        &settings.config.name,
        &metrics,
    )
    .await?;
    let mesh = identity.as_ref().map(|i| i.mesh.clone());
    let control_plane = control_plane
        .map(|url| ControlPlane::new(url, mesh.as_deref()))
        .transpose()?;
    let pod = std::env::var(env::POD_NAME).unwrap_or_default();
    // PUSH frames from managers go to this process's WebSocket subscribers.
    let hub = Arc::new(Hub::new(metrics.clone()));
    let mut upstream = Upstream::start(
        &settings.config.name,
        &settings.config.namespace,
        Reach {
            destinations: &settings.config.destinations,
            subscribers: &settings.config.subscribers,
            static_endpoints: &settings.config.static_endpoints,
        },
        Some(hub.clone() as Arc<dyn PushSink>),
        mesh,
        metrics.clone(),
    );
    if let Some(cp) = &control_plane {
        let activator = Activator::new(
            cp,
            &settings.config.name,
            &settings.config.namespace,
            &pod,
            settings.config.spec.broker.activation_timeout.into(),
        );
        upstream = upstream
            .with_control_plane(cp.url())
            .with_activation(activator);
    }
    let upstream = Arc::new(upstream);
    let admin = bind("admin", admin_addr).await?;
    let admin_addr = local_addr(&admin, admin_addr);
    let taps = Taps::new("router", api_key_headers(&settings.config.spec.middleware));
    tokio::spawn(admin::serve_router(
        admin,
        metrics.clone(),
        ready.clone(),
        upstream.clone(),
        taps.clone(),
    ));
    // Until the first table arrives (and whenever the operator is away) the config's table or the
    // last streamed one serves.
    let reporter = control_plane.as_ref().map(|cp| {
        let events = table
            .routes()
            .iter()
            .map(|r| r.event.clone())
            .chain(grpc_routes.iter().map(|r| r.event.clone()))
            .chain(
                ws_routes
                    .iter()
                    .flat_map(|w| w.iter().map(|r| r.event.clone())),
            );
        let meters = Arc::new(LoadMeters::new(events));
        let _ = metrics.load.set(meters.clone());
        let who = Reporter {
            pod: pod.clone(),
            namespace: settings.config.namespace.clone(),
            role: "router",
            owner: settings.config.name.clone(),
        };
        super::push_load(cp, meters, who)
    });
    let follower =
        control_plane.map(|cp| tokio::spawn(follow::run(cp, upstream.clone(), pod.clone())));

    let http_addr = SocketAddr::new(bind_ip, settings.http_port);
    let listener = bind("HTTP listener", http_addr).await?;
    let http_addr = local_addr(&listener, http_addr);
    let (grpc_listener, grpc_addr) = match grpc_port.map(|p| SocketAddr::new(bind_ip, p)) {
        None => (None, None),
        Some(a) => {
            let l = bind("gRPC listener", a).await?;
            let bound = local_addr(&l, a);
            (Some(l), Some(bound))
        }
    };
    let drain = CancellationToken::new();
    let ws_path = ws_routes.as_ref().map(|w| w.path.clone());
    let ws = ws_routes.map(|routes| WsEdge {
        routes,
        hub,
        drain: drain.clone(),
        sessions: TaskTracker::new(),
    });
    let timing_allow_origin = match settings
        .config
        .spec
        .middleware
        .iter()
        .enumerate()
        .find_map(|(i, m)| Some((i, m.timing.as_ref()?)))
    {
        Some((i, t)) => {
            crate::answer::http::timing_allow_origin(&t.allow_origins).map_err(|_| {
                crate::config::field_error(
                    config_file,
                    format!("spec.middleware[{i}].timing.allowOrigins"),
                    format!(
                        "{:?} is not a valid header value",
                        t.allow_origins.join(", ")
                    ),
                )
            })?
        }
        None => None,
    };
    let edge = Arc::new(Edge {
        timing_allow_origin,
        access_log: settings.config.spec.access_log.enabled,
        table,
        dispatch: Dispatch {
            broker: Broker::new(settings.queue_capacity, metrics.clone()),
            upstream,
            // Request/response is always direct: nothing a client sends is published.
            durable: None,
            observers: crate::dispatch::Observers::new(metrics.clone()),
        },
        metrics,
        unmatched: EventLabel(Arc::from("unmatched")),
        body_budget: crate::net::budget::ByteBudget::new(bodies),
        otel: otel.clone(),
        ws,
        middleware,
        taps,
    });
    // One tracker: the caps count the HTTP, WebSocket and gRPC connections together.
    let tracker = Tracker::new(limits.caps);
    let policy = |listener: &'static str| Policy {
        tracker: tracker.clone(),
        timeouts: limits.timeouts,
        meters: crate::listener::connections::meters(&edge.metrics, listener),
    };
    let grpc_server = match grpc_listener {
        None => None,
        Some(l) => {
            let svc = grpc::service(edge.clone(), Arc::new(grpc_routes), drain.clone())?;
            Some(tokio::spawn(grpc::serve(
                l,
                svc,
                edge.clone(),
                drain.clone(),
                grpc_tls,
                policy("grpc"),
            )))
        }
    };
    let server = tokio::spawn(http::serve(
        listener,
        edge.clone(),
        drain.clone(),
        http_tls,
        policy("http"),
    ));
    // Written before readiness, so whoever sees `/readyz` answer 200 finds the file complete.
    if let Some(path) = ready_file {
        let bound = serde_json::json!({
            "http": http_addr.to_string(),
            "grpc": grpc_addr.map(|a| a.to_string()),
            "admin": admin_addr.to_string(),
        });
        std::fs::write(path, bound.to_string()).map_err(|source| RunError::ReadyFile {
            path: path.to_owned(),
            source,
        })?;
    }
    ready.set(true);
    let grpc_shown = grpc_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "off".to_owned());
    let ws_shown = ws_path.unwrap_or_else(|| "off".to_owned());
    let tls_shown = settings.config.spec.listeners.tls.is_some();
    tracing::info!(http = %http_addr, ws = %ws_shown, grpc = %grpc_shown, tls = tls_shown, admin = %admin_addr, probe = %probe_shown, router = %settings.config.name, max_connections = limits.caps.total, max_connections_per_client = limits.caps.per_client, fd_limit, "router ready");

    crate::shutdown::signal().await;
    ready.set(false);
    drain.cancel();
    let _ = server.await;
    if let Some(g) = grpc_server {
        let _ = g.await;
    }
    if let Some(ws) = &edge.ws {
        // Sessions saw the drain: they finish their replies and close with 1001.
        ws.sessions.close();
        if tokio::time::timeout(DRAIN_LIMIT, ws.sessions.wait())
            .await
            .is_err()
        {
            tracing::warn!("drain limit reached with WebSocket connections still open");
        }
    }
    if let Some(f) = follower {
        f.abort();
    }
    if let Some(r) = reporter {
        r.abort();
    }
    if let Some(i) = identity {
        i.renewal.abort();
    }
    tracing::info!("router drained");
    if let Some(o) = &otel {
        o.shutdown().await;
    }
    Ok(())
}

/// `broker.bodyBudgetBytes`, lowered to what the container's memory limit (its cgroup) leaves for
/// bodies; refused when that cannot hold one body of the largest size read whole.
fn body_budget_under_limit(configured: usize, table: &RouteTable) -> Result<usize, RunError> {
    use switchyard_protocol::memory;
    let limit = crate::cgroup::memory_limit();
    let b = memory::router_budget(limit, configured as u64, table.whole_limit as u64)
        .map_err(RunError::Memory)?;
    let shown = limit.map_or_else(|| "none".to_owned(), memory::mib);
    if b.lowered {
        tracing::warn!(memory_limit = %shown, configured = %memory::mib(configured as u64), bodies = %memory::mib(b.bodies), "broker.bodyBudgetBytes is more than the memory limit leaves for bodies; lowered");
    } else {
        tracing::info!(memory_limit = %shown, bodies = %memory::mib(b.bodies), "body budget");
    }
    Ok(usize::try_from(b.bodies).unwrap_or(usize::MAX))
}

/// The headers the spec's API-key middleware reads keys from: a tap never copies their values.
fn api_key_headers(middleware: &[switchyard_crds::router::Middleware]) -> Vec<String> {
    middleware
        .iter()
        .filter_map(|m| Some(m.auth.as_ref()?.api_key.as_ref()?.header.clone()))
        .collect()
}
