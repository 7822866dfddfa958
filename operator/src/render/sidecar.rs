//! The sidecar container, in router or manager role.

use super::RenderSettings;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use switchyard_protocol::{config, env, ports};

/// Name of the sidecar container; reserved in Manager templates.
pub const CONTAINER: &str = "switchyard-sidecar";
/// Name of the config volume; reserved in Manager templates.
pub(crate) const CONFIG_VOLUME: &str = "switchyard-config";
/// Name of the sidecar's probe port.
pub(crate) const PROBE_PORT: &str = "probes";
/// Annotation of a mesh Deployment naming the sidecar image its pod template runs. The operator's
/// caches keep Deployments without their pod templates; this is how they still know it.
pub(crate) const IMAGE_ANNOTATION: &str = "switchyard.dev/sidecar-image";

/// Environment variable carrying the control-plane URL (the sidecar's `--control-plane`).
pub use switchyard_protocol::env::CONTROL_PLANE as CONTROL_PLANE_ENV;

/// Role of a sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Edge: listener, broker, router.
    Router,
    /// Inbound delivery and workers next to the app.
    Manager,
}

impl Role {
    fn arg(self) -> &'static str {
        match self {
            Role::Router => "router",
            Role::Manager => "manager",
        }
    }
}

/// The sidecar container. `ports` are the role's serving ports (name, port); the admin and probe
/// ports are added. The kubelet probes the probe port, which serves nothing else.
pub(crate) fn container(
    settings: &RenderSettings,
    role: Role,
    ports: &[(&str, i32)],
    resources: Option<ResourceRequirements>,
    extra_env: Vec<EnvVar>,
) -> Container {
    let mut container_ports: Vec<ContainerPort> = ports
        .iter()
        .map(|(name, port)| ContainerPort {
            name: Some((*name).to_owned()),
            container_port: *port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        })
        .collect();
    container_ports.push(ContainerPort {
        name: Some("admin".into()),
        container_port: i32::from(ports::ADMIN),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    });
    container_ports.push(ContainerPort {
        name: Some(PROBE_PORT.into()),
        container_port: i32::from(ports::PROBES),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    });
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(PROBE_PORT.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        ..Probe::default()
    };
    let mut env = vec![
        field_env(env::POD_NAME, "metadata.name"),
        field_env(env::POD_NAMESPACE, "metadata.namespace"),
    ];
    // An env var rather than an argument: both roles accept it, and a role that does not follow the
    // control plane yet ignores it instead of failing on an unknown flag.
    if let Some(url) = &settings.control_plane_url {
        env.push(EnvVar {
            name: CONTROL_PLANE_ENV.into(),
            value: Some(url.clone()),
            ..EnvVar::default()
        });
    }
    env.extend(extra_env);
    Container {
        name: CONTAINER.into(),
        image: Some(settings.sidecar_image.clone()),
        args: Some(vec![
            role.arg().into(),
            "--config".into(),
            format!("{}/{}", config::MOUNT_DIR, config::FILE_NAME),
            "--probe-addr".into(),
            format!("0.0.0.0:{}", ports::PROBES),
        ]),
        env: Some(env),
        ports: Some(container_ports),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(probe("/healthz")),
        resources: Some(resources.unwrap_or_else(default_resources)),
        volume_mounts: Some(vec![VolumeMount {
            name: CONFIG_VOLUME.into(),
            mount_path: config::MOUNT_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// The volume that mounts the rendered config.
pub(crate) fn config_volume(config_map: &str) -> Volume {
    Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_owned(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

// Requests sized for a sidecar at moderate load; the memory limit bounds a leak, not normal use.
fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("100m".into())),
            ("memory".into(), Quantity("32Mi".into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".into(),
            Quantity(crate::validate::memory::DEFAULT_LIMIT.into()),
        )])),
        ..ResourceRequirements::default()
    }
}

/// Sets the sidecar image of `deployment`'s pod template (the sidecar container, wherever the
/// template has it) and records it in [`IMAGE_ANNOTATION`].
pub(crate) fn stamp_image(deployment: &mut Deployment, image: &str) {
    deployment
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(IMAGE_ANNOTATION.to_owned(), image.to_owned());
    let Some(pod) = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    else {
        return;
    };
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for c in containers.filter(|c| c.name == CONTAINER) {
        c.image = Some(image.to_owned());
    }
}

/// The sidecar image a Deployment's annotation records (`None`: made before the annotation was).
pub(crate) fn stamped_image(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(IMAGE_ANNOTATION))
        .map(String::as_str)
}

/// The sidecar image `deployment` runs: its annotation, or for one made before the annotation
/// existed (by an older operator), its pod template's sidecar container.
pub(crate) fn running_image(deployment: &Deployment) -> Option<String> {
    if let Some(image) = stamped_image(&deployment.metadata) {
        return Some(image.to_owned());
    }
    let pod = deployment.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == CONTAINER)
        .and_then(|c| c.image.clone())
}
