//! Workers: admit events into a bounded queue, deliver them with at most `maxInFlight` at once,
//! under a deadline, retrying 5xx and connection errors with backoff; CANCEL aborts a delivery.
//! Optionally one at a time per ordering key, and with dead letters published when retries run out.

pub(crate) use super::delivery::Delivery;
use super::delivery::Outcome;
use super::ordering::{self, Lanes, Turn};
use crate::backoff;
use crate::durable::Store;
use crate::metrics::{EventLabel, EventLabels, Metrics};
use crate::net::budget::{ByteBudget, Held};
use crate::net::stream::body::StreamBody;
use crate::otel::Otel;
use crate::otel::inbound::InboundTrace;
use crate::otel::produce::Produce;
use crate::otel::request::Remote;
use crate::problem;
use crate::tap::{Seen, Taps, copy_fields, now_ms};
use crate::upstream::{Outgoing, Upstream};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};
use switchyard_protocol::frame::{Request, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

/// Delivery settings, checked.
pub(crate) struct Settings {
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
    /// Bytes of admitted events held at once (`switchyard_protocol::memory::manager_budgets`).
    pub admitted_bytes: usize,
}

/// How long publishing a dead letter may wait for an endpoint and credit.
const DEAD_LETTER_DEADLINE: Duration = Duration::from_secs(5);

/// Where events go whose delivery failed for good: published through the app's upstream.
struct DeadLetter {
    event: Arc<str>,
    upstream: Arc<Upstream>,
    /// The sidecar's JetStream servers: a durable dead-letter type goes to its stream.
    store: Option<Arc<Store>>,
}

/// Per-key ordering: the payload's JSON pointer and the lanes by key.
struct KeyOrder {
    pointer: String,
    lanes: Arc<Lanes>,
}

/// The event being delivered, its metric label and its deadline.
struct Job<'a> {
    ev: &'a Request,
    label: &'a EventLabel,
    deadline: Option<Instant>,
    /// The router takes streamed answers.
    streams: bool,
    /// The event's body, when it streams.
    upload: Option<StreamBody>,
}

/// How an event's bodies travel to and from the app.
struct Bodies {
    /// The answer may stream (the router takes streams).
    streams: bool,
    /// The request body, when it streams (taken by the first attempt).
    upload: Option<StreamBody>,
}

/// A delivered event's answer: its head (the whole answer, unless it streams) and the app's unread
/// body when it streams.
pub(crate) type Handled = (
    Response,
    Option<crate::manager::delivery::app_body::AppBody>,
);

/// An event's place in the ordering lanes, taken in arrival order by the connection's reader.
pub(crate) enum Place {
    /// No ordering key configured, or the event has no key value.
    Unordered,
    /// Its turn in the lane of its key.
    Turn(Turn),
    /// The lanes are full: refused with 503.
    Full,
}

/// An event admitted to this pod's queue by [`Worker::admit`]; [`Worker::handle`] delivers it.
pub(crate) struct Admission {
    place: Place,
    label: EventLabel,
    _underway: Option<crate::load::Underway>,
    _admitted: Admitted,
    /// The event's bytes in the pod's byte budget, given back when its delivery ends.
    _bytes: Held,
}

/// The worker pool of one manager sidecar.
pub(crate) struct Worker {
    settings: Settings,
    ordering: Option<KeyOrder>,
    dead_letter: Option<DeadLetter>,
    /// Event types handled here, with their metric labels.
    events: HashMap<String, EventLabel>,
    /// The Manager's subscriptions (type or pattern, and its label): events they cover are
    /// admitted as well as the handled types.
    subscribed: Vec<(String, EventLabel)>,
    /// The pod's worker slots, one budget for direct events and every durable lane (FIFO, so fair).
    slots: Arc<Semaphore>,
    admitted: Arc<AtomicUsize>,
    /// The bytes of admitted events, bounded below the container's memory limit.
    bytes: ByteBudget,
    delivery: Delivery,
    metrics: Arc<Metrics>,
    otel: Option<Arc<Otel>>,
    /// Open taps (`switchyard tap`), and the CloudEvents source this Manager gives its app.
    taps: Arc<Taps>,
    source: String,
}

