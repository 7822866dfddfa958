//! Metrics of the edge's credentials over time: key material reloaded from its files, and long
//! sessions (WebSocket, gRPC `Connect`) ended because their credential lapsed.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Reloads and lapsed sessions.
pub(crate) struct SessionMetrics {
    /// `switchyard_secret_reloads_total{secret,result}`: key material reloaded from its mounted
    /// files, by Secret name (never its contents) and result (`ok`; `error`: the old stays).
    pub reloads: Family<Vec<(&'static str, String)>, Counter>,
    /// `switchyard_sessions_lapsed_total{protocol,reason}`: sessions ended because their
    /// credential lapsed (`websocket`, `grpc`; `expired`, or the gate's reason after a reload).
    pub lapsed: Family<Vec<(&'static str, &'static str)>, Counter>,
}

impl SessionMetrics {
    /// Registers the metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> SessionMetrics {
        let m = SessionMetrics {
            reloads: Family::default(),
            lapsed: Family::default(),
        };
        registry.register(
            "switchyard_secret_reloads",
            "Key material reloaded from its mounted files, by Secret and result (error: the old material stays)",
            m.reloads.clone(),
        );
        registry.register(
            "switchyard_sessions_lapsed",
            "WebSocket sessions and gRPC Connect streams ended because their credential lapsed, by protocol and reason",
            m.lapsed.clone(),
        );
        m
    }

    /// Counts one session ended by its lapsed credential.
    pub(crate) fn lapse(&self, protocol: &'static str, reason: &'static str) {
        self.lapsed
            .get_or_create(&vec![("protocol", protocol), ("reason", reason)])
            .inc();
    }
}
