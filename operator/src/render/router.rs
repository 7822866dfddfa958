//! Children of a Router: the router-role Deployment, its Service and the rendered config.

use super::RenderSettings;
use super::meta::{self, ROUTER};
use super::sidecar::{self, Role};
use crate::Error;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, PodTemplateSpec, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::collections::BTreeMap;
use switchyard_crds::{Manager, Router};
use switchyard_protocol::config::{self, Destination, RouterConfig, Subscriber};
use switchyard_protocol::durable::DurableRoute;
use switchyard_protocol::ports;

/// The desired children of one Router.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterChildren {
    /// The Router's own ServiceAccount, which its pods run as unless `podTemplate` names another.
    pub service_account: ServiceAccount,
    /// Rendered routing config.
    pub config_map: ConfigMap,
    /// Router pods.
    pub deployment: Deployment,
    /// Service in front of the router pods.
    pub service: Service,
    /// What may reach the router pods; `None` when `networkPolicy.enabled` is false.
    pub network_policy: Option<NetworkPolicy>,
}

/// The rendered config: the spec plus where each event type goes. `managers` are the Managers that
/// name this Router; when two claim one event type the first by name wins (validation reports it).
pub fn render_config(router: &Router, managers: &[Manager]) -> Result<RouterConfig, Error> {
    Ok(RouterConfig {
        name: router.name_any(),
        namespace: router
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?,
        spec: sidecar_spec(router),
        destinations: destinations(managers.iter()),
        subscribers: subscribers(managers.iter()),
        static_endpoints: BTreeMap::new(),
    })
}

/// The spec as the router sidecar reads it: without `service`, which only the operator reads, so
/// a change of the Service (a node port, an annotation) neither rolls the router pods nor reaches
/// a sidecar too old to know the field.
fn sidecar_spec(router: &Router) -> switchyard_crds::RouterSpec {
    switchyard_crds::RouterSpec {
        service: Default::default(),
        ..router.spec.clone()
    }
}

/// Where each event type goes, from the Managers that name a Router (the first by name wins a
/// contested type). Borrows the Managers: the control plane calls it from its shared cache.
pub(crate) fn destinations<'a>(
    managers: impl IntoIterator<Item = &'a Manager>,
) -> BTreeMap<switchyard_crds::EventType, Destination> {
    let mut sorted: Vec<&Manager> = managers.into_iter().collect();
    sorted.sort_by_key(|m| m.name_any());
    let mut destinations = BTreeMap::new();
    for m in sorted {
        let name = m.name_any();
        let per_type = m.spec.scaling.split == switchyard_crds::manager::Split::PerEventType;
        for event in &m.spec.events {
            let mut pod_selector = meta::selector(meta::MANAGER, &name);
            if per_type {
                pod_selector.insert(meta::EVENT_TYPE.into(), event.dns_fragment());
            }
            destinations
                .entry(event.clone())
                .or_insert_with(|| Destination {
                    manager: name.clone(),
                    service: super::names::manager_service(&name),
                    port: ports::MANAGER_INBOUND,
                    pod_selector,
                    durable: (m.spec.delivery_of(event)
                        == switchyard_crds::manager::DeliveryMode::Durable)
                        .then(|| durable_route(m)),
                    push: m.spec.push.clone(),
                });
        }
    }
    destinations
}

/// How publishers store events for Manager `m`'s stream: its ordering key and stream limits, the
/// same for its handled types and its durable subscriptions.
pub(crate) fn durable_route(m: &Manager) -> DurableRoute {
    DurableRoute {
        ordering_key: m.spec.workers.ordering_key.clone(),
        duplicate_window_ms: m.spec.durable.duplicate_window_ms(),
        max_bytes: m.spec.durable.max_bytes(),
    }
}

/// Who observes what, from the Managers that name a Router: one entry per subscription, keyed by
/// [`config::subscriber_key`], each sending to all pods of its Manager, or, for a durable
/// subscription, storing a copy in its Manager's stream (the route's `durable`).
pub(crate) fn subscribers<'a>(
    managers: impl IntoIterator<Item = &'a Manager>,
) -> BTreeMap<String, Subscriber> {
    let mut out = BTreeMap::new();
    for m in managers {
        let name = m.name_any();
        for s in &m.spec.subscriptions {
            let durable = (s.delivery == switchyard_crds::manager::DeliveryMode::Durable)
                .then(|| durable_route(m));
            out.insert(
                config::subscriber_key(&s.event, &name),
                Subscriber {
                    subscription: s.clone(),
                    destination: Destination {
                        manager: name.clone(),
                        service: super::names::manager_service(&name),
                        port: ports::MANAGER_INBOUND,
                        pod_selector: meta::selector(meta::MANAGER, &name),
                        durable,
                        push: m.spec.push.clone(),
                    },
                },
            );
        }
    }
    out
}

