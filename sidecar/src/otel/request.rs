//! Spans of one request through the dispatch stage: the front door's SERVER span (child of the
//! client's `traceparent`, or a root), the broker's INTERNAL span, and the CLIENT span of the hop to
//! a manager, whose context travels in the frame's `traceparent`. The front door is the router's
//! HTTP, gRPC or WebSocket listener, or the manager's local API (an app's `request`).

use super::{MESSAGING_SYSTEM, Otel, context};
use opentelemetry::trace::{Link, SpanContext, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use opentelemetry_semantic_conventions::attribute as attr;
use std::time::SystemTime;

/// The gRPC service of the listener, as `rpc.method` prefixes it.
const GRPC_SERVICE: &str = "switchyard.v1.Gateway";

/// The W3C context a front door was given: the raw `traceparent` and the `tracestate` the mesh
/// carries with it (`crate::traceparent::tracestate`, empty when none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Remote<'a> {
    /// The `traceparent` header or metadata value, if any.
    pub traceparent: Option<&'a [u8]>,
    /// The checked `tracestate`.
    pub tracestate: &'a str,
}

impl Remote<'_> {
    /// No context: a new root.
    pub(crate) const NONE: Remote<'static> = Remote {
        traceparent: None,
        tracestate: "",
    };
}

/// The open spans of one traced request.
#[derive(Debug)]
pub(crate) struct RequestTrace {
    tracer: SdkTracer,
    listener: Context,
    broker: Option<Context>,
    send: Option<Context>,
    in_timing: bool,
}

impl RequestTrace {
    fn start(otel: &Otel, incoming: Remote<'_>, name: String, attrs: Vec<KeyValue>) -> Self {
        Self::start_linked(otel, incoming, name, attrs, Vec::new())
    }

