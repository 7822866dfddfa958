//! Metric families of client connections, per listener: open connections, refusals by cap,
//! connections ended by a timer, failed accepts (`net::conn::meters` holds one listener's handles).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels keyed by listener only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ListenerLabels {
    /// `http`, `grpc`, `local-api`, `admin` or `probes`.
    pub listener: &'static str,
}

/// Labels of the refusal and close counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    /// `http`, `grpc`, `local-api`, `admin` or `probes`.
    pub listener: &'static str,
    /// Which cap refused, or which timer ended the connection.
    pub reason: &'static str,
}

/// The connection metric families.
pub(crate) struct ConnMetrics {
    open: Family<ListenerLabels, Gauge>,
    refused: Family<ReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    accept_errors: Family<ListenerLabels, Counter>,
}

impl ConnMetrics {
    /// Registers the connection metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> ConnMetrics {
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

    /// `switchyard_connections{listener}`.
    pub(crate) fn open(&self, listener: &'static str) -> Gauge {
        self.open
            .get_or_create(&ListenerLabels { listener })
            .clone()
    }

    /// `switchyard_accept_errors_total{listener}`.
    pub(crate) fn accept_errors(&self, listener: &'static str) -> Counter {
        self.accept_errors
            .get_or_create(&ListenerLabels { listener })
            .clone()
    }

    /// `switchyard_connections_refused_total{listener,reason}`.
    pub(crate) fn refused(&self, listener: &'static str, reason: &'static str) -> Counter {
        self.refused
            .get_or_create(&ReasonLabels { listener, reason })
            .clone()
    }

    /// `switchyard_connections_closed_total{listener,reason}`.
    pub(crate) fn closed(&self, listener: &'static str, reason: &'static str) -> Counter {
        self.closed
            .get_or_create(&ReasonLabels { listener, reason })
            .clone()
    }
}
