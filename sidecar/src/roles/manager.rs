//! Manager role: frame listener -> workers -> app, the app's local API -> outbound router, plus
//! admin; drains on SIGTERM, or on its own preStop hook (`GET /drain` from inside the pod), with
//! GOAWAY.

use super::{RunError, bind, local_addr};
use crate::admin::{self, DrainHook, Readiness};
use crate::durable::Store;
use crate::load::report::Reporter;
use crate::manager::access::Access;
use crate::manager::delivery::app_addr::AppAddr;
use crate::manager::delivery::grpc::GrpcDelivery;
use crate::manager::delivery::http::HttpDelivery;
use crate::manager::durable;
use crate::manager::inbound::{self, Inbound};
use crate::manager::local_api::{self, LocalApi};
use crate::manager::routers::Routers;
use crate::manager::worker::{Delivery, Settings, Worker};
use crate::metrics::{EventLabel, Metrics, SubscriptionLabels};
use crate::net::control_plane::ControlPlane;
use crate::net::identity::IdentitySettings;
use crate::net::mesh::MeshTls;
use crate::otel::Otel;
use crate::shutdown::DRAIN_LIMIT;
use crate::tap::Taps;
use crate::upstream::activate::Activator;
use crate::upstream::{Reach, Upstream, follow};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use switchyard_crds::manager::{AppProtocol, AppTransport};
use switchyard_identity::Kind;
use switchyard_protocol::{env, memory};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where the command line puts the app, for each transport; the config's `app.transport` picks one.
pub(crate) struct AppFlags<'a> {
    /// `--app-addr`.
    pub tcp: Option<SocketAddr>,
    /// `--app-socket` (or `SWITCHYARD_APP_SOCKET`).
    pub unix: Option<&'a Path>,
}

/// Where the manager's servers bind.
pub(crate) struct Addrs {
    /// `--listen`: the frame listener.
    pub listen: SocketAddr,
    /// `--admin-addr`.
    pub admin: SocketAddr,
    /// `--probe-addr`.
    pub probe: Option<SocketAddr>,
    /// `--local-api-addr`.
    pub local_api: SocketAddr,
}

/// Runs the manager role until a drain completes: check the config → start the pod's parts →
/// drain. After a drain `/drain` started, the SIGTERM that ends the pod's stop is awaited for
/// `signal_wait`; without it the role fails ([`RunError::DrainNotFollowed`]).
pub(crate) async fn run(
    config_file: &Path,
    addrs: Addrs,
    app_flags: AppFlags<'_>,
    event_types: Option<&str>,
    signal_wait: std::time::Duration,
) -> Result<(), RunError> {
    let metrics = Metrics::new(crate::metrics::Role::Manager);
    let (checked, delivery) = check(config_file, app_flags, event_types, &metrics)?;
    let running = start(config_file, &checked, delivery, addrs, metrics).await?;
    running.stop(signal_wait).await
}

/// The manager's configuration, checked and resolved before anything is bound or started.
struct Checked {
    settings: crate::config::ManagerSettings,
    app: AppAddr,
    /// The CloudEvents source of the events this Manager sends.
    source: String,
    otel: Option<Arc<Otel>>,
    budgets: memory::ManagerBudgets,
    /// The event types this pod handles.
    events: Vec<String>,
    /// The patterns of every subscription, direct or durable.
    subscribed: Vec<String>,
    durable_subscriptions: Vec<(String, switchyard_protocol::durable::StartFrom)>,
    control_plane_url: Option<String>,
}

