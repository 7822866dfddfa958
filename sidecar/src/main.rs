//! `switchyard-sidecar router|manager`: parses the command line and runs the role.

#![forbid(unsafe_code)]

use clap::Parser;
use std::process::ExitCode;
use switchyard_sidecar::cli::{Cli, Role};
use switchyard_sidecar::roles::{self, RunError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    switchyard_sidecar::telemetry::init(cli.log_format);
    let runtime = match switchyard_sidecar::runtime::build(cli.runtime_threads) {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match &cli.role {
            Role::Router {
                config,
                bind,
                admin_addr,
                secrets_dir,
                control_plane,
            } => {
                roles::router::run(
                    config,
                    *bind,
                    *admin_addr,
                    secrets_dir,
                    control_plane.as_deref(),
                )
                .await
            }
            Role::Manager {
                config,
                listen,
                admin_addr,
                app_addr,
                local_api_addr,
                event_types,
            } => {
                roles::manager::run(
                    config,
                    *listen,
                    *admin_addr,
                    *app_addr,
                    *local_api_addr,
                    event_types.as_deref(),
                )
                .await
            }
        }
    });
    // Connection tasks still finishing after the drain limit must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Config(e)) => {
            tracing::error!(error = %e, "invalid config");
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e @ RunError::Startup(_)) => {
            tracing::error!(error = %e, "start-up failed");
            ExitCode::FAILURE
        }
    }
}
