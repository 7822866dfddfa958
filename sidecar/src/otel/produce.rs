//! Spans of events that leave without a reply: a WebSocket session, and what a manager sidecar
//! sends on: an app's `publish` and `push` through the local API, and dead letters.
//!
//! A sent event's span is a PRODUCER span whose context travels in the frame's `traceparent`, so the
//! receiving manager's spans (or the routers' pushes) hang under it.

use super::request::{Remote, messaging};
use super::{Otel, context};
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_semantic_conventions::attribute as attr;

/// An open PRODUCER span.
#[derive(Debug)]
pub(crate) struct Produce(Context);

impl Produce {
    /// A `{op} {event}` span, child of `incoming` (the app's or the failed event's `traceparent`),
    /// and the `traceparent` the sent frame carries.
    pub(crate) fn start(
        otel: &Otel,
        incoming: Remote<'_>,
        op: &'static str,
        event: &str,
        ce_id: Option<&str>,
    ) -> (Produce, String) {
        let parent = context::remote_parent(incoming.traceparent, incoming.tracestate);
        let mut attrs = messaging(event, ce_id);
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_TYPE, "send"));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_NAME, op));
        let span = otel
            .tracer()
            .span_builder(format!("{op} {event}"))
            .with_kind(SpanKind::Producer)
            .with_attributes(attrs)
            .start_with_context(otel.tracer(), &parent);
        let cx = parent.with_span(span);
        let tp = context::traceparent_of(&cx);
        (Produce(cx), tp)
    }

    /// Ends the span: the status answered (202 for taken), or why the event was not sent.
    pub(crate) fn finish(self, outcome: Result<u16, &str>) {
        let span = self.0.span();
        match outcome {
            Ok(status) => span.set_attribute(KeyValue::new(
                "switchyard.response.status",
                i64::from(status),
            )),
            Err(why) => {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, why.to_owned()));
                span.set_status(Status::error(why.to_owned()));
            }
        }
        span.end();
    }
}

/// The span of a WebSocket session, from the upgrade to the close; each message's span links to it.
#[derive(Debug)]
pub(crate) struct Session(Context);

impl Session {
    /// A `WebSocket {path}` SERVER span, child of the upgrade request's `traceparent`.
    pub(crate) fn start(otel: &Otel, incoming: Remote<'_>, path: &str) -> Session {
        let parent = context::remote_parent(incoming.traceparent, incoming.tracestate);
        let span = otel
            .tracer()
            .span_builder(format!("WebSocket {path}"))
            .with_kind(SpanKind::Server)
            .with_attributes(vec![
                KeyValue::new(attr::NETWORK_PROTOCOL_NAME, "websocket"),
                KeyValue::new(attr::URL_PATH, path.to_owned()),
            ])
            .start_with_context(otel.tracer(), &parent);
        Session(parent.with_span(span))
    }

    /// What the messages' spans link to.
    pub(crate) fn span_context(&self) -> SpanContext {
        self.0.span().span_context().clone()
    }

    /// Ends the session's span with the number of messages it carried and how it closed.
    pub(crate) fn finish(self, messages: u64, close: &'static str) {
        let span = self.0.span();
        span.set_attribute(KeyValue::new(
            "switchyard.websocket.messages",
            messages as i64,
        ));
        span.set_attribute(KeyValue::new("switchyard.websocket.close", close));
        span.end();
    }
}