/// Checks the config file and resolves what the manager runs with, and the delivery to its app.
fn check(
    config_file: &Path,
    app_flags: AppFlags<'_>,
    event_types: Option<&str>,
    metrics: &Metrics,
) -> Result<(Checked, Delivery), RunError> {
    let s = crate::config::load_manager(config_file, event_types)?;
    let c = &s.config;
    let app = match c.app.transport {
        AppTransport::Tcp => AppAddr::Tcp(
            app_flags
                .tcp
                .unwrap_or(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), s.app_port)),
        ),
        // In a pod the operator sets the path (the `emptyDir` both containers mount); the default
        // is that same path, for a pod rendered by hand.
        AppTransport::Unix => AppAddr::Unix(app_flags.unix.map_or_else(
            || switchyard_protocol::config::APP_SOCKET_PATH.into(),
            Path::to_path_buf,
        )),
    };
    let source = format!("/switchyard/{}/{}", c.namespace, c.name);
    let delivery = delivery(config_file, &s, &app, &source)?;
    let otel = crate::otel::configure(
        c.tracing.as_ref(),
        "tracing",
        crate::otel::Role::Manager,
        crate::otel::settings::Identity {
            name: &c.name,
            namespace: &c.namespace,
        },
        config_file,
    )?
    .map(Arc::new);
    let budgets = memory_budgets(&s, metrics)?;
    let events: Vec<String> = s.events.iter().map(|e| e.as_str().to_owned()).collect();
    // Direct subscriptions arrive as frames, durable ones from their consumers; both are counted
    // under their pattern.
    let subscribed: Vec<String> = c.subscriptions.iter().map(|s| s.event.clone()).collect();
    let durable_subscriptions = durable_subscriptions(c)
        .map_err(|e| crate::config::field_error(config_file, "subscriptions", e))?;
    // The app's outgoing events and dead letters leave through the same router stage as client requests.
    // In a cluster the table comes from the operator's control plane (the operator sets the variable on
    // both sidecars); locally `switchyard up` puts the Router's table in the config.
    let control_plane_url = std::env::var(env::CONTROL_PLANE)
        .ok()
        .filter(|u| !u.is_empty());
    if let Some(url) = &control_plane_url {
        ControlPlane::precheck(url, IdentitySettings::from_env().is_some())?;
    }
    let checked = Checked {
        settings: s,
        app,
        source,
        otel,
        budgets,
        events,
        subscribed,
        durable_subscriptions,
        control_plane_url,
    };
    Ok((checked, delivery))
}

/// The delivery to the app, by its protocol.
fn delivery(
    config_file: &Path,
    s: &crate::config::ManagerSettings,
    app: &AppAddr,
    source: &str,
) -> Result<Delivery, RunError> {
    let c = &s.config;
    Ok(match c.app.protocol {
        AppProtocol::Grpc => Delivery::Grpc(Box::new(
            GrpcDelivery::new(app.clone(), source)
                .map_err(|e| crate::config::field_error(config_file, "app.port", e.to_string()))?,
        )),
        AppProtocol::Http => Delivery::Http(Box::new(
            HttpDelivery::new(app.clone(), &c.app.path, source, s.max_in_flight)
                .map_err(|e| crate::config::field_error(config_file, "app.path", e.to_string()))?,
        )),
    })
}

/// Names the subscriptions to types this pod does not handle for `switchyard top`; a subscription
/// to a handled type is counted under that type.
fn count_subscriptions(metrics: &Metrics, checked: &Checked) {
    let name = &checked.settings.config.name;
    for e in checked
        .subscribed
        .iter()
        .filter(|e| !checked.events.contains(e))
    {
        let labels = SubscriptionLabels {
            subscription: EventLabel(Arc::from(format!("{e}@{name}"))),
            event: EventLabel(Arc::from(e.as_str())),
        };
        metrics.subscriptions.get_or_create(&labels).set(1);
    }
}

/// The manager's parts, running until the drain.
struct Running {
    ready: Readiness,
    hook: DrainHook,
    drain: CancellationToken,
    local_drain: CancellationToken,
    acceptor: JoinHandle<()>,
    connections: TaskTracker,
    pulls: TaskTracker,
    local_server: JoinHandle<()>,
    /// The control plane's table follower and load reporter.
    tasks: Vec<JoinHandle<()>>,
    identity: Option<super::identity::MeshIdentity>,
    otel: Option<Arc<Otel>>,
}

