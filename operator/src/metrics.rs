//! Operator metrics (Prometheus text via prometheus-client), named `switchyard_operator_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// Labels of per-controller series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ControllerLabels {
    /// `router` or `manager`.
    pub controller: &'static str,
}

/// Labels of failure series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    /// `router` or `manager`.
    pub controller: &'static str,
    /// Pipeline step that failed, from [`crate::Error::metric_label`].
    pub error: &'static str,
}

/// Every metric the operator exports, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    applies_skipped: Family<ControllerLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    invalid: Family<ControllerLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    leader: Gauge,
    cp_subscribers: Gauge,
    cp_tables_sent: Counter,
    cp_bytes_sent: Counter,
    cp_publish: Histogram,
    autoscale_tick: Histogram,
    autoscale_last_tick: Gauge<f64, std::sync::atomic::AtomicU64>,
    autoscale_status_writes: Histogram,
    cp_routing_tables: Gauge,
    cp_load_reports: Counter,
    cp_activations: Counter,
    cp_forwarded: Family<KindLabels, Counter>,
    cp_forward_dropped: Counter,
    scale_decisions: Family<ScaleLabels, Counter>,
    scale_reaction: Histogram,
    certificates: Family<KindLabels, Counter>,
    identity_refused: Family<ReasonLabels, Counter>,
    cp_refused: Family<ReasonLabels, Counter>,
    conn_refused: Family<ListenerLabels, Counter>,
    token_reviews: Family<ResultLabels, Counter>,
    backlog_reads: Family<ResultLabels, Counter>,
    backlog_read: Histogram,
    backlogs: BacklogGauges,
    trust: TrustGauges,
}

/// The latest backlog read of each durable Manager's event types, and the series set, so a
/// Manager no longer read leaves no stale figure.
#[derive(Default)]
struct BacklogGauges {
    events: Family<BacklogLabels, Gauge>,
    set: Mutex<HashSet<BacklogLabels>>,
}

/// Labels of the durable backlog gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BacklogLabels {
    /// The Manager's namespace.
    pub namespace: String,
    /// The Manager.
    pub manager: String,
    /// The event type (a subscription's pattern as written).
    pub event: String,
}

/// The expiry of what the mesh's identity rests on, and the rotations seen.
#[derive(Default)]
struct TrustGauges {
    anchor_expiry: Gauge,
    issuer_expiry: Gauge,
    oldest_leaf_expiry: Gauge,
    leaves: Family<IssuerLabels, Gauge>,
    rotations: Family<ChangeLabels, Counter>,
}

/// Labels of the build info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VersionLabels {
    /// The operator's version (its crate version).
    pub version: &'static str,
}

/// Labels of the leaves gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct IssuerLabels {
    /// `current` (signed by the issuer that signs now) or `previous`.
    pub issuer: &'static str,
}

/// Labels of the rotations counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ChangeLabels {
    /// `anchors`, `staged` (a new issuer announced), `switched` (a new issuer signs).
    pub change: &'static str,
}

/// Labels of the backlog read counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    /// `ok`, `timeout` or `error` (backlog reads); `reviewed` or `cached` (token reviews).
    pub result: &'static str,
}

/// Labels of the certificates counter and of the forwarding counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    /// Certificates: `router`, `manager` or `operator`; forwards: `report` or `activation`.
    pub kind: &'static str,
}

/// Labels of refusal counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    /// Why, as a fixed word (`token`, `owner`, `spoofed`, `oversized`, ...).
    pub reason: &'static str,
}

/// Labels of the connection refusal counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ListenerLabels {
    /// `control_plane`, `identity`, `admin` or `probes`.
    pub listener: &'static str,
    /// `connections`, `peer_connections`, `handshake` or `idle`.
    pub reason: &'static str,
}

