//! The app's Unix socket (`app.transport: unix`), pure: an `emptyDir` mounted in the sidecar and in
//! every app container at the same path, and that path in `SWITCHYARD_APP_SOCKET` on each of them,
//! so the app listens where the sidecar connects. The volume is the pod's own, so nothing outside
//! the pod reaches the socket.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PodSpec, Volume, VolumeMount,
};
use switchyard_protocol::config::{APP_SOCKET_DIR, APP_SOCKET_PATH};
use switchyard_protocol::env;

/// Name of the socket's volume; reserved in Manager templates.
pub(crate) const APP_SOCKET_VOLUME: &str = "switchyard-app-socket";

/// Adds the socket's volume to `pod` and its mount and path to `sidecar` and to every container
/// of `pod`. A path the template set for `SWITCHYARD_APP_SOCKET` is replaced: the sidecar only
/// knows this one.
pub(crate) fn apply(pod: &mut PodSpec, sidecar: &mut Container) {
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: APP_SOCKET_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    });
    for c in pod.containers.iter_mut().chain(std::iter::once(sidecar)) {
        c.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: APP_SOCKET_VOLUME.into(),
                mount_path: APP_SOCKET_DIR.into(),
                ..VolumeMount::default()
            });
        let vars = c.env.get_or_insert_with(Vec::new);
        vars.retain(|e| e.name != env::APP_SOCKET);
        vars.push(EnvVar {
            name: env::APP_SOCKET.into(),
            value: Some(APP_SOCKET_PATH.into()),
            ..EnvVar::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Container::default()
        }
    }

    fn socket_env(c: &Container) -> Vec<Option<String>> {
        c.env
            .iter()
            .flatten()
            .filter(|e| e.name == env::APP_SOCKET)
            .map(|e| e.value.clone())
            .collect()
    }

    #[test]
    fn the_sidecar_and_every_app_container_share_one_socket_path() {
        let mut app = container("app");
        app.env = Some(vec![EnvVar {
            name: env::APP_SOCKET.into(),
            value: Some("/tmp/elsewhere.sock".into()),
            ..EnvVar::default()
        }]);
        let mut pod = PodSpec {
            containers: vec![app, container("helper")],
            ..PodSpec::default()
        };
        let mut side = container("switchyard-sidecar");
        apply(&mut pod, &mut side);
        let volumes = pod.volumes.as_deref().unwrap_or_default();
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].name, APP_SOCKET_VOLUME);
        assert!(volumes[0].empty_dir.is_some(), "{:?}", volumes[0]);
        for c in pod.containers.iter().chain(std::iter::once(&side)) {
            assert_eq!(
                socket_env(c),
                vec![Some(APP_SOCKET_PATH.to_owned())],
                "{}",
                c.name
            );
            let mounts = c.volume_mounts.as_deref().unwrap_or_default();
            assert!(
                mounts
                    .iter()
                    .any(|m| m.name == APP_SOCKET_VOLUME && m.mount_path == APP_SOCKET_DIR),
                "{}: {mounts:?}",
                c.name
            );
        }
        assert!(APP_SOCKET_PATH.starts_with(APP_SOCKET_DIR));
    }
}
