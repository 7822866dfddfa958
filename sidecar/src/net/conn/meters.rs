//! One listener's connection metrics, as handles resolved once (the accept path looks nothing
//! up): open connections, refusals by cap, connections ended by a timer, failed accepts. The
//! families are registered by `metrics::conns`; whoever wires a listener resolves them.

use super::limits::Refusal;
use super::timers::Due;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Every timer that ends connections, in the order of [`Meters::closed`]'s array.
const DUES: [Due; 4] = [Due::FirstByte, Due::Idle, Due::MaxAge, Due::Grace];

/// One listener's connection metrics.
#[derive(Clone, Debug)]
pub(crate) struct Meters {
    /// Open connections.
    pub open: Gauge,
    /// Failed accepts.
    pub accept_errors: Counter,
    refused: [Counter; 2],
    closed: [Counter; 4],
}

impl Meters {
    /// The handles: `refused(reason)` and `closed(reason)` give the counter of a reason label.
    pub(crate) fn new(
        open: Gauge,
        accept_errors: Counter,
        refused: impl Fn(&'static str) -> Counter,
        closed: impl Fn(&'static str) -> Counter,
    ) -> Meters {
        Meters {
            open,
            accept_errors,
            refused: [Refusal::Total, Refusal::PerClient].map(|r| refused(r.label())),
            closed: DUES.map(|d| closed(d.label())),
        }
    }

    /// The refusal counter of `r`.
    pub(crate) fn refused(&self, r: Refusal) -> &Counter {
        &self.refused[match r {
            Refusal::Total => 0,
            Refusal::PerClient => 1,
        }]
    }

    /// The counter of connections `due` ended.
    pub(crate) fn closed(&self, due: Due) -> &Counter {
        &self.closed[match due {
            Due::FirstByte => 0,
            Due::Idle => 1,
            Due::MaxAge => 2,
            Due::Grace => 3,
        }]
    }
}
