//! Metrics of durable publishes: where a publish's time goes on its way to the stream's PubAck;
//! and of durable deliveries: how long an event waited in the stream.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::EventLabels;

/// Label pairs of these metrics (fixed strings only).
type Pairs = Vec<(&'static str, &'static str)>;

/// Durable publish metrics, one histogram per stage of a publish.
#[derive(Clone)]
pub(crate) struct DurableMetrics {
    /// `switchyard_durable_publish_seconds{stage="sent"}`: from the publish's start until the NATS
    /// client took the message (the stream ensured, the connection open, the message queued).
    pub sent: Histogram,
    /// `switchyard_durable_publish_seconds{stage="stored"}`: from then until the stream's PubAck.
    pub stored: Histogram,
    /// `switchyard_durable_wait_seconds{event}`: from an event's publish (the stream's timestamp)
    /// until this manager pod received it, redeliveries included: the age of the backlog it
    /// was taken from.
    pub waited: Family<EventLabels, Histogram>,
}

/// 10 ms to about 12 h in steps of 4: a backlog's age is judged against seconds to hours.
fn new_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 12))
}

/// 50 us to about 1.6 s in steps of 2: a publish's tail is judged against milliseconds, so the
/// buckets are finer than the request histograms'.
fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl DurableMetrics {
    /// Registers the durable publish metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> DurableMetrics {
        let stages =
            Family::<Pairs, Histogram>::new_with_constructor(new_histogram as fn() -> Histogram);
        registry.register(
            "switchyard_durable_publish_seconds",
            "Time of each stage of a durable publish: sent (taken by the NATS client), stored (until the PubAck)",
            stages.clone(),
        );
        // Created now, so both series are exported from the start and a publish touches no map.
        let sent = stages.get_or_create(&vec![("stage", "sent")]).clone();
        let stored = stages.get_or_create(&vec![("stage", "stored")]).clone();
        let waited = Family::<EventLabels, Histogram>::new_with_constructor(
            new_wait_histogram as fn() -> Histogram,
        );
        registry.register(
            "switchyard_durable_wait_seconds",
            "Time a durable event waited in the stream, from its publish until a manager pod received it (redeliveries included), by event type",
            waited.clone(),
        );
        DurableMetrics {
            sent,
            stored,
            waited,
        }
    }
}
