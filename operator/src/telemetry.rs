//! Structured logging through `tracing`.

use crate::settings::LogFormat;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global subscriber; an invalid filter is reported, not ignored.
pub fn init(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("--log-level {filter:?}: {e}"))?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .try_init()?,
        LogFormat::Text => {
            // Colour codes only for a terminal; in a log file they are noise.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
            registry.with(fmt::layer().with_ansi(ansi)).try_init()?
        }
    }
    Ok(())
}
