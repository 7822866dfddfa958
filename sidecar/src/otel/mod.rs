//! OpenTelemetry: one span per hop, exported over OTLP/gRPC with a batch processor.
//!
//! The OpenTelemetry API is used directly rather than through `tracing` + `tracing-opentelemetry`:
//! spans exist only when a request is traced, so with tracing off the hot path pays one `Option`
//! check and allocates nothing, and span kinds, parents and start times stay explicit in the code
//! instead of riding on the `tracing` subscriber's current-span bookkeeping. Logs keep using
//! `tracing` (see `crate::telemetry`).

pub mod catalog;
pub(crate) mod context;
pub(crate) mod dropped;
pub(crate) mod inbound;
pub(crate) mod produce;
pub(crate) mod request;
pub(crate) mod settings;

use crate::config::ConfigError;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};
use settings::{ExportSettings, Identity};
use std::time::Duration;

/// Longest wait for the last spans to reach the collector at exit.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// Deadline of one export call.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// `messaging.system` of every span here.
pub(crate) const MESSAGING_SYSTEM: &str = "switchyard";

/// Which sidecar role exports (the `switchyard.role` resource attribute); defined with the metrics,
/// whose series both roles record carry it as `role`.
pub(crate) use crate::metrics::Role;

/// Tracing could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OtelError {
    /// The `tracing` block or the OTEL variables are unusable (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OTLP exporter could not be built for this endpoint.
    #[error("OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// The collector endpoint.
        endpoint: String,
        /// Why.
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// A random UUID (version 4), the `service.instance.id` of a process outside a pod.
fn random_uuid() -> String {
    let n = (fastrand::u128(..) & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A running exporter and the tracer that feeds it.
#[derive(Debug)]
pub(crate) struct Otel {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Add `trace;desc=<trace-id>` to `Server-Timing` (the timing middleware's `traceId`).
    pub trace_in_timing: bool,
}

impl Otel {
    /// Starts the OTLP exporter (its connection is made lazily, so a collector that is not up yet
    /// does not stop the sidecar). Must run inside the Tokio runtime, which the exporter uses.
    pub(crate) fn start(
        settings: &ExportSettings,
        role: Role,
        who: Identity<'_>,
    ) -> Result<Otel, OtelError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|source| OtelError::Exporter {
                endpoint: settings.endpoint.clone(),
                source,
            })?;
        let env = |k: &str| std::env::var(k).ok();
        let (service, mut attributes) = settings::resource_attributes(who, env, random_uuid);
        attributes.push(KeyValue::new(
            opentelemetry_semantic_conventions::attribute::SERVICE_VERSION,
            env!("CARGO_PKG_VERSION"),
        ));
        attributes.push(KeyValue::new("switchyard.role", role.name()));
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attributes(attributes)
            .build();
        // The queue bound is kept by `dropped::Bounded`, which counts what it refuses; the batch
        // processor's own queue is as large, so it never drops uncounted.
        let limit = settings::queue_limit(env);
        let queue = dropped::Queue::new(limit, crate::metrics::spans_dropped().clone());
        let batch = BatchSpanProcessor::builder(dropped::Draining::new(exporter, queue.clone()))
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(limit)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(dropped::Bounded::new(batch, queue))
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sampling_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("switchyard-sidecar");
        Ok(Otel {
            provider,
            tracer,
            trace_in_timing: true,
        })
    }

    /// The tracer spans are made with.
    pub(crate) fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is still buffered and stops the exporter; called once the role has drained.
    pub(crate) async fn shutdown(&self) {
        let provider = self.provider.clone();
        // The SDK's shutdown blocks until the batch thread is done: keep it off the async workers.
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_LIMIT)).await;
        match done {
            Ok(Ok(())) => tracing::info!("trace export flushed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "trace export did not flush"),
            Err(e) => tracing::warn!(error = %e, "trace export shutdown failed"),
        }
    }
}

/// Starts export when the config's `tracing` block (at `field` of `file`) or the env asks for it;
/// `who` is the Router or Manager the sidecar serves.
pub(crate) fn configure(
    config: Option<&switchyard_crds::router::Tracing>,
    field: &'static str,
    role: Role,
    who: Identity<'_>,
    file: &std::path::Path,
) -> Result<Option<Otel>, OtelError> {
    let resolved = settings::resolve(config, field, |k| std::env::var(k).ok())
        .map_err(|e| crate::config::field_error(file, e.field, e.message))?;
    let Some(s) = resolved else {
        return Ok(None);
    };
    let otel = Otel::start(&s, role, who)?;
    tracing::info!(endpoint = %s.endpoint, sampling_ratio = s.sampling_ratio, "exporting traces over OTLP");
    Ok(Some(otel))
}