fn problem_response(id: u64, status: u16, detail: &str) -> Response {
    Response {
        headers: Vec::new(),
        id,
        status,
        queue_us: 0,
        app_us: 0,
        content_type: problem::CONTENT_TYPE.to_owned(),
        payload: problem::body(status, problem::title(status), detail),
        returns_credit: false,
        from_mesh: true,
        more: false,
    }
}

/// The bytes an admitted event holds: its payload (a streamed body: one window of it at a time) and
/// its head. Its payload shares the frame's buffer, which is freed when the delivery drops it.
fn cost(ev: &Request, streamed: bool) -> usize {
    let head = ev.event.len()
        + ev.ce_id.len()
        + ev.traceparent.len()
        + ev.tracestate.len()
        + ev.content_type.len()
        + ev.headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    let body = match streamed {
        true => ev.payload.len() + crate::net::stream::WINDOW as usize,
        false => ev.payload.len(),
    };
    let overhead = usize::try_from(switchyard_protocol::memory::EVENT_OVERHEAD).unwrap_or(4096);
    body + head + overhead
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Worker {
    /// A worker pool.
    pub(crate) fn new(
        settings: Settings,
        events: &[String],
        delivery: Delivery,
        metrics: Arc<Metrics>,
    ) -> Worker {
        let events = events
            .iter()
            .map(|e| (e.clone(), EventLabel(Arc::from(e.as_str()))))
            .collect();
        let bytes = ByteBudget::new(settings.admitted_bytes);
        Worker {
            slots: Arc::new(Semaphore::new(
                settings.max_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            settings,
            ordering: None,
            dead_letter: None,
            events,
            subscribed: Vec::new(),
            admitted: Arc::default(),
            bytes,
            delivery,
            metrics,
            otel: None,
            taps: Taps::new("manager", Vec::new()),
            source: String::new(),
        }
    }

    /// Offers every delivered event to `taps`, naming `source` as the app's `ce-source` when the
    /// event carries none.
    pub(crate) fn with_taps(mut self, taps: Arc<Taps>, source: &str) -> Worker {
        self.taps = taps;
        source.clone_into(&mut self.source);
        self
    }

    /// Records spans of every event (inbound, queue wait, delivery) when `otel` is set.
    pub(crate) fn with_tracing(mut self, otel: Option<Arc<Otel>>) -> Worker {
        self.otel = otel;
        self
    }

    /// Admits the events `patterns` (the Manager's subscriptions: types, `prefix.*` or `*`) cover,
    /// beside the handled types; they are counted under their pattern.
    pub(crate) fn with_subscriptions(mut self, patterns: &[String]) -> Worker {
        self.subscribed = patterns
            .iter()
            .map(|p| (p.clone(), EventLabel(Arc::from(p.as_str()))))
            .collect();
        self
    }

    /// The label an event of type `event` is counted under, if this pod admits it.
    fn label_of(&self, event: &str) -> Option<&EventLabel> {
        self.events.get(event).or_else(|| {
            self.subscribed
                .iter()
                .find(|(p, _)| switchyard_crds::subscription::pattern_matches(p, event))
                .map(|(_, l)| l)
        })
    }

    /// Delivers events with the same value at JSON pointer `pointer` one at a time, in arrival order.
    pub(crate) fn with_ordering_key(mut self, pointer: String) -> Worker {
        let bound = self.settings.queue_capacity + self.settings.max_in_flight;
        self.ordering = Some(KeyOrder {
            pointer,
            lanes: Lanes::new(bound),
        });
        self
    }

    /// Publishes events whose delivery failed for good to `event` through `upstream` (or, when
    /// the table says `event` is durable, to its stream through `store`).
    pub(crate) fn with_dead_letter(
        mut self,
        event: &str,
        upstream: Arc<Upstream>,
        store: Option<Arc<Store>>,
    ) -> Worker {
        self.dead_letter = Some(DeadLetter {
            event: Arc::from(event),
            upstream,
            store,
        });
        self
    }

    /// The event's place in the ordering lanes. Call in arrival order, before [`Worker::admit`].
    fn place(&self, ev: &Request) -> Place {
        let Some(order) = &self.ordering else {
            return Place::Unordered;
        };
        match ordering::key_of(&ev.payload, &order.pointer) {
            None => Place::Unordered,
            Some(key) => match order.lanes.enter(key) {
                Ok(turn) => Place::Turn(turn),
                Err(ordering::Full) => Place::Full,
            },
        }
    }

    /// What this pod admits at once, over all its senders: the queue plus the events being
    /// delivered. The credits granted over all connections add up to this (`credit.rs`).
    pub(crate) fn capacity(&self) -> usize {
        self.settings.queue_capacity + self.settings.max_in_flight
    }

    /// Admits `ev` to the queue or refuses it, at once and in arrival order (the connection's reader
    /// calls it before the delivery task starts, so an acknowledgement means admitted). A refusal is
    /// the answer to send: 503 when the queue, the ordering lanes or the pod's byte budget are full,
    /// 502 for an event type this pod does not handle. `streamed`: its body follows in DATA frames,
    /// of which the pod holds one window at a time.
    pub(crate) fn admit(&self, ev: &Request, streamed: bool) -> Result<Admission, Response> {
        let Some(label) = self.label_of(&ev.event) else {
            let detail = format!("this Manager pod does not handle event type {:?}", ev.event);
            return Err(problem_response(ev.id, 502, &detail));
        };
        let underway = self.metrics.arrive(&label.0);
        // Bytes first: an event refused for them takes no place in a lane and no slot of the queue.
        let mut bytes = Held::default();
        if !self.bytes.grow(&mut bytes, cost(ev, streamed)) {
            self.metrics.shed_event(label);
            self.metrics.refuse_admission("bytes");
            let detail = format!(
                "the Manager pod holds {} of admitted events at most (its share of the sidecar's memory limit) and has no room for this one now; retry shortly",
                switchyard_protocol::memory::mib(self.bytes.total() as u64)
            );
            return Err(problem_response(ev.id, 503, &detail));
        }
        let place = self.place(ev);
        // Credits bound the sum over all senders; this holds it against a sender that ignores them.
        let lanes_full = matches!(place, Place::Full);
        if lanes_full || self.admitted.fetch_add(1, Ordering::AcqRel) >= self.capacity() {
            if !lanes_full {
                self.admitted.fetch_sub(1, Ordering::AcqRel);
            }
            self.metrics.shed_event(label);
            self.metrics
                .refuse_admission(if lanes_full { "lanes" } else { "queue" });
            return Err(problem_response(
                ev.id,
                503,
                "the Manager's queue is full; retry shortly",
            ));
        }
        Ok(Admission {
            place,
            label: label.clone(),
            _underway: underway,
            _admitted: Admitted(self.admitted.clone()),
            _bytes: bytes,
        })
    }

    /// Delivers one admitted event; `None` when it was cancelled. With `streams` (the router takes
    /// streamed answers) an app's streamed answer comes back as the head and its unread body.
    pub(crate) async fn handle(
        &self,
        ev: Request,
        admission: Admission,
        cancel: CancellationToken,
        streams: bool,
        upload: Option<StreamBody>,
    ) -> Option<Handled> {
        let Some(otel) = &self.otel else {
            return self
                .handle_traced(ev, admission, cancel, None, streams, upload)
                .await;
        };
        let mut trace =
            InboundTrace::start(otel, &ev.event, &ev.ce_id, &ev.traceparent, &ev.tracestate);
        let resp = self
            .handle_traced(ev, admission, cancel, Some(&mut trace), streams, upload)
            .await;
        trace.finish(resp.as_ref().map(|r| r.0.status));
        resp
    }

    async fn handle_traced(
        &self,
        ev: Request,
        admission: Admission,
        cancel: CancellationToken,
        trace: Option<&mut InboundTrace>,
        streams: bool,
        upload: Option<StreamBody>,
    ) -> Option<Handled> {
        let arrived = Instant::now();
        // The guards live until the delivery ends: the event counts as admitted and underway.
        let Admission {
            place,
            label,
            _underway,
            _admitted,
            _bytes,
        } = admission;
        let label = &label;
        let deadline = match ev.deadline_ms {
            0 => None,
            ms => Some(arrived + Duration::from_millis(ms.into())),
        };
        let started = Instant::now();
        let mut failed_for_good = None;
        let resp = self
            .deliver(
                Job {
                    ev: &ev,
                    label,
                    deadline,
                    streams,
                    upload,
                },
                place,
                &cancel,
                &mut failed_for_good,
                trace,
            )
            .await;
        let status = resp.as_ref().map_or(499, |r| r.0.status);
        self.metrics
            .observe(label, status, started.elapsed().as_secs_f64());
        if self.taps.watching() {
            self.tap(&ev, status, resp.as_ref().map(|r| &r.0), started);
        }
        if let Some(reason) = failed_for_good {
            // Boxed: rare, and its publish future would otherwise size (and be copied with) every
            // delivery's.
            Box::pin(self.dead_letter(&ev, label, reason)).await;
        }
        resp
    }

    /// Offers the delivery of `ev` to the open taps (only called while one is open).
    fn tap(&self, ev: &Request, status: u16, resp: Option<&Response>, started: Instant) {
        let total = started.elapsed();
        let times = crate::timing::StageTimes {
            queue: resp.map(|r| Duration::from_micros(r.queue_us.into())),
            app: resp.map(|r| Duration::from_micros(r.app_us.into())),
            total,
            ..Default::default()
        };
        let source = ev
            .headers
            .iter()
            .find(|(n, _)| n == "ce-source")
            .map_or_else(|| self.source.clone(), |(_, v)| v.clone());
        let wanted = self.taps.payload_wanted().min(ev.payload.len());
        self.taps.publish(&Seen {
            at_ms: now_ms().saturating_sub(total.as_millis() as u64),
            event: Arc::from(ev.event.as_str()),
            ce_id: ev.ce_id.clone(),
            source: Some(source),
            status,
            latency: total,
            server_timing: Some(times.header_value()),
            traceparent: ev.traceparent.clone(),
            headers: copy_fields(&ev.headers, self.taps.hidden()),
            payload: ev.payload.slice(..wanted),
            payload_len: ev.payload.len(),
            ..Seen::default()
        });
    }

    /// One event's delivery: wait for its turn and a worker → call the app (with retries) → make
    /// its answer. `None` when it was cancelled.
    async fn deliver(
        &self,
        job: Job<'_>,
        place: Place,
        cancel: &CancellationToken,
        failed_for_good: &mut Option<&'static str>,
        mut trace: Option<&mut InboundTrace>,
    ) -> Option<Handled> {
        let Job {
            ev,
            label,
            deadline,
            streams,
            upload,
        } = job;
        let mut bodies = Bodies { streams, upload };
        let arrived = Instant::now();
        // Held until the delivery ends, so the next event of the key waits for it.
        let mut turn = match place {
            Place::Turn(t) => Some(t),
            Place::Unordered | Place::Full => None,
        };
        let permit = self
            .queue(ev, turn.as_mut(), cancel, deadline, trace.as_deref_mut())
            .await?;
        let queue_us = micros(arrived.elapsed());
        let Some(_permit) = permit else {
            let mut r = problem_response(
                ev.id,
                504,
                "the deadline passed while the event waited for a worker",
            );
            r.queue_us = queue_us;
            return Some((r, None));
        };
        self.metrics.in_flight.inc();
        let _in_flight = GaugeGuard(&self.metrics);
        let app_start = Instant::now();
        let outcome = match trace {
            None => {
                self.with_retries(ev, label, deadline, cancel, None, &mut bodies)
                    .await?
            }
            Some(t) => {
                self.traced_with_retries(ev, label, deadline, cancel, t, &mut bodies)
                    .await?
            }
        };
        let app_us = micros(app_start.elapsed());
        let (mut resp, streamed) = self.answer_of(ev, outcome, failed_for_good);
        resp.queue_us = queue_us;
        resp.app_us = app_us;
        resp.more = streamed.is_some();
        Some((resp, streamed))
    }

    /// Waits in the queue for the event's turn in its lane (when ordered), then for a worker.
    /// `None` when cancelled while waiting; `Some(None)` when the deadline passed first.
    async fn queue(
        &self,
        ev: &Request,
        turn: Option<&mut Turn>,
        cancel: &CancellationToken,
        deadline: Option<Instant>,
        mut trace: Option<&mut InboundTrace>,
    ) -> Option<Option<SemaphorePermit<'_>>> {
        self.metrics.queued.inc();
        let waiting = self.metrics.wait(&ev.event);
        if let Some(t) = trace.as_deref_mut() {
            t.queue_start(&ev.event);
        }
        let in_turn = match turn {
            None => true,
            Some(t) => tokio::select! {
                _ = t.ready() => true,
                _ = cancel.cancelled() => {
                    self.metrics.queued.dec();
                    return None;
                }
                _ = sleep_until(deadline) => false,
            },
        };
        let permit = if !in_turn {
            None
        } else {
            tokio::select! {
            p = self.slots.acquire() => p.ok(),
            _ = cancel.cancelled() => {
                self.metrics.queued.dec();
                return None;
            }
            _ = sleep_until(deadline) => None,
            }
        };
        self.metrics.queued.dec();
        drop(waiting);
        if let Some(t) = trace {
            t.queue_end(permit.is_none().then_some("deadline"));
        }
        Some(permit)
    }

    /// [`Self::with_retries`] inside the delivery span: the app's traceparent is the span's, so
    /// its spans hang under it, and the span ends with the outcome.
    async fn traced_with_retries(
        &self,
        ev: &Request,
        label: &EventLabel,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
        t: &mut InboundTrace,
        bodies: &mut Bodies,
    ) -> Option<Outcome> {
        let traced = Request {
            traceparent: t.deliver_start(&ev.event, &ev.ce_id, self.delivery.target()),
            ..ev.clone()
        };
        let out = self
            .with_retries(&traced, label, deadline, cancel, Some(&mut *t), bodies)
            .await;
        t.deliver_end(match &out {
            Some(Outcome::Answer { status, .. }) => Ok(*status),
            Some(Outcome::Unreachable(_)) => Err("unreachable"),
            Some(Outcome::TimedOut) => Err("timeout"),
            Some(Outcome::Invalid(_)) => Err("invalid"),
            None => Err("cancelled"),
        });
        out
    }

    /// The answer to the sender from the delivery's outcome, with the app's streamed body when it
    /// streams; notes in `failed_for_good` why an event is to be dead-lettered.
    fn answer_of(
        &self,
        ev: &Request,
        outcome: Outcome,
        failed_for_good: &mut Option<&'static str>,
    ) -> Handled {
        match outcome {
            Outcome::Answer {
                status,
                content_type,
                headers,
                body,
                stream,
            } => {
                if self.settings.dead_letter && retryable_status(status) {
                    *failed_for_good = Some("the handler app failed every attempt");
                    let detail = "the handler app failed every attempt; the event was not handled";
                    return (problem_response(ev.id, 502, detail), None);
                }
                // The app's own answer passes through, error statuses included: it is the app's reply.
                let resp = Response {
                    headers,
                    id: ev.id,
                    status,
                    queue_us: 0,
                    app_us: 0,
                    content_type,
                    payload: body,
                    returns_credit: false,
                    from_mesh: false,
                    more: false,
                };
                (resp, stream)
            }
            Outcome::Unreachable(e) => {
                tracing::warn!(event = %ev.event, ce_id = %ev.ce_id, error = %e, "app unreachable");
                if self.settings.dead_letter {
                    *failed_for_good = Some("the handler app is unreachable");
                }
                (
                    problem_response(ev.id, 502, "the handler app is unreachable"),
                    None,
                )
            }
            Outcome::TimedOut => {
                // The bound that fired: the attempt timeout, or the sender's deadline when sooner.
                let bound = match ev.deadline_ms {
                    0 => self.settings.attempt_timeout,
                    d => Duration::from_millis(d.into()).min(self.settings.attempt_timeout),
                };
                let detail = format!(
                    "the handler app did not answer within {}",
                    crate::answer::duration(bound)
                );
                (problem_response(ev.id, 504, &detail), None)
            }
            Outcome::Invalid(e) => (problem_response(ev.id, 400, &e), None),
        }
    }

    /// Publishes the event that failed for good to the dead-letter type (same id, payload and
    /// traceparent). Only a failed publish is counted as unrouted, and logged: never silent.
    async fn dead_letter(&self, ev: &Request, label: &EventLabel, reason: &'static str) {
        let labels = EventLabels {
            event: label.clone(),
        };
        let Some(dl) = &self.dead_letter else {
            tracing::warn!(event = %ev.event, ce_id = %ev.ce_id, reason, "dead letter not published: no outbound path");
            self.metrics
                .dead_letter_unrouted
                .get_or_create(&labels)
                .inc();
            return;
        };
        // Traced, the dead letter is a PRODUCER span under the failed event's context.
        let (span, traceparent) = match &self.otel {
            Some(otel) => {
                let remote = Remote {
                    traceparent: Some(ev.traceparent.as_bytes()),
                    tracestate: &ev.tracestate,
                };
                let (span, tp) =
                    Produce::start(otel, remote, "dead-letter", &dl.event, Some(&ev.ce_id));
                (Some(span), tp)
            }
            None => (None, ev.traceparent.clone()),
        };
        let out = Outgoing {
            // A durable event's publisher (its `ce-source`) stays its dead letter's: the same
            // event, and its key stays in its publisher's scope.
            headers: ev
                .headers
                .iter()
                .filter(|(n, _)| n == crate::durable::header::SOURCE)
                .cloned()
                .collect(),
            upload: None,
            content_type: (!crate::edge::is_json_media_type(&ev.content_type))
                .then(|| ev.content_type.clone()),
            event: dl.event.clone(),
            ce_id: ev.ce_id.clone(),
            traceparent,
            tracestate: ev.tracestate.clone(),
            payload: ev.payload.clone(),
        };
        let deadline = Instant::now() + DEAD_LETTER_DEADLINE;
        // The same path as the app's publishes: a durable dead-letter type is kept in its stream.
        let published =
            crate::dispatch::publish_routed(&dl.upstream, dl.store.as_deref(), out, deadline)
                .await
                .map_err(|f| f.name().to_owned());
        if let Some(span) = span {
            span.finish(published.as_ref().map(|()| 202).map_err(String::as_str));
        }
        match published {
            Ok(()) => {
                tracing::info!(event = %ev.event, ce_id = %ev.ce_id, dead_letter = %dl.event, reason, "dead letter published");
                self.metrics
                    .dead_letter_published
                    .get_or_create(&labels)
                    .inc();
            }
            Err(e) => {
                tracing::warn!(event = %ev.event, ce_id = %ev.ce_id, dead_letter = %dl.event, reason, error = %e, "dead letter could not be published; the event is lost");
                self.metrics
                    .dead_letter_unrouted
                    .get_or_create(&labels)
                    .inc();
            }
        }
    }

    /// Attempts until an answer that is not retryable, attempts or time run out, or a cancel.
    async fn with_retries(
        &self,
        ev: &Request,
        label: &EventLabel,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
        mut trace: Option<&mut InboundTrace>,
        bodies: &mut Bodies,
    ) -> Option<Outcome> {
        // A streamed body is read once, by the first attempt: it is not retried.
        let attempts = if bodies.upload.is_some() {
            1
        } else {
            self.settings.attempts
        };
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
                o = self.delivery.attempt(ev, per_attempt, bodies.streams, bodies.upload.take()) => o,
                _ = cancel.cancelled() => return None,
            };
            attempt += 1;
            let retryable = match &outcome {
                Outcome::Answer { status, .. } => retryable_status(*status),
                Outcome::Unreachable(_) => true,
                Outcome::TimedOut | Outcome::Invalid(_) => false,
            };
            if !retryable || attempt >= attempts {
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

/// What one delivery attempt of a durable event came to (the stream redelivers; no retry loop here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempted {
    /// The app answered with a status that ends the event: acknowledged (2xx, and the app's final
    /// refusals such as 4xx and 501).
    Done(u16),
    /// A failure a later attempt may cure (5xx, unreachable, timed out): redelivered, or
    /// dead-lettered after the last attempt.
    Failed(&'static str),
    /// The event type is not handled here: the stream keeps it for a pod that does.
    NotHere,
}

impl Worker {
    /// A worker slot, in turn with every other waiter (direct events and durable lanes alike).
    /// `None` only if the slots were closed, which they never are.
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }

    /// A worker slot if one is free now (nobody waits for it).
    pub(crate) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// The pod's byte budget, which durable lanes reserve from before they pull (direct events
    /// take from it at admission).
    pub(crate) fn bytes(&self) -> &ByteBudget {
        &self.bytes
    }

    /// Counts an event waiting for a worker slot (`switchyard_queued`) while the guard lives.
    pub(crate) fn queued(&self) -> impl Drop + '_ {
        self.metrics.queued.inc();
        Queued(&self.metrics)
    }

    /// Counts a redelivery of a durable event (its delivery count above 1).
    pub(crate) fn redelivered(&self, event: &str) {
        if let Some(label) = self.label_of(event) {
            self.metrics
                .durable_redeliveries
                .get_or_create(&EventLabels {
                    event: label.clone(),
                })
                .inc();
        }
    }

    /// Counts how long a durable event waited in the stream before this pod received it: from
    /// `published` (the stream's clock) to now (this pod's); a clock behind the stream's counts 0.
    pub(crate) fn waited(&self, event: &str, published: SystemTime) {
        if let Some(label) = self.label_of(event) {
            let waited = SystemTime::now()
                .duration_since(published)
                .unwrap_or_default();
            self.metrics
                .durable
                .waited
                .get_or_create(&EventLabels {
                    event: label.clone(),
                })
                .observe(waited.as_secs_f64());
        }
    }

    /// One attempt at a durable event on the worker slot `_slot` (taken before the event was
    /// pulled): delivers within the attempt timeout and counts it like any delivery. Not cut short
    /// by a drain: the attempt is bounded by its timeout, and an attempt cut short would be
    /// redelivered to another pod while the app may still be acting on it.
    pub(crate) async fn attempt_durable(
        &self,
        ev: &Request,
        _slot: OwnedSemaphorePermit,
    ) -> Attempted {
        let Some(label) = self.label_of(&ev.event) else {
            return Attempted::NotHere;
        };
        let _underway = self.metrics.arrive(&ev.event);
        self.metrics.in_flight.inc();
        let _in_flight = GaugeGuard(&self.metrics);
        let started = Instant::now();
        // Traced as an inbound event is: its spans hang under the stored traceparent (the publish),
        // and the app gets the delivery span's context.
        let mut trace = self.otel.as_ref().map(|otel| {
            InboundTrace::start(otel, &ev.event, &ev.ce_id, &ev.traceparent, &ev.tracestate)
        });
        let traced;
        let ev = match trace.as_mut() {
            Some(t) => {
                traced = Request {
                    traceparent: t.deliver_start(&ev.event, &ev.ce_id, self.delivery.target()),
                    ..ev.clone()
                };
                &traced
            }
            None => ev,
        };
        // Nobody reads a durable event's answer: never streamed.
        let outcome = self
            .delivery
            .attempt(ev, self.settings.attempt_timeout, false, None)
            .await;
        if let Some(t) = trace.as_mut() {
            t.deliver_end(match &outcome {
                Outcome::Answer { status, .. } => Ok(*status),
                Outcome::Unreachable(_) => Err("unreachable"),
                Outcome::TimedOut => Err("timeout"),
                Outcome::Invalid(_) => Err("invalid"),
            });
        }
        let (status, attempted) = match outcome {
            Outcome::Answer { status, .. } if retryable_status(status) => {
                (status, Attempted::Failed("the handler app answered 5xx"))
            }
            Outcome::Answer { status, .. } => (status, Attempted::Done(status)),
            Outcome::Unreachable(_) => (502, Attempted::Failed("the handler app is unreachable")),
            Outcome::TimedOut => (
                504,
                Attempted::Failed("the handler app did not answer in time"),
            ),
            Outcome::Invalid(_) => (400, Attempted::Done(400)),
        };
        self.metrics
            .observe(label, status, started.elapsed().as_secs_f64());
        if let Some(t) = trace {
            t.finish(Some(status));
        }
        attempted
    }

    /// The wait before redelivering a durable event after its `attempt`-th failed delivery.
    pub(crate) fn redelivery_delay(&self, attempt: u32) -> Duration {
        backoff::delay(
            self.settings.backoff,
            self.settings.max_backoff,
            attempt.saturating_sub(1),
            fastrand::f64(),
        )
    }

    /// A durable event failed its last attempt: to the dead-letter type when one is set (counted
    /// either way, never silent).
    /// A subscription's copy counts under its pattern; an event of no type or subscription of this
    /// pod (a stream written by a newer or older config) is counted unrouted under its own type,
    /// never dropped silently.
    pub(crate) async fn dead_letter_durable(&self, ev: &Request, reason: &'static str) {
        let label = self
            .label_of(&ev.event)
            .cloned()
            .unwrap_or_else(|| EventLabel(Arc::from(ev.event.as_str())));
        self.dead_letter(ev, &label, reason).await;
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

/// An event admitted to the queue: counted until dropped.
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An event waiting for a worker slot: counted in `switchyard_queued` until dropped.
struct Queued<'a>(&'a Metrics);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queued.dec();
    }
}

struct GaugeGuard<'a>(&'a Metrics);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}
