//! Metrics of a manager pod's admission: the events it refused and why, and its byte budgets.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label pairs of these metrics (fixed strings only).
pub(crate) type Pairs = Vec<(&'static str, &'static str)>;

/// Admission metrics.
pub(crate) struct AdmissionMetrics {
    /// `switchyard_admission_refused_total{reason}`: events a manager pod refused with 503 at
    /// admission (`bytes`: its byte budget was full; `queue`: its event bound; `lanes`: the
    /// ordering lanes).
    pub refused: Family<Pairs, Counter>,
    /// `switchyard_admission_budget_bytes{budget}`: the byte budgets derived from the memory limit
    /// (`events`: admitted events; `local_api`: the local API's bodies; `limit`: the limit they
    /// were computed for).
    pub budget: Family<Pairs, Gauge>,
}

impl AdmissionMetrics {
    /// Registers the admission metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> AdmissionMetrics {
        let m = AdmissionMetrics {
            refused: Family::default(),
            budget: Family::default(),
        };
        registry.register(
            "switchyard_admission_refused",
            "Events a manager pod refused with 503 at admission, by reason (bytes, queue, lanes)",
            m.refused.clone(),
        );
        registry.register(
            "switchyard_admission_budget_bytes",
            "Byte budgets derived from the sidecar's memory limit (events, local_api, limit)",
            m.budget.clone(),
        );
        m
    }

    /// Sets the budget `which` to `bytes`.
    pub(crate) fn set_budget(&self, which: &'static str, bytes: u64) {
        self.budget
            .get_or_create(&vec![("budget", which)])
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}
