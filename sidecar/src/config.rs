//! Reading and checking the rendered config file once at start-up. Errors name the file and the field.

use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use switchyard_crds::EventType;
use switchyard_protocol::config::{ManagerConfig, RouterConfig};

/// Largest config file read; a rendered ConfigMap is far below Kubernetes' 1 MiB object limit.
const MAX_FILE: u64 = 4 << 20;

/// Why the config cannot be used. The process exits with status 2.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The file cannot be read.
    #[error("config {file}: cannot read: {source}")]
    Read {
        /// Path given on the command line.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is too large to be a rendered config.
    #[error("config {file}: larger than {MAX_FILE} bytes; is this the rendered config.json?")]
    TooLarge {
        /// Path given on the command line.
        file: PathBuf,
    },
    /// A field is missing, of the wrong type, or out of range.
    #[error("config {file}: field `{field}`: {message}")]
    Field {
        /// Path given on the command line.
        file: PathBuf,
        /// Dotted field path, e.g. `spec.listeners.http.port`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// Builds a field error for `file`.
pub(crate) fn field_error(
    file: &Path,
    field: impl Into<String>,
    message: impl Into<String>,
) -> ConfigError {
    ConfigError::Field {
        file: file.to_owned(),
        field: field.into(),
        message: message.into(),
    }
}

fn read<T: DeserializeOwned>(file: &Path) -> Result<T, ConfigError> {
    let meta = std::fs::metadata(file).map_err(|source| ConfigError::Read {
        file: file.to_owned(),
        source,
    })?;
    if meta.len() > MAX_FILE {
        return Err(ConfigError::TooLarge {
            file: file.to_owned(),
        });
    }
    let text = std::fs::read(file).map_err(|source| ConfigError::Read {
        file: file.to_owned(),
        source,
    })?;
    let de = &mut serde_json::Deserializer::from_slice(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let message = if inner.is_syntax() || inner.is_eof() {
            format!("not valid JSON: {inner}")
        } else {
            inner.to_string()
        };
        field_error(
            file,
            if field == "." {
                "(root)".to_owned()
            } else {
                field
            },
            message,
        )
    })
}

fn port(file: &Path, field: &str, value: i32) -> Result<u16, ConfigError> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| {
            field_error(
                file,
                field,
                format!("{value} is not a TCP port (1 to 65535)"),
            )
        })
}

/// A listener's port; 0 binds any free port, which the role's ready line reports (local runs and
/// tests start processes on port 0 instead of guessing a free one).
fn listen_port(file: &Path, field: &str, value: i32) -> Result<u16, ConfigError> {
    u16::try_from(value).map_err(|_| {
        field_error(
            file,
            field,
            format!("{value} is not a TCP port (1 to 65535, or 0 for any free port)"),
        )
    })
}

fn positive(file: &Path, field: &str, value: i32) -> Result<usize, ConfigError> {
    usize::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| field_error(file, field, format!("{value} must be at least 1")))
}

/// A router config, checked.
pub(crate) struct RouterSettings {
    /// The config as read.
    pub config: RouterConfig,
    /// HTTP listener port (0: any free port).
    pub http_port: u16,
    /// Broker admission bound.
    pub queue_capacity: usize,
    /// Bytes of request bodies held at once.
    pub body_budget: usize,
}

/// Reads and checks a router config.
pub(crate) fn load_router(file: &Path) -> Result<RouterSettings, ConfigError> {
    settle_router(file, read(file)?)
}

/// Checks a router config read from `file` (named in errors only).
pub(crate) fn settle_router(
    file: &Path,
    config: RouterConfig,
) -> Result<RouterSettings, ConfigError> {
    let http_port = listen_port(
        file,
        "spec.listeners.http.port",
        config.spec.listeners.http.port,
    )?;
    let queue_capacity = positive(
        file,
        "spec.broker.queueCapacity",
        config.spec.broker.queue_capacity,
    )?;
    let body_budget = body_budget(file, &config)?;
    for (manager, list) in &config.static_endpoints {
        for (i, ep) in list.iter().enumerate() {
            let ok = ep
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0));
            if !ok {
                return Err(field_error(
                    file,
                    format!("staticEndpoints.{manager}[{i}]"),
                    format!("{ep:?} is not host:port"),
                ));
            }
        }
    }
    Ok(RouterSettings {
        config,
        http_port,
        queue_capacity,
        body_budget,
    })
}

/// `broker.bodyBudgetBytes`, at least 1 (the role checks that it holds one body of the largest
/// size its routes accept, which it knows from their table).
fn body_budget(file: &Path, config: &RouterConfig) -> Result<usize, ConfigError> {
    let field = "spec.broker.bodyBudgetBytes";
    let value = config.spec.broker.body_budget_bytes;
    usize::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| field_error(file, field, format!("{value} must be at least 1")))
}

