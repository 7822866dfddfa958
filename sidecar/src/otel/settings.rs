//! What tracing export a sidecar runs with: the config's `tracing` block, the
//! `OTEL_EXPORTER_OTLP_ENDPOINT` override, and the resource attributes taken from the pod's env.
//!
//! Pure: the environment is passed in as a lookup function, so the rules are tested beside them.

use opentelemetry::KeyValue;
use opentelemetry_semantic_conventions::attribute::{K8S_NAMESPACE_NAME, K8S_POD_NAME};
use switchyard_crds::router::Tracing;

/// The env variable that points every sidecar at a collector, whatever the config says.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Checked export settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportSettings {
    /// OTLP/gRPC endpoint, `http://host:port` or `https://...`.
    pub endpoint: String,
    /// Fraction of root traces sampled, 0 to 1.
    pub sampling_ratio: f64,
}

/// A tracing setting that cannot be used; `field` names the config field at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// Config field (or env variable) at fault.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Export settings from the config's `tracing` block (at `field`) and the env; `None` is tracing off.
/// The env endpoint wins over the config's, and alone turns tracing on (sampling everything).
pub fn resolve(
    config: Option<&Tracing>,
    field: &'static str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<ExportSettings>, Invalid> {
    let from_env = env(ENDPOINT_ENV).filter(|v| !v.trim().is_empty());
    let (endpoint, endpoint_field) = match (&from_env, config) {
        (Some(e), _) => (e.trim().to_owned(), ENDPOINT_ENV),
        (None, Some(c)) => (c.otlp_endpoint.clone(), field),
        (None, None) => return Ok(None),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        || endpoint.len() <= "http://".len()
    {
        return Err(Invalid {
            field: endpoint_field,
            message: format!(
                "OTLP endpoint {endpoint:?} must be an http:// or https:// URL, e.g. http://otel-collector:4317"
            ),
        });
    }
    let sampling_ratio = config.map_or(1.0, |c| c.sampling_ratio);
    if !(0.0..=1.0).contains(&sampling_ratio) {
        return Err(Invalid {
            field,
            message: format!("samplingRatio {sampling_ratio} must be between 0 and 1"),
        });
    }
    Ok(Some(ExportSettings {
        endpoint,
        sampling_ratio,
    }))
}

/// Kubernetes resource attributes from the downward-API env variables, when present.
pub fn k8s_attributes(env: impl Fn(&str) -> Option<String>) -> Vec<KeyValue> {
    [
        ("POD_NAME", K8S_POD_NAME),
        ("POD_NAMESPACE", K8S_NAMESPACE_NAME),
    ]
    .into_iter()
    .filter_map(|(var, key)| {
        env(var)
            .filter(|v| !v.is_empty())
            .map(|v| KeyValue::new(key, v))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracing(endpoint: &str, ratio: f64) -> Tracing {
        Tracing {
            otlp_endpoint: endpoint.to_owned(),
            sampling_ratio: ratio,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn off_without_config_or_env() {
        assert_eq!(resolve(None, "spec.tracing", no_env), Ok(None));
        let empty = |_: &str| Some(" ".to_owned());
        assert_eq!(resolve(None, "spec.tracing", empty), Ok(None));
    }

    #[test]
    fn config_then_env_override() {
        let c = tracing("http://collector:4317", 0.25);
        let got = resolve(Some(&c), "spec.tracing", no_env).expect("ok");
        assert_eq!(
            got,
            Some(ExportSettings {
                endpoint: "http://collector:4317".into(),
                sampling_ratio: 0.25
            })
        );
        let env = |k: &str| (k == ENDPOINT_ENV).then(|| "http://other:4317".to_owned());
        let got = resolve(Some(&c), "spec.tracing", env).expect("ok");
        assert_eq!(
            got.map(|s| (s.endpoint, s.sampling_ratio)),
            Some(("http://other:4317".into(), 0.25))
        );
        let got = resolve(None, "tracing", env).expect("ok");
        assert_eq!(got.map(|s| s.sampling_ratio), Some(1.0));
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = resolve(
            Some(&tracing("collector:4317", 1.0)),
            "spec.tracing",
            no_env,
        )
        .expect_err("scheme");
        assert_eq!(e.field, "spec.tracing");
        assert!(e.message.contains("http://"), "{}", e.message);
        let e =
            resolve(Some(&tracing("http://c:4317", 1.5)), "tracing", no_env).expect_err("ratio");
        assert_eq!(e.field, "tracing");
        let env = |_: &str| Some("nope".to_owned());
        assert_eq!(
            resolve(None, "tracing", env).expect_err("env").field,
            ENDPOINT_ENV
        );
    }

    #[test]
    fn k8s_attributes_only_when_set() {
        assert!(k8s_attributes(no_env).is_empty());
        let env = |k: &str| match k {
            "POD_NAME" => Some("edge-7f9-abc".to_owned()),
            "POD_NAMESPACE" => Some(String::new()),
            _ => None,
        };
        let got = k8s_attributes(env);
        assert_eq!(got, vec![KeyValue::new(K8S_POD_NAME, "edge-7f9-abc")]);
    }
}
