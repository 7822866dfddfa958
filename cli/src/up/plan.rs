//! What `switchyard up` will start, decided before anything starts: programs, arguments, environment, ports,
//! config files and how to tell each process is ready. Pure apart from the port source and program lookup.

use super::config;
use super::edge::Edge;
use super::locate;
use super::ports::PortSource;
use anyhow::{Context, bail};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use switchyard_crds::manager::AppTransport;
use switchyard_crds::yaml::Objects;
use switchyard_crds::{Manager, Router};

/// Environment variable giving the app its port (the `PORT` convention), set for every app on TCP.
pub const PORT_ENV: &str = "PORT";
/// Environment variable giving the app its Unix socket (`app.transport: unix`).
pub const APP_SOCKET_ENV: &str = switchyard_protocol::env::APP_SOCKET;
/// Environment variable telling the manager sidecar which event types it serves.
pub use switchyard_protocol::env::EVENT_TYPES as EVENT_TYPES_ENV;
/// Environment variable telling the app where its manager sidecar's local API is.
pub use switchyard_protocol::env::LOCAL_API as LOCAL_API_ENV;
/// The OpenTelemetry SDKs' collector address; an app gets its Router's `tracing.otlpEndpoint` there.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The OpenTelemetry SDKs' service name; an app is `<manager>-app` unless its container sets one.
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// The example app answers `/healthz`; other apps are only known to listen.
const EXAMPLE_APP: &str = "switchyard-example-app";

/// Start order; shutdown goes the other way so no process loses its downstream while it still has traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// The event store of durable delivery (a NATS JetStream server), first up and last down.
    Store,
    /// The user's handler apps.
    App,
    /// Manager-role sidecars.
    Manager,
    /// Router-role sidecars.
    Router,
}

/// How to tell a process is ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `GET path` answers 200.
    Http {
        /// Where.
        addr: SocketAddr,
        /// Which path.
        path: &'static str,
    },
    /// A TCP connect succeeds.
    Tcp(SocketAddr),
    /// A connect to a Unix socket succeeds.
    Unix(PathBuf),
}

/// Where one app listens locally: the TCP port it was given, or its Unix socket
/// (`app.transport: unix`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum AppEnd {
    Tcp(u16),
    Unix(PathBuf),
}

impl std::fmt::Display for AppEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppEnd::Tcp(port) => write!(f, "{LOCALHOST}:{port}"),
            AppEnd::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The longest path a Unix socket address holds (`sun_path`, less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// One process to start.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcSpec {
    /// Human name, also the output prefix and log file name, e.g. `app handlers`.
    pub label: String,
    /// When it starts and stops.
    pub tier: Tier,
    /// Executable.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment added to the inherited one.
    pub env: Vec<(String, String)>,
    /// Readiness check.
    pub probe: Probe,
    /// Where it listens, printed once ready.
    pub listening: String,
    /// For a Router's sidecar, its listeners: once it is ready they are printed with the ports it reports
    /// having bound instead of `listening`.
    pub edge: Option<Edge>,
    /// The mesh identity a sidecar is certified as; `None` for apps.
    pub identity: Option<Workload>,
}

/// A sidecar's mesh identity: its Router or Manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Router or Manager.
    pub kind: switchyard_identity::Kind,
    /// The namespace its config names.
    pub namespace: String,
    /// The Router's or Manager's name.
    pub name: String,
}

/// Everything a run needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Config files to write before starting: path and content.
    pub files: Vec<(PathBuf, String)>,
    /// Secret files to write privately (folders 0700, files 0600) before starting.
    pub secret_files: Vec<(PathBuf, Vec<u8>)>,
    /// Processes in start order.
    pub procs: Vec<ProcSpec>,
    /// Lines to print before starting (e.g. apps the user runs with `--no-app`).
    pub notes: Vec<String>,
}

/// The Go runtime's count of cores to schedule goroutines on, read by nats-server.
pub const GOMAXPROCS_ENV: &str = "GOMAXPROCS";

/// The Go garbage collector's pace, read by nats-server: a collection each time the heap has grown
/// by this percentage of what the last one kept.
pub const GOGC_ENV: &str = "GOGC";
/// The Go runtime's soft memory limit, read by nats-server.
pub const GOMEMLIMIT_ENV: &str = "GOMEMLIMIT";
/// GOGC of the local NATS server. Its live heap is mostly the ids of the duplicate window (600,000
/// at 20,000 events/s over 30 s), which every collection walks, on the server's one core of two
/// beside the sidecars and apps. The share of time spent marking falls with GOGC, and so did the
/// durable publish tail: p99 in the third 10 s run on one server 5.9-6.2 ms with Go's 100, 3.8-5.8 ms
/// with 400, 3.2 ms with 800 (at most 4.4 by the fifth run), 2.5 ms with the collector off
/// (docs/performance-log.md, "2026-12-04 (late)").
pub const NATS_GOGC: u32 = 800;
/// GOMEMLIMIT of the local NATS server: the bound on what [`NATS_GOGC`] lets its heap grow to (it
/// collects more often near it). A minute at 20,000 durable events/s took its RSS to about 850 MiB.
pub const NATS_GOMEMLIMIT: &str = "1GiB";

/// Cores the local NATS server is given on a machine of `cpus`: half of them, at least one. It
/// shares the machine with every sidecar and app of the run, and with a core for each of them Go's
/// scheduler keeps waking idle threads to steal work from the busy one: on two cores, one cut its
/// CPU per durable event from 35 to 29 us and raised the durable publish rate (docs/performance-log.md).
pub fn nats_cores(cpus: usize) -> usize {
    (cpus / 2).max(1)
}