/// Labels of the scaling decision counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ScaleLabels {
    /// `up` or `down`.
    pub direction: &'static str,
    /// `panic` or `stable`.
    pub mode: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("switchyard_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let applies_skipped = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let invalid = Family::<ControllerLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        registry.register(
            "applies_skipped",
            "Child applies not sent: the same object on the same live version was applied lately",
            applies_skipped.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Reconciles that failed, by pipeline step",
            failures.clone(),
        );
        registry.register(
            "invalid_specs",
            "Reconciles that found an invalid spec",
            invalid.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a reconcile",
            duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            leader.clone(),
        );
        // The version this replica runs, so skew between the operator and the sidecars shows.
        let build = Family::<VersionLabels, Gauge>::default();
        build
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "build_info",
            "1, labelled with the version of this operator",
            build,
        );
        let cp_subscribers = Gauge::default();
        let cp_tables_sent = Counter::default();
        let cp_routing_tables = Gauge::default();
        let cp_bytes_sent = Counter::default();
        registry.register(
            "control_plane_bytes_sent",
            "Encoded bytes of the routing-table messages sent to subscribers",
            cp_bytes_sent.clone(),
        );
        // 50 µs to about 0.8 s.
        let cp_publish = Histogram::new(exponential_buckets(0.00005, 2.0, 15));
        registry.register(
            "control_plane_publish_seconds",
            "Time to turn a batch of watch events into table changes and publish them",
            cp_publish.clone(),
        );
        let autoscale_tick = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "autoscale_tick_seconds",
            "Duration of one autoscaler tick over every scaled Manager: load aggregation, decisions and replica writes",
            autoscale_tick.clone(),
        );
        let autoscale_status_writes = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "autoscale_status_writes_seconds",
            "Duration of the status writes after a tick (several at a time)",
            autoscale_status_writes.clone(),
        );
        let autoscale_last_tick = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "autoscale_last_tick_seconds",
            "Duration of the latest autoscaler tick",
            autoscale_last_tick.clone(),
        );
        let cp_load_reports = Counter::default();
        let cp_activations = Counter::default();
        registry.register(
            "control_plane_subscribers",
            "Open WatchRoutes streams",
            cp_subscribers.clone(),
        );
        registry.register(
            "control_plane_tables_sent",
            "Routing tables sent to subscribers",
            cp_tables_sent.clone(),
        );
        registry.register(
            "control_plane_routing_tables",
            "Routers with a routing table",
            cp_routing_tables.clone(),
        );
        registry.register(
            "control_plane_load_reports",
            "Load reports received",
            cp_load_reports.clone(),
        );
        registry.register(
            "control_plane_activations",
            "Activate calls received from routers holding requests for an event type scaled to zero",
            cp_activations.clone(),
        );
        let cp_forwarded = Family::<KindLabels, Counter>::default();
        let cp_forward_dropped = Counter::default();
        registry.register(
            "control_plane_forwarded",
            "Load reports and activations a standby passed on to the leader",
            cp_forwarded.clone(),
        );
        registry.register(
            "control_plane_forward_dropped",
            "Load reports a standby dropped: no leader known, or the way to it full",
            cp_forward_dropped.clone(),
        );
        let scale_decisions = Family::<ScaleLabels, Counter>::default();
        registry.register(
            "scale_decisions",
            "Replica changes written by the autoscaler, by direction and mode",
            scale_decisions.clone(),
        );
        // 50 ms to about 7 min: the goal is seconds, the e2e bound 15 s.
        let scale_reaction = Histogram::new(exponential_buckets(0.05, 2.0, 14));
        registry.register(
            "scale_reaction_seconds",
            "Time from the first load report asking for more pods to the scale-up written",
            scale_reaction.clone(),
        );
        let certificates = Family::<KindLabels, Counter>::default();
        registry.register(
            "certificates_issued",
            "Mesh certificates issued, by workload kind",
            certificates.clone(),
        );
        let identity_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "identity_refused",
            "Certificate requests refused, by reason",
            identity_refused.clone(),
        );
        let cp_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "control_plane_refused",
            "Control-plane calls and messages refused (unauthenticated, another pod's or Router's, oversized, out of bounds), by reason",
            cp_refused.clone(),
        );
        let conn_refused = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "connections_refused",
            "Connections closed by a listener's caps and timeouts (over the cap, over the peer's share, a failed or slow handshake, idle), by listener and reason",
            conn_refused.clone(),
        );
        let token_reviews = Family::<ResultLabels, Counter>::default();
        registry.register(
            "identity_token_reviews",
            "Tokens of certificate requests checked, by result: reviewed (a TokenReview made) or cached (a review of the same token kept until it expires)",
            token_reviews.clone(),
        );
        let backlog_reads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "backlog_reads",
            "Reads of a durable Manager's backlog from JetStream, by result (ok, timeout, error)",
            backlog_reads.clone(),
        );
        // 1 ms to about 4 s: a read is bounded by its timeout.
        let backlog_read = Histogram::new(exponential_buckets(0.001, 2.0, 13));
        registry.register(
            "backlog_read_seconds",
            "Time to read one durable Manager's backlog from JetStream",
            backlog_read.clone(),
        );
        let backlogs = BacklogGauges::default();
        registry.register(
            "durable_backlog",
            "Events stored for a durable Manager and not yet acknowledged (pending plus unacknowledged), by namespace, Manager and event type, as the leader last read them",
            backlogs.events.clone(),
        );
        let trust = TrustGauges::default();
        registry.register(
            "mesh_anchor_expiry_seconds",
            "End of validity (Unix seconds) of the trust anchor that expires first",
            trust.anchor_expiry.clone(),
        );
        registry.register(
            "mesh_issuer_expiry_seconds",
            "End of validity (Unix seconds) of the issuer that signs certificates now",
            trust.issuer_expiry.clone(),
        );
        registry.register(
            "mesh_oldest_leaf_expiry_seconds",
            "End of validity (Unix seconds) of the oldest certificate this replica issued that is still its pod's latest and valid (0: none)",
            trust.oldest_leaf_expiry.clone(),
        );
        registry.register(
            "mesh_leaves",
            "Certificates this replica issued that are still their pod's latest and valid, by issuer (current, previous): previous must be 0 on every replica before the old root leaves the bundle",
            trust.leaves.clone(),
        );
        registry.register(
            "mesh_ca_rotations",
            "Changes of the CA Secret taken without a restart, by change (anchors, staged, switched)",
            trust.rotations.clone(),
        );
        Metrics {
            backlogs,
            trust,
            registry,
            backlog_reads,
            backlog_read,
            certificates,
            identity_refused,
            cp_refused,
            conn_refused,
            token_reviews,
            scale_decisions,
            scale_reaction,
            cp_subscribers,
            cp_tables_sent,
            cp_bytes_sent,
            cp_publish,
            autoscale_tick,
            autoscale_last_tick,
            autoscale_status_writes,
            cp_routing_tables,
            cp_load_reports,
            cp_activations,
            cp_forwarded,
            cp_forward_dropped,
            reconciles,
            applies_skipped,
            failures,
            invalid,
            duration,
            leader,
        }
    }
}