/// Builds every child of `router`.
pub fn build(
    router: &Router,
    managers: &[Manager],
    settings: &RenderSettings,
) -> Result<RouterChildren, Error> {
    let name = router.name_any();
    let labels = meta::labels(ROUTER, &name);
    let selector = meta::selector(ROUTER, &name);
    let rendered =
        serde_json::to_string_pretty(&render_config(router, managers)?).map_err(|e| {
            Error::Render {
                what: "router config".into(),
                message: e.to_string(),
            }
        })?;
    // Only the spec rolls the router pods. Destinations follow Managers coming and going; the sidecar
    // picks those up from the updated ConfigMap (and the operator's table stream) without a restart.
    let spec_json = serde_json::to_string(&sidecar_spec(router)).map_err(|e| Error::Render {
        what: "router spec".into(),
        message: e.to_string(),
    })?;
    let config_hash = meta::hash(&spec_json);

    let config_map = ConfigMap {
        metadata: meta::child_meta(
            router,
            super::names::router_config_map(&name),
            labels.clone(),
        )?,
        data: Some(
            [(config::FILE_NAME.to_owned(), rendered)]
                .into_iter()
                .chain(super::identity::trust_entry(settings))
                .collect(),
        ),
        ..ConfigMap::default()
    };

    let listeners = &router.spec.listeners;
    let mut serving = vec![("http", listeners.http.port)];
    if let Some(grpc) = &listeners.grpc {
        serving.push(("grpc", grpc.port));
    }
    let mut container = sidecar::container(
        settings,
        Role::Router,
        &serving,
        router.spec.resources.clone(),
        vec![],
    );
    // Secret names are part of the spec, so the config hash (and a rollout) follows a change of them.
    let (secret_volumes, secret_mounts) = super::secrets::volumes(&router.spec);
    container
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .extend(secret_mounts);
    let mut volumes = vec![sidecar::config_volume(&super::names::router_config_map(
        &name,
    ))];
    volumes.extend(secret_volumes);
    let mut identity_pod = PodSpec::default();
    super::identity::apply(settings, &mut identity_pod, &mut container);
    volumes.extend(identity_pod.volumes.unwrap_or_default());

    let overrides = router.spec.pod_template.clone().unwrap_or_default();
    let mut pod_labels = overrides.labels.clone();
    pod_labels.extend(selector.clone());
    let mut annotations = overrides.annotations.clone();
    annotations.insert(meta::CONFIG_HASH.into(), config_hash);

    super::stop_order::delay_router_stop(&mut container);
    let mut router_pod = PodSpec {
        containers: vec![container],
        volumes: Some(volumes),
        node_selector: non_empty(overrides.node_selector),
        tolerations: (!overrides.tolerations.is_empty()).then_some(overrides.tolerations),
        affinity: overrides.affinity,
        service_account_name: Some(super::service_account::of_router(router)),
        priority_class_name: overrides.priority_class_name,
        image_pull_secrets: (!overrides.image_pull_secrets.is_empty())
            .then_some(overrides.image_pull_secrets),
        // Serving on while the pod leaves the endpoints (the preStop delay), then the drain on
        // SIGTERM: the drain limit and the exit.
        termination_grace_period_seconds: Some(super::stop_order::ROUTER_TERMINATION_GRACE_SECONDS),
        // The router talks to no API server: only the projected identity token.
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    };
    super::pod_security::restrict(&mut router_pod);

    let mut deployment = Deployment {
        metadata: meta::child_meta(router, super::names::router_workload(&name), labels.clone())?,
        spec: Some(DeploymentSpec {
            replicas: Some(router.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            // Surge before removing: a router rollout never drops serving capacity.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::String("25%".into())),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(router_pod),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };

    sidecar::stamp_image(&mut deployment, &settings.sidecar_image);

    let service = super::router_service::build(
        router,
        super::names::router_workload(&name),
        labels,
        selector,
        &serving,
    )?;

    let network_policy = super::network_policy::router(router, &serving)?;
    Ok(RouterChildren {
        service_account: super::service_account::build(router, ROUTER)?,
        config_map,
        deployment,
        service,
        network_policy,
    })
}

fn non_empty(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}