/// The Go runtime settings the local NATS server starts with on a machine of `cpus`: GOMAXPROCS
/// ([`nats_cores`]), GOGC and GOMEMLIMIT, each unless `is_set` says the environment has it (the
/// user's is theirs to keep, and the server inherits it).
pub fn nats_runtime(cpus: usize, is_set: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    [
        (GOMAXPROCS_ENV, nats_cores(cpus).to_string()),
        (GOGC_ENV, NATS_GOGC.to_string()),
        (GOMEMLIMIT_ENV, NATS_GOMEMLIMIT.to_owned()),
    ]
    .into_iter()
    .filter(|(name, _)| !is_set(name))
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// Inputs of planning besides the objects.
pub struct Options<'a> {
    /// Where config files go.
    pub state_dir: &'a Path,
    /// The sidecar binary.
    pub sidecar: &'a Path,
    /// Start the apps (false with `--no-app`).
    pub apps: bool,
    /// The NATS server, found when some Manager delivers durably.
    pub nats_server: Option<&'a Path>,
    /// The Go runtime settings of the NATS server ([`nats_runtime`]); the environment has the rest.
    pub nats_runtime: Vec<(String, String)>,
    /// The NATS server's `sync_interval` (`--jetstream-sync`, checked by `nats::sync_interval`).
    pub nats_sync: &'a str,
    /// The mesh's mTLS is on (not `--plaintext`): the NATS server then takes only clients with a
    /// mesh certificate, each with its Manager's permissions.
    pub mesh_tls: bool,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set in this environment: every process inherits it and the
    /// sidecars let it win over the Router's `tracing`, so apps keep it too.
    pub otlp_from_env: bool,
}

/// The folder of the run's mesh identity files: the trust bundle, the sidecars' tokens, the NATS
/// server's certificate and key.
pub fn identity_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("identity")
}

/// The mesh's trust bundle in [`identity_dir`].
pub const TRUST_FILE: &str = "ca.crt";
/// The NATS server's certificate chain in [`identity_dir`].
pub const NATS_CERT: &str = "nats.crt";
/// The NATS server's private key in [`identity_dir`].
pub const NATS_KEY: &str = "nats.key";

/// The NATS user of a Manager's sidecars: its identity, and what its table lets it store and
/// consume.
fn nats_user(
    config: &switchyard_protocol::config::ManagerConfig,
) -> anyhow::Result<(String, switchyard_protocol::nats_access::Permissions)> {
    use switchyard_identity::{Kind, SpiffeId};
    use switchyard_protocol::nats_access::{Party, permissions};
    let mut party = Party {
        namespace: config.namespace.clone(),
        manager: config.name.clone(),
        consumes: !config.durable_events.is_empty()
            || config
                .subscriptions
                .iter()
                .any(|s| s.delivery == switchyard_crds::manager::DeliveryMode::Durable),
        stores: BTreeMap::new(),
    };
    let routed = config
        .destinations
        .iter()
        .filter(|(_, d)| d.durable.is_some())
        .map(|(event, d)| (d.manager.clone(), event.to_string()));
    let own = config
        .durable_events
        .iter()
        .map(|event| (config.name.clone(), event.to_string()));
    // A durable subscriber's copies, under its subscription's token.
    let copies = config
        .subscribers
        .values()
        .filter(|s| s.destination.durable.is_some())
        .map(|s| {
            (
                s.destination.manager.clone(),
                switchyard_protocol::durable::subscription_token(&s.subscription.event),
            )
        });
    for (manager, event) in routed.chain(own).chain(copies) {
        party.stores.entry(manager).or_default().insert(event);
    }
    let who = || format!("Manager {}/{}", config.namespace, config.name);
    let id = SpiffeId::new(
        switchyard_identity::local::LOCAL_TRUST_DOMAIN,
        &config.namespace,
        Kind::Manager,
        &config.name,
    )
    .with_context(who)?;
    let allowed = permissions(&party).with_context(who)?;
    Ok((id.uri(), allowed))
}

/// Whether any Manager of `objs` delivers some event type or subscription durably (then a
/// JetStream server runs).
pub fn needs_jetstream(objs: &Objects) -> bool {
    objs.managers.iter().any(|m| m.spec.consumes_durably())
}

