//! Sending a checked event through the broker and the router to a manager, and the stage clock of one
//! request: what every listener does once a request has become an event.
//!
//! Both the HTTP and the gRPC listener end here, so their stage timing and shedding agree.

use crate::listener::Edge;
use crate::otel::request::RequestTrace;
use crate::router::{CallError, CallTimes, Outgoing};
use crate::timing::StageTimes;
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use switchyard_protocol::frame::Response;

/// Timestamps of one request's stages.
#[derive(Debug)]
pub struct Clock {
    /// When the request arrived.
    pub start: Instant,
    /// When the edge checks ended.
    pub checked: Option<Instant>,
    /// When the broker admitted it.
    pub admitted: Option<Instant>,
    /// The router's timestamps.
    pub call: CallTimes,
    /// When the router call ended.
    pub call_end: Option<Instant>,
    /// The manager's queue time.
    pub queue: Duration,
    /// The app's time.
    pub app: Duration,
    /// The request's spans, when tracing is on.
    pub trace: Option<RequestTrace>,
}

impl Clock {
    /// A clock for a request that arrived at `start`.
    pub fn new(start: Instant) -> Clock {
        Clock {
            start,
            checked: None,
            admitted: None,
            call: CallTimes::default(),
            call_end: None,
            queue: Duration::ZERO,
            app: Duration::ZERO,
            trace: None,
        }
    }

    /// Stage durations up to now; `listener` is the remainder, so the stages add up to the total.
    pub fn stages(&self) -> StageTimes {
        let end = Instant::now();
        let total = end - self.start;
        let mut t = StageTimes {
            total,
            trace_id: self.trace.as_ref().and_then(RequestTrace::timing_trace_id),
            ..StageTimes::default()
        };
        if let (Some(checked), Some(admitted)) = (self.checked, self.admitted) {
            t.broker = Some(admitted - checked + self.call.credit_wait);
            if let Some(call_end) = self.call_end {
                let routed_until = self.call.sent.unwrap_or(call_end);
                t.router = Some((routed_until - admitted).saturating_sub(self.call.credit_wait));
                match (self.call.sent, self.call.received) {
                    (Some(sent), Some(received)) => {
                        t.set_round_trip(received - sent, self.queue, self.app)
                    }
                    (Some(sent), None) => t.net = Some(call_end - sent),
                    _ => {}
                }
            }
        } else if let Some(checked) = self.checked {
            // Shed at the broker: everything after the checks was the broker's refusal.
            t.broker = Some(end - checked);
        }
        let accounted: Duration = [t.broker, t.router, t.net, t.queue, t.app]
            .into_iter()
            .flatten()
            .sum();
        t.listener = Some(total.saturating_sub(accounted));
        t
    }
}

/// Why an event got no answer from a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The broker's bound is reached: shed at once (HTTP 503).
    Shed,
    /// No Manager handles the event type (HTTP 503).
    NoManager,
    /// The router could not get an answer.
    Call(CallError),
}

impl Failure {
    /// A short name for spans (`error.type`).
    pub fn name(&self) -> &'static str {
        match self {
            Failure::Shed => "shed",
            Failure::NoManager => "no_manager",
            Failure::Call(CallError::NoEndpoint) => "no_endpoint",
            Failure::Call(CallError::NoCredit) => "no_credit",
            Failure::Call(CallError::Timeout) => "timeout",
            Failure::Call(CallError::Lost) => "lost",
        }
    }
}

/// Admits the event at the broker, sends it to a manager of its type and waits for the answer until
/// `deadline`. Records the stage timestamps in `clock` (`checked` is taken on entry), and the broker
/// and send spans when the request is traced.
pub async fn dispatch(
    edge: &Edge,
    event: &Arc<str>,
    payload: Bytes,
    traceparent: String,
    deadline: Instant,
    clock: &mut Clock,
) -> Result<Response, Failure> {
    clock.checked = Some(Instant::now());
    if let Some(t) = clock.trace.as_mut() {
        t.broker_start(event, SystemTime::now());
    }
    let result = route(edge, event, payload, traceparent, deadline, clock).await;
    if let Some(t) = clock.trace.as_mut() {
        t.routed(result.as_ref().map(|r| r.status).map_err(Failure::name));
    }
    result
}

async fn route(
    edge: &Edge,
    event: &Arc<str>,
    payload: Bytes,
    traceparent: String,
    deadline: Instant,
    clock: &mut Clock,
) -> Result<Response, Failure> {
    let Some(_admitted) = edge.broker.admit() else {
        return Err(Failure::Shed);
    };
    clock.admitted = Some(Instant::now());
    // Waits (within the deadline) for an endpoint when the event type has none ready and the router
    // can ask the operator for one (scale from zero); the broker's admission bounds these waits.
    let Some(pool) = edge.router.ready_pool(event, deadline).await else {
        clock.call_end = clock.admitted;
        return Err(Failure::NoManager);
    };
    let ce_id = format!("{:032x}", fastrand::u128(..));
    // Traced: the manager's spans hang under the send span, so its context is what travels.
    let traceparent = match clock.trace.as_mut() {
        Some(t) => t.send_start(event, &ce_id),
        None => traceparent,
    };
    let out = Outgoing {
        event: event.clone(),
        ce_id,
        traceparent,
        payload,
    };
    let result = edge
        .router
        .call(&pool, &out, deadline, &mut clock.call)
        .await;
    clock.call_end = Some(Instant::now());
    let resp = result.map_err(Failure::Call)?;
    clock.queue = Duration::from_micros(resp.queue_us.into());
    clock.app = Duration::from_micros(resp.app_us.into());
    Ok(resp)
}
