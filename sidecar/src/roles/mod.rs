//! Wiring of each role: bind, serve, drain.

pub mod manager;
pub mod router;

/// How a role run ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The config is unusable (exit 2).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A listener could not be bound or another start-up step failed (exit 1).
    #[error("{0}")]
    Startup(String),
}
