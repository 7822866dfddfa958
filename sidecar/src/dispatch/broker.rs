//! The broker stage: a bound on requests pending in this router process. Past it, requests are shed
//! with 503 + Retry-After at once instead of queueing without limit.

use crate::metrics::Metrics;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admission control for pending requests.
pub struct Broker {
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// Held while a request is pending; counts it in `switchyard_in_flight`.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
    }
}

impl Broker {
    /// A broker admitting `capacity` pending requests.
    pub fn new(capacity: usize, metrics: Arc<Metrics>) -> Broker {
        Broker {
            slots: Arc::new(Semaphore::new(capacity.min(Semaphore::MAX_PERMITS))),
            metrics,
        }
    }

    /// The metrics of the process, where dispatch counts its failures.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Admits a request, or `None` (counted as shed) when the bound is reached.
    pub fn admit(&self) -> Option<Admitted> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.metrics.in_flight.inc();
                Some(Admitted {
                    _permit: permit,
                    metrics: self.metrics.clone(),
                })
            }
            Err(_) => {
                self.metrics.shed.inc();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheds_past_capacity_and_frees_on_drop() {
        let m = Metrics::new(crate::metrics::Role::Router);
        let b = Broker::new(2, m.clone());
        let a1 = b.admit().expect("1");
        let _a2 = b.admit().expect("2");
        assert!(b.admit().is_none());
        assert_eq!(m.shed.get(), 1);
        assert_eq!(m.in_flight.get(), 2);
        drop(a1);
        assert!(b.admit().is_some());
    }
}