    fn start_linked(
        otel: &Otel,
        incoming: Remote<'_>,
        name: String,
        attrs: Vec<KeyValue>,
        links: Vec<Link>,
    ) -> Self {
        let parent = context::remote_parent(incoming.traceparent, incoming.tracestate);
        let span = otel
            .tracer()
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attrs)
            .with_links(links)
            .start_with_context(otel.tracer(), &parent);
        RequestTrace {
            tracer: otel.tracer().clone(),
            listener: parent.with_span(span),
            broker: None,
            send: None,
            in_timing: otel.trace_in_timing,
        }
    }

    /// The listener span of an HTTP request; named `{method}` until its route is known.
    pub(crate) fn http(otel: &Otel, incoming: Remote<'_>, method: &str, path: &str) -> Self {
        let attrs = vec![
            KeyValue::new(attr::HTTP_REQUEST_METHOD, method.to_owned()),
            KeyValue::new(attr::URL_PATH, path.to_owned()),
        ];
        Self::start(otel, incoming, method.to_owned(), attrs)
    }

    /// The listener span of one gRPC message (`Call`, or one message of a `Connect` stream).
    pub(crate) fn grpc(otel: &Otel, incoming: Remote<'_>, rpc: &'static str, method: &str) -> Self {
        let full = format!("{GRPC_SERVICE}/{rpc}");
        let attrs = vec![
            KeyValue::new(attr::RPC_SYSTEM_NAME, "grpc"),
            KeyValue::new(attr::RPC_METHOD, full.clone()),
            KeyValue::new("switchyard.route.method", method.to_owned()),
        ];
        Self::start(otel, incoming, full, attrs)
    }

    /// The listener span of one WebSocket message: each message is a trace of its own (a session
    /// may last hours, too long for one trace), linked to its session's span.
    pub(crate) fn websocket(
        otel: &Otel,
        session: Option<&SpanContext>,
        path: &str,
        command: &str,
    ) -> Self {
        let attrs = vec![
            KeyValue::new(attr::NETWORK_PROTOCOL_NAME, "websocket"),
            KeyValue::new(attr::URL_PATH, path.to_owned()),
            KeyValue::new("switchyard.websocket.command", command.to_owned()),
        ];
        let links = session
            .filter(|s| s.is_valid())
            .map(|s| vec![Link::with_context(s.clone())])
            .unwrap_or_default();
        Self::start_linked(otel, Remote::NONE, format!("WS {command}"), attrs, links)
    }

    /// The local API's span of an app's `request` (child of the app's `traceparent`).
    pub(crate) fn local_request(otel: &Otel, incoming: Remote<'_>, event: &str) -> Self {
        let mut attrs = messaging(event, None);
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_TYPE, "send"));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_NAME, "request"));
        Self::start(otel, incoming, format!("request {event}"), attrs)
    }

    /// The request matched an HTTP route (`template`) or gRPC route mapping it to `event`.
    pub(crate) fn matched(&self, http_template: Option<(&str, &str)>, event: &str) {
        let span = self.listener.span();
        if let Some((method, template)) = http_template {
            span.update_name(format!("{method} {template}"));
            span.set_attribute(KeyValue::new(attr::HTTP_ROUTE, template.to_owned()));
        }
        span.set_attribute(KeyValue::new(
            attr::MESSAGING_DESTINATION_NAME,
            event.to_owned(),
        ));
    }

    /// The trace id, when `Server-Timing` should show it.
    pub(crate) fn timing_trace_id(&self) -> Option<u128> {
        self.in_timing.then(|| context::trace_id_of(&self.listener))
    }

    /// Opens the broker span (admission, endpoint choice, the call), child of the listener span.
    pub(crate) fn broker_start(&mut self, event: &str, at: SystemTime) {
        let span = self
            .tracer
            .span_builder(format!("broker {event}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(messaging(event, None))
            .start_with_context(&self.tracer, &self.listener);
        self.broker = Some(self.listener.with_span(span));
    }

    /// Opens the CLIENT span of the hop to a manager and returns its `traceparent` for the frame.
    pub(crate) fn send_start(&mut self, event: &str, ce_id: &str) -> String {
        let parent = self.broker.as_ref().unwrap_or(&self.listener);
        let mut attrs = messaging(event, Some(ce_id));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_TYPE, "send"));
        attrs.push(KeyValue::new(attr::MESSAGING_OPERATION_NAME, "send"));
        let span = self
            .tracer
            .span_builder(format!("send {event}"))
            .with_kind(SpanKind::Client)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, parent);
        let cx = parent.with_span(span);
        let tp = context::traceparent_of(&cx);
        self.send = Some(cx);
        tp
    }

    /// Ends the send and broker spans: the manager's answer status, or why there was none.
    pub(crate) fn routed(&mut self, outcome: Result<u16, &'static str>) {
        for cx in [self.send.take(), self.broker.take()].into_iter().flatten() {
            let span = cx.span();
            match outcome {
                Ok(status) => span.set_attribute(KeyValue::new(
                    "switchyard.response.status",
                    i64::from(status),
                )),
                Err(why) => {
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, why));
                    span.set_status(Status::error(why));
                }
            }
            span.end();
        }
    }

    /// Ends the HTTP listener span with the response status; 5xx is an error.
    pub(crate) fn finish_http(self, status: u16) {
        let span = self.listener.span();
        span.set_attribute(KeyValue::new(
            attr::HTTP_RESPONSE_STATUS_CODE,
            i64::from(status),
        ));
        if status >= 500 {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, status.to_string()));
            span.set_status(Status::error(format!("HTTP {status}")));
        }
        span.end();
    }

    /// Ends a WebSocket or local-API span with the reply's status; 5xx is an error.
    pub(crate) fn finish_status(self, status: u16) {
        let span = self.listener.span();
        span.set_attribute(KeyValue::new(
            "switchyard.response.status",
            i64::from(status),
        ));
        if status >= 500 {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, status.to_string()));
            span.set_status(Status::error(format!("status {status}")));
        }
        span.end();
    }

    /// Ends a gRPC listener span with the gRPC code name (`OK`, `UNAVAILABLE`, ...) and the app's
    /// status when it answered; server-side error codes are errors.
    pub(crate) fn finish_grpc(self, code: &'static str, app_status: Option<u16>, message: &str) {
        let span = self.listener.span();
        span.set_attribute(KeyValue::new(attr::RPC_RESPONSE_STATUS_CODE, code));
        if let Some(s) = app_status {
            span.set_attribute(KeyValue::new("switchyard.response.status", i64::from(s)));
        }
        // As the gRPC conventions say: these codes are the server's fault, the others the client's.
        if matches!(
            code,
            "UNKNOWN"
                | "DEADLINE_EXCEEDED"
                | "UNIMPLEMENTED"
                | "INTERNAL"
                | "UNAVAILABLE"
                | "DATA_LOSS"
        ) {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, code));
            span.set_status(Status::error(message.to_owned()));
        }
        span.end();
    }
}

/// The messaging attributes every hop span carries.
pub(super) fn messaging(event: &str, ce_id: Option<&str>) -> Vec<KeyValue> {
    let mut v = vec![
        KeyValue::new(attr::MESSAGING_SYSTEM, MESSAGING_SYSTEM),
        KeyValue::new(attr::MESSAGING_DESTINATION_NAME, event.to_owned()),
    ];
    if let Some(id) = ce_id {
        v.push(KeyValue::new(attr::MESSAGING_MESSAGE_ID, id.to_owned()));
    }
    v
}
