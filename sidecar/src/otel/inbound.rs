//! Spans of one event in the manager role: the SERVER span of the inbound event (child of the
//! frame's `traceparent`), the INTERNAL span of its wait for a worker, and the CLIENT span of the
//! delivery to the app, whose context goes to the app as `traceparent`. Retries are events on the
//! delivery span.

use super::request::messaging;
use super::{Otel, context};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use opentelemetry_semantic_conventions::attribute as attr;

/// The open spans of one traced event.
#[derive(Debug)]
pub(crate) struct InboundTrace {
    tracer: SdkTracer,
    inbound: Context,
    queue: Option<Context>,
    deliver: Option<Context>,
    retries: u32,
}

impl InboundTrace {
    /// Opens the inbound span of event `event` (`ce_id`) sent with `traceparent` and `tracestate`.
    pub(crate) fn start(
        otel: &Otel,
        event: &str,
        ce_id: &str,
        traceparent: &str,
        tracestate: &str,
    ) -> Self {
        let parent = context::remote_parent(Some(traceparent.as_bytes()), tracestate);
        let mut attrs = messaging(event, Some(ce_id));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_TYPE, "process"));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_NAME, "process"));
        let span = otel
            .tracer()
            .span_builder(format!("process {event}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attrs)
            .start_with_context(otel.tracer(), &parent);
        InboundTrace {
            tracer: otel.tracer().clone(),
            inbound: parent.with_span(span),
            queue: None,
            deliver: None,
            retries: 0,
        }
    }

    fn child(&self, name: String, kind: SpanKind, attrs: Vec<KeyValue>) -> Context {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &self.inbound);
        self.inbound.with_span(span)
    }

    /// The event starts waiting for a worker.
    pub(crate) fn queue_start(&mut self, event: &str) {
        self.queue = Some(self.child(
            format!("queue {event}"),
            SpanKind::Internal,
            messaging(event, None),
        ));
    }

    /// The wait ended: a worker took it, or `why` not.
    pub(crate) fn queue_end(&mut self, why_not: Option<&'static str>) {
        if let Some(cx) = self.queue.take() {
            if let Some(why) = why_not {
                cx.span()
                    .set_attribute(KeyValue::new(attr::ERROR_TYPE, why));
                cx.span().set_status(Status::error(why));
            }
            cx.span().end();
        }
    }

    /// Opens the delivery span and returns the `traceparent` the app gets.
    pub(crate) fn deliver_start(
        &mut self,
        event: &str,
        ce_id: &str,
        target: AppTarget<'_>,
    ) -> String {
        let mut attrs = messaging(event, Some(ce_id));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_NAME, "deliver"));
        match target {
            AppTarget::Http(path) => {
                attrs.push(KeyValue::new(attr::HTTP_REQUEST_METHOD, "POST"));
                attrs.push(KeyValue::new(attr::URL_PATH, path.to_owned()));
            }
            AppTarget::Grpc => {
                attrs.push(KeyValue::new(attr::RPC_SYSTEM_NAME, "grpc"));
                attrs.push(KeyValue::new(
                    attr::RPC_METHOD,
                    "switchyard.v1.Handler/Handle",
                ));
            }
        }
        let cx = self.child(format!("deliver {event}"), SpanKind::Client, attrs);
        let tp = context::traceparent_of(&cx);
        self.deliver = Some(cx);
        tp
    }

    /// Attempt `attempt` failed with `reason` and will be retried.
    pub(crate) fn retry(&mut self, attempt: u32, reason: String) {
        self.retries += 1;
        if let Some(cx) = &self.deliver {
            cx.span().add_event(
                "retry",
                vec![
                    KeyValue::new(attr::HTTP_REQUEST_RESEND_COUNT, i64::from(attempt)),
                    KeyValue::new(attr::ERROR_TYPE, reason),
                ],
            );
        }
    }

    /// Ends the delivery span: the app's last status, or why it gave none.
    pub(crate) fn deliver_end(&mut self, outcome: Result<u16, &str>) {
        let Some(cx) = self.deliver.take() else {
            return;
        };
        let span = cx.span();
        span.set_attribute(KeyValue::new(
            "switchyard.delivery.attempts",
            i64::from(self.retries) + 1,
        ));
        match outcome {
            Ok(status) => {
                span.set_attribute(KeyValue::new(
                    attr::HTTP_RESPONSE_STATUS_CODE,
                    i64::from(status),
                ));
                // The app's 4xx is its answer to a bad event; only its failures mark the span.
                if status >= 500 {
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, status.to_string()));
                    span.set_status(Status::error(format!("app answered {status}")));
                }
            }
            Err(why) => {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, why.to_owned()));
                span.set_status(Status::error(why.to_owned()));
            }
        }
        span.end();
    }

    /// Ends the inbound span with the status sent back (`None`: cancelled by the router).
    pub(crate) fn finish(mut self, status: Option<u16>) {
        self.queue_end(None);
        if let Some(cx) = self.deliver.take() {
            cx.span().end();
        }
        let span = self.inbound.span();
        match status {
            Some(s) => {
                span.set_attribute(KeyValue::new("switchyard.response.status", i64::from(s)));
                if s >= 500 {
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, s.to_string()));
                    span.set_status(Status::error(format!("answered {s}")));
                }
            }
            None => {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, "cancelled"));
                span.set_status(Status::error("cancelled by the router"));
            }
        }
        span.end();
    }
}

/// Where the app delivery span points: an HTTP path or the gRPC Handler service.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AppTarget<'a> {
    /// CloudEvents HTTP binary mode to this path.
    Http(&'a str),
    /// `switchyard.v1.Handler/Handle`.
    Grpc,
}
