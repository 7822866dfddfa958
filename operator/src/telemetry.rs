//! Structured logging through `tracing`, and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the
//! operator's spans (one per reconcile, one per autoscaler decision) exported over OTLP/gRPC
//! through `tracing-opentelemetry`. Only this crate's spans are exported: kube-runtime's own are
//! logging detail, not trace structure. Log lines stay logs: the bridge would otherwise attach every
//! one written inside a span to it as a span event (OpenTelemetry now carries such records as logs,
//! not span events), and the spans would be exactly what `spans.rs` catalogs only until the next log
//! line.

use crate::settings::LogFormat;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_semantic_conventions::attribute as attr;
use tracing_subscriber::filter::{FilterExt as _, Targets, filter_fn};
use tracing_subscriber::{EnvFilter, Layer as _, fmt, prelude::*};

/// The variable that turns span export on (and names the collector).
pub(crate) const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Span export, flushed by [`Tracing::shutdown`].
pub struct Tracing(SdkTracerProvider);

impl Tracing {
    /// Exports what is buffered; blocking, so it runs on a blocking thread.
    pub async fn shutdown(self) {
        let provider = self.0;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "trace export did not flush"),
            Err(e) => tracing::warn!(error = %e, "trace export shutdown failed"),
        }
    }
}

/// The operator's resource, per the semantic conventions: `service.name` (`OTEL_SERVICE_NAME`, else
/// `switchyard-operator`), `k8s.namespace.name` and `k8s.pod.name` from the downward API, and
/// `service.instance.id` (`identity`, the Lease holder name: the pod name in a cluster). Pure.
pub(crate) fn resource_attributes(
    env: impl Fn(&str) -> Option<String>,
    identity: &str,
) -> (String, Vec<KeyValue>) {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let service = set("OTEL_SERVICE_NAME").unwrap_or_else(|| "switchyard-operator".to_owned());
    let mut attrs = vec![KeyValue::new(
        attr::SERVICE_INSTANCE_ID,
        identity.to_owned(),
    )];
    if let Some(ns) = set("POD_NAMESPACE") {
        attrs.push(KeyValue::new(attr::K8S_NAMESPACE_NAME, ns));
    }
    if let Some(pod) = set("POD_NAME") {
        attrs.push(KeyValue::new(attr::K8S_POD_NAME, pod));
    }
    attrs.push(KeyValue::new(
        attr::SERVICE_VERSION,
        env!("CARGO_PKG_VERSION"),
    ));
    (service, attrs)
}

/// Installs the global subscriber; an invalid filter is reported, not ignored. Span export starts
/// when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (inside the Tokio runtime, which the exporter uses).
pub fn init(filter: &str, format: LogFormat, identity: &str) -> anyhow::Result<Option<Tracing>> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("--log-level {filter:?}: {e}"))?;
    let endpoint = std::env::var(ENDPOINT_ENV)
        .ok()
        .filter(|e| !e.trim().is_empty());
    let (otel, provider) = match endpoint {
        None => (None, None),
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| anyhow::anyhow!("{ENDPOINT_ENV}={endpoint}: {e}"))?;
            let (service, attrs) = resource_attributes(|k| std::env::var(k).ok(), identity);
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    Resource::builder()
                        .with_service_name(service)
                        .with_attributes(attrs)
                        .build(),
                )
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("switchyard-operator"))
                .with_filter(
                    Targets::new()
                        .with_target("switchyard_operator", tracing::Level::INFO)
                        .and(filter_fn(|meta| meta.is_span())),
                );
            (Some(layer), Some(Tracing(provider)))
        }
    };
    let registry = tracing_subscriber::registry().with(otel).with(
        match format {
            LogFormat::Json => fmt::layer().json().flatten_event(true).boxed(),
            LogFormat::Text => {
                // Colour codes only for a terminal; in a log file they are noise.
                let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
                fmt::layer().with_ansi(ansi).boxed()
            }
        }
        .with_filter(filter),
    );
    registry.try_init()?;
    Ok(provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_the_pod_when_in_one() {
        let (service, attrs) = resource_attributes(|_| None, "host-42");
        assert_eq!(service, "switchyard-operator");
        assert_eq!(
            attrs[0],
            KeyValue::new(attr::SERVICE_INSTANCE_ID, "host-42")
        );
        let env = |k: &str| match k {
            "POD_NAMESPACE" => Some("switchyard-system".to_owned()),
            "POD_NAME" => Some("switchyard-7f9-abc".to_owned()),
            _ => None,
        };
        let (_, attrs) = resource_attributes(env, "switchyard-7f9-abc");
        assert!(attrs.contains(&KeyValue::new(
            attr::K8S_NAMESPACE_NAME,
            "switchyard-system"
        )));
        assert!(attrs.contains(&KeyValue::new(attr::K8S_POD_NAME, "switchyard-7f9-abc")));
    }
}
