//! What a sidecar refuses in its config at start, found without I/O: the config's own fields and the
//! route tables it compiles. The roles run these at start; `switchyard check` runs [`router`] and
//! [`manager`] on the configs `switchyard up` and the operator render, so a spec a sidecar would
//! refuse is refused before anything starts, with the same field and message. Checks that read
//! files (Secrets, certificates) or reach the network stay in the roles.

use crate::config::{self, ConfigError};
use crate::routes::RouteError;
use crate::routes::grpc::GrpcRoutes;
use crate::routes::http::RouteTable;
use crate::routes::ws::WsRoutes;
use std::fmt;
use std::path::Path;
use switchyard_protocol::config::{FILE_NAME, ManagerConfig, RouterConfig};

/// The first field of a config that a sidecar refuses at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartProblem {
    /// Field path in the config (`spec.broker.bodyBudgetBytes` for a router, `events` for a manager).
    pub field: String,
    /// What is wrong, as the sidecar says it.
    pub message: String,
}

impl fmt::Display for StartProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl From<RouteError> for StartProblem {
    fn from(e: RouteError) -> Self {
        StartProblem {
            field: e.field,
            message: e.message,
        }
    }
}

fn from_config(e: ConfigError) -> StartProblem {
    match e {
        ConfigError::Field { field, message, .. } => StartProblem { field, message },
        other => StartProblem {
            field: "(root)".into(),
            message: other.to_string(),
        },
    }
}

/// The first thing a router-role sidecar would refuse in `config` at start.
pub fn router(config: &RouterConfig) -> Result<(), StartProblem> {
    let settings =
        config::settle_router(Path::new(FILE_NAME), config.clone()).map_err(from_config)?;
    let table = RouteTable::build(&config.spec)?;
    body_budget(settings.body_budget, &table)?;
    GrpcRoutes::build(&config.spec)?;
    if let Some(g) = &config.spec.listeners.grpc {
        grpc_port(g.port, settings.http_port)?;
    }
    WsRoutes::build(&config.spec)?;
    Ok(())
}

/// The first thing a manager-role sidecar would refuse in `config` at start (serving every event
/// type of the config, as a pod without `SWITCHYARD_EVENT_TYPES` does).
pub fn manager(config: &ManagerConfig) -> Result<(), StartProblem> {
    config::settle_manager(Path::new(FILE_NAME), config.clone(), None)
        .map(drop)
        .map_err(from_config)
}

/// The body budget holds one body of the largest size read whole (a streamed body holds one
/// window of it).
pub(crate) fn body_budget(budget: usize, table: &RouteTable) -> Result<(), StartProblem> {
    if budget < table.whole_limit {
        return Err(StartProblem {
            field: "spec.broker.bodyBudgetBytes".into(),
            message: format!(
                "{budget} is less than one body of the largest size read whole ({} bytes: bodyLimit.maxBytes, at most 16 MiB): no such body could ever be read",
                table.whole_limit
            ),
        });
    }
    Ok(())
}

/// The gRPC listener's port: 0 binds any free port, as for HTTP; two fixed ports must differ.
pub(crate) fn grpc_port(port: i32, http_port: u16) -> Result<u16, StartProblem> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p == 0 || *p != http_port)
        .ok_or_else(|| StartProblem {
            field: "spec.listeners.grpc.port".into(),
            message: format!(
                "{port} is not a TCP port (1 to 65535, or 0 for any free port) other than the HTTP port"
            ),
        })
}
