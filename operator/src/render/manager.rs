//! Children of a Manager: one Deployment (or one per event type), a Service and the rendered config.

use super::RenderSettings;
use super::meta::{self, MANAGER};
use super::sidecar::{self, Role};
use crate::Error;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, EnvVar, PodTemplateSpec, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::collections::BTreeMap;
use switchyard_crds::manager::{AppTransport, Split};
use switchyard_crds::{EventType, Manager, Router};
use switchyard_protocol::config::{self, ManagerConfig};
use switchyard_protocol::durable::JetStreamConfig;
use switchyard_protocol::ports;

/// Environment variable telling a manager pod's sidecar which event types its Deployment serves.
pub(crate) use switchyard_protocol::env::EVENT_TYPES as EVENT_TYPES_ENV;
/// Environment variable telling the app where the sidecar's local API is.
pub(crate) use switchyard_protocol::env::LOCAL_API as LOCAL_API_ENV;

/// The desired children of one Manager.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerChildren {
    /// The Manager's own ServiceAccount, which its pods run as unless the template names another.
    pub service_account: ServiceAccount,
    /// Rendered manager-role config.
    pub config_map: ConfigMap,
    /// One Deployment (`split: shared`) or one per event type (`split: perEventType`).
    pub deployments: Vec<Deployment>,
    /// Service whose endpoints are all the Manager's pods.
    pub service: Service,
    /// What may reach the Manager's pods; `None` when its Router's `networkPolicy.enabled` is false.
    pub network_policy: Option<NetworkPolicy>,
}