/// Starts the pod's parts: probes → identity → upstream → event store → worker → admin → the
/// frame listener, the local API and the durable consumers; then says it is ready.
async fn start(
    config_file: &Path,
    checked: &Checked,
    delivery: Delivery,
    addrs: Addrs,
    metrics: Arc<Metrics>,
) -> Result<Running, RunError> {
    let c = &checked.settings.config;
    count_subscriptions(&metrics, checked);
    let ready = Readiness::default();
    // Probes answer from the start (live, not ready), while the certificate is being fetched.
    serve_probes(addrs.probe, &metrics, &ready).await?;
    let identity = super::identity::start(Kind::Manager, &c.namespace, &c.name, &metrics).await?;
    let mesh = identity.as_ref().map(|i| i.mesh.clone());
    let control_plane = checked
        .control_plane_url
        .as_deref()
        .map(|url| ControlPlane::new(url, mesh.as_deref()))
        .transpose()?;
    let pod = std::env::var(env::POD_NAME).unwrap_or_default();
    let upstream = start_upstream(
        checked,
        mesh.clone(),
        &metrics,
        control_plane.as_ref(),
        &pod,
    );
    let reporter = control_plane
        .as_ref()
        .map(|cp| report_load(cp, checked, &metrics, &pod));
    let follower = control_plane.map(|cp| tokio::spawn(follow::run(cp, upstream.clone(), pod)));
    let tasks = [follower, reporter].into_iter().flatten().collect();
    warn_if_dead_letters_unrouted(c, &upstream);
    let store = open_store(config_file, checked, mesh.as_deref(), &metrics)?;
    let taps = Taps::new("manager", Vec::new());
    let worker = build_worker(checked, delivery, &upstream, &store, &metrics, &taps);
    let routers = Arc::new(Routers::default());
    let (admin_addr, hook) = serve_admin(addrs.admin, &metrics, &ready, &upstream, taps).await?;
    let listener = bind("frame listener", addrs.listen).await?;
    let listen = local_addr(&listener, addrs.listen);
    let local_listener = bind("local API", addrs.local_api).await?;
    let local_api_addr = local_addr(&local_listener, addrs.local_api);
    let drain = CancellationToken::new();
    // The app may still publish while its last deliveries run: the local API closes after them.
    let local_drain = CancellationToken::new();
    let pulls = TaskTracker::new();
    if let Some(store) = &store {
        start_durable(checked, store, &worker, &drain, &pulls);
    }
    let local = local_api(checked, upstream, store, &routers, &metrics);
    let local_server = tokio::spawn(local_api::serve(local_listener, local, local_drain.clone()));
    let connections = TaskTracker::new();
    let access = Access::new(&c.namespace, &c.router, c.allow_from.as_deref());
    let inbound = Inbound::new(worker, mesh, access, metrics);
    let acceptor = tokio::spawn(inbound::serve(
        listener,
        inbound,
        routers,
        drain.clone(),
        connections.clone(),
    ));
    ready.set(true);
    tracing::info!(listen = %listen, admin = %admin_addr, app = %checked.app, local_api = %local_api_addr, events = ?checked.events, manager = %c.name, "manager ready");
    Ok(Running {
        ready,
        hook,
        drain,
        local_drain,
        acceptor,
        connections,
        pulls,
        local_server,
        tasks,
        identity,
        otel: checked.otel.clone(),
    })
}

impl Running {
    /// Drains on SIGTERM or the preStop hook's `/drain`: the frame listener stops, deliveries
    /// finish (up to the drain limit), then the local API closes.
    async fn stop(self, signal_wait: std::time::Duration) -> Result<(), RunError> {
        let mut signals = crate::shutdown::Signals::listen();
        let by_signal = tokio::select! {
            which = signals.recv() => {
                tracing::info!("{which}: draining");
                true
            }
            () = self.hook.requested() => {
                tracing::info!("drain requested (the sidecar's preStop hook)");
                false
            }
        };
        // Whatever started it: the app's preStop hook (`/drained`) waits for this drain either way.
        self.hook.begin();
        self.ready.set(false);
        self.drain.cancel();
        let _ = self.acceptor.await;
        self.connections.close();
        self.pulls.close();
        let drained = async {
            self.connections.wait().await;
            self.pulls.wait().await;
        };
        if tokio::time::timeout(DRAIN_LIMIT, drained).await.is_err() {
            tracing::warn!("drain limit reached with deliveries still open");
        }
        self.hook.finish();
        let followed = by_signal || signal_followed(&mut signals, signal_wait).await;
        self.local_drain.cancel();
        let _ = self.local_server.await;
        for task in self.tasks {
            task.abort();
        }
        if let Some(i) = self.identity {
            i.renewal.abort();
        }
        tracing::info!("manager drained");
        if let Some(o) = &self.otel {
            o.shutdown().await;
        }
        if followed {
            Ok(())
        } else {
            Err(RunError::DrainNotFollowed(signal_wait))
        }
    }
}