impl Metrics {
    /// Counts a certificate issued for a workload of `kind`.
    pub fn certificate_issued(&self, kind: &'static str) {
        self.certificates.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a refused certificate request.
    pub fn identity_refused(&self, reason: &'static str) {
        self.identity_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts a refused control-plane call or message.
    pub fn control_plane_refused(&self, reason: &'static str) {
        self.cp_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts a connection closed by `listener`'s caps or timeouts.
    pub fn connection_refused(&self, listener: &'static str, reason: &'static str) {
        self.conn_refused
            .get_or_create(&ListenerLabels { listener, reason })
            .inc();
    }

    /// Counts a token checked: `reviewed` or `cached`.
    pub fn token_review(&self, result: &'static str) {
        self.token_reviews
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a reconcile start.
    pub fn reconcile(&self, controller: &'static str) {
        self.reconciles
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// Counts a child apply that was not sent (see `controller::applied`).
    pub fn apply_skipped(&self, controller: &'static str) {
        self.applies_skipped
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// Records how long a reconcile took.
    pub fn observe_duration(&self, controller: &'static str, took: Duration) {
        self.duration
            .get_or_create(&ControllerLabels { controller })
            .observe(took.as_secs_f64());
    }

    /// Counts a failed reconcile.
    pub fn failure(&self, controller: &'static str, error: &crate::Error) {
        self.failures
            .get_or_create(&FailureLabels {
                controller,
                error: error.metric_label(),
            })
            .inc();
    }

    /// Counts a reconcile that found an invalid spec.
    pub fn invalid_spec(&self, controller: &'static str) {
        self.invalid
            .get_or_create(&ControllerLabels { controller })
            .inc();
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Adds `delta` to the open WatchRoutes streams.
    pub fn subscribers(&self, delta: i64) {
        self.cp_subscribers.inc_by(delta);
    }

    /// Counts a routing-table message (whole or delta) of `bytes` sent to a subscriber.
    pub fn table_sent(&self, bytes: usize) {
        self.cp_tables_sent.inc();
        self.cp_bytes_sent
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Records how long a publish of table changes took.
    pub fn table_publish(&self, took: Duration) {
        self.cp_publish.observe(took.as_secs_f64());
    }

    /// Records how long the status writes after a tick took.
    pub fn autoscale_status_writes(&self, took: Duration) {
        self.autoscale_status_writes.observe(took.as_secs_f64());
    }

    /// Counts one backlog read of a Manager (`ok`, `timeout`, `error`) and how long it took.
    pub fn backlog_read(&self, result: &'static str, took: Duration) {
        self.backlog_reads
            .get_or_create(&ResultLabels { result })
            .inc();
        self.backlog_read.observe(took.as_secs_f64());
    }

    /// Sets the backlog of each event type of Manager `manager` in `namespace` as just read.
    pub fn set_backlog(&self, namespace: &str, manager: &str, figures: &BTreeMap<String, u64>) {
        let mut set = self.backlogs.lock();
        for (event, n) in figures {
            let labels = BacklogLabels {
                namespace: namespace.to_owned(),
                manager: manager.to_owned(),
                event: event.clone(),
            };
            self.backlogs
                .events
                .get_or_create(&labels)
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
            set.insert(labels);
        }
    }

    /// Drops the backlog series of every Manager not in `keep` (namespace, name): no longer
    /// durable, scaled or there, or of a replica that is no longer the leader (empty `keep`).
    pub fn retain_backlogs(&self, keep: &HashSet<(String, String)>) {
        let mut set = self.backlogs.lock();
        set.retain(|l| {
            let kept = keep.contains(&(l.namespace.clone(), l.manager.clone()));
            if !kept {
                self.backlogs.events.remove(l);
            }
            kept
        });
    }

    /// Records how long an autoscaler tick took.
    pub fn autoscale_tick(&self, took: Duration) {
        self.autoscale_tick.observe(took.as_secs_f64());
        self.autoscale_last_tick.set(took.as_secs_f64());
    }

    /// Sets how many Routers have a routing table.
    pub fn set_routing_tables(&self, count: usize) {
        self.cp_routing_tables
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts a load report received.
    pub fn load_report(&self) {
        self.cp_load_reports.inc();
    }

    /// Counts an `Activate` call.
    pub fn activation(&self) {
        self.cp_activations.inc();
    }

    /// Counts a report or activation forwarded to the leader.
    pub fn forwarded(&self, kind: &'static str) {
        self.cp_forwarded.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a load report that could not be forwarded.
    pub fn forward_dropped(&self) {
        self.cp_forward_dropped.inc();
    }

    /// Counts a replica change written by the autoscaler.
    pub fn scale_decision(&self, up: bool, panic: bool) {
        self.scale_decisions
            .get_or_create(&ScaleLabels {
                direction: if up { "up" } else { "down" },
                mode: if panic { "panic" } else { "stable" },
            })
            .inc();
    }

    /// Records the reaction time of a scale-up.
    pub fn scale_reaction(&self, took: Duration) {
        self.scale_reaction.observe(took.as_secs_f64());
    }

    /// Sets the expiry of the first anchor to expire and of the signing issuer (Unix seconds).
    pub fn set_trust_expiry(&self, anchor: i64, issuer: i64) {
        self.trust.anchor_expiry.set(anchor);
        self.trust.issuer_expiry.set(issuer);
    }

    /// Sets the leaves still in use: the oldest one's expiry (0: none), and how many were signed
    /// by the current issuer and by previous ones.
    pub fn set_leaves(&self, oldest_expiry: i64, current: usize, previous: usize) {
        self.trust.oldest_leaf_expiry.set(oldest_expiry);
        for (issuer, n) in [("current", current), ("previous", previous)] {
            self.trust
                .leaves
                .get_or_create(&IssuerLabels { issuer })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Counts a change of the CA Secret.
    pub fn ca_rotation(&self, change: &'static str) {
        self.trust
            .rotations
            .get_or_create(&ChangeLabels { change })
            .inc();
    }

    /// The registry, for the guide's metrics reference (cli/tests/reference): its `Debug` names every
    /// metric with its help, where the exposition leaves out families that have no series yet.
    #[doc(hidden)]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail (fmt::Write for String is infallible).
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl BacklogGauges {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<BacklogLabels>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_series_follow_the_managers_read() {
        let m = Metrics::default();
        let figures = BTreeMap::from([
            ("orders.created".to_owned(), 42),
            ("orders.paid".to_owned(), 0),
        ]);
        m.set_backlog("shop", "orders", &figures);
        m.set_backlog("shop", "audit", &BTreeMap::from([("audit".to_owned(), 3)]));
        let text = m.encode();
        assert!(text.contains(r#"switchyard_operator_durable_backlog{namespace="shop",manager="orders",event="orders.created"} 42"#), "{text}");
        assert!(text.contains(r#"switchyard_operator_durable_backlog{namespace="shop",manager="orders",event="orders.paid"} 0"#), "{text}");
        m.retain_backlogs(&HashSet::from([("shop".to_owned(), "audit".to_owned())]));
        let text = m.encode();
        assert!(!text.contains(r#"manager="orders""#), "{text}");
        assert!(text.contains(r#"switchyard_operator_durable_backlog{namespace="shop",manager="audit",event="audit"} 3"#), "{text}");
        assert!(
            text.contains(&format!(
                r#"switchyard_operator_build_info{{version="{}"}} 1"#,
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

    #[test]
    fn encodes_counters_with_labels() {
        let m = Metrics::default();
        m.reconcile("router");
        m.failure("manager", &crate::Error::MissingMetadata("name"));
        m.set_leader(true);
        let text = m.encode();
        assert!(
            text.contains(r#"switchyard_operator_reconciles_total{controller="router"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"switchyard_operator_reconcile_failures_total{controller="manager",error="metadata"} 1"#));
        assert!(text.contains("switchyard_operator_leader 1"));
    }
}
