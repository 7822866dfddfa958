//! Workers: admit events into a bounded queue, deliver them with at most `maxInFlight` at once,
//! under a deadline, retrying 5xx and connection errors with backoff; CANCEL aborts a delivery.

pub use super::delivery::Delivery;
use super::delivery_http::Outcome;
use crate::backoff;
use crate::metrics::{EventLabel, EventLabels, Metrics};
use crate::otel::Otel;
use crate::otel::inbound::InboundTrace;
use crate::problem;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use switchyard_protocol::frame::{Request, Response};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Delivery settings, checked.
pub struct Settings {
    /// Concurrent deliveries.
    pub max_in_flight: usize,
    /// Events waiting for a worker.
    pub queue_capacity: usize,
    /// Deadline of one attempt.
    pub attempt_timeout: Duration,
    /// Attempts in all.
    pub attempts: u32,
    /// First retry wait.
    pub backoff: Duration,
    /// Longest retry wait.
    pub max_backoff: Duration,
    /// Whether a dead-letter event type is configured.
    pub dead_letter: bool,
}

/// The worker pool of one manager sidecar.
pub struct Worker {
    settings: Settings,
    /// Event types handled here, with their metric labels.
    events: HashMap<String, EventLabel>,
    slots: Semaphore,
    admitted: AtomicUsize,
    delivery: Delivery,
    metrics: Arc<Metrics>,
    otel: Option<Arc<Otel>>,
}