/// Serves the probes on `probe_addr`, when given.
async fn serve_probes(
    probe_addr: Option<SocketAddr>,
    metrics: &Arc<Metrics>,
    ready: &Readiness,
) -> Result<(), RunError> {
    if let Some(addr) = probe_addr {
        let probes = bind("probe listener", addr).await?;
        tokio::spawn(admin::serve_probes(probes, metrics.clone(), ready.clone()));
    }
    Ok(())
}

/// Says so when no Manager handles the dead-letter type yet (its dead letters then count as
/// unrouted).
fn warn_if_dead_letters_unrouted(
    c: &switchyard_protocol::config::ManagerConfig,
    upstream: &Upstream,
) {
    if let Some(dl) = &c.workers.dead_letter
        && upstream.pool_of(dl.as_str()).is_none()
    {
        tracing::warn!(dead_letter = %dl, "no Manager handles the dead-letter event type yet; dead letters are counted as unrouted");
    }
}

/// The connections to the routers' managers for the app's events and dead letters (no WebSocket
/// clients here: they take no pushes), following the control plane's tables when there is one.
fn start_upstream(
    checked: &Checked,
    mesh: Option<Arc<MeshTls>>,
    metrics: &Arc<Metrics>,
    control_plane: Option<&ControlPlane>,
    pod: &str,
) -> Arc<Upstream> {
    let c = &checked.settings.config;
    let mut upstream = Upstream::start(
        &c.router,
        &c.namespace,
        Reach {
            destinations: &c.destinations,
            subscribers: &c.subscribers,
            static_endpoints: &c.static_endpoints,
        },
        None,
        mesh,
        metrics.clone(),
    )
    .with_source(checked.source.clone());
    if let Some(cp) = control_plane {
        // The app's publishes to a Manager at zero replicas (its handler's or a subscriber's) wait
        // for a pod as the Router's requests do; the Router's default hold bounds the wait.
        let activator = Activator::new(
            cp,
            &c.router,
            &c.namespace,
            pod,
            switchyard_crds::router::DEFAULT_ACTIVATION_TIMEOUT,
        );
        upstream = upstream
            .with_control_plane(cp.url())
            .with_activation(activator);
    }
    Arc::new(upstream)
}

/// Reports this pod's load to the control plane; subscriptions report theirs under their pattern,
/// as the worker counts them.
fn report_load(
    cp: &ControlPlane,
    checked: &Checked,
    metrics: &Arc<Metrics>,
    pod: &str,
) -> JoinHandle<()> {
    let c = &checked.settings.config;
    let events = checked
        .events
        .iter()
        .chain(&checked.subscribed)
        .map(|e| Arc::<str>::from(e.as_str()));
    let who = Reporter::new("manager", pod, &c.namespace, &c.name);
    super::report_load(cp, metrics, events, who)
}

/// The JetStream store of durable events, when `jetstream` is configured; refused when durable
/// delivery is set without it.
fn open_store(
    config_file: &Path,
    checked: &Checked,
    mesh: Option<&MeshTls>,
    metrics: &Metrics,
) -> Result<Option<Arc<Store>>, RunError> {
    let c = &checked.settings.config;
    let Some(js) = &c.jetstream else {
        if !c.durable_events.is_empty() || !checked.durable_subscriptions.is_empty() {
            return Err(crate::config::field_error(
                config_file,
                "jetstream",
                "durable delivery is set but no JetStream server is configured".to_owned(),
            )
            .into());
        }
        return Ok(None);
    };
    // Publishes of the types the routing table says are durable go to their Manager's
    // stream; the connection opens on first use.
    let client = crate::durable::Client {
        namespace: &c.namespace,
        manager: &c.name,
        publisher: &checked.source,
        tls: mesh.map(|m| m.jetstream_client()),
    };
    let store = Store::new(js, client, metrics.durable.clone())
        .map_err(|e| crate::config::field_error(config_file, "jetstream.url", e.to_string()))?;
    Ok(Some(Arc::new(store)))
}

