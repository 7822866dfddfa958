//! Prometheus metrics of one sidecar process (either role), served on the admin port.

pub(crate) mod admission;
pub(crate) mod conns;
pub(crate) mod durable;
pub(crate) mod labels;
pub(crate) mod mesh;
pub(crate) mod sessions;
pub(crate) mod ws;

use crate::load::{LoadMeters, Underway};
pub use labels::Role;
use labels::{AdminRefusedLabels, BuildLabels, FailureLabels, RejectLabels, RequestLabels};
pub(crate) use labels::{
    EventLabel, EventLabels, LocalApiLabels, ObserverLabels, SubscriptionLabels,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

/// The process's count of spans dropped at a full trace export queue (one exporter per process; the
/// exporter starts before the metrics do, so the counter is the process's, not a field's).
pub(crate) fn spans_dropped() -> &'static Counter {
    static DROPPED: OnceLock<Counter> = OnceLock::new();
    DROPPED.get_or_init(Counter::default)
}

fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.5, 16))
}

/// Every metric of the process.
pub struct Metrics {
    /// The registry encoded at `/metrics`.
    pub registry: Registry,
    /// `switchyard_requests_total{role,event,status}`.
    pub(crate) requests: Family<RequestLabels, Counter>,
    /// `switchyard_request_duration_seconds{role,event}`.
    pub(crate) duration: Family<EventLabels, Histogram>,
    /// `switchyard_dispatch_failures_total{role,event,reason}`: events a sidecar answered for
    /// because its handler app's answer did not come (shed, no Manager, no endpoint, deadline, ...).
    pub(crate) failures: Family<FailureLabels, Counter>,
    /// `switchyard_in_flight`: router: requests waiting for a reply; manager: deliveries running.
    pub(crate) in_flight: Gauge,
    /// `switchyard_queued`: router: requests waiting for credit; manager: events waiting for a worker.
    pub(crate) queued: Gauge,
    /// `switchyard_held_requests`: router: requests held for an event type with no ready endpoint
    /// while the operator is asked to scale it up.
    pub(crate) held: Gauge,
    /// `switchyard_shed_total`: requests refused with 503 because a bound was reached.
    pub(crate) shed: Counter,
    /// `switchyard_retries_total{event}`: delivery retries (manager).
    pub(crate) retries: Family<EventLabels, Counter>,
    /// `switchyard_durable_redeliveries_total{event}`: durable events this pod received with a
    /// delivery count above 1 (a failed attempt, or one the server took back; 0 while nothing failed).
    pub(crate) durable_redeliveries: Family<EventLabels, Counter>,
    /// `switchyard_dead_letter_unrouted_total{event}`: events whose delivery failed for good with a
    /// dead-letter type set, and whose dead-letter publish failed too.
    pub(crate) dead_letter_unrouted: Family<EventLabels, Counter>,
    /// WebSocket connections, messages and pushes (router).
    pub(crate) ws: ws::WsMetrics,
    /// Mesh TLS: handshakes, the certificate, refused peers.
    pub(crate) mesh: mesh::MeshMetrics,
    /// A manager pod's admission: refusals and byte budgets.
    pub(crate) admission: admission::AdmissionMetrics,
    /// Durable publishes: the time of each stage (manager).
    pub(crate) durable: durable::DurableMetrics,
    /// Key material reloads and sessions ended by a lapsed credential (router).
    pub(crate) sessions: sessions::SessionMetrics,
    /// Client connections: open, refused, ended by their timers.
    pub(crate) conns: conns::ConnMetrics,
    /// `switchyard_middleware_rejections_total{middleware,reason}`: requests refused at the edge.
    pub(crate) rejections: Family<RejectLabels, Counter>,
    /// `switchyard_admin_refused_total{path,reason}`: admin requests refused: a loopback-only path
    /// asked from outside the pod, or a wrong method.
    pub(crate) admin_refused: Family<AdminRefusedLabels, Counter>,
    /// `switchyard_dead_letter_published_total{event}`: events whose delivery failed for good,
    /// published to the dead-letter type (manager).
    pub(crate) dead_letter_published: Family<EventLabels, Counter>,
    /// `switchyard_published_unconfirmed_total{event}`: publishes a manager admitted (their app
    /// was answered 202) whose connection ended before the manager reported them done: lost if that
    /// pod died, since in-memory delivery keeps no copy (the sender counts them; the pod cannot).
    pub(crate) published_unconfirmed: Family<EventLabels, Counter>,
    /// `switchyard_local_api_requests_total{op,status}`: the app's calls to the local API (manager).
    pub(crate) local_api: Family<LocalApiLabels, Counter>,
    /// `switchyard_observer_copies_total{subscription,copy,outcome}`: copies of requests and
    /// answers sent beside the handler's path to `requests`/`responses` subscribers.
    pub(crate) observer_copies: Family<ObserverLabels, Counter>,
    /// `switchyard_subscription_info{subscription,event}`: 1 per subscription of this manager pod
    /// whose deliveries are counted under their own `event` label (not a handled type's), so
    /// `switchyard top` can tell a subscription's deliveries from a handled type's.
    pub(crate) subscriptions: Family<SubscriptionLabels, Gauge>,
    /// `switchyard_control_plane_tables_total`: routing tables received from the operator (router).
    pub(crate) control_plane_tables: Counter,
    /// `switchyard_control_plane_connected`: 1 while the routing-table stream is open (router).
    pub(crate) control_plane_connected: Gauge,
    /// Per-event-type load counters for the control plane's reports; set once at start-up, and
    /// only when a control plane is configured (otherwise the request path skips them).
    pub(crate) load: OnceLock<Arc<LoadMeters>>,
}

