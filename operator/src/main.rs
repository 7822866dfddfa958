//! `switchyard-operator`: thin shell around the library — flags, telemetry, then the operator's
//! run (`wiring.rs`: admin server, leader election, controllers, clean shutdown).

use clap::Parser;
use std::process::ExitCode;
use switchyard_operator::{Settings, init_telemetry, run};

/// mimalloc instead of glibc's malloc: start-up in a large cluster (the initial lists, every
/// Manager's reconcile, every router stream's whole table) allocates in a burst, and glibc kept what
/// the burst freed, so RSS stayed at the start-up peak (with `MALLOC_ARENA_MAX=2` too); mimalloc
/// returns it (docs/performance-log.md, "The control plane at scale").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let settings = Settings::parse();
    let tracing = match init_telemetry(
        &settings.log_level,
        settings.log_format,
        &settings.identity(),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("switchyard-operator: {e}");
            return ExitCode::from(2);
        }
    };
    let code = match run(settings).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "operator failed");
            ExitCode::FAILURE
        }
    };
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    code
}
