//! Command line: one binary, two roles. Parses the arguments, starts the runtime and runs the role;
//! the exit status says how it ended (0 after a drain, 2 for an unusable config, 3 after a drain
//! `/drain` started that no SIGTERM followed, 1 otherwise).

use crate::roles::{self, RunError};
use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

/// The Switchyard sidecar.
#[derive(Parser, Debug)]
#[command(name = "switchyard-sidecar", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value = "json", global = true)]
    log_format: LogFormat,
    /// Async runtime threads: 1 runs every task on one thread, n > 1 a pool of n, 0 one per CPU. One
    /// costs the least CPU per request (no cross-thread wake-ups; docs/performance-log.md, "Hot path
    /// profile"); give a router that has cores of its own more.
    #[arg(long, env = crate::runtime::THREADS_ENV, default_value_t = 1, global = true)]
    runtime_threads: usize,
    /// Role to run.
    #[command(subcommand)]
    role: Role,
}

/// The two roles, and the manager's preStop hook.
#[derive(Subcommand, Debug)]
enum Role {
    /// The manager sidecar's preStop hook: asks the manager in this container to drain (`GET
    /// /drain` on loopback, the only place it answers) and returns once the drain is over; exits 1
    /// if it could not.
    Drain {
        /// The manager's admin address, as seen from inside its container.
        #[arg(long, default_value = "127.0.0.1:9901")]
        admin_addr: SocketAddr,
    },
    /// At the edge: accept client requests and route them as events to manager sidecars.
    Router {
        /// Rendered router config (config.json).
        #[arg(long)]
        config: PathBuf,
        /// Address the HTTP listener binds (its port comes from spec.listeners.http.port).
        #[arg(long, default_value = "0.0.0.0")]
        bind: IpAddr,
        /// Admin server address (/healthz, /readyz, /metrics, /routes).
        #[arg(long, default_value = "0.0.0.0:9901")]
        admin_addr: SocketAddr,
        /// Probe server address (/healthz, /readyz only), started first; unset: the admin port
        /// answers probes.
        #[arg(long)]
        probe_addr: Option<SocketAddr>,
        /// Folder of mounted Secrets: keys and TLS files are read from `<dir>/<secret>/<key>`.
        #[arg(long, default_value = crate::secrets::DEFAULT_DIR)]
        secrets_dir: PathBuf,
        /// Operator control plane (`https://host:port`, or `http://` with mesh TLS off) to follow
        /// for the routing table; unset: the config's static endpoints or the Managers' Service DNS
        /// names.
        #[arg(long, env = switchyard_protocol::env::CONTROL_PLANE)]
        control_plane: Option<String>,
        /// Once ready, write the addresses actually bound (`http`, `grpc`, `admin`) to this file as
        /// JSON: how `switchyard up` and scripts learn the ports of listeners configured as 0.
        #[arg(long, value_name = "PATH")]
        ready_file: Option<PathBuf>,
    },
    /// Beside the handler app: accept events from routers and deliver them to the app.
    Manager {
        /// Rendered manager config (config.json).
        #[arg(long)]
        config: PathBuf,
        /// Frame listener address for router connections.
        #[arg(long, default_value = "0.0.0.0:7070")]
        listen: SocketAddr,
        /// Admin server address (/healthz, /readyz, /metrics, /routes).
        #[arg(long, default_value = "0.0.0.0:9901")]
        admin_addr: SocketAddr,
        /// Probe server address (/healthz, /readyz only), started first; unset: the admin port
        /// answers probes.
        #[arg(long)]
        probe_addr: Option<SocketAddr>,
        /// The app's address with `app.transport: tcp`; default 127.0.0.1:<app.port>.
        #[arg(long)]
        app_addr: Option<SocketAddr>,
        /// The app's Unix socket with `app.transport: unix`; default /var/run/switchyard/app.sock
        /// (where the operator mounts it).
        #[arg(long, value_name = "PATH", env = switchyard_protocol::env::APP_SOCKET)]
        app_socket: Option<PathBuf>,
        /// The app's local API (publish, request, push), HTTP and gRPC; keep it on localhost.
        #[arg(long, default_value = "127.0.0.1:7071")]
        local_api_addr: SocketAddr,
        /// Event types this pod handles (comma list); default: every one in the config.
        #[arg(long, env = switchyard_protocol::env::EVENT_TYPES, hide_env_values = true)]
        event_types: Option<String>,
        /// After a drain `GET /drain` started (the preStop hook), how long to wait for the SIGTERM
        /// that ends the pod's stop before exiting 3 for the kubelet to restart the sidecar; keep
        /// it above the pod's termination grace period.
        #[arg(long, env = switchyard_protocol::env::SIGNAL_WAIT, default_value_t = crate::shutdown::SIGNAL_WAIT.into())]
        signal_wait: humantime::Duration,
    },
    /// Beside the chart's nats-server (in a pod sharing its process namespace): send it SIGHUP,
    /// its configuration reload, whenever the files of its mounted access Secret change.
    NatsReload {
        /// The mounted Secret's folder.
        #[arg(long, default_value = "/etc/nats-access")]
        watch: PathBuf,
        /// nats-server's `pid_file`.
        #[arg(long, default_value = "/var/run/nats/nats.pid")]
        pid_file: PathBuf,
        /// Time between looks at the folder, e.g. `2s`.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        every: std::time::Duration,
    },
}

