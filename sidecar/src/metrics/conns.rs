//! Metrics of client connections, per listener: open connections, refusals by cap, connections
//! asked to end or closed by their timers, failed accepts.

use crate::net::conn::limits::Refusal;
use crate::net::conn::timers::Due;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels keyed by listener only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `http`, `grpc` or `local-api`.
    pub listener: &'static str,
}

/// Labels of the refusal and close counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `http`, `grpc` or `local-api`.
    pub listener: &'static str,
    /// Which cap refused, or which timer ended the connection.
    pub reason: &'static str,
}

/// The connection metric families.
pub struct ConnMetrics {
    open: Family<ListenerLabels, Gauge>,
    refused: Family<ReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    accept_errors: Family<ListenerLabels, Counter>,
}

impl ConnMetrics {
    /// Registers the connection metrics in `registry`.
    pub fn register(registry: &mut Registry) -> ConnMetrics {
        let m = ConnMetrics {
            open: Family::default(),
            refused: Family::default(),
            closed: Family::default(),
            accept_errors: Family::default(),
        };
        registry.register(
            "switchyard_connections",
            "Client connections open, by listener (a WebSocket session counts on the HTTP listener)",
            m.open.clone(),
        );
        registry.register(
            "switchyard_connections_refused",
            "Client connections closed as soon as accepted because a cap was reached, by listener and reason",
            m.refused.clone(),
        );
        registry.register(
            "switchyard_connections_closed",
            "Client connections asked to end by a timer (first_byte_timeout, idle_timeout, max_connection_age), or closed when their grace ran out (grace_expired), by listener",
            m.closed.clone(),
        );
        registry.register(
            "switchyard_accept_errors",
            "Failed accepts (such as EMFILE), each followed by a short pause, by listener",
            m.accept_errors.clone(),
        );
        m
    }

    /// The handles of `listener`, resolved once so the accept path looks nothing up.
    pub fn meters(&self, listener: &'static str) -> Meters {
        let reason = |family: &Family<ReasonLabels, Counter>, reason: &'static str| {
            family
                .get_or_create(&ReasonLabels { listener, reason })
                .clone()
        };
        Meters {
            open: self
                .open
                .get_or_create(&ListenerLabels { listener })
                .clone(),
            refused_total: reason(&self.refused, Refusal::Total.label()),
            refused_per_client: reason(&self.refused, Refusal::PerClient.label()),
            closed: [Due::FirstByte, Due::Idle, Due::MaxAge, Due::Grace]
                .map(|d| reason(&self.closed, d.label())),
            accept_errors: self
                .accept_errors
                .get_or_create(&ListenerLabels { listener })
                .clone(),
        }
    }
}

/// One listener's connection metrics.
#[derive(Clone, Debug)]
pub struct Meters {
    /// Open connections.
    pub open: Gauge,
    refused_total: Counter,
    refused_per_client: Counter,
    closed: [Counter; 4],
    /// Failed accepts.
    pub accept_errors: Counter,
}

impl Meters {
    /// The refusal counter of `r`.
    pub fn refused(&self, r: Refusal) -> &Counter {
        match r {
            Refusal::Total => &self.refused_total,
            Refusal::PerClient => &self.refused_per_client,
        }
    }

    /// The counter of connections `due` ended.
    pub fn closed(&self, due: Due) -> &Counter {
        &self.closed[match due {
            Due::FirstByte => 0,
            Due::Idle => 1,
            Due::MaxAge => 2,
            Due::Grace => 3,
        }]
    }
}
