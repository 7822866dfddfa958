//! Observer copies: a request's copy to its type's `requests` subscribers and the handler's answer
//! to its `responses` subscribers, sent beside the handler's path and never on it. Each copy is a
//! publish in a task of its own; at most [`MAX_UNDERWAY`] are underway per sidecar, and a copy
//! past that is shed and counted (`switchyard_observer_copies_total{outcome="shed"}`), so an
//! observer that is slow or gone costs the client's answer nothing. An observer at zero replicas is
//! activated; its copies wait for its first pod within [`COPY_DEADLINE`], inside that bound.
//!
//! Copies go to the observer's pods directly, also for a durable subscription: a copy is
//! best-effort by design (shed rather than slow the handler), and the Router's sidecars, which
//! send most of them, are not JetStream clients. A durable subscription keeps its `published`
//! events in its stream.

use super::ce_id::new_ce_id;
use crate::metrics::{EventLabel, Metrics, ObserverLabels};
use crate::upstream::subscribers::Sub;
use crate::upstream::{Outgoing, Upstream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::subscription::Observe;
use switchyard_protocol::frame::Response;
use tokio::sync::Semaphore;

/// Copies underway at once, per sidecar.
pub(crate) const MAX_UNDERWAY: usize = 1024;
/// How long a copy may take to be admitted by its observer (endpoint, credit, acknowledgement).
const COPY_DEADLINE: Duration = Duration::from_secs(10);

/// Header the app of an observer reads to tell a copy from an event it handles: `request` or
/// `response` (CloudEvents binary mode makes it the extension attribute `switchyardobserved`).
pub(crate) const OBSERVED: &str = "ce-switchyardobserved";
/// On a response copy: the ce-id of the request it answers.
pub(crate) const REQUEST_ID: &str = "ce-switchyardrequestid";
/// On a response copy: the handler's HTTP status.
pub(crate) const STATUS: &str = "ce-switchyardstatus";

/// The bound and the counters of one sidecar's observer copies.
pub(crate) struct Observers {
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Observers {
    /// Copies bounded by [`MAX_UNDERWAY`], counted in `metrics`.
    pub(crate) fn new(metrics: Arc<Metrics>) -> Observers {
        Observers {
            slots: Arc::new(Semaphore::new(MAX_UNDERWAY)),
            metrics,
        }
    }

    /// The `requests` subscribers of `out`, when it has any and its body is whole (a streamed
    /// request body is read once, by its handler: its observers are not sent a copy).
    pub(crate) fn of_request(&self, upstream: &Upstream, out: &Outgoing) -> Vec<Arc<Sub>> {
        if out.upload.is_some() {
            return Vec::new();
        }
        upstream.subscribers_of(out, Observe::Requests)
    }

    /// Sends `out`'s copy to each of `subs` (its `requests` subscribers).
    pub(crate) fn request(&self, upstream: &Arc<Upstream>, subs: Vec<Arc<Sub>>, out: &Outgoing) {
        for sub in subs {
            self.send(upstream, sub, "request", || {
                out.buffered_copy(vec![(OBSERVED.to_owned(), "request".to_owned())])
            });
        }
    }

    /// Sends the handler's answer `resp` to `request` to each of `subs` (its `responses`
    /// subscribers): the answer's body and content type, a ce-id of its own, and the request's
    /// ce-id and the status in extension attributes.
    pub(crate) fn response(
        &self,
        upstream: &Arc<Upstream>,
        subs: Vec<Arc<Sub>>,
        request: &Outgoing,
        resp: &Response,
    ) {
        for sub in subs {
            let copy = || Outgoing {
                event: request.event.clone(),
                ce_id: new_ce_id(),
                traceparent: request.traceparent.clone(),
                tracestate: request.tracestate.clone(),
                payload: resp.payload.clone(),
                content_type: Some(resp.content_type.clone()).filter(|c| !c.is_empty()),
                upload: None,
                headers: vec![
                    (OBSERVED.to_owned(), "response".to_owned()),
                    (REQUEST_ID.to_owned(), request.ce_id.clone()),
                    (STATUS.to_owned(), resp.status.to_string()),
                ],
            };
            self.send(upstream, sub, "response", copy);
        }
    }

    /// Sends the copy `make` builds to `sub` in a task of its own, or sheds it when
    /// [`MAX_UNDERWAY`] are underway: the slot is taken first, so a shed copy (every copy while an
    /// observer is stopped) costs the handler's path no copy of headers, no ce-id and no task.
    fn send(
        &self,
        upstream: &Arc<Upstream>,
        sub: Arc<Sub>,
        copy: &'static str,
        make: impl FnOnce() -> Outgoing,
    ) {
        let label = |outcome| ObserverLabels {
            subscription: EventLabel(sub.spec.key.clone()),
            copy,
            outcome,
        };
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.metrics
                .observer_copies
                .get_or_create(&label("shed"))
                .inc();
            tracing::debug!(subscription = %sub.spec.key, "observer copy shed: too many underway");
            return;
        };
        let out = make();
        let upstream = upstream.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let deadline = Instant::now() + COPY_DEADLINE;
            // An observer at zero replicas is activated and waited for, inside the copy's bound.
            let pool = upstream
                .ready_subscriber(&sub, &out.event, deadline)
                .await
                .unwrap_or_else(|| sub.pool.clone());
            let outcome = match upstream.publish(&pool, &out, deadline).await {
                Ok(ack) if ack.status == 202 && ack.from_mesh => "sent",
                Ok(ack) => {
                    tracing::debug!(subscription = %sub.spec.key, status = ack.status, "observer refused its copy");
                    "failed"
                }
                Err(e) => {
                    tracing::debug!(subscription = %sub.spec.key, error = ?e, "observer copy not delivered");
                    "failed"
                }
            };
            metrics
                .observer_copies
                .get_or_create(&ObserverLabels {
                    subscription: EventLabel(sub.spec.key.clone()),
                    copy,
                    outcome,
                })
                .inc();
        });
    }
}
