//! `spec.listeners.connections` resolved against the process's open-file limit (pure): the caps
//! and timers the HTTP and gRPC listeners share. Errors name the field.

use crate::config::{ConfigError, field_error};
use crate::metrics::Metrics;
use crate::net::conn::fd_limit;
use crate::net::conn::limits::Caps;
use crate::net::conn::meters::Meters;
use crate::net::conn::timers::Timeouts;
use std::path::Path;
use std::time::Duration;
use switchyard_crds::router::Connections;

/// The cap when neither the spec nor the file limit sets one (an unlimited file limit).
const UNLIMITED_TOTAL: usize = 1 << 20;

/// What the listeners enforce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Total and per-client caps.
    pub caps: Caps,
    /// Each connection's timers.
    pub timeouts: Timeouts,
    /// `spec.listeners.connections.maxConnections` when the file limit lowered it.
    pub lowered_from: Option<usize>,
}

/// The connection metrics of `listener` (`http`, `grpc`).
pub(crate) fn meters(metrics: &Metrics, listener: &'static str) -> Meters {
    let c = &metrics.conns;
    Meters::new(
        c.open(listener),
        c.accept_errors(listener),
        |reason| c.refused(listener, reason),
        |reason| c.closed(listener, reason),
    )
}

/// Resolves `c` for a process whose soft open-file limit is `fd_limit` (`None`: unlimited).
pub(crate) fn resolve(
    c: &Connections,
    fd_limit: Option<u64>,
    file: &Path,
) -> Result<Resolved, ConfigError> {
    let field = |name: &str| format!("spec.listeners.connections.{name}");
    let first_byte: Duration = c.first_byte_timeout.into();
    if first_byte.is_zero() {
        return Err(field_error(
            file,
            field("firstByteTimeout"),
            "must be longer than 0s: a connection that sends nothing would be held forever",
        ));
    }
    let positive = |name: &str, v: i32| {
        usize::try_from(v).ok().filter(|n| *n > 0).ok_or_else(|| {
            field_error(
                file,
                field(name),
                format!("{v} is not a count of 1 or more"),
            )
        })
    };
    let per_client = positive("maxConnectionsPerClient", c.max_connections_per_client)?;
    let configured = c
        .max_connections
        .map(|m| positive("maxConnections", m))
        .transpose()?;
    if let Some(m) = configured
        && per_client > m
    {
        return Err(field_error(
            file,
            field("maxConnectionsPerClient"),
            format!("{per_client} exceeds maxConnections ({m})"),
        ));
    }
    let room = fd_limit.map(|l| {
        usize::try_from(fd_limit::room(l))
            .unwrap_or(usize::MAX)
            .max(1)
    });
    let total = match (configured, room) {
        (Some(m), Some(r)) => m.min(r),
        (Some(m), None) => m,
        (None, Some(r)) => r,
        (None, None) => UNLIMITED_TOTAL,
    };
    let off_if_zero = |d: Duration| (!d.is_zero()).then_some(d);
    Ok(Resolved {
        caps: Caps {
            total,
            per_client: per_client.min(total),
        },
        timeouts: Timeouts {
            first_byte: Some(first_byte),
            idle: off_if_zero(c.idle_timeout.into()),
            max_age: off_if_zero(c.max_connection_age.into()),
            max_age_grace: c.max_connection_age_grace.into(),
        },
        lowered_from: configured.filter(|m| *m > total),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conns(patch: serde_json::Value) -> Connections {
        serde_json::from_value(patch).expect("a Connections block")
    }

    fn file() -> &'static Path {
        Path::new("router.json")
    }

    #[test]
    fn defaults_follow_the_file_limit() {
        let r = resolve(&Connections::default(), Some(20_000), file()).expect("valid");
        assert_eq!(
            r.caps,
            Caps {
                total: 18_976,
                per_client: 1024
            }
        );
        assert_eq!(
            r.timeouts,
            Timeouts {
                first_byte: Some(Duration::from_secs(10)),
                idle: Some(Duration::from_secs(75)),
                max_age: Some(Duration::from_secs(3600)),
                max_age_grace: Duration::from_secs(30),
            }
        );
        assert_eq!(r.lowered_from, None);
        // An empty block is the defaults.
        assert_eq!(conns(serde_json::json!({})), Connections::default());
    }

    #[test]
    fn a_cap_above_the_file_limit_is_lowered_and_said_so() {
        let c =
            conns(serde_json::json!({"maxConnections": 50_000, "maxConnectionsPerClient": 40_000}));
        let r = resolve(&c, Some(20_000), file()).expect("valid");
        assert_eq!(r.caps.total, 18_976);
        assert_eq!(r.caps.per_client, 18_976);
        assert_eq!(r.lowered_from, Some(50_000));
        let r = resolve(&c, None, file()).expect("valid");
        assert_eq!(r.caps.total, 50_000);
        assert_eq!(
            resolve(&Connections::default(), None, file())
                .expect("valid")
                .caps
                .total,
            UNLIMITED_TOTAL
        );
    }

    #[test]
    fn zero_turns_idle_and_age_off() {
        let c = conns(
            serde_json::json!({"idleTimeout": "0s", "maxConnectionAge": "0s", "firstByteTimeout": "250ms"}),
        );
        let t = resolve(&c, Some(1024), file()).expect("valid").timeouts;
        assert_eq!(t.idle, None);
        assert_eq!(t.max_age, None);
        assert_eq!(t.first_byte, Some(Duration::from_millis(250)));
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases = [
            (
                serde_json::json!({"firstByteTimeout": "0s"}),
                "firstByteTimeout",
                "longer than 0s",
            ),
            (
                serde_json::json!({"maxConnectionsPerClient": 0}),
                "maxConnectionsPerClient",
                "0 is not a count",
            ),
            (
                serde_json::json!({"maxConnections": -3}),
                "maxConnections",
                "-3 is not a count",
            ),
            (
                serde_json::json!({"maxConnections": 10, "maxConnectionsPerClient": 11}),
                "maxConnectionsPerClient",
                "exceeds maxConnections (10)",
            ),
        ];
        for (patch, name, says) in cases {
            let err = resolve(&conns(patch.clone()), Some(20_000), file())
                .expect_err("refused")
                .to_string();
            assert!(
                err.contains(&format!("spec.listeners.connections.{name}")) && err.contains(says),
                "{patch}: {err}"
            );
        }
    }
}