/// A manager config, checked, with the event types of this pod.
pub(crate) struct ManagerSettings {
    /// The config as read.
    pub config: ManagerConfig,
    /// Event types this pod handles.
    pub events: Vec<EventType>,
    /// App port.
    pub app_port: u16,
    /// Worker concurrency.
    pub max_in_flight: usize,
    /// Worker queue bound.
    pub queue_capacity: usize,
    /// Delivery attempts, the first included.
    pub attempts: u32,
}

/// Reads and checks a manager config; `only` is `SWITCHYARD_EVENT_TYPES` when set.
pub(crate) fn load_manager(
    file: &Path,
    only: Option<&str>,
) -> Result<ManagerSettings, ConfigError> {
    settle_manager(file, read(file)?, only)
}

/// Checks a manager config read from `file` (named in errors only); `only` as for [`load_manager`].
pub(crate) fn settle_manager(
    file: &Path,
    config: ManagerConfig,
    only: Option<&str>,
) -> Result<ManagerSettings, ConfigError> {
    let app_port = port(file, "app.port", config.app.port)?;
    let max_in_flight = positive(file, "workers.maxInFlight", config.workers.max_in_flight)?;
    let queue_capacity = positive(file, "workers.queueCapacity", config.workers.queue_capacity)?;
    let attempts = positive(
        file,
        "workers.retries.attempts",
        config.workers.retries.attempts,
    )? as u32;
    let events = match only.map(str::trim).filter(|s| !s.is_empty()) {
        None => config.events.clone(),
        Some(list) => {
            let mut out = Vec::new();
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let et = EventType::from(name);
                if !config.events.contains(&et) {
                    return Err(field_error(
                        file,
                        "events",
                        format!(
                            "SWITCHYARD_EVENT_TYPES names {name:?}, which this Manager does not handle"
                        ),
                    ));
                }
                out.push(et);
            }
            out
        }
    };
    if events.is_empty() {
        return Err(field_error(file, "events", "no event types to handle"));
    }
    Ok(ManagerSettings {
        config,
        events,
        app_port,
        max_in_flight,
        queue_capacity,
        attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp");
        f.write_all(text.as_bytes()).expect("write");
        f
    }

    #[test]
    fn errors_name_file_and_field() {
        let f = file(
            r#"{"name":"e","namespace":"d","destinations":{},"spec":{"listeners":{"http":{"port":"x"}},"routes":[]}}"#,
        );
        let err = load_router(f.path()).err().expect("error").to_string();
        assert!(err.contains(&f.path().display().to_string()), "{err}");
        assert!(err.contains("spec.listeners.http.port"), "{err}");
        let f = file(
            r#"{"name":"e","namespace":"d","destinations":{},"spec":{"listeners":{"http":{"port":70000}},"routes":[]}}"#,
        );
        let err = load_router(f.path()).err().expect("error").to_string();
        assert!(err.contains("spec.listeners.http.port"), "{err}");
    }

    #[test]
    fn http_port_zero_means_any_free_port() {
        let f = file(
            r#"{"name":"e","namespace":"d","destinations":{},"spec":{"listeners":{"http":{"port":0}},"routes":[]}}"#,
        );
        assert_eq!(load_router(f.path()).expect("ok").http_port, 0);
        let f = file(
            r#"{"name":"e","namespace":"d","destinations":{},"spec":{"listeners":{"http":{"port":-1}},"routes":[]}}"#,
        );
        let err = load_router(f.path()).err().expect("error").to_string();
        assert!(err.contains("or 0 for any free port"), "{err}");
    }

    #[test]
    fn event_type_subset() {
        let f = file(
            r#"{"name":"m","namespace":"d","router":"e","events":["noop","echo"],"app":{"port":8000,"protocol":"http","path":"/"},"workers":{},"split":"shared"}"#,
        );
        assert_eq!(
            load_manager(f.path(), Some("echo")).expect("ok").events,
            vec![EventType::from("echo")]
        );
        assert_eq!(load_manager(f.path(), None).expect("ok").events.len(), 2);
        let err = load_manager(f.path(), Some("other"))
            .err()
            .expect("error")
            .to_string();
        assert!(err.contains("other"), "{err}");
    }

    /// The skew policy (docs/upgrading.md): a sidecar of the previous version reads the config a
    /// newer operator renders, ignoring the keys it adds, and a newer sidecar reads an older config.
    #[test]
    fn keys_a_newer_operator_adds_are_ignored() {
        let f = file(
            r#"{"name":"e","namespace":"d","destinations":{},"addedLater":1,"spec":{"listeners":{"http":{"port":8080,"addedLater":true}},"routes":[],"addedLater":{"x":1}}}"#,
        );
        assert_eq!(
            load_router(f.path()).expect("a newer config").http_port,
            8080
        );
        let f = file(
            r#"{"name":"m","namespace":"d","router":"e","events":["noop"],"app":{"port":8000,"protocol":"http","path":"/","addedLater":2},"workers":{"addedLater":3},"split":"shared","addedLater":[]}"#,
        );
        assert_eq!(
            load_manager(f.path(), None)
                .expect("a newer config")
                .events
                .len(),
            1
        );
    }
}