impl Metrics {
    /// Registers every metric of a sidecar of `role`.
    pub fn new(role: Role) -> Arc<Metrics> {
        let mut registry = Registry::default();
        // Both roles answer the same request (the router the client, the manager the router) and
        // record it: the `role` label keeps a sum over the mesh from counting it twice and a
        // quantile from mixing the two latencies. A constant of the process, so the request path
        // hashes nothing more.
        let both = registry.sub_registry_with_label(("role".into(), role.name().into()));
        let requests = Family::<RequestLabels, Counter>::default();
        both.register(
            "switchyard_requests",
            "Requests answered, by event type and status",
            requests.clone(),
        );
        // 100 us to about 1.5 min: sub-millisecond hops and slow handlers both land in a bucket.
        let duration = Family::<EventLabels, Histogram>::new_with_constructor(
            new_histogram as fn() -> Histogram,
        );
        both.register(
            "switchyard_request_duration_seconds",
            "Time from request arrival to reply, by event type",
            duration.clone(),
        );
        let failures = Family::<FailureLabels, Counter>::default();
        both.register(
            "switchyard_dispatch_failures",
            "Events answered by the sidecar because no answer of the handler app came, by event type and reason (shed, no_manager, no_endpoint, no_credit, timeout, lost, manager, ...)",
            failures.clone(),
        );
        // The version every sidecar runs, so version skew across the mesh shows in a query.
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        both.register(
            "switchyard_build_info",
            "1, labelled with the version of this sidecar",
            build,
        );
        let in_flight = Gauge::default();
        registry.register(
            "switchyard_in_flight",
            "Requests or deliveries in flight",
            in_flight.clone(),
        );
        let queued = Gauge::default();
        let held = Gauge::default();
        registry.register(
            "switchyard_held_requests",
            "Requests held for an event type with no ready endpoint (activation)",
            held.clone(),
        );
        registry.register(
            "switchyard_queued",
            "Requests or events waiting in a bounded queue",
            queued.clone(),
        );
        let shed = Counter::default();
        registry.register(
            "switchyard_shed",
            "Requests refused with 503 because a bound was reached",
            shed.clone(),
        );
        let retries = Family::<EventLabels, Counter>::default();
        registry.register(
            "switchyard_retries",
            "Delivery retries to the app",
            retries.clone(),
        );
        let durable_redeliveries = Family::<EventLabels, Counter>::default();
        registry.register(
            "switchyard_durable_redeliveries",
            "Durable events received again (delivery count above 1): after a failed attempt, or taken back by the server",
            durable_redeliveries.clone(),
        );
        let dead_letter_unrouted = Family::<EventLabels, Counter>::default();
        registry.register(
            "switchyard_dead_letter_unrouted",
            "Events that failed for good while a dead-letter type is set, and whose dead-letter publish failed",
            dead_letter_unrouted.clone(),
        );
        let ws = ws::WsMetrics::register(&mut registry);
        let mesh = mesh::MeshMetrics::register(&mut registry);
        let admission = admission::AdmissionMetrics::register(&mut registry);
        let durable = durable::DurableMetrics::register(&mut registry);
        let sessions = sessions::SessionMetrics::register(&mut registry);
        let conns = conns::ConnMetrics::register(&mut registry);
        let rejections = Family::<RejectLabels, Counter>::default();
        registry.register(
            "switchyard_middleware_rejections",
            "Requests refused by edge middleware, by middleware and reason",
            rejections.clone(),
        );
        let admin_refused = Family::<AdminRefusedLabels, Counter>::default();
        registry.register(
            "switchyard_admin_refused",
            "Admin requests refused, by path and reason (not_loopback: a pod-local path asked from outside the pod; method)",
            admin_refused.clone(),
        );
        let dead_letter_published = Family::<EventLabels, Counter>::default();
        registry.register(
            "switchyard_dead_letter_published",
            "Events that failed for good, published to the dead-letter event type",
            dead_letter_published.clone(),
        );
        let published_unconfirmed = Family::<EventLabels, Counter>::default();
        registry.register(
            "switchyard_published_unconfirmed",
            "Acknowledged publishes whose manager connection ended before they were reported done (lost if that pod died)",
            published_unconfirmed.clone(),
        );
        let observer_copies = Family::<ObserverLabels, Counter>::default();
        registry.register(
            "switchyard_observer_copies",
            "Copies of requests and answers for requests/responses subscribers, by subscription, copy and outcome (sent, shed, failed)",
            observer_copies.clone(),
        );
        let subscriptions = Family::<SubscriptionLabels, Gauge>::default();
        registry.register(
            "switchyard_subscription_info",
            "1 per subscription of this manager pod, naming its route key and the event label its deliveries are counted under",
            subscriptions.clone(),
        );
        let local_api = Family::<LocalApiLabels, Counter>::default();
        registry.register(
            "switchyard_local_api_requests",
            "Calls of the app to the manager's local API, by operation and status",
            local_api.clone(),
        );
        let control_plane_tables = Counter::default();
        registry.register(
            "switchyard_control_plane_tables",
            "Routing tables received from the operator's control plane",
            control_plane_tables.clone(),
        );
        registry.register(
            "switchyard_trace_spans_dropped",
            "Spans dropped because the trace export queue was full (OTEL_BSP_MAX_QUEUE_SIZE)",
            spans_dropped().clone(),
        );
        let control_plane_connected = Gauge::default();
        registry.register(
            "switchyard_control_plane_connected",
            "1 while the routing-table stream from the control plane is open",
            control_plane_connected.clone(),
        );
        Arc::new(Metrics {
            ws,
            mesh,
            admission,
            durable,
            sessions,
            conns,
            registry,
            requests,
            duration,
            failures,
            in_flight,
            queued,
            held,
            shed,
            retries,
            durable_redeliveries,
            dead_letter_unrouted,
            rejections,
            admin_refused,
            dead_letter_published,
            published_unconfirmed,
            local_api,
            observer_copies,
            subscriptions,
            control_plane_tables,
            control_plane_connected,
            load: OnceLock::new(),
        })
    }

