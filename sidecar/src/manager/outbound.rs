//! The manager sidecar's outbound path: events the app publishes or requests, and dead letters, go
//! to other Managers through the same router stage as client requests (pools, P2C, credits).

use crate::router::{CallError, CallTimes, Outgoing, Router};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::frame::Response;

/// Why an outgoing event was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No Manager handles the event type (404).
    NoManager,
    /// The router stage failed: no endpoint, no credit, deadline, connection lost.
    Call(CallError),
}

/// An event leaving this manager sidecar.
pub struct Event {
    /// Event type.
    pub event: Arc<str>,
    /// CloudEvents id (kept from the app, or generated).
    pub ce_id: String,
    /// W3C traceparent, carried from the app or the delivered event.
    pub traceparent: String,
    /// JSON payload.
    pub payload: Bytes,
}

/// The outbound router of a manager sidecar.
pub struct Outbound {
    router: Arc<Router>,
}

impl Outbound {
    /// Wraps a router started on the manager config's destinations.
    pub fn new(router: Arc<Router>) -> Outbound {
        Outbound { router }
    }

    /// Whether some Manager handles `event`.
    pub fn knows(&self, event: &str) -> bool {
        self.router.pool_of(event).is_some()
    }

    fn outgoing(ev: Event) -> Outgoing {
        Outgoing {
            event: ev.event,
            ce_id: ev.ce_id,
            traceparent: ev.traceparent,
            payload: ev.payload,
        }
    }

    /// Fire-and-forget: `Ok` once a manager sidecar granted credit and the frame was written to it.
    pub async fn publish(&self, ev: Event, deadline: Instant) -> Result<(), SendError> {
        let pool = self.router.pool_of(&ev.event).ok_or(SendError::NoManager)?;
        self.router
            .publish(&pool, &Self::outgoing(ev), deadline)
            .await
            .map_err(SendError::Call)
    }

    /// Sends and waits for the reply until `deadline`.
    pub async fn request(&self, ev: Event, deadline: Instant) -> Result<Response, SendError> {
        let pool = self.router.pool_of(&ev.event).ok_or(SendError::NoManager)?;
        let mut times = CallTimes::default();
        self.router
            .call(&pool, &Self::outgoing(ev), deadline, &mut times)
            .await
            .map_err(SendError::Call)
    }
}

/// A new CloudEvents id: 128 random bits in hex, as the router's edge makes them.
pub fn new_ce_id() -> String {
    format!("{:032x}", fastrand::u128(..))
}