const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Plans a run of `objs`, which have passed validation.
pub fn plan(
    objs: &Objects,
    opts: &Options<'_>,
    ports: &mut dyn PortSource,
) -> anyhow::Result<Plan> {
    let mut plan = Plan {
        files: Vec::new(),
        secret_files: Vec::new(),
        procs: Vec::new(),
        notes: Vec::new(),
    };
    // Routers bind the ports their spec names; check those first so a clash is reported before anything runs,
    // and so no app or sidecar is handed one of them. Port 0 binds any free port, which the router reports.
    for r in &objs.routers {
        for (field, port) in router_ports(r) {
            let port =
                u16::try_from(port).with_context(|| format!("Router {}: {field}", r.name_any()))?;
            if port == 0 {
                continue;
            }
            if !ports.available(port) {
                bail!(
                    "Router {}: {field}: 127.0.0.1:{port} is already in use (is another `switchyard up` running?)",
                    r.name_any()
                );
            }
            ports.claim(port);
        }
    }

    // Durable delivery: one JetStream server for the run, its data in the state folder.
    let mut nats_conf = None;
    let jetstream = match (needs_jetstream(objs), opts.nats_server) {
        (false, _) => None,
        (true, None) => bail!("a Manager sets `delivery: durable`, and no nats-server was found"),
        (true, Some(program)) => {
            let port = ports.ephemeral()?;
            let monitor = ports.ephemeral()?;
            let store = opts.state_dir.join("jetstream");
            let conf = opts.state_dir.join("nats.conf");
            // The one URL of the server, for the sidecars and the ✓ line: TLS with the mesh on.
            let url = format!(
                "{}://{LOCALHOST}:{port}",
                if opts.mesh_tls { "tls" } else { "nats" }
            );
            // Written once the Managers' tables are known: they decide the permissions.
            nats_conf = Some((conf.clone(), port, monitor, store));
            plan.procs.push(ProcSpec {
                label: "nats-server".into(),
                tier: Tier::Store,
                program: program.to_owned(),
                args: vec![
                    "--jetstream".into(),
                    "--config".into(),
                    conf.display().to_string(),
                ],
                env: opts.nats_runtime.clone(),
                probe: Probe::Http {
                    addr: SocketAddr::from((LOCALHOST, monitor)),
                    path: "/healthz?js-enabled-only=true",
                },
                listening: format!("{url} (monitor :{monitor})"),
                edge: None,
                identity: None,
            });
            Some(switchyard_protocol::durable::JetStreamConfig { url, replicas: 1 })
        }
    };
    let mut endpoints: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut sidecars = Vec::new();
    // Manager configs wait for the endpoint table: their outbound path needs every Manager's address.
    let mut manager_configs = Vec::new();
    for m in &objs.managers {
        let name = m.name_any();
        let declared = u16::try_from(m.spec.app.port)
            .with_context(|| format!("Manager {name}: spec.app.port"))?;
        let events = m
            .spec
            .events
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let replicas = local_replicas(m);
        for replica in 1..=replicas {
            // The first replica keeps the plain names, so a one-replica run looks as it always did.
            let id = if replica == 1 {
                name.clone()
            } else {
                format!("{name}[{replica}]")
            };
            let app_end = match m.spec.app.transport {
                AppTransport::Unix => {
                    let path = opts.state_dir.join(format!("app-{id}.sock"));
                    if path.as_os_str().len() > MAX_SOCKET_PATH {
                        bail!(
                            "Manager {name}: spec.app.transport unix: the socket path {} is longer than the {MAX_SOCKET_PATH} bytes a Unix socket address holds; set TMPDIR to a shorter directory",
                            path.display()
                        );
                    }
                    AppEnd::Unix(path)
                }
                // With --no-app the user runs the app, presumably on the port the spec declares.
                AppTransport::Tcp if opts.apps => AppEnd::Tcp(ports.app(declared)?),
                AppTransport::Tcp if replica == 1 => AppEnd::Tcp(declared),
                AppTransport::Tcp => bail!(
                    "Manager {name}: {replicas} replicas need one app each on its own port; --no-app runs only one \
                     (set spec.replicas to 1, or let switchyard up start the apps)"
                ),
            };
            let local_api = ports.ephemeral()?;
            let local_api_url = format!("http://{LOCALHOST}:{local_api}");
            if opts.apps {
                let tracing = router_of(&objs.routers, m)
                    .and_then(|r| r.spec.tracing.as_ref())
                    .map(|t| t.otlp_endpoint.as_str());
                let traced = match (tracing, opts.otlp_from_env) {
                    // The sidecars let the environment's endpoint win: the app inherits it.
                    (_, true) => Traced::Inherited,
                    (Some(e), false) => Traced::To(e),
                    (None, false) => Traced::Off,
                };
                plan.procs
                    .push(app_proc(m, &id, &app_end, &local_api_url, traced)?);
            } else {
                let socket_env = match &app_end {
                    AppEnd::Unix(path) => format!(" and {APP_SOCKET_ENV}={}", path.display()),
                    AppEnd::Tcp(_) => String::new(),
                };
                plan.notes.push(format!(
                    "· app {id}: not started (--no-app); run it on {app_end} with {LOCAL_API_ENV}={local_api_url}{socket_env}"
                ));
            }

            let listen = ports.ephemeral()?;
            let admin = ports.ephemeral()?;
            let config_path = opts.state_dir.join(format!("manager-{id}.json"));
            let manager_config = config::manager_config(
                m,
                router_of(&objs.routers, m),
                match &app_end {
                    AppEnd::Tcp(port) => *port,
                    AppEnd::Unix(_) => declared,
                },
                jetstream.as_ref(),
            )?;
            let identity = Workload {
                kind: switchyard_identity::Kind::Manager,
                namespace: manager_config.namespace.clone(),
                name: manager_config.name.clone(),
            };
            manager_configs.push((m, config_path.clone(), manager_config));
            endpoints
                .entry(name.clone())
                .or_default()
                .push(format!("{LOCALHOST}:{listen}"));
            sidecars.push(ProcSpec {
                label: format!("manager sidecar {id}"),
                tier: Tier::Manager,
                program: opts.sidecar.to_owned(),
                args: vec![
                    "manager".into(),
                    // Humans read this output; the JSON default is for log collectors in a cluster.
                    "--log-format".into(),
                    "text".into(),
                    "--config".into(),
                    config_path.display().to_string(),
                    "--listen".into(),
                    format!("{LOCALHOST}:{listen}"),
                    "--admin-addr".into(),
                    format!("{LOCALHOST}:{admin}"),
                    match &app_end {
                        AppEnd::Tcp(_) => "--app-addr".into(),
                        AppEnd::Unix(_) => "--app-socket".into(),
                    },
                    match &app_end {
                        AppEnd::Tcp(port) => format!("{LOCALHOST}:{port}"),
                        AppEnd::Unix(path) => path.display().to_string(),
                    },
                    "--local-api-addr".into(),
                    format!("{LOCALHOST}:{local_api}"),
                ],
                env: vec![(EVENT_TYPES_ENV.into(), events.clone())],
                probe: Probe::Http {
                    addr: SocketAddr::from((LOCALHOST, admin)),
                    path: "/readyz",
                },
                // The local API too: what the app (or a client standing in for it) publishes to.
                listening: format!(
                    "on {LOCALHOST}:{listen}, local API {local_api_url} (admin :{admin})"
                ),
                edge: None,
                identity: Some(identity),
            });
        }
    }
    plan.procs.extend(sidecars);
    // One NATS user per Manager: its replicas share one identity (and one table).
    let mut nats_users = BTreeMap::new();
    for (m, path, mut config) in manager_configs {
        // The app publishes and requests through its sidecar: give it the table its Router has.
        if let Some(r) = objs
            .routers
            .iter()
            .find(|r| r.name_any() == m.spec.router_ref.name)
        {
            let managers: Vec<Manager> = objs
                .managers
                .iter()
                .filter(|o| o.spec.router_ref.name == m.spec.router_ref.name)
                .cloned()
                .collect();
            let table = config::router_config(r, &managers, &endpoints).with_context(|| {
                format!("Manager {}: rendering its outbound table", m.name_any())
            })?;
            config.destinations = table.destinations;
            config.subscribers = table.subscribers;
            config.static_endpoints = table.static_endpoints;
        }
        config.jetstream = jetstream.clone();
        if jetstream.is_some() {
            let (user, allowed) = nats_user(&config)?;
            nats_users.insert(user, allowed);
        }
        plan.files
            .push((path, serde_json::to_string_pretty(&config)?));
    }
    if let Some((conf, port, monitor, store)) = nats_conf {
        let identity = identity_dir(opts.state_dir);
        let access = opts.mesh_tls.then(|| super::nats::Access {
            cert: identity.join(NATS_CERT),
            key: identity.join(NATS_KEY),
            ca: identity.join(TRUST_FILE),
            users: nats_users.into_iter().collect(),
        });
        plan.files.push((
            conf,
            super::nats::conf(
                LOCALHOST,
                port,
                monitor,
                &store,
                opts.nats_sync,
                access.as_ref(),
            ),
        ));
    }

    for r in &objs.routers {
        let name = r.name_any();
        let managers: Vec<Manager> = objs
            .managers
            .iter()
            .filter(|m| m.spec.router_ref.name == name)
            .cloned()
            .collect();
        let admin = ports.ephemeral()?;
        let config_path = opts.state_dir.join(format!("router-{name}.json"));
        let config = config::router_config(r, &managers, &endpoints)
            .with_context(|| format!("Router {name}: rendering its config"))?;
        plan.files
            .push((config_path.clone(), serde_json::to_string_pretty(&config)?));
        let secrets_dir = opts.state_dir.join("secrets");
        let edge = Edge::of(
            r,
            admin,
            opts.state_dir.join(format!("router-{name}.ready.json")),
        )?;
        plan.secret_files
            .extend(super::secrets::files(r, &objs.secrets, &secrets_dir)?);
        plan.procs.push(ProcSpec {
            label: format!("router {name}"),
            tier: Tier::Router,
            program: opts.sidecar.to_owned(),
            args: vec![
                "router".into(),
                // Humans read this output; the JSON default is for log collectors in a cluster.
                "--log-format".into(),
                "text".into(),
                "--config".into(),
                config_path.display().to_string(),
                "--bind".into(),
                LOCALHOST.to_string(),
                "--admin-addr".into(),
                format!("{LOCALHOST}:{admin}"),
                "--secrets-dir".into(),
                secrets_dir.display().to_string(),
                "--ready-file".into(),
                edge.ready_file.display().to_string(),
            ],
            env: Vec::new(),
            probe: Probe::Http {
                addr: SocketAddr::from((LOCALHOST, admin)),
                path: "/readyz",
            },
            listening: edge.listening(),
            edge: Some(edge),
            identity: Some(Workload {
                kind: switchyard_identity::Kind::Router,
                namespace: config.namespace.clone(),
                name: config.name.clone(),
            }),
        });
    }
    Ok(plan)
}

