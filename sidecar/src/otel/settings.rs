//! What tracing export a sidecar runs with: the config's `tracing` block, the
//! `OTEL_EXPORTER_OTLP_ENDPOINT` override, the export queue's bound, and the resource attributes
//! (semantic conventions) taken from the Router or Manager and the pod's env.
//!
//! Pure: the environment is passed in as a lookup function, so the rules are tested beside them.

use opentelemetry::KeyValue;
use opentelemetry_semantic_conventions::attribute::{
    K8S_NAMESPACE_NAME, K8S_POD_NAME, SERVICE_INSTANCE_ID,
};
use switchyard_crds::router::Tracing;

/// The env variable that points every sidecar at a collector, whatever the config says.
pub(crate) const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Checked export settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExportSettings {
    /// OTLP/gRPC endpoint, `http://host:port` or `https://...`.
    pub endpoint: String,
    /// Fraction of root traces sampled, 0 to 1.
    pub sampling_ratio: f64,
}

/// A tracing setting that cannot be used; `field` names the config field at fault.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invalid {
    /// Config field (or env variable) at fault.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Export settings from the config's `tracing` block (at `field`) and the env; `None` is tracing off.
/// The env endpoint wins over the config's, and alone turns tracing on (sampling everything).
pub(crate) fn resolve(
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

/// The SDK's variable bounding the export queue (spans past it are dropped and counted).
pub(crate) const QUEUE_SIZE_ENV: &str = "OTEL_BSP_MAX_QUEUE_SIZE";
/// The SDK's default queue bound.
pub(crate) const DEFAULT_QUEUE_SIZE: usize = 2048;
/// The SDK's variable naming the service; it wins over the Router or Manager name.
pub(crate) const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// The sidecar's container name in the pods the operator renders (part of `service.instance.id`).
pub(crate) const CONTAINER: &str = "switchyard-sidecar";

/// The export queue's bound: `OTEL_BSP_MAX_QUEUE_SIZE` when it is a positive number, else the SDK's
/// default (as the SDK itself reads it).
pub(crate) fn queue_limit(env: impl Fn(&str) -> Option<String>) -> usize {
    env(QUEUE_SIZE_ENV)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_QUEUE_SIZE)
}

/// Who exports: the Router's or Manager's name and namespace (from the config).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Identity<'a> {
    /// Router or Manager name: the `service.name`.
    pub name: &'a str,
    /// Its namespace: `k8s.namespace.name` when the pod's env does not say.
    pub namespace: &'a str,
}

/// The resource of a sidecar, per the semantic conventions: `service.name` (the Router or Manager
/// name, unless `OTEL_SERVICE_NAME` is set), `k8s.namespace.name` (`POD_NAMESPACE`, else the
/// config's namespace), `k8s.pod.name` (`POD_NAME`, when set) and `service.instance.id`
/// (`<namespace>.<pod>.<container>` in a pod, as the conventions suggest for Kubernetes; else
/// `fallback_instance`, a random UUID per process).
pub(crate) fn resource_attributes(
    who: Identity<'_>,
    env: impl Fn(&str) -> Option<String>,
    fallback_instance: impl FnOnce() -> String,
) -> (String, Vec<KeyValue>) {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let service = set(SERVICE_NAME_ENV).unwrap_or_else(|| who.name.to_owned());
    let namespace = set("POD_NAMESPACE").unwrap_or_else(|| who.namespace.to_owned());
    let pod = set("POD_NAME");
    let instance = match &pod {
        Some(p) => format!("{namespace}.{p}.{CONTAINER}"),
        None => fallback_instance(),
    };
    let mut attrs = vec![KeyValue::new(K8S_NAMESPACE_NAME, namespace)];
    if let Some(p) = pod {
        attrs.push(KeyValue::new(K8S_POD_NAME, p));
    }
    attrs.push(KeyValue::new(SERVICE_INSTANCE_ID, instance));
    (service, attrs)
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
    fn resource_follows_the_conventions() {
        let who = Identity {
            name: "edge",
            namespace: "shop",
        };
        let (service, attrs) = resource_attributes(who, no_env, || "uuid-1".into());
        assert_eq!(service, "edge");
        assert_eq!(
            attrs,
            vec![
                KeyValue::new(K8S_NAMESPACE_NAME, "shop"),
                KeyValue::new(SERVICE_INSTANCE_ID, "uuid-1"),
            ]
        );
        let env = |k: &str| match k {
            "POD_NAME" => Some("edge-7f9-abc".to_owned()),
            "POD_NAMESPACE" => Some("shop-prod".to_owned()),
            "OTEL_SERVICE_NAME" => Some(" ".to_owned()),
            _ => None,
        };
        let (service, attrs) = resource_attributes(who, env, || unreachable!("in a pod"));
        assert_eq!(service, "edge");
        assert_eq!(
            attrs,
            vec![
                KeyValue::new(K8S_NAMESPACE_NAME, "shop-prod"),
                KeyValue::new(K8S_POD_NAME, "edge-7f9-abc"),
                KeyValue::new(
                    SERVICE_INSTANCE_ID,
                    "shop-prod.edge-7f9-abc.switchyard-sidecar"
                ),
            ]
        );
        let named = |k: &str| (k == SERVICE_NAME_ENV).then(|| "checkout".to_owned());
        assert_eq!(resource_attributes(who, named, String::new).0, "checkout");
    }

    #[test]
    fn queue_limit_from_env_or_default() {
        assert_eq!(queue_limit(no_env), DEFAULT_QUEUE_SIZE);
        let env = |v: &'static str| move |k: &str| (k == QUEUE_SIZE_ENV).then(|| v.to_owned());
        assert_eq!(queue_limit(env("16")), 16);
        assert_eq!(queue_limit(env("0")), DEFAULT_QUEUE_SIZE);
        assert_eq!(queue_limit(env("lots")), DEFAULT_QUEUE_SIZE);
    }
}
