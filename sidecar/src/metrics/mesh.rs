//! Metrics of the mesh's mTLS: handshakes, this sidecar's certificate, and peers refused.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label pairs of these metrics (fixed strings only: never a peer's address or name).
pub(crate) type Pairs = Vec<(&'static str, &'static str)>;

/// Mesh TLS metrics.
pub(crate) struct MeshMetrics {
    /// `switchyard_mesh_handshakes_total{side,result}`: TLS handshakes of frame connections; one
    /// per connection, and connections live per pod pair, not per request.
    pub handshakes: Family<Pairs, Counter>,
    /// `switchyard_mesh_certificate_expiry_seconds`: end of the current certificate's validity
    /// (seconds since the Unix epoch).
    pub not_after: Gauge,
    /// `switchyard_mesh_certifications_total{result}`: certificates asked for (start and renewals).
    pub certifications: Family<Pairs, Counter>,
    /// `switchyard_mesh_refused_total{reason}`: inbound frame connections refused after their
    /// handshake (`identity`: a valid certificate of a workload not allowed here; `credit`: more
    /// requests than granted; `plaintext`: ...).
    pub refused: Family<Pairs, Counter>,
    /// `switchyard_mesh_trust_updates_total`: new trust (anchors or issuers) taken from the
    /// Identity service while running.
    pub trust_updates: Counter,
}

impl MeshMetrics {
    /// Registers the mesh metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> MeshMetrics {
        let m = MeshMetrics {
            handshakes: Family::default(),
            not_after: Gauge::default(),
            certifications: Family::default(),
            refused: Family::default(),
            trust_updates: Counter::default(),
        };
        registry.register(
            "switchyard_mesh_trust_updates",
            "New trust anchors or issuers taken from the Identity service without a restart",
            m.trust_updates.clone(),
        );
        registry.register(
            "switchyard_mesh_handshakes",
            "TLS handshakes of frame connections, by side and result",
            m.handshakes.clone(),
        );
        registry.register(
            "switchyard_mesh_certificate_expiry_seconds",
            "End of the mesh certificate's validity, seconds since the Unix epoch",
            m.not_after.clone(),
        );
        registry.register(
            "switchyard_mesh_certifications",
            "Mesh certificates asked for, by result",
            m.certifications.clone(),
        );
        registry.register(
            "switchyard_mesh_refused",
            "Inbound frame connections refused after the handshake, by reason",
            m.refused.clone(),
        );
        m
    }

    /// Counts one refused connection.
    pub(crate) fn refuse(&self, reason: &'static str) {
        self.refused.get_or_create(&vec![("reason", reason)]).inc();
    }
}
