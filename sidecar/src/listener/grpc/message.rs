//! One `Call` or `Connect` message, from checks to the manager's answer (or the mesh's refusal).

use crate::answer::Answer;
use crate::answer::grpc::code_name;
use crate::answer::http::app_status;
use crate::dispatch::{Clock, new_ce_id};
use crate::edge::{self, Rejection};
use crate::listener::Edge;
use crate::metrics::EventLabel;
use crate::net::stream::body::StreamBody;
use crate::otel::request::{Remote, RequestTrace};
use crate::routes::grpc::GrpcRoutes;
use crate::timing::StageTimes;
use crate::traceparent;
use crate::upstream::Outgoing;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// The app's answer.
pub(super) struct AppAnswer {
    pub(super) status: u16,
    pub(super) payload: Bytes,
    pub(super) content_type: String,
    /// The rest of a streamed answer, for a message that takes one ([`Message::streams`]).
    pub(super) stream: Option<StreamBody>,
}

/// What one message came to, and its stages.
pub(super) struct Outcome {
    pub(super) result: Result<AppAnswer, Answer>,
    pub(super) times: StageTimes,
}

/// One message as it arrived.
pub(super) struct Message<'a> {
    /// `Call` or `Connect`.
    pub(super) rpc: &'static str,
    pub(super) method: &'a str,
    pub(super) payload: Bytes,
    pub(super) traceparent: Option<&'a [u8]>,
    /// The checked tracestate that goes with it (`traceparent::tracestate`).
    pub(super) tracestate: &'a str,
    /// When it arrived.
    pub(super) start: Instant,
    /// The client's deadline, if it set one.
    pub(super) client_deadline: Option<Instant>,
    /// The answer may stay streaming (`CallStream`); else a streamed one is read whole.
    pub(super) streams: bool,
}

/// When the reply must be out for a client that allows `timeout`: a little early, so that the
/// answer (DEADLINE_EXCEEDED from here) reaches the client before its own timer fires.
pub(super) fn client_deadline(arrival: Instant, timeout: Duration) -> Instant {
    let margin = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
    arrival + timeout.saturating_sub(margin)
}

/// The HTTP-style payload detail, said of a payload rather than a body.
fn payload_detail(r: Rejection) -> String {
    match r.detail.strip_prefix("body") {
        Some(rest) => format!("payload{rest}"),
        None => r.detail,
    }
}

/// Checks, dispatches and answers one message; counts it and ends its span.
pub(super) async fn handle(edge: &Edge, routes: &GrpcRoutes, msg: Message<'_>) -> Outcome {
    let mut clock = Clock::new(msg.start);
    if let Some(otel) = &edge.otel {
        let remote = Remote {
            traceparent: msg.traceparent,
            tracestate: msg.tracestate,
        };
        clock.trace = Some(RequestTrace::grpc(otel, remote, msg.rpc, msg.method));
    }
    let (result, label) = process(edge, routes, msg, &mut clock).await;
    let times = clock.stages();
    let status = match &result {
        Ok(a) => a.status,
        Err(r) => r.status,
    };
    edge.metrics
        .observe(&label, status, times.total.as_secs_f64());
    if let Some(t) = clock.trace.take() {
        match &result {
            Ok(a) => t.finish_grpc("OK", Some(a.status), ""),
            Err(r) => t.finish_grpc(code_name(r.code), None, &r.detail),
        }
    }
    Outcome { result, times }
}

async fn process(
    edge: &Edge,
    routes: &GrpcRoutes,
    msg: Message<'_>,
    clock: &mut Clock,
) -> (Result<AppAnswer, Answer>, EventLabel) {
    let Some(route) = routes.get(msg.method) else {
        let r = Answer::refusal(404, format!("no gRPC route for method {}", msg.method));
        return (Err(r), edge.unmatched.clone());
    };
    let label = EventLabel(route.event.clone());
    let _underway = edge.metrics.arrive(&route.event);
    if let Some(t) = &clock.trace {
        t.matched(None, &route.event);
    }
    let mut deadline = clock.start + route.timeout;
    if let Some(d) = msg.client_deadline {
        deadline = deadline.min(d);
    }
    // An empty payload is the empty object, like an HTTP GET without parameters.
    let payload = if msg.payload.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        msg.payload
    };
    let checked = match &route.schema {
        None => edge::check_syntax(&payload),
        Some(schema) => edge::parse_json(&payload).and_then(|v| edge::check_schema(schema, &v)),
    };
    if let Err(r) = checked {
        return (Err(Answer::refusal(400, payload_detail(r))), label);
    }
    let out = Outgoing {
        headers: Vec::new(),
        upload: None,
        content_type: None,
        event: route.event.clone(),
        ce_id: new_ce_id(),
        traceparent: traceparent::extract_or_new(msg.traceparent),
        tracestate: msg.tracestate.to_owned(),
        payload,
    };
    let called = match msg.streams {
        true => edge
            .dispatch
            .call_streamed(out, deadline, clock)
            .await
            .map(|a| (a.head, a.body)),
        false => edge
            .dispatch
            .call(out, deadline, clock)
            .await
            .map(|r| (r, None)),
    };
    let answer = match called {
        Ok((resp, stream)) => Ok(AppAnswer {
            status: app_status(resp.status),
            payload: resp.payload,
            content_type: resp.content_type,
            stream,
        }),
        // The client's deadline (a little before its own) is what it waited for.
        Err(f) => Err(Answer::of(
            &f,
            &route.event,
            deadline.saturating_duration_since(clock.start),
        )),
    };
    (answer, label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_deadline_is_a_little_early() {
        let t0 = Instant::now();
        assert_eq!(
            client_deadline(t0, Duration::from_millis(500)),
            t0 + Duration::from_millis(450)
        );
        assert_eq!(
            client_deadline(t0, Duration::from_secs(10)),
            t0 + Duration::from_millis(9_900)
        );
        assert_eq!(client_deadline(t0, Duration::ZERO), t0);
    }

    #[test]
    fn payload_details_say_payload() {
        let r = Rejection {
            status: 400,
            detail: "body is not valid JSON at line 1 column 2: x".into(),
        };
        assert_eq!(
            payload_detail(r),
            "payload is not valid JSON at line 1 column 2: x"
        );
    }
}