/// Runs the sidecar as the command line says, until its role drains.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    crate::telemetry::init(cli.log_format);
    let runtime = match crate::runtime::build(cli.runtime_threads) {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    if let Role::NatsReload {
        watch,
        pid_file,
        every,
    } = &cli.role
    {
        let settings = crate::nats_reload::Settings {
            watch: watch.clone(),
            pid_file: pid_file.clone(),
            every: *every,
        };
        return runtime.block_on(crate::nats_reload::run(&settings));
    }
    let result = runtime.block_on(async {
        match &cli.role {
            Role::Drain { admin_addr } => drain(*admin_addr).await,
            Role::Router {
                config,
                bind,
                admin_addr,
                probe_addr,
                secrets_dir,
                control_plane,
                ready_file,
            } => {
                roles::router::run(
                    config,
                    *bind,
                    *admin_addr,
                    *probe_addr,
                    secrets_dir,
                    control_plane.as_deref(),
                    ready_file.as_deref(),
                )
                .await
            }
            Role::Manager {
                config,
                listen,
                admin_addr,
                probe_addr,
                app_addr,
                app_socket,
                local_api_addr,
                event_types,
                signal_wait,
            } => {
                roles::manager::run(
                    config,
                    roles::manager::Addrs {
                        listen: *listen,
                        admin: *admin_addr,
                        probe: *probe_addr,
                        local_api: *local_api_addr,
                    },
                    roles::manager::AppFlags {
                        tcp: *app_addr,
                        unix: app_socket.as_deref(),
                    },
                    event_types.as_deref(),
                    (*signal_wait).into(),
                )
                .await
            }
            Role::NatsReload { .. } => Ok(()),
        }
    });
    // Connection tasks still finishing after the drain limit must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Stopped) => {
            tracing::info!("stopped before start-up finished");
            ExitCode::SUCCESS
        }
        Err(e @ (RunError::DrainNotFollowed(_) | RunError::DrainCall(_))) => {
            tracing::error!(error = %e, "exiting");
            // On stderr too: the kubelet puts a failed hook's output in the pod's events.
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
        Err(RunError::Config(e)) => {
            tracing::error!(error = %e, "invalid config");
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!(error = %e, "start-up failed");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs the preStop hook: the drain of the manager at `admin_addr`.
async fn drain(admin_addr: SocketAddr) -> Result<(), RunError> {
    crate::admin::call_drain(admin_addr).await?;
    tracing::info!("drained");
    Ok(())
}
