//! The stage clock of one request: when each stage ended, turned into Server-Timing durations.

use crate::otel::request::RequestTrace;
use crate::timing::StageTimes;
use crate::upstream::CallTimes;
use std::time::{Duration, Instant};

/// Timestamps of one request's stages.
#[derive(Debug)]
pub(crate) struct Clock {
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
    /// A clock for a request that arrived at `start` and is traced by `trace` (when tracing is on).
    pub(crate) fn traced(start: Instant, trace: Option<RequestTrace>) -> Clock {
        Clock {
            trace,
            ..Clock::new(start)
        }
    }

    /// A clock for a request that arrived at `start`.
    pub(crate) fn new(start: Instant) -> Clock {
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
    pub(crate) fn stages(&self) -> StageTimes {
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
