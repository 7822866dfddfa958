//! The app's own span per event, so a trace shows the handler under the manager sidecar's delivery
//! span. On only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (OTLP/gRPC, batch export); the service is
//! `OTEL_SERVICE_NAME`, by default `switchyard-example-app`.

use crate::trace::Trace;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::time::Duration;

/// The variable that turns the app's tracing on.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const DEFAULT_SERVICE: &str = "switchyard-example-app";

/// A running exporter.
#[derive(Clone, Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    /// Starts export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; must run inside the Tokio runtime.
    pub fn from_env() -> Result<Option<Tracing>, String> {
        let Some(endpoint) = std::env::var(ENDPOINT_ENV).ok().filter(|e| !e.is_empty()) else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("{ENDPOINT_ENV}={endpoint}: {e}"))?;
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE.to_owned());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        let tracer = provider.tracer("switchyard-example-app");
        Ok(Some(Tracing { provider, tracer }))
    }

    /// Opens the span of handling one event, child of the trace context it came with (its
    /// `tracestate` kept in the span's context, so it is carried onwards).
    pub fn handle(&self, ce_type: &str, trace: &Trace) -> EventSpan {
        let parent = if trace.parent.is_some() {
            TraceContextPropagator::new().extract(trace)
        } else {
            Context::new()
        };
        let span = self
            .tracer
            .span_builder(format!("handle {ce_type}"))
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("cloudevents.event_type", ce_type.to_owned())])
            .start_with_context(&self.tracer, &parent);
        EventSpan(parent.with_span(span))
    }

    /// Exports what is buffered and stops; blocking, so it runs on a blocking thread.
    pub async fn shutdown(self) {
        let provider = self.provider;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("switchyard-example-app: trace export did not flush: {e}"),
            Err(e) => eprintln!("switchyard-example-app: trace export shutdown failed: {e}"),
        }
    }
}

/// The open span of one event; ended by [`EventSpan::end`].
pub struct EventSpan(Context);

impl EventSpan {
    /// The trace context to send on (the relay's local-API call): this span as the parent, the
    /// `tracestate` it came with.
    pub fn trace(&self) -> Trace {
        let mut out = Trace::default();
        TraceContextPropagator::new().inject_context(&self.0, &mut out);
        out
    }

    /// Ends the span with the answer's status; 5xx marks it failed.
    pub fn end(self, status: u16) {
        let span = self.0.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            span.set_status(Status::error(format!("answered {status}")));
        }
        span.end();
    }
}
