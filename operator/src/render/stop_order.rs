//! How a manager pod stops without losing a request. The kubelet stops the app containers first and
//! the native sidecar after them, so the app gets a preStop hook, `GET /drain` on the sidecar's admin
//! port, which returns only once the sidecar has sent GOAWAY to its routers and finished every
//! delivery it accepted: the app is alive for all of them. The grace period leaves room for that
//! drain (the sidecar's limit, 30 s) and for both containers' own stop after it. Pure.

use k8s_openapi::api::core::v1::{HTTPGetAction, Lifecycle, LifecycleHandler, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use switchyard_protocol::ports;

/// Path of the sidecar's drain on its admin port.
pub const DRAIN_PATH: &str = "/drain";

/// The sidecars' drain limit (`sidecar::shutdown::DRAIN_LIMIT`), in seconds.
pub const SIDECAR_DRAIN_LIMIT_SECONDS: i64 = 30;

/// Grace period of pods whose template sets none: the drain plus the app's and the sidecar's own stop.
pub const TERMINATION_GRACE_SECONDS: i64 = SIDECAR_DRAIN_LIMIT_SECONDS + 15;

/// Gives every app container without a preStop hook the drain hook, and the pod a grace period above
/// the drain limit when its template has none. A user's own hook or grace period is kept.
pub fn wait_for_sidecar_drain(pod: &mut PodSpec) {
    pod.termination_grace_period_seconds
        .get_or_insert(TERMINATION_GRACE_SECONDS);
    for c in &mut pod.containers {
        let lifecycle = c.lifecycle.get_or_insert_with(Lifecycle::default);
        lifecycle.pre_stop.get_or_insert_with(drain_hook);
    }
}

/// The preStop hook that waits for the sidecar's drain. (By port number: a named port would be
/// looked up in the app container's own ports.)
pub fn drain_hook() -> LifecycleHandler {
    LifecycleHandler {
        http_get: Some(HTTPGetAction {
            path: Some(DRAIN_PATH.into()),
            port: IntOrString::Int(i32::from(ports::ADMIN)),
            ..HTTPGetAction::default()
        }),
        ..LifecycleHandler::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ExecAction};

    #[test]
    fn app_waits_for_the_drain_within_a_longer_grace_period() {
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        wait_for_sidecar_drain(&mut pod);
        assert_eq!(pod.termination_grace_period_seconds, Some(45));
        const { assert!(TERMINATION_GRACE_SECONDS > SIDECAR_DRAIN_LIMIT_SECONDS) };
        let hook = pod.containers[0]
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.http_get.as_ref())
            .expect("httpGet preStop");
        assert_eq!(hook.path.as_deref(), Some("/drain"));
        assert_eq!(hook.port, IntOrString::Int(9901));
    }

    #[test]
    fn keeps_the_users_hook_and_grace_period() {
        let own = LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["/bin/flush".into()]),
            }),
            ..LifecycleHandler::default()
        };
        let mut pod = PodSpec {
            termination_grace_period_seconds: Some(120),
            containers: vec![Container {
                name: "app".into(),
                lifecycle: Some(Lifecycle {
                    pre_stop: Some(own.clone()),
                    ..Lifecycle::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        wait_for_sidecar_drain(&mut pod);
        assert_eq!(pod.termination_grace_period_seconds, Some(120));
        assert_eq!(
            pod.containers[0]
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.clone()),
            Some(own)
        );
    }
}