/// How many replicas of `manager` a local run starts: `spec.replicas` (what `kubectl scale` sets), kept within
/// `scaling.minReplicas..=maxReplicas` when scaling is enabled (the operator's autoscaler would, and no autoscaler
/// runs locally), and at least one, since nothing would start a replica from zero locally.
pub fn local_replicas(manager: &Manager) -> u32 {
    let spec = &manager.spec;
    let mut n = spec.replicas;
    if spec.scaling.enabled {
        n = n.clamp(
            spec.scaling.min_replicas,
            spec.scaling.max_replicas.max(spec.scaling.min_replicas),
        );
    }
    u32::try_from(n).unwrap_or(0).max(1)
}

/// Whether an app's spans go to a collector, and which.
#[derive(Clone, Copy, Debug)]
enum Traced<'a> {
    /// Tracing is off.
    Off,
    /// To the Router's `tracing.otlpEndpoint`.
    To(&'a str),
    /// To the `OTEL_EXPORTER_OTLP_ENDPOINT` every process inherits.
    Inherited,
}

/// The app process of one replica (`id`) of `manager`: the first container's `command` + `args`, listening at
/// `end`; with tracing on, pointed at the sidecars' collector and named `<manager>-app`, so its spans join the trace.
fn app_proc(
    manager: &Manager,
    id: &str,
    end: &AppEnd,
    local_api_url: &str,
    traced: Traced<'_>,
) -> anyhow::Result<ProcSpec> {
    let name = manager.name_any();
    let field = "spec.template.spec.containers[0]";
    let container = manager
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .with_context(|| format!("Manager {name}: {field}: no container to run"))?;
    let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
    argv.extend(container.args.clone().unwrap_or_default());
    let Some((program, args)) = argv.split_first() else {
        bail!(
            "Manager {name}: {field}.command: needed to run the app locally (outside a container the image's \
             entrypoint is unknown); set it, or pass --no-app and run the app yourself"
        );
    };
    let path = locate::program(program).with_context(|| {
        format!(
            "Manager {name}: {field}.command: {program:?} not found next to switchyard nor on PATH; build or \
             install it, or pass --no-app and run the app yourself"
        )
    })?;

    let mut env: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        // valueFrom (Secrets, ConfigMaps, the downward API) needs a cluster; those variables are left unset.
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .filter(|(k, _)| k != PORT_ENV && k != LOCAL_API_ENV && k != APP_SOCKET_ENV)
        .collect();
    match end {
        AppEnd::Tcp(port) => env.push((PORT_ENV.into(), port.to_string())),
        // As the operator does in a pod: the sidecar dials this path, whatever the manifest says.
        AppEnd::Unix(path) => env.push((APP_SOCKET_ENV.into(), path.display().to_string())),
    }
    // Locally only this address reaches the sidecar, whatever the manifest says.
    env.push((LOCAL_API_ENV.into(), local_api_url.to_owned()));
    let mut tracing_env = Vec::new();
    if let Traced::To(endpoint) = traced {
        tracing_env.push((OTLP_ENDPOINT_ENV, endpoint.to_owned()));
    }
    if !matches!(traced, Traced::Off) {
        tracing_env.push((SERVICE_NAME_ENV, format!("{name}-app")));
    }
    for (key, value) in tracing_env {
        // The container's own settings win.
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.into(), value));
        }
    }

    let probe = match end {
        AppEnd::Unix(path) => Probe::Unix(path.clone()),
        AppEnd::Tcp(port) => {
            let addr = SocketAddr::from((LOCALHOST, *port));
            // The example app answers /healthz over HTTP; in gRPC mode (or any other app) an open port is the signal.
            let http_app = manager.spec.app.protocol == switchyard_crds::manager::AppProtocol::Http;
            if http_app && locate::file_name(&path) == EXAMPLE_APP {
                Probe::Http {
                    addr,
                    path: "/healthz",
                }
            } else {
                Probe::Tcp(addr)
            }
        }
    };
    Ok(ProcSpec {
        label: format!("app {id}"),
        tier: Tier::App,
        program: path,
        args: match end {
            AppEnd::Tcp(port) => rewrite_port(args, *port),
            AppEnd::Unix(_) => args.to_vec(),
        },
        env,
        probe,
        listening: format!("on {end}"),
        edge: None,
        identity: None,
    })
}