/// The worker that delivers events to the app: its limits, retries, ordering and dead letters.
fn build_worker(
    checked: &Checked,
    delivery: Delivery,
    upstream: &Arc<Upstream>,
    store: &Option<Arc<Store>>,
    metrics: &Arc<Metrics>,
    taps: &Arc<Taps>,
) -> Arc<Worker> {
    let (s, c) = (&checked.settings, &checked.settings.config);
    let mut worker = Worker::new(
        Settings {
            max_in_flight: s.max_in_flight,
            queue_capacity: s.queue_capacity,
            attempt_timeout: c.workers.timeout.into(),
            attempts: s.attempts,
            backoff: c.workers.retries.backoff.into(),
            max_backoff: c.workers.retries.max_backoff.into(),
            dead_letter: c.workers.dead_letter.is_some(),
            admitted_bytes: usize::try_from(checked.budgets.admitted).unwrap_or(usize::MAX),
        },
        &checked.events,
        delivery,
        metrics.clone(),
    )
    .with_tracing(checked.otel.clone())
    .with_subscriptions(&checked.subscribed);
    if let Some(key) = &c.workers.ordering_key {
        worker = worker.with_ordering_key(key.clone());
    }
    if let Some(dl) = &c.workers.dead_letter {
        worker = worker.with_dead_letter(dl.as_str(), upstream.clone(), store.clone());
    }
    Arc::new(worker.with_taps(taps.clone(), &checked.source))
}

/// Serves the admin port (`/routes` shows the outbound table the app's events and dead letters
/// use); returns its bound address and the preStop hook's drain.
async fn serve_admin(
    admin_addr: SocketAddr,
    metrics: &Arc<Metrics>,
    ready: &Readiness,
    upstream: &Arc<Upstream>,
    taps: Arc<Taps>,
) -> Result<(SocketAddr, DrainHook), RunError> {
    let admin = bind("admin", admin_addr).await?;
    let admin_addr = local_addr(&admin, admin_addr);
    let hook = DrainHook::default();
    tokio::spawn(admin::serve_manager(
        admin,
        metrics.clone(),
        ready.clone(),
        upstream.clone(),
        hook.clone(),
        taps,
    ));
    Ok((admin_addr, hook))
}

/// Starts this pod's durable consumers: its durable types, pulled from their consumers instead of
/// arriving as frames, and every durable subscription (a subscription is not split by type).
fn start_durable(
    checked: &Checked,
    store: &Arc<Store>,
    worker: &Arc<Worker>,
    drain: &CancellationToken,
    pulls: &TaskTracker,
) {
    let (s, c) = (&checked.settings, &checked.settings.config);
    let mine: Vec<String> = c
        .durable_events
        .iter()
        .map(|e| e.as_str().to_owned())
        .filter(|e| checked.events.contains(e))
        .collect();
    let mut plans = switchyard_protocol::durable::consumers(
        &c.namespace,
        &c.name,
        &mine,
        c.workers.timeout.into(),
        s.attempts,
        c.workers.ordering_key.is_some(),
    );
    plans.extend(switchyard_protocol::durable::subscription_consumers(
        &c.namespace,
        &c.name,
        &checked.durable_subscriptions,
        c.workers.timeout.into(),
        s.attempts,
        c.workers.ordering_key.is_some(),
    ));
    tracing::info!(events = ?mine, subscriptions = checked.durable_subscriptions.len(), consumers = plans.len(), "durable delivery from JetStream");
    durable::start(
        store.clone(),
        worker.clone(),
        &durable::OwnStream {
            manager: c.name.clone(),
            limits: switchyard_protocol::durable::StreamLimits::of(
                c.duplicate_window_ms,
                c.max_bytes,
            ),
        },
        plans,
        s.max_in_flight,
        drain.clone(),
        pulls,
    );
}

