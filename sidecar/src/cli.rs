//! Command line: one binary, two roles.

use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// The Switchyard sidecar.
#[derive(Parser, Debug)]
#[command(name = "switchyard-sidecar", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value = "json", global = true)]
    pub log_format: LogFormat,
    /// Async runtime threads: 1 runs every task on one thread, n > 1 a pool of n, 0 one per CPU. One
    /// costs the least CPU per request (no cross-thread wake-ups; docs/performance.md, "Hot path
    /// profile"); give a router that has cores of its own more.
    #[arg(long, env = crate::runtime::THREADS_ENV, default_value_t = 1, global = true)]
    pub runtime_threads: usize,
    /// Role to run.
    #[command(subcommand)]
    pub role: Role,
}

/// The two roles.
#[derive(Subcommand, Debug)]
pub enum Role {
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
        /// Folder of mounted Secrets: keys and TLS files are read from `<dir>/<secret>/<key>`.
        #[arg(long, default_value = crate::secrets::DEFAULT_DIR)]
        secrets_dir: PathBuf,
        /// Operator control plane (`http://host:port`) to follow for the routing table; unset: the
        /// config's static endpoints or the Managers' Service DNS names.
        #[arg(long, env = crate::router::follow::CONTROL_PLANE_ENV)]
        control_plane: Option<String>,
    },
    /// Beside the handler app: accept events from routers and deliver them to the app.
    Manager {
        /// Rendered manager config (config.json).
        #[arg(long)]
        config: PathBuf,
        /// Frame listener address for router connections.
        #[arg(long, default_value = "0.0.0.0:7070")]
        listen: SocketAddr,
        /// Admin server address (/healthz, /readyz, /metrics).
        #[arg(long, default_value = "0.0.0.0:9901")]
        admin_addr: SocketAddr,
        /// The app's address; default 127.0.0.1:<app.port>.
        #[arg(long)]
        app_addr: Option<SocketAddr>,
        /// The app's local API (publish, request, push), HTTP and gRPC; keep it on localhost.
        #[arg(long, default_value = "127.0.0.1:7071")]
        local_api_addr: SocketAddr,
        /// Event types this pod handles (comma list); default: every one in the config.
        #[arg(long, env = "SWITCHYARD_EVENT_TYPES", hide_env_values = true)]
        event_types: Option<String>,
    },
}