/// `args` with the value of `--port N` / `--port=N` replaced by `port`, so several Managers declaring the same
/// app port can run side by side. Apps that take their port another way get it from `PORT`.
pub fn rewrite_port(args: &[String], port: u16) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut next_is_port = false;
    for a in args {
        if next_is_port {
            out.push(port.to_string());
            next_is_port = false;
        } else if a == "--port" {
            out.push(a.clone());
            next_is_port = true;
        } else if a.starts_with("--port=") {
            out.push(format!("--port={port}"));
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// The ports a Router's sidecar binds, with the field that sets each.
/// The Router of `manager` among those in the file (same name, same namespace or both unset).
fn router_of<'a>(routers: &'a [Router], manager: &Manager) -> Option<&'a Router> {
    routers.iter().find(|r| {
        r.name_any() == manager.spec.router_ref.name && r.namespace() == manager.namespace()
    })
}

fn router_ports(r: &Router) -> Vec<(&'static str, i32)> {
    let l = &r.spec.listeners;
    let mut out = vec![("spec.listeners.http.port", l.http.port)];
    if let Some(g) = &l.grpc {
        out.push(("spec.listeners.grpc.port", g.port));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::up::ports::PortSource;

    /// Hands out ports deterministically and treats `busy` as taken.
    struct FakePorts {
        next: u16,
        busy: Vec<u16>,
    }

    impl PortSource for FakePorts {
        fn ephemeral(&mut self) -> anyhow::Result<u16> {
            self.next += 1;
            Ok(self.next)
        }
        fn available(&mut self, port: u16) -> bool {
            !self.busy.contains(&port)
        }
        fn claim(&mut self, port: u16) {
            self.busy.push(port);
        }
    }

    const TWO_MANAGERS: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  listeners: {http: {port: 8080}, websocket: {path: /ws}}
  routes:
    - event: echo
      http: {method: POST, path: /echo}
    - event: noop
      http: {method: GET, path: /noop}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: a}
spec:
  routerRef: {name: edge}
  events: [noop]
  app: {port: 8000, path: /events}
  template:
    spec:
      containers:
        - name: app
          command: [/bin/sh, -c, "exec sleep 1", --port, "8000"]
          env:
            - {name: GREETING, value: hi}
            - {name: FROM_SECRET, valueFrom: {secretKeyRef: {name: s, key: k}}}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: b}
spec:
  routerRef: {name: edge}
  events: [echo]
  app: {port: 8000}
  template:
    spec:
      containers:
        - name: app
          command: [/bin/sh]
          args: [-c, "exec sleep 1", --port=8000]