/// The local API the app publishes and pushes through: the Manager's own types (every pod of it,
/// whatever its split) and `spec.push` may be pushed.
fn local_api(
    checked: &Checked,
    upstream: Arc<Upstream>,
    store: Option<Arc<Store>>,
    routers: &Arc<Routers>,
    metrics: &Arc<Metrics>,
) -> Arc<LocalApi> {
    let c = &checked.settings.config;
    let pushable = local_api::Pushable::new(c.events.iter().chain(&c.push).map(|e| e.as_str()));
    let local = LocalApi::new(
        upstream,
        store,
        routers.clone(),
        pushable,
        metrics.clone(),
        checked.otel.clone(),
    )
    .with_body_budget(usize::try_from(checked.budgets.local_api).unwrap_or(usize::MAX));
    Arc::new(local)
}

/// After a drain `/drain` started: whether the SIGTERM came within `wait`.
///
/// In a pod the hook runs when the kubelet stops it: the app's own preStop hook (`/drained`) keeps
/// the app up until the drain is over, the kubelet then stops the app and sends this native
/// sidecar SIGTERM after it; meanwhile the app may still publish through the local API, which
/// stays open until then. Exiting before that SIGTERM would have the kubelet restart a sidecar
/// with nothing left to do.
///
/// When no SIGTERM comes, the drain was not the pod's stop (someone in the pod asked for it), and
/// this sidecar would sit unready with its listeners and pulls stopped forever, its liveness still
/// 200. It does not re-arm in place: the frame listener, the pulls' consumers and the routers'
/// GOAWAY'd connections are each built once on the start-up path, and a second, rarely exercised
/// way of building them would be the one that is wrong when it matters. Failing instead has the
/// kubelet restart the container (`restartPolicy: Always`) through the start-up path that runs on
/// every rollout. `wait` is longer than the pod's grace period, so a pod that really is stopping
/// is killed before this fires.
async fn signal_followed(
    signals: &mut crate::shutdown::Signals,
    wait: std::time::Duration,
) -> bool {
    tracing::info!(wait = ?wait, "drained; waiting for SIGTERM");
    match tokio::time::timeout(wait, signals.recv()).await {
        Ok(which) => {
            tracing::info!("{which}: stopping");
            true
        }
        Err(_) => {
            tracing::error!(wait = ?wait, "drained by /drain but no SIGTERM followed: the pod is not stopping; exiting for the kubelet to restart this sidecar");
            false
        }
    }
}

/// The byte budgets of this sidecar, from its container's memory limit (its cgroup): refused when
/// the limit cannot hold one event of the largest size the mesh carries.
fn memory_budgets(
    s: &crate::config::ManagerSettings,
    metrics: &Metrics,
) -> Result<memory::ManagerBudgets, RunError> {
    let limit = crate::cgroup::memory_limit();
    let load = memory::ManagerLoad {
        largest_event: switchyard_protocol::frame::DEFAULT_MAX_FRAME as u64,
        admitted_events: (s.queue_capacity + s.max_in_flight) as u64,
        local_api_body: local_api::MAX_BODY as u64,
    };
    let budgets = memory::manager_budgets(limit, load).map_err(RunError::Memory)?;
    let a = &metrics.admission;
    a.set_budget("limit", budgets.limit);
    a.set_budget("events", budgets.admitted);
    a.set_budget("local_api", budgets.local_api);
    tracing::info!(
        memory_limit = limit.map_or_else(|| "none".to_owned(), memory::mib),
        admitted_events = %memory::mib(budgets.admitted),
        local_api_bodies = %memory::mib(budgets.local_api),
        "byte budgets from the memory limit"
    );
    Ok(budgets)
}

/// The Manager's durable subscriptions, each pattern with where it starts; why one cannot start.
fn durable_subscriptions(
    c: &switchyard_protocol::config::ManagerConfig,
) -> Result<Vec<(String, switchyard_protocol::durable::StartFrom)>, String> {
    c.subscriptions
        .iter()
        .filter(|s| s.delivery == switchyard_crds::manager::DeliveryMode::Durable)
        .map(|s| {
            s.start()
                .map(|start| (s.event.clone(), start))
                .map_err(|e| format!("{}: {e}", s.event))
        })
        .collect()
}