fn problem_response(id: u64, status: u16, detail: &str) -> Response {
    Response {
        id,
        status,
        queue_us: 0,
        app_us: 0,
        content_type: problem::CONTENT_TYPE.to_owned(),
        payload: problem::body(status, problem::title(status), detail),
    }
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Worker {
    /// A worker pool.
    pub fn new(
        settings: Settings,
        events: &[String],
        delivery: Delivery,
        metrics: Arc<Metrics>,
    ) -> Worker {
        let events = events
            .iter()
            .map(|e| (e.clone(), EventLabel(Arc::from(e.as_str()))))
            .collect();
        Worker {
            slots: Semaphore::new(settings.max_in_flight.min(Semaphore::MAX_PERMITS)),
            settings,
            events,
            admitted: AtomicUsize::new(0),
            delivery,
            metrics,
            otel: None,
        }
    }

    /// Records spans of every event (inbound, queue wait, delivery) when `otel` is set.
    pub fn with_tracing(mut self, otel: Option<Arc<Otel>>) -> Worker {
        self.otel = otel;
        self
    }

    /// Credits granted to each router connection: the queue capacity.
    pub fn credits(&self) -> u32 {
        u32::try_from(self.settings.queue_capacity).unwrap_or(u32::MAX)
    }

    /// Handles one event; `None` when it was cancelled (nothing is sent back but the credit).
    pub async fn handle(&self, ev: Request, cancel: CancellationToken) -> Option<Response> {
        let Some(otel) = &self.otel else {
            return self.handle_traced(ev, cancel, None).await;
        };
        let mut trace = InboundTrace::start(otel, &ev.event, &ev.ce_id, &ev.traceparent);
        let resp = self.handle_traced(ev, cancel, Some(&mut trace)).await;
        trace.finish(resp.as_ref().map(|r| r.status));
        resp
    }

    async fn handle_traced(
        &self,
        ev: Request,
        cancel: CancellationToken,
        trace: Option<&mut InboundTrace>,
    ) -> Option<Response> {
        let arrived = Instant::now();
        let Some(label) = self.events.get(&ev.event) else {
            let detail = format!("this Manager pod does not handle event type {:?}", ev.event);
            return Some(problem_response(ev.id, 502, &detail));
        };
        // Credits bound each router connection; this bounds the sum over all routers.
        let bound = self.settings.queue_capacity + self.settings.max_in_flight;
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= bound {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            self.metrics.shed.inc();
            return Some(problem_response(
                ev.id,
                503,
                "the Manager's queue is full; retry shortly",
            ));
        }
        let _admitted = Admitted(&self.admitted);
        let deadline = match ev.deadline_ms {
            0 => None,
            ms => Some(arrived + Duration::from_millis(ms.into())),
        };
        let started = Instant::now();
        let resp = self.deliver(&ev, label, deadline, &cancel, trace).await;
        let status = resp.as_ref().map_or(499, |r| r.status);
        self.metrics
            .observe(label, status, started.elapsed().as_secs_f64());
        resp
    }

    async fn deliver(
        &self,
        ev: &Request,
        label: &EventLabel,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
        mut trace: Option<&mut InboundTrace>,
    ) -> Option<Response> {
        let arrived = Instant::now();
        self.metrics.queued.inc();
        if let Some(t) = trace.as_deref_mut() {
            t.queue_start(&ev.event);
        }
        let permit = tokio::select! {
            p = self.slots.acquire() => p.ok(),
            _ = cancel.cancelled() => {
                self.metrics.queued.dec();
                return None;
            }
            _ = sleep_until(deadline) => None,
        };
        self.metrics.queued.dec();
        if let Some(t) = trace.as_deref_mut() {
            t.queue_end(permit.is_none().then_some("deadline"));
        }
        let queue_us = micros(arrived.elapsed());
        let Some(_permit) = permit else {
            let mut r = problem_response(
                ev.id,
                504,
                "the deadline passed while the event waited for a worker",
            );
            r.queue_us = queue_us;
            return Some(r);
        };
        self.metrics.in_flight.inc();
        let _in_flight = GaugeGuard(&self.metrics);
        let app_start = Instant::now();
        let outcome = match trace {
            None => self.with_retries(ev, label, deadline, cancel, None).await?,
            Some(t) => {
                // The app's traceparent is the delivery span's, so its spans hang under it.
                let traced = Request {
                    traceparent: t.deliver_start(&ev.event, &ev.ce_id, self.delivery.target()),
                    ..ev.clone()
                };
                let out = self
                    .with_retries(&traced, label, deadline, cancel, Some(&mut *t))
                    .await;
                t.deliver_end(match &out {
                    Some(Outcome::Answer { status, .. }) => Ok(*status),
                    Some(Outcome::Unreachable(_)) => Err("unreachable"),
                    Some(Outcome::TimedOut) => Err("timeout"),
                    Some(Outcome::Invalid(_)) => Err("invalid"),
                    None => Err("cancelled"),
                });
                out?
            }
        };
        let app_us = micros(app_start.elapsed());
        let mut resp = match outcome {
            Outcome::Answer {
                status,
                content_type,
                body,
            } => {
                if self.settings.dead_letter && retryable_status(status) {
                    self.dead_lettered(label);
                    problem_response(
                        ev.id,
                        502,
                        "the handler app failed every attempt; the event was not handled",
                    )
                } else {
                    // The app's own answer passes through, error statuses included: it is the app's reply.
                    Response {
                        id: ev.id,
                        status,
                        queue_us: 0,
                        app_us: 0,
                        content_type,
                        payload: body,
                    }
                }
            }
            Outcome::Unreachable(e) => {
                tracing::warn!(event = %ev.event, ce_id = %ev.ce_id, error = %e, "app unreachable");
                if self.settings.dead_letter {
                    self.dead_lettered(label);
                }
                problem_response(ev.id, 502, "the handler app is unreachable")
            }
            Outcome::TimedOut => {
                // The bound that fired: the attempt timeout, or the sender's deadline when sooner.
                let attempt_ms = self.settings.attempt_timeout.as_millis();
                let bound_ms = match u128::from(ev.deadline_ms) {
                    0 => attempt_ms,
                    d => d.min(attempt_ms),
                };
                problem_response(
                    ev.id,
                    504,
                    &format!("the handler app did not answer within {bound_ms} ms"),
                )
            }
            Outcome::Invalid(e) => problem_response(ev.id, 400, &e),
        };
        resp.queue_us = queue_us;
        resp.app_us = app_us;
        Some(resp)
    }

    /// Publishing to the dead-letter type needs the manager-to-router path of a later release;
    /// until then the event is answered 502 and counted.
    fn dead_lettered(&self, label: &EventLabel) {
        self.metrics
            .dead_letter_unrouted
            .get_or_create(&EventLabels {
                event: label.clone(),
            })
            .inc();
    }

    /// Attempts until an answer that is not retryable, attempts or time run out, or a cancel.
    async fn with_retries(
        &self,
        ev: &Request,
        label: &EventLabel,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
        mut trace: Option<&mut InboundTrace>,
    ) -> Option<Outcome> {
        let mut attempt = 0u32;
        loop {
            let mut per_attempt = self.settings.attempt_timeout;
            if let Some(d) = deadline {
                per_attempt = per_attempt.min(d.saturating_duration_since(Instant::now()));
                if per_attempt.is_zero() {
                    return Some(Outcome::TimedOut);
                }
            }
            let outcome = tokio::select! {
                o = self.delivery.attempt(ev, per_attempt) => o,
                _ = cancel.cancelled() => return None,
            };
            attempt += 1;
            let retryable = match &outcome {
                Outcome::Answer { status, .. } => retryable_status(*status),
                Outcome::Unreachable(_) => true,
                Outcome::TimedOut | Outcome::Invalid(_) => false,
            };
            if !retryable || attempt >= self.settings.attempts {
                return Some(outcome);
            }
            let wait = backoff::delay(
                self.settings.backoff,
                self.settings.max_backoff,
                attempt - 1,
                fastrand::f64(),
            );
            if deadline.is_some_and(|d| Instant::now() + wait >= d) {
                return Some(outcome);
            }
            self.metrics
                .retries
                .get_or_create(&EventLabels {
                    event: label.clone(),
                })
                .inc();
            if let Some(t) = trace.as_deref_mut() {
                let reason = match &outcome {
                    Outcome::Answer { status, .. } => status.to_string(),
                    _ => "unreachable".to_owned(),
                };
                t.retry(attempt, reason);
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }
}

/// 5xx except 501 (not implemented: retrying cannot help).
fn retryable_status(status: u16) -> bool {
    (500..=599).contains(&status) && status != 501
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct GaugeGuard<'a>(&'a Metrics);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}