"#;

    fn plan_of(yaml: &str, apps: bool) -> anyhow::Result<Plan> {
        let objs = switchyard_crds::yaml::parse_for_local_run(yaml)?;
        let mut ports = FakePorts {
            next: 40000,
            busy: Vec::new(),
        };
        let opts = Options {
            state_dir: Path::new("/state"),
            sidecar: Path::new("/bin/switchyard-sidecar"),
            apps,
            nats_server: Some(Path::new("/bin/nats-server")),
            nats_runtime: nats_runtime(2, |_| false),
            nats_sync: super::super::nats::SYNC_ALWAYS,
            mesh_tls: true,
            otlp_from_env: false,
        };
        plan(&objs, &opts, &mut ports)
    }

    /// The `authorization` block of the nats.conf `p` writes, as JSON.
    fn nats_users_of(p: &Plan) -> anyhow::Result<serde_json::Value> {
        let conf = p
            .files
            .iter()
            .find(|(path, _)| path == Path::new("/state/nats.conf"))
            .map(|(_, text)| text.as_str())
            .context("no nats.conf planned")?;
        let block = conf
            .split_once("authorization: ")
            .context("no authorization block")?
            .1;
        Ok(serde_json::from_str(block)?)
    }

    /// The manager-role config `p` writes for Manager `name`.
    fn manager_config_of(
        p: &Plan,
        name: &str,
    ) -> anyhow::Result<switchyard_protocol::config::ManagerConfig> {
        let (_, text) = p
            .files
            .iter()
            .find(|(path, _)| path.ends_with(format!("manager-{name}.json")))
            .with_context(|| format!("no config of Manager {name}"))?;
        Ok(serde_json::from_str(text)?)
    }

    #[test]
    fn apps_of_a_traced_router_export_to_its_collector() -> anyhow::Result<()> {
        let p = plan_of(TWO_MANAGERS, true)?;
        assert!(!p.procs[0].env.iter().any(|(k, _)| k == OTLP_ENDPOINT_ENV));
        let traced = TWO_MANAGERS.replace(
            "  listeners:",
            "  tracing: {otlpEndpoint: \"http://127.0.0.1:4317\"}\n  listeners:",
        );
        assert_ne!(traced, TWO_MANAGERS, "the fixture changed shape");
        let p = plan_of(&traced, true)?;
        for (app, service) in [(&p.procs[0], "a-app"), (&p.procs[1], "b-app")] {
            assert!(
                app.env
                    .contains(&(OTLP_ENDPOINT_ENV.into(), "http://127.0.0.1:4317".into())),
                "{:?}",
                app.env
            );
            assert!(app.env.contains(&(SERVICE_NAME_ENV.into(), service.into())));
        }
        Ok(())
    }

    #[test]
    fn same_app_port_gets_distinct_local_ports() -> anyhow::Result<()> {
        let p = plan_of(TWO_MANAGERS, true)?;
        let labels: Vec<_> = p.procs.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "app a",
                "app b",
                "manager sidecar a",
                "manager sidecar b",
                "router edge"
            ]
        );
        assert_eq!(p.procs[0].args, ["-c", "exec sleep 1", "--port", "8000"]);
        assert_eq!(p.procs[1].args, ["-c", "exec sleep 1", "--port=8001"]);
        assert!(p.procs[0].env.contains(&("PORT".into(), "8000".into())));
        assert!(p.procs[1].env.contains(&("PORT".into(), "8001".into())));
        assert!(p.procs[0].env.contains(&("GREETING".into(), "hi".into())));
        assert!(!p.procs[0].env.iter().any(|(k, _)| k == "FROM_SECRET"));
        assert!(p.procs[3].args.contains(&"127.0.0.1:8001".to_owned()));
        assert_eq!(
            p.procs[1].probe,
            Probe::Tcp(SocketAddr::from((LOCALHOST, 8001)))
        );
        Ok(())
    }

    #[test]
    fn a_unix_app_transport_gives_app_and_sidecar_one_socket_and_claims_no_port()
    -> anyhow::Result<()> {
        let unix = TWO_MANAGERS.replace(
            "app: {port: 8000, path: /events}",
            "app: {port: 8000, path: /events, transport: unix}",
        );
        assert_ne!(unix, TWO_MANAGERS, "the fixture changed shape");
        let p = plan_of(&unix, true)?;
        let socket = "/state/app-a.sock".to_owned();
        let (app_a, app_b, side_a) = (&p.procs[0], &p.procs[1], &p.procs[2]);
        assert!(app_a.env.contains(&(APP_SOCKET_ENV.into(), socket.clone())));
        assert!(!app_a.env.iter().any(|(k, _)| k == PORT_ENV));
        // Its declared port is not claimed, so the TCP app beside it keeps the same one.
        assert_eq!(app_a.args, ["-c", "exec sleep 1", "--port", "8000"]);
        assert!(app_b.env.contains(&(PORT_ENV.into(), "8000".into())));
        assert_eq!(app_a.probe, Probe::Unix(PathBuf::from(&socket)));
        assert_eq!(app_a.listening, format!("on unix:{socket}"));
        let dials: Vec<_> = side_a
            .args
            .iter()
            .skip_while(|a| *a != "--app-socket")
            .take(2)
            .collect();
        assert_eq!(dials, ["--app-socket", &socket]);
        assert!(!side_a.args.iter().any(|a| a == "--app-addr"));

        // With --no-app the note says where the user's app must listen.
        let p = plan_of(&unix, false)?;
        assert!(
            p.notes.iter().any(|n| n.contains(&format!("unix:{socket}"))
                && n.contains(&format!("{APP_SOCKET_ENV}={socket}"))),
            "{:?}",
            p.notes
        );
        Ok(())
    }

    #[test]
    fn router_config_points_at_local_manager_sidecars() -> anyhow::Result<()> {
        let p = plan_of(TWO_MANAGERS, true)?;
        let (path, text) = p
            .files
            .iter()
            .find(|(path, _)| path.ends_with("router-edge.json"))
            .context("router config")?;
        assert_eq!(path, Path::new("/state/router-edge.json"));
        let cfg: switchyard_protocol::config::RouterConfig = serde_json::from_str(text)?;
        assert_eq!(cfg.namespace, "default");
        let listen_a = p.procs[2].args[6].clone();
        assert_eq!(cfg.static_endpoints.get("a"), Some(&vec![listen_a]));
        assert_eq!(cfg.static_endpoints.len(), 2);

        let cfg = manager_config_of(&p, "b")?;
        assert_eq!(cfg.app.port, 8001);
        // Its outbound path knows every Manager of the Router, at their local sidecars.
        assert_eq!(cfg.destinations.len(), 2, "{:?}", cfg.destinations);
        assert_eq!(
            cfg.static_endpoints.get("a"),
            Some(&vec![p.procs[2].args[6].clone()])
        );
        let local_api = p.procs[3]
            .args
            .iter()
            .skip_while(|a| *a != "--local-api-addr")
            .nth(1)
            .context("--local-api-addr")?;
        assert!(
            p.procs[1]
                .env
                .contains(&(LOCAL_API_ENV.into(), format!("http://{local_api}"))),
            "app b gets its sidecar's local API: {:?}",
            p.procs[1].env
        );
        let edge = p
            .procs
            .last()
            .and_then(|r| r.edge.as_ref())
            .context("edge")?;
        assert_eq!(
            edge.try_command().as_deref(),
            Some("curl -i http://127.0.0.1:8080/noop")
        );
        assert_eq!(edge.ready_file, Path::new("/state/router-edge.ready.json"));
        let router_args = &p.procs.last().context("router")?.args;
        assert!(
            router_args.ends_with(&[
                "--ready-file".into(),
                "/state/router-edge.ready.json".into()
            ]),
            "{router_args:?}"
        );
        Ok(())
    }

    #[test]
    fn router_ports_of_zero_are_left_to_the_router() -> anyhow::Result<()> {
        let yaml = TWO_MANAGERS.replace(
            "  listeners: {http: {port: 8080}, websocket: {path: /ws}}\n",
            "  listeners: {http: {port: 0}, websocket: {path: /ws}, grpc: {port: 0}}\n",
        );
        let objs = switchyard_crds::yaml::parse_for_local_run(&yaml)?;
        // As with real sockets, 0 is never "available": it is not checked nor claimed.
        let mut ports = FakePorts {
            next: 40000,
            busy: vec![0],
        };
        let opts = Options {
            state_dir: Path::new("/state"),
            sidecar: Path::new("/bin/switchyard-sidecar"),
            apps: true,
            nats_server: None,
            nats_runtime: Vec::new(),
            nats_sync: super::super::nats::SYNC_ALWAYS,
            mesh_tls: true,
            otlp_from_env: false,
        };
        let p = plan(&objs, &opts, &mut ports)?;
        let edge = p
            .procs
            .last()
            .and_then(|r| r.edge.as_ref())
            .context("edge")?;
        assert_eq!((edge.http, edge.grpc), (0, Some(0)));
        let (_, text) = p
            .files
            .iter()
            .find(|(path, _)| path.ends_with("router-edge.json"))
            .context("router config")?;
        let cfg: switchyard_protocol::config::RouterConfig = serde_json::from_str(text)?;
        assert_eq!(cfg.spec.listeners.http.port, 0);
        Ok(())
    }

    #[test]
    fn connection_limits_reach_the_router_sidecar() -> anyhow::Result<()> {
        let yaml = TWO_MANAGERS.replace(
            "  listeners: {http: {port: 8080}, websocket: {path: /ws}}\n",
            "  listeners:\n    http: {port: 8080}\n    websocket: {path: /ws}\n    connections: {idleTimeout: 5s, maxConnectionsPerClient: 64}\n",
        );
        let p = plan_of(&yaml, true)?;
        let (_, text) = p
            .files
            .iter()
            .find(|(path, _)| path.ends_with("router-edge.json"))
            .context("router config")?;
        let cfg: switchyard_protocol::config::RouterConfig = serde_json::from_str(text)?;
        let c = &cfg.spec.listeners.connections;
        assert_eq!(
            std::time::Duration::from(c.idle_timeout),
            std::time::Duration::from_secs(5)
        );
        assert_eq!(c.max_connections_per_client, 64);
        // What is not set keeps its default.
        assert_eq!(
            std::time::Duration::from(c.first_byte_timeout),
            std::time::Duration::from_secs(10)
        );
        Ok(())
    }

    #[test]
    fn managers_get_their_routers_tracing() -> anyhow::Result<()> {
        let yaml = TWO_MANAGERS.replace(
            "  listeners: {http: {port: 8080}, websocket: {path: /ws}}\n",
            "  listeners: {http: {port: 8080}, websocket: {path: /ws}}\n  tracing: {otlpEndpoint: \"http://127.0.0.1:4317\", samplingRatio: 0.5}\n",
        );
        let p = plan_of(&yaml, true)?;
        let cfg = manager_config_of(&p, "a")?;
        let t = cfg.tracing.context("tracing")?;
        assert_eq!(
            (t.otlp_endpoint.as_str(), t.sampling_ratio),
            ("http://127.0.0.1:4317", 0.5)
        );
        // Without tracing on the Router, none on the Managers.
        let p = plan_of(TWO_MANAGERS, true)?;
        let cfg = manager_config_of(&p, "a")?;
        assert_eq!(cfg.tracing, None);
        Ok(())
    }

    #[test]
    fn a_durable_manager_gets_a_jetstream_server_on_its_share_of_the_cores() -> anyhow::Result<()> {
        let durable = TWO_MANAGERS.replacen("  routerRef:", "  delivery: durable\n  routerRef:", 1);
        assert_ne!(durable, TWO_MANAGERS, "the fixture changed shape");
        let p = plan_of(&durable, true)?;
        let nats = p
            .procs
            .iter()
            .find(|p| p.tier == Tier::Store)
            .context("no JetStream server planned")?;
        let env: Vec<(&str, &str)> = nats.env.iter().map(|(k, v)| (&**k, &**v)).collect();
        assert_eq!(
            env,
            [
                (GOMAXPROCS_ENV, "1"),
                (GOGC_ENV, "800"),
                (GOMEMLIMIT_ENV, "1GiB")
            ]
        );
        assert_eq!(
            nats.args,
            ["--jetstream", "--config", "/state/nats.conf"],
            "{:?}",
            nats.args
        );
        let conf = p
            .files
            .iter()
            .find(|(path, _)| path == Path::new("/state/nats.conf"))
            .map(|(_, text)| text.as_str())
            .context("no nats.conf planned")?;
        assert!(conf.contains("sync_interval: always"), "{conf}");
        assert!(conf.contains("max_payload: 16842752"), "{conf}");
        // Mesh mTLS on: only clients with a mesh certificate, each with its Manager's permissions.
        assert!(conf.contains("verify_and_map: true"), "{conf}");
        assert!(
            conf.contains("ca_file: \"/state/identity/ca.crt\""),
            "{conf}"
        );
        let users = nats_users_of(&p)?;
        let allowed = |user: &str, side: &str| -> Vec<String> {
            users["users"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|u| u["user"] == user)
                .and_then(|u| u["permissions"][side]["allow"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let a = allowed("spiffe://local/ns/default/manager/a", "publish");
        let b = allowed("spiffe://local/ns/default/manager/b", "publish");
        assert!(
            a.contains(&"$JS.API.CONSUMER.MSG.NEXT.SY_default_a.*".to_owned()),
            "{a:?}"
        );
        assert!(a.contains(&"$JS.ACK.SY_default_a.>".to_owned()), "{a:?}");
        // b's table routes noop durably to a: it may store it there, never consume a's events.
        assert!(b.contains(&"sy.default.a.noop.*".to_owned()), "{b:?}");
        assert!(
            !b.iter()
                .any(|s| s.contains("CONSUMER") || s.contains("$JS.ACK")),
            "{b:?}"
        );
        assert_eq!(
            allowed("spiffe://local/ns/default/manager/b", "subscribe"),
            ["_SY_INBOX.default.b.>"]
        );
        let cfg = manager_config_of(&p, "a")?;
        assert!(
            cfg.jetstream
                .as_ref()
                .is_some_and(|j| j.url.starts_with("tls://127.0.0.1:")),
            "{:?}",
            cfg.jetstream
        );
        assert!(
            plan_of(TWO_MANAGERS, true)?
                .procs
                .iter()
                .all(|p| p.tier != Tier::Store)
        );
        assert_eq!(
            [1, 2, 3, 4, 16].map(nats_cores),
            [1, 1, 1, 2, 8],
            "half the cores, at least one"
        );
        Ok(())
    }

    #[test]
    fn a_go_runtime_setting_of_the_users_is_left_to_the_environment() {
        let names =
            |env: Vec<(String, String)>| env.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            names(nats_runtime(8, |n| n == GOGC_ENV)),
            [GOMAXPROCS_ENV, GOMEMLIMIT_ENV]
        );
        assert_eq!(
            nats_runtime(8, |n| n != GOMAXPROCS_ENV),
            [(GOMAXPROCS_ENV.to_owned(), "4".to_owned())]
        );
        assert!(nats_runtime(8, |_| true).is_empty());
    }

    #[test]
    fn a_managers_stream_limits_reach_its_sidecar_and_every_publisher() -> anyhow::Result<()> {
        let durable = TWO_MANAGERS.replacen(
            "  routerRef:",
            "  delivery: durable\n  durable: {duplicateWindow: 5s, maxBytes: 1073741824}\n  routerRef:",
            1,
        );
        assert_ne!(durable, TWO_MANAGERS, "the fixture changed shape");
        let p = plan_of(&durable, true)?;
        let file = |suffix: &str| {
            p.files
                .iter()
                .find(|(path, _)| path.ends_with(suffix))
                .map(|(_, text)| text.clone())
                .with_context(|| format!("no {suffix}"))
        };
        // The consuming side: Manager a's own sidecar creates its stream with it.
        let manager: switchyard_protocol::config::ManagerConfig =
            serde_json::from_str(&file("manager-a.json")?)?;
        assert_eq!(manager.duplicate_window_ms, Some(5_000));
        assert_eq!(manager.max_bytes, Some(1 << 30));
        // The publishing side: the Router's route to a's durable type carries the same limits.
        let router: switchyard_protocol::config::RouterConfig =
            serde_json::from_str(&file("router-edge.json")?)?;
        let noop = router
            .destinations
            .iter()
            .find(|(event, _)| event.as_str() == "noop")
            .map(|(_, d)| d)
            .context("noop's destination")?;
        let route = noop.durable.as_ref().context("noop is durable")?;
        assert_eq!(route.duplicate_window(), std::time::Duration::from_secs(5));
        assert_eq!(route.stream_limits().max_bytes, Some(1 << 30));
        Ok(())
    }

    #[test]
    fn no_app_keeps_declared_ports_and_starts_only_sidecars() -> anyhow::Result<()> {
        let p = plan_of(TWO_MANAGERS, false)?;
        assert!(p.procs.iter().all(|p| p.tier != Tier::App));
        assert_eq!(p.notes.len(), 2);
        assert!(p.procs[1].args.contains(&"127.0.0.1:8000".to_owned()));
        Ok(())
    }

    #[test]
    fn a_durable_managers_replicas_share_one_nats_user() -> anyhow::Result<()> {
        // nats-server refuses to start on a user listed twice.
        let yaml = TWO_MANAGERS.replace(
            "  events: [noop]\n",
            "  events: [noop]\n  replicas: 2\n  delivery: durable\n",
        );
        assert_ne!(yaml, TWO_MANAGERS, "the fixture changed shape");
        let p = plan_of(&yaml, true)?;
        assert!(
            p.files
                .iter()
                .any(|(path, _)| path.ends_with("manager-a[2].json"))
        );
        let users = nats_users_of(&p)?;
        let names: Vec<&str> = users["users"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u["user"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "spiffe://local/ns/default/manager/a",
                "spiffe://local/ns/default/manager/b"
            ]
        );
        Ok(())
    }

    #[test]
    fn replicas_start_one_app_and_sidecar_each_behind_one_router() -> anyhow::Result<()> {
        let yaml = TWO_MANAGERS.replace(
            "  events: [noop]\n",
            "  events: [noop]\n  replicas: 3\n  scaling: {enabled: true, minReplicas: 1, maxReplicas: 2}\n",
        );
        let p = plan_of(&yaml, true)?;
        let labels: Vec<_> = p.procs.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "app a",
                "app a[2]",
                "app b",
                "manager sidecar a",
                "manager sidecar a[2]",
                "manager sidecar b",
                "router edge"
            ],
            "3 replicas capped at maxReplicas 2"
        );
        assert!(p.procs[0].env.contains(&("PORT".into(), "8000".into())));
        assert!(p.procs[1].env.contains(&("PORT".into(), "8001".into())));
        assert!(p.procs[4].args.contains(&"127.0.0.1:8001".to_owned()));
        let (_, text) = p
            .files
            .iter()
            .find(|(path, _)| path.ends_with("router-edge.json"))
            .context("router config")?;
        let cfg: switchyard_protocol::config::RouterConfig = serde_json::from_str(text)?;
        let a = cfg.static_endpoints.get("a").context("endpoints of a")?;
        assert_eq!(
            a,
            &vec![p.procs[3].args[6].clone(), p.procs[4].args[6].clone()]
        );
        assert!(
            p.files
                .iter()
                .any(|(path, _)| path.ends_with("manager-a[2].json"))
        );
        let err = plan_of(&yaml, false).err().map(|e| format!("{e:#}"));
        assert!(
            err.as_deref().is_some_and(|e| e.contains("--no-app")),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn local_replicas_follow_spec_and_scaling_bounds() -> anyhow::Result<()> {
        let objs = switchyard_crds::yaml::parse_for_local_run(TWO_MANAGERS)?;
        let mut m = objs.managers[0].clone();
        assert_eq!(local_replicas(&m), 1);
        m.spec.replicas = 4;
        assert_eq!(local_replicas(&m), 4, "scaling off: spec.replicas");
        m.spec.replicas = 0;
        assert_eq!(local_replicas(&m), 1, "never none locally");
        m.spec.scaling.enabled = true;
        m.spec.scaling.min_replicas = 2;
        assert_eq!(local_replicas(&m), 2, "raised to minReplicas");
        m.spec.replicas = 50;
        assert_eq!(local_replicas(&m), 10, "capped at maxReplicas");
        Ok(())
    }

    #[test]
    fn missing_command_names_the_field() {
        let yaml = TWO_MANAGERS.replace("command: [/bin/sh]\n", "image: x\n");
        let err = plan_of(&yaml, true).err().map(|e| format!("{e:#}"));
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("Manager b: spec.template.spec.containers[0].command")),
            "{err:?}"
        );
    }

    #[test]
    fn rewrites_port_flags_only() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rewrite_port(&args(&["--port", "1", "--portal", "x", "--port=2"]), 9),
            args(&["--port", "9", "--portal", "x", "--port=9"])
        );
    }
}
