//! Metrics of the WebSocket listener and the push hub.

use super::labels::EventLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of the message counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CommandLabels {
    /// A configured command, `subscribe`, `unsubscribe`, or `invalid` (no usable command).
    pub command: EventLabel,
    /// HTTP-style status of the reply.
    pub status: u16,
}

/// Labels of the refused-push counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ManagerLabels {
    /// The Manager whose pods sent it.
    pub manager: EventLabel,
}

/// WebSocket connections, messages and pushes.
pub(crate) struct WsMetrics {
    /// `switchyard_ws_connections`: open WebSocket connections.
    pub connections: Gauge,
    /// `switchyard_ws_messages_total{command,status}`: client messages answered.
    pub messages: Family<CommandLabels, Counter>,
    /// `switchyard_ws_subscriptions`: push subscriptions held.
    pub subscriptions: Gauge,
    /// `switchyard_ws_pushes_delivered_total`: pushes queued to a subscriber.
    pub pushes_delivered: Counter,
    /// `switchyard_ws_pushes_dropped_total`: pushes dropped because a subscriber's outbox was full.
    pub pushes_dropped: Counter,
    /// `switchyard_pushes_refused_total{manager}`: pushes from a Manager's pods of a type it neither
    /// handles nor lists in `spec.push`, refused.
    pub pushes_refused: Family<ManagerLabels, Counter>,
}

impl WsMetrics {
    /// Registers the WebSocket metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> WsMetrics {
        let m = WsMetrics {
            connections: Gauge::default(),
            messages: Family::default(),
            subscriptions: Gauge::default(),
            pushes_delivered: Counter::default(),
            pushes_dropped: Counter::default(),
            pushes_refused: Family::default(),
        };
        registry.register(
            "switchyard_ws_connections",
            "Open WebSocket connections",
            m.connections.clone(),
        );
        registry.register(
            "switchyard_ws_messages",
            "WebSocket messages answered, by command and status",
            m.messages.clone(),
        );
        registry.register(
            "switchyard_ws_subscriptions",
            "Push subscriptions held",
            m.subscriptions.clone(),
        );
        registry.register(
            "switchyard_ws_pushes_delivered",
            "Pushes queued to a WebSocket subscriber",
            m.pushes_delivered.clone(),
        );
        registry.register(
            "switchyard_pushes_refused",
            "Pushes from a Manager's pods of a type it neither handles nor lists in spec.push, refused",
            m.pushes_refused.clone(),
        );
        registry.register(
            "switchyard_ws_pushes_dropped",
            "Pushes dropped because the subscriber's outbox was full (the subscriber is told)",
            m.pushes_dropped.clone(),
        );
        m
    }

    /// Counts one answered message.
    pub(crate) fn message(&self, command: &str, status: u16) {
        self.messages
            .get_or_create(&CommandLabels {
                command: EventLabel(command.into()),
                status,
            })
            .inc();
    }
}