/// The manager-role sidecar config of `manager`.
/// `router` is the Manager's Router as observed (`None` while it does not exist): its tracing settings
/// are the manager sidecars' too, so their spans join the router's traces. `jetstream` is where
/// durable event types are kept: given to every Manager's sidecars when the operator has it, since
/// any app may publish to another Manager's durable type (the control plane's route says which types
/// are; the sidecar connects only once it needs to), and required by a Manager with durable types.
pub fn render_config(
    manager: &Manager,
    router: Option<&Router>,
    jetstream: Option<&JetStreamConfig>,
) -> Result<ManagerConfig, Error> {
    let spec = &manager.spec;
    let durable_events = spec.durable_events();
    let jetstream = match (spec.consumes_durably(), jetstream) {
        (_, Some(js)) => Some(js.clone()),
        (false, None) => None,
        (true, None) => {
            return Err(Error::Render {
                what: "manager config".into(),
                message: format!(
                    "{} delivered durably but the operator has no JetStream server: set the chart's jetstream.enabled or jetstream.url (the operator's --jetstream-url), or delivery: direct",
                    durable_events
                        .iter()
                        .map(|e| format!("event type {e}"))
                        .chain(
                            spec.durable_subscriptions()
                                .map(|s| format!("subscription {}", s.event))
                        )
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    };
    Ok(ManagerConfig {
        name: manager.name_any(),
        namespace: manager
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?,
        router: spec.router_ref.name.clone(),
        events: spec.events.clone(),
        app: spec.app.clone(),
        workers: spec.workers.clone(),
        split: spec.scaling.split,
        destinations: Default::default(),
        subscribers: Default::default(),
        subscriptions: spec.subscriptions.clone(),
        push: spec.push.clone(),
        static_endpoints: Default::default(),
        tracing: router.and_then(|r| r.spec.tracing.clone()),
        allow_from: spec.allow_from.clone(),
        durable_events,
        jetstream,
        duplicate_window_ms: spec.durable.duplicate_window_ms(),
        max_bytes: spec.durable.max_bytes(),
    })
}

/// Replicas of the Deployment serving `events`: the Manager's, except with `perEventType` scaling,
/// where each type's Deployment takes the replicas the autoscaler recorded for it in status.
pub(crate) fn replicas_of(manager: &Manager, events: &[EventType]) -> i32 {
    let spec = &manager.spec;
    if !spec.scaling.enabled || spec.scaling.split != Split::PerEventType {
        return spec.replicas;
    }
    events
        .first()
        .and_then(|e| recorded_replicas(manager, e.as_str()))
        .unwrap_or(spec.replicas)
}

/// The replicas the autoscaler recorded in status for one event type's Deployment
/// (`perEventType`), if it recorded any.
pub(crate) fn recorded_replicas(manager: &Manager, event: &str) -> Option<i32> {
    manager
        .status
        .as_ref()?
        .events
        .iter()
        .find(|s| s.event == event)?
        .desired_replicas
}

/// Builds every child of `manager`.
pub fn build(
    manager: &Manager,
    router: Option<&Router>,
    settings: &RenderSettings,
) -> Result<ManagerChildren, Error> {
    let name = manager.name_any();
    let spec = &manager.spec;
    let labels = meta::labels(MANAGER, &name);
    let selector = meta::selector(MANAGER, &name);
    let rendered = serde_json::to_string_pretty(&render_config(
        manager,
        router,
        settings.jetstream.as_ref(),
    )?)
    .map_err(|e| Error::Render {
        what: "manager config".into(),
        message: e.to_string(),
    })?;
    let config_hash = meta::hash(&rendered);

    let config_map = ConfigMap {
        metadata: meta::child_meta(
            manager,
            super::names::manager_config_map(&name),
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

    // (Deployment name, extra selector labels, event types served)
    let groups: Vec<(String, BTreeMap<String, String>, Vec<EventType>)> = match spec.scaling.split {
        Split::Shared => vec![(
            super::names::manager_service(&name),
            BTreeMap::new(),
            spec.events.clone(),
        )],
        Split::PerEventType => spec
            .events
            .iter()
            .map(|e| {
                let extra = BTreeMap::from([(meta::EVENT_TYPE.to_owned(), e.dns_fragment())]);
                (
                    super::names::manager_per_type(&name, e),
                    extra,
                    vec![e.clone()],
                )
            })
            .collect(),
    };

    let deployments = groups
        .into_iter()
        .map(|(deploy_name, extra, events)| {
            let mut sel = selector.clone();
            sel.extend(extra);
            let mut dep_labels = labels.clone();
            dep_labels.extend(sel.clone());
            let mut deployment = Deployment {
                metadata: meta::child_meta(manager, deploy_name, dep_labels)?,
                spec: Some(DeploymentSpec {
                    replicas: Some(replicas_of(manager, &events)),
                    selector: LabelSelector {
                        match_labels: Some(sel.clone()),
                        ..LabelSelector::default()
                    },
                    template: pod_template(manager, settings, &sel, &config_hash, &events),
                    ..DeploymentSpec::default()
                }),
                ..Deployment::default()
            };
            sidecar::stamp_image(&mut deployment, &settings.sidecar_image);
            Ok(deployment)
        })
        .collect::<Result<Vec<_>, Error>>()?;

    let service = Service {
        metadata: meta::child_meta(manager, super::names::manager_service(&name), labels)?,
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("frames".into()),
                port: i32::from(ports::MANAGER_INBOUND),
                target_port: Some(IntOrString::String("frames".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    let network_policy = super::network_policy::manager(manager, router)?;
    Ok(ManagerChildren {
        service_account: super::service_account::build(manager, MANAGER)?,
        config_map,
        deployments,
        service,
        network_policy,
    })
}

/// The user's pod template plus the sidecar (a native sidecar: an init container with
/// `restartPolicy: Always`, so it is up before the app and does not keep Jobs alive).
fn pod_template(
    manager: &Manager,
    settings: &RenderSettings,
    selector: &BTreeMap<String, String>,
    config_hash: &str,
    events: &[EventType],
) -> PodTemplateSpec {
    let mut template = manager.spec.template.clone();
    let mut metadata = template.metadata.take().unwrap_or_default();
    // The user's metadata is kept, but name/namespace/ownership of a template are meaningless there.
    let mut labels = metadata.labels.take().unwrap_or_default();
    labels.extend(selector.clone());
    let mut annotations = metadata.annotations.take().unwrap_or_default();
    annotations.insert(meta::CONFIG_HASH.into(), config_hash.to_owned());
    let metadata = ObjectMeta {
        labels: Some(labels),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };

    let mut pod = template.spec.take().unwrap_or_default();
    let event_list = events
        .iter()
        .map(EventType::as_str)
        .collect::<Vec<_>>()
        .join(",");
    let mut side = sidecar::container(
        settings,
        Role::Manager,
        &[("frames", i32::from(ports::MANAGER_INBOUND))],
        manager.spec.sidecar.resources.clone(),
        vec![EnvVar {
            name: EVENT_TYPES_ENV.into(),
            value: Some(event_list),
            ..EnvVar::default()
        }],
    );
    side.restart_policy = Some("Always".into());
    if manager.spec.app.transport == AppTransport::Unix {
        super::app_socket::apply(&mut pod, &mut side);
    }
    super::identity::apply(settings, &mut pod, &mut side);
    super::identity::no_default_token(&mut pod);
    super::service_account::run_as(&mut pod, super::service_account::of_manager(manager));
    let mut init = vec![side];
    init.extend(pod.init_containers.take().unwrap_or_default());
    pod.init_containers = Some(init);

    let local_api = format!("http://127.0.0.1:{}", ports::MANAGER_LOCAL_API);
    for c in &mut pod.containers {
        let env = c.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e.name == LOCAL_API_ENV) {
            env.push(EnvVar {
                name: LOCAL_API_ENV.into(),
                value: Some(local_api.clone()),
                ..EnvVar::default()
            });
        }
    }
    pod.volumes
        .get_or_insert_with(Vec::new)
        .push(sidecar::config_volume(&super::names::manager_config_map(
            &manager.name_any(),
        )));
    super::stop_order::wait_for_sidecar_drain(&mut pod);
    super::pod_security::restrict(&mut pod);
    PodTemplateSpec {
        metadata: Some(metadata),
        spec: Some(pod),
    }
}
