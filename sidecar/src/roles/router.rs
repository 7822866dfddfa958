//! Router role: HTTP (with WebSocket) and gRPC listeners -> broker -> router, plus admin; drains on
//! SIGTERM.

use super::{RunError, bind, local_addr};
use crate::admin::{self, Readiness};
use crate::dispatch::{Broker, Dispatch};
use crate::listener::connections::Resolved;
use crate::listener::tls::{self, EdgeCert};
use crate::listener::ws::WsEdge;
use crate::listener::ws::push::Hub;
use crate::listener::{Edge, grpc, http};
use crate::load::report::Reporter;
use crate::metrics::{EventLabel, Metrics};
use crate::middleware::Stack;
use crate::net::accept::Policy;
use crate::net::conn::limits::Tracker;
use crate::net::control_plane::ControlPlane;
use crate::net::identity::IdentitySettings;
use crate::net::mesh::MeshTls;
use crate::otel::Otel;
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
use hyper::header::HeaderValue;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use switchyard_identity::Kind;
use switchyard_protocol::env;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs the router role until a drain completes: check the config → start the mesh side (probes,
/// identity, upstream, admin) → build the edge and serve its listeners → drain on SIGTERM.
pub(crate) async fn run(
    config_file: &Path,
    bind_ip: IpAddr,
    admin_addr: SocketAddr,
    probe_addr: Option<SocketAddr>,
    secrets_dir: &Path,
    control_plane: Option<&str>,
    ready_file: Option<&Path>,
) -> Result<(), RunError> {
    let checked = check(config_file, secrets_dir, control_plane)?;
    let (settings, config) = (&checked.settings, &checked.settings.config);
    let metrics = Metrics::new(crate::metrics::Role::Router);
    checked
        .reloads
        .spawn(metrics.sessions.reloads.clone())
        .map_err(RunError::Reload)?;
    let ready = Readiness::default();
    // Probes answer from the start (live, not ready), while the certificate is being fetched.
    let probe_shown = serve_probes(probe_addr, &metrics, &ready).await?;
    let identity =
        super::identity::start(Kind::Router, &config.namespace, &config.name, &metrics).await?;
    let mesh = identity.as_ref().map(|i| i.mesh.clone());
    let control_plane = control_plane
        .map(|url| ControlPlane::new(url, mesh.as_deref()))
        .transpose()?;
    let pod = std::env::var(env::POD_NAME).unwrap_or_default();
    // PUSH frames from managers go to this process's WebSocket subscribers.
    let hub = Arc::new(Hub::new(metrics.clone()));
    let upstream = start_upstream(config, &hub, mesh, &metrics, control_plane.as_ref(), &pod);
    let taps = Taps::new("router", api_key_headers(&config.spec.middleware));
    let admin_addr = serve_admin(admin_addr, &metrics, &ready, &upstream, &taps).await?;
    // Until the first table arrives (and whenever the operator is away) the config's table or the
    // last streamed one serves.
    let reporter = control_plane
        .as_ref()
        .map(|cp| report_load(cp, &checked.edge, &checked.serving, config, &metrics, &pod));
    let follower =
        control_plane.map(|cp| tokio::spawn(follow::run(cp, upstream.clone(), pod.clone())));
    let serving = checked.serving;
    let (listener, http_addr, grpc) =
        bind_listeners(bind_ip, settings.http_port, serving.grpc_port).await?;
    let grpc_addr = grpc.as_ref().map(|(_, a)| *a);
    let drain = CancellationToken::new();
    let otel = checked.edge.otel.clone();
    let edge = build_edge(checked.edge, settings, upstream, hub, metrics, taps, &drain);
    let (caps, fd_limit) = (serving.limits.caps, serving.fd_limit);
    let servers = serve(&edge, listener, grpc, serving, &drain)?;
    // Written before readiness, so whoever sees `/readyz` answer 200 finds the file complete.
    if let Some(path) = ready_file {
        write_ready_file(path, http_addr, grpc_addr, admin_addr)?;
    }
    ready.set(true);
    let grpc_shown = grpc_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "off".to_owned());
    let ws_shown = edge.ws.as_ref().map_or("off", |w| w.routes.path.as_str());
    let tls_shown = config.spec.listeners.tls.is_some();
    tracing::info!(http = %http_addr, ws = %ws_shown, grpc = %grpc_shown, tls = tls_shown, admin = %admin_addr, probe = %probe_shown, router = %config.name, max_connections = caps.total, max_connections_per_client = caps.per_client, fd_limit, "router ready");

    crate::shutdown::signal().await;
    ready.set(false);
    drain_listeners(&edge, drain, servers).await;
    for task in [follower, reporter].into_iter().flatten() {
        task.abort();
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

/// Serves the probes on `probe_addr` (when given); returns the address shown in the ready line.
async fn serve_probes(
    probe_addr: Option<SocketAddr>,
    metrics: &Arc<Metrics>,
    ready: &Readiness,
) -> Result<String, RunError> {
    let Some(addr) = probe_addr else {
        return Ok("off".to_owned());
    };
    let probes = bind("probe listener", addr).await?;
    let shown = local_addr(&probes, addr).to_string();
    tokio::spawn(admin::serve_probes(probes, metrics.clone(), ready.clone()));
    Ok(shown)
}

/// Serves the admin port; returns its bound address.
async fn serve_admin(
    admin_addr: SocketAddr,
    metrics: &Arc<Metrics>,
    ready: &Readiness,
    upstream: &Arc<Upstream>,
    taps: &Arc<Taps>,
) -> Result<SocketAddr, RunError> {
    let admin = bind("admin", admin_addr).await?;
    let admin_addr = local_addr(&admin, admin_addr);
    tokio::spawn(admin::serve_router(
        admin,
        metrics.clone(),
        ready.clone(),
        upstream.clone(),
        taps.clone(),
    ));
    Ok(admin_addr)
}

/// The connections to the managers, following the control plane's tables when there is one.
fn start_upstream(
    config: &switchyard_protocol::config::RouterConfig,
    hub: &Arc<Hub>,
    mesh: Option<Arc<MeshTls>>,
    metrics: &Arc<Metrics>,
    control_plane: Option<&ControlPlane>,
    pod: &str,
) -> Arc<Upstream> {
    let mut upstream = Upstream::start(
        &config.name,
        &config.namespace,
        Reach {
            destinations: &config.destinations,
            subscribers: &config.subscribers,
            static_endpoints: &config.static_endpoints,
        },
        Some(hub.clone() as Arc<dyn PushSink>),
        mesh,
        metrics.clone(),
    );
    if let Some(cp) = control_plane {
        let activator = Activator::new(
            cp,
            &config.name,
            &config.namespace,
            pod,
            config.spec.broker.activation_timeout.into(),
        );
        upstream = upstream
            .with_control_plane(cp.url())
            .with_activation(activator);
    }
    Arc::new(upstream)
}

/// Reports this pod's load, per event type it serves, to the control plane.
fn report_load(
    cp: &ControlPlane,
    edge: &EdgeConfig,
    serving: &Serving,
    config: &switchyard_protocol::config::RouterConfig,
    metrics: &Arc<Metrics>,
    pod: &str,
) -> tokio::task::JoinHandle<()> {
    let events = edge
        .table
        .routes()
        .iter()
        .map(|r| r.event.clone())
        .chain(serving.grpc_routes.iter().map(|r| r.event.clone()))
        .chain(
            edge.ws_routes
                .iter()
                .flat_map(|w| w.iter().map(|r| r.event.clone())),
        );
    let who = Reporter::new("router", pod, &config.namespace, &config.name);
    super::report_load(cp, metrics, events, who)
}

/// A bound listener and its address.
type Bound = (TcpListener, SocketAddr);

/// Binds the HTTP listener and, with a gRPC port, the gRPC one.
async fn bind_listeners(
    bind_ip: IpAddr,
    http_port: u16,
    grpc_port: Option<u16>,
) -> Result<(TcpListener, SocketAddr, Option<Bound>), RunError> {
    let http_addr = SocketAddr::new(bind_ip, http_port);
    let listener = bind("HTTP listener", http_addr).await?;
    let http_addr = local_addr(&listener, http_addr);
    let grpc = match grpc_port.map(|p| SocketAddr::new(bind_ip, p)) {
        None => None,
        Some(a) => {
            let l = bind("gRPC listener", a).await?;
            let bound = local_addr(&l, a);
            Some((l, bound))
        }
    };
    Ok((listener, http_addr, grpc))
}

/// The edge every listener serves: routes, middleware, the dispatch to the managers, the
/// WebSocket sessions (which see `drain`).
fn build_edge(
    cfg: EdgeConfig,
    settings: &crate::config::RouterSettings,
    upstream: Arc<Upstream>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    taps: Arc<Taps>,
    drain: &CancellationToken,
) -> Arc<Edge> {
    let ws = cfg.ws_routes.map(|routes| WsEdge {
        routes,
        hub,
        drain: drain.clone(),
        sessions: TaskTracker::new(),
    });
    Arc::new(Edge {
        timing_allow_origin: cfg.timing_allow_origin,
        access_log: settings.config.spec.access_log.enabled,
        table: cfg.table,
        dispatch: Dispatch {
            broker: Broker::new(settings.queue_capacity, metrics.clone()),
            upstream,
            // Request/response is always direct: nothing a client sends is published.
            durable: None,
            observers: crate::dispatch::Observers::new(metrics.clone()),
        },
        metrics,
        unmatched: EventLabel(Arc::from("unmatched")),
        body_budget: crate::net::budget::ByteBudget::new(cfg.bodies),
        otel: cfg.otel,
        ws,
        middleware: cfg.middleware,
        taps,
    })
}

/// The listeners' servers, running.
struct Servers {
    http: tokio::task::JoinHandle<()>,
    grpc: Option<tokio::task::JoinHandle<()>>,
}

/// Serves the edge on the HTTP listener and the gRPC one, until `drain`.
fn serve(
    edge: &Arc<Edge>,
    listener: TcpListener,
    grpc: Option<Bound>,
    serving: Serving,
    drain: &CancellationToken,
) -> Result<Servers, RunError> {
    // One tracker: the caps count the HTTP, WebSocket and gRPC connections together.
    let tracker = Tracker::new(serving.limits.caps);
    let policy = |listener: &'static str| Policy {
        tracker: tracker.clone(),
        timeouts: serving.limits.timeouts,
        meters: crate::listener::connections::meters(&edge.metrics, listener),
    };
    let grpc = match grpc {
        None => None,
        Some((l, _)) => {
            let svc = grpc::service(edge.clone(), Arc::new(serving.grpc_routes), drain.clone())?;
            Some(tokio::spawn(grpc::serve(
                l,
                svc,
                edge.clone(),
                drain.clone(),
                serving.grpc_tls,
                policy("grpc"),
            )))
        }
    };
    let http = tokio::spawn(http::serve(
        listener,
        edge.clone(),
        drain.clone(),
        serving.http_tls,
        policy("http"),
    ));
    Ok(Servers { http, grpc })
}

/// Writes the bound addresses to `path` as JSON.
fn write_ready_file(
    path: &Path,
    http_addr: SocketAddr,
    grpc_addr: Option<SocketAddr>,
    admin_addr: SocketAddr,
) -> Result<(), RunError> {
    let bound = serde_json::json!({
        "http": http_addr.to_string(),
        "grpc": grpc_addr.map(|a| a.to_string()),
        "admin": admin_addr.to_string(),
    });
    std::fs::write(path, bound.to_string()).map_err(|source| RunError::ReadyFile {
        path: path.to_owned(),
        source,
    })
}

/// Stops accepting, waits for the servers, then for the WebSocket sessions (up to the drain
/// limit).
async fn drain_listeners(edge: &Edge, drain: CancellationToken, servers: Servers) {
    drain.cancel();
    let _ = servers.http.await;
    if let Some(g) = servers.grpc {
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
}

/// The router's configuration, checked and resolved before anything is bound or started: every
/// refusal of the config happens here, naming the field.
struct Checked {
    settings: crate::config::RouterSettings,
    /// Every key file read while checking, polled afterwards and reloaded when it changes.
    reloads: Reloads,
    edge: EdgeConfig,
    serving: Serving,
}

/// What the edge is built of.
struct EdgeConfig {
    middleware: Stack,
    table: RouteTable,
    /// The body budget, under the container's memory limit.
    bodies: usize,
    ws_routes: Option<WsRoutes>,
    otel: Option<Arc<Otel>>,
    timing_allow_origin: Option<HeaderValue>,
}

/// What the listeners are served with.
struct Serving {
    http_tls: Option<TlsAcceptor>,
    grpc_tls: Option<TlsAcceptor>,
    grpc_routes: GrpcRoutes,
    /// `None`: no gRPC listener.
    grpc_port: Option<u16>,
    limits: Resolved,
    fd_limit: Option<u64>,
}

/// Checks the config file (and the key files it names) and resolves what the router runs with.
fn check(
    config_file: &Path,
    secrets_dir: &Path,
    control_plane: Option<&str>,
) -> Result<Checked, RunError> {
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
    let (http_tls, grpc_tls) = edge_tls(&settings, &secrets, &mut reloads)?;
    let (table, bodies) = http_routes(&settings, config_file)?;
    let (grpc_routes, grpc_port) = grpc_routes(&settings, config_file)?;
    let otel = otel_of(&settings, config_file)?;
    let ws_routes = ws_routes(&settings, &middleware, config_file)?;
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
    let timing_allow_origin = timing_allow_origin(&settings, config_file)?;
    Ok(Checked {
        settings,
        reloads,
        edge: EdgeConfig {
            middleware,
            table,
            bodies,
            ws_routes,
            otel,
            timing_allow_origin,
        },
        serving: Serving {
            http_tls,
            grpc_tls,
            grpc_routes,
            grpc_port,
            limits,
            fd_limit,
        },
    })
}

/// The HTTP and gRPC listeners' TLS, when `spec.listeners.tls` names a certificate.
fn edge_tls(
    settings: &crate::config::RouterSettings,
    secrets: &Secrets,
    reloads: &mut Reloads,
) -> Result<(Option<TlsAcceptor>, Option<TlsAcceptor>), RunError> {
    let tls = match &settings.config.spec.listeners.tls {
        None => None,
        Some(t) => Some(EdgeCert::read(secrets, &t.secret_name, reloads)?),
    };
    let http_tls = tls
        .as_ref()
        .map(|t| t.acceptor(secrets, tls::HTTP_ALPN))
        .transpose()?;
    let grpc_tls = tls
        .as_ref()
        .map(|t| t.acceptor(secrets, tls::GRPC_ALPN))
        .transpose()?;
    Ok((http_tls, grpc_tls))
}

/// The HTTP route table and the body budget it fits in.
fn http_routes(
    settings: &crate::config::RouterSettings,
    config_file: &Path,
) -> Result<(RouteTable, usize), RunError> {
    let table = RouteTable::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    crate::start_checks::body_budget(settings.body_budget, &table)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    let bodies = body_budget_under_limit(settings.body_budget, &table)?;
    for route in table.routes() {
        if !handled(settings, &route.event) {
            tracing::warn!(event = %route.event, "no Manager handles this event type yet; its requests get 503");
        }
    }
    Ok((table, bodies))
}

/// Whether a Manager of the config handles `event`.
fn handled(settings: &crate::config::RouterSettings, event: &str) -> bool {
    settings
        .config
        .destinations
        .keys()
        .any(|e| e.as_str() == event)
}

/// The gRPC routes and the gRPC listener's port (`None`: no listener).
fn grpc_routes(
    settings: &crate::config::RouterSettings,
    config_file: &Path,
) -> Result<(GrpcRoutes, Option<u16>), RunError> {
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
        if !handled(settings, &route.event) {
            tracing::warn!(event = %route.event, method = %route.method, "no Manager handles this event type yet; its gRPC calls get UNAVAILABLE");
        }
    }
    Ok((grpc_routes, grpc_port))
}

/// The router's OpenTelemetry export, when `spec.tracing` asks for it.
fn otel_of(
    settings: &crate::config::RouterSettings,
    config_file: &Path,
) -> Result<Option<Arc<Otel>>, RunError> {
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
    Ok(otel.map(Arc::new))
}

/// The WebSocket routes (`None`: no WebSocket listener), checked against the auth middleware.
fn ws_routes(
    settings: &crate::config::RouterSettings,
    middleware: &Stack,
    config_file: &Path,
) -> Result<Option<WsRoutes>, RunError> {
    let mut ws_routes = WsRoutes::build(&settings.config.spec)
        .map_err(|e| crate::config::field_error(config_file, e.field, e.message))?;
    let Some(w) = ws_routes.as_mut() else {
        if settings
            .config
            .spec
            .routes
            .iter()
            .any(|r| r.websocket.is_some())
        {
            tracing::warn!(
                "the spec has WebSocket routes but no listeners.websocket; they are not served"
            );
        }
        return Ok(None);
    };
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
    for route in w.iter() {
        if !handled(settings, &route.event) {
            tracing::warn!(event = %route.event, command = %route.command, "no Manager handles this event type yet; its WebSocket commands get 503");
        }
    }
    Ok(ws_routes)
}

/// The `Timing-Allow-Origin` value of the first timing middleware that has one.
fn timing_allow_origin(
    settings: &crate::config::RouterSettings,
    config_file: &Path,
) -> Result<Option<HeaderValue>, RunError> {
    let Some((i, t)) = settings
        .config
        .spec
        .middleware
        .iter()
        .enumerate()
        .find_map(|(i, m)| Some((i, m.timing.as_ref()?)))
    else {
        return Ok(None);
    };
    crate::answer::http::timing_allow_origin(&t.allow_origins).map_err(|_| {
        crate::config::field_error(
            config_file,
            format!("spec.middleware[{i}].timing.allowOrigins"),
            format!(
                "{:?} is not a valid header value",
                t.allow_origins.join(", ")
            ),
        )
        .into()
    })
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
