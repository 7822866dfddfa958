//! OpenTelemetry: one span per hop, exported over OTLP/gRPC with a batch processor.
//!
//! The OpenTelemetry API is used directly rather than through `tracing` + `tracing-opentelemetry`:
//! spans exist only when a request is traced, so with tracing off the hot path pays one `Option`
//! check and allocates nothing, and span kinds, parents and start times stay explicit in the code
//! instead of riding on the `tracing` subscriber's current-span bookkeeping. Logs keep using
//! `tracing` (see `crate::telemetry`).

pub(crate) mod context;
pub(crate) mod inbound;
pub(crate) mod request;
pub(crate) mod settings;

use crate::config::ConfigError;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use settings::ExportSettings;
use std::time::Duration;

/// Longest wait for the last spans to reach the collector at exit.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// Deadline of one export call.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// `messaging.system` of every span here.
pub const MESSAGING_SYSTEM: &str = "switchyard";

/// Which sidecar role exports: it names the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `switchyard-router`.
    Router,
    /// `switchyard-manager`.
    Manager,
}

impl Role {
    /// `service.name` of the role.
    pub fn service_name(self) -> &'static str {
        match self {
            Role::Router => "switchyard-router",
            Role::Manager => "switchyard-manager",
        }
    }
}

/// Tracing could not be started.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
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

/// A running exporter and the tracer that feeds it.
#[derive(Debug)]
pub struct Otel {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Add `trace;desc=<trace-id>` to `Server-Timing` (the timing middleware's `traceId`).
    pub trace_in_timing: bool,
}

impl Otel {
    /// Starts the OTLP exporter (its connection is made lazily, so a collector that is not up yet
    /// does not stop the sidecar). Must run inside the Tokio runtime, which the exporter uses.
    pub fn start(settings: &ExportSettings, role: Role) -> Result<Otel, OtelError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|source| OtelError::Exporter {
                endpoint: settings.endpoint.clone(),
                source,
            })?;
        let mut attributes = settings::k8s_attributes(|k| std::env::var(k).ok());
        attributes.push(KeyValue::new(
            opentelemetry_semantic_conventions::attribute::SERVICE_VERSION,
            env!("CARGO_PKG_VERSION"),
        ));
        let resource = Resource::builder()
            .with_service_name(role.service_name())
            .with_attributes(attributes)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
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
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is still buffered and stops the exporter; called once the role has drained.
    pub async fn shutdown(&self) {
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

/// Starts export when the config's `tracing` block (at `field` of `file`) or the env asks for it.
pub fn configure(
    config: Option<&switchyard_crds::router::Tracing>,
    field: &'static str,
    role: Role,
    file: &std::path::Path,
) -> Result<Option<Otel>, OtelError> {
    let resolved = settings::resolve(config, field, |k| std::env::var(k).ok())
        .map_err(|e| crate::config::field_error(file, e.field, e.message))?;
    let Some(s) = resolved else {
        return Ok(None);
    };
    let otel = Otel::start(&s, role)?;
    tracing::info!(endpoint = %s.endpoint, sampling_ratio = s.sampling_ratio, "exporting traces over OTLP");
    Ok(Some(otel))
}
