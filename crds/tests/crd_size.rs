//! Every CRD can be applied by any tool: the JSON a client-side `kubectl apply`
//! copies into the `kubectl.kubernetes.io/last-applied-configuration` annotation, stays under the
//! 256 KiB the API server allows an object's annotations in total. And the pod template Manager
//! embeds lost only its descriptions on the way there, none of its validation.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use switchyard_crds::{Manager, crd};

/// `TotalAnnotationSizeLimitB` of the API server's object-meta validation: 256 KiB.
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

#[test]
fn every_crd_fits_a_client_side_apply() {
    let files = crd::all_yaml().expect("renders");
    assert_eq!(
        files.len(),
        2,
        "{:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (file, yaml) in files {
        // The bound is on the JSON below, not on this YAML: two thirds of the Manager's YAML is
        // indentation (198 of 303 KB once subscriptions' nested filters came), which neither the
        // annotation nor the API server ever sees.
        // What kubectl stores in the annotation: the object as compact JSON.
        let value: serde_json::Value =
            serde_saphyr::from_str(&yaml).expect("generated YAML parses");
        let json = serde_json::to_string(&value).expect("serializes");
        assert!(
            json.len() < ANNOTATIONS_LIMIT,
            "{file} is {} bytes as JSON, over the {ANNOTATIONS_LIMIT} a client-side `kubectl apply -f` \
             can carry in its last-applied annotation: trim what an embedded Kubernetes type carries \
             (see schema::pod_template_spec)",
            json.len()
        );
    }
}

/// The same pod template as Manager's, derived with kube's own schema settings but without the trim.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "test.switchyard.dev",
    version = "v1",
    kind = "Untrimmed",
    namespaced
)]
struct UntrimmedSpec {
    template: PodTemplateSpec,
}

/// `v` with every `description` key removed, at any depth (the pod template has no property of that
/// name, which `pod_template_keeps_every_validation` checks, so nothing else is removed).
fn without_descriptions(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(k, _)| k.as_str() != "description")
            .map(|(k, v)| (k.clone(), without_descriptions(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        serde_json::Value::Array(items) => items.iter().map(without_descriptions).collect(),
        other => other.clone(),
    }
}

fn template_schema(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> serde_json::Value {
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
    schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"].clone()
}

#[test]
fn pod_template_keeps_every_validation() {
    let full = template_schema(&Untrimmed::crd());
    let trimmed = template_schema(&Manager::crd());
    let full_text = full.to_string();
    assert!(
        !full_text.contains("\"description\":{\"type\""),
        "the pod template gained a property named `description`; compare it by hand"
    );
    // Every type, format, enum, `required` and `x-kubernetes-*` marker is still there...
    assert_eq!(
        without_descriptions(&trimmed),
        without_descriptions(&full),
        "Manager's spec.template schema differs from core/v1 PodTemplateSpec's in more than descriptions"
    );
    // ...some of which the operator relies on: a container is an object with a required name.
    let containers = &trimmed["properties"]["spec"]["properties"]["containers"];
    assert_eq!(containers["type"], "array", "{containers}");
    assert_eq!(
        containers["items"]["required"],
        serde_json::json!(["name"]),
        "{containers}"
    );
    assert_eq!(
        trimmed["properties"]["spec"]["required"],
        serde_json::json!(["containers"]),
        "{trimmed}"
    );
    // ...and the descriptions are gone below the field's own.
    assert!(
        trimmed["description"]
            .as_str()
            .is_some_and(|d| d.contains("kubectl explain pod.spec")),
        "{}",
        trimmed["description"]
    );
    let mut inner = trimmed.clone();
    inner.as_object_mut().expect("object").remove("description");
    assert!(
        !inner.to_string().contains("\"description\""),
        "a description is left inside spec.template"
    );
    assert!(
        full_text.len() > 4 * inner.to_string().len(),
        "the trim saves less than expected: {} -> {} bytes",
        full_text.len(),
        inner.to_string().len()
    );
}