    /// Counts one answered request and its duration.
    pub(crate) fn observe(&self, event: &EventLabel, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                event: event.clone(),
                status,
            })
            .inc();
        self.duration
            .get_or_create(&EventLabels {
                event: event.clone(),
            })
            .observe(seconds);
        if let Some(l) = self.load.get() {
            l.finish(&event.0, status, seconds);
        }
    }

    /// Counts an event's arrival for the load reports; the guard keeps it in flight.
    pub(crate) fn arrive(&self, event: &str) -> Option<Underway> {
        self.load.get().map(|l| l.arrive(event))
    }

    /// Counts an event as waiting (held, waiting for credit or for a worker) in the load reports
    /// until the guard drops.
    pub(crate) fn wait(&self, event: &str) -> Option<crate::load::Waiting> {
        self.load.get().map(|l| l.wait(event))
    }

    /// Counts an event its app's answer did not come for, by `reason` (`answer::Failure::name`).
    pub(crate) fn failed(&self, event: &Arc<str>, reason: &'static str) {
        self.failures
            .get_or_create(&FailureLabels {
                event: EventLabel(event.clone()),
                reason,
            })
            .inc();
    }

    /// Counts an event shed before it was answered through [`Metrics::observe`].
    pub(crate) fn shed_event(&self, event: &EventLabel) {
        self.shed.inc();
        if let Some(l) = self.load.get() {
            l.shed(&event.0);
        }
    }

    /// Counts one event a manager pod refused at admission, by `reason`.
    pub(crate) fn refuse_admission(&self, reason: &'static str) {
        self.admission
            .refused
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }

    /// Counts one request refused by middleware.
    pub(crate) fn rejected(&self, middleware: &'static str, reason: &'static str) {
        self.rejections
            .get_or_create(&RejectLabels { middleware, reason })
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_both_roles_record_carries_the_role() {
        let m = Metrics::new(Role::Manager);
        let event = EventLabel(Arc::from("orders"));
        m.observe(&event, 200, 0.01);
        m.failed(&event.0, "no_endpoint");
        let text = m.encode();
        for line in [
            r#"switchyard_requests_total{role="manager",event="orders",status="200"} 1"#,
            r#"switchyard_request_duration_seconds_count{role="manager",event="orders"} 1"#,
            r#"switchyard_dispatch_failures_total{role="manager",event="orders",reason="no_endpoint"} 1"#,
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
        let version = format!(
            r#"switchyard_build_info{{role="manager",version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&version), "no {version} in\n{text}");
        // One process is one role: the per-pod metrics carry none.
        assert!(text.contains("\nswitchyard_in_flight 0\n"), "{text}");
    }
}
