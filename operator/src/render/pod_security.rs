//! Pod Security `restricted` by default: every pod the operator makes is admitted in a namespace
//! that enforces it. Only fields the user left unset are filled; a user who needs otherwise (an app
//! image that must run as root, say) sets the field and gets what they set. Pure.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// Fills the pod-level securityContext (`runAsNonRoot`, seccomp `RuntimeDefault`) and, on every
/// container and init container, `allowPrivilegeEscalation: false` and `capabilities.drop: [ALL]`.
pub(crate) fn restrict(pod: &mut PodSpec) {
    let sc = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    sc.run_as_non_root.get_or_insert(true);
    sc.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    });
    for c in pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten())
    {
        restrict_container(c);
    }
}

fn restrict_container(c: &mut Container) {
    let sc = c
        .security_context
        .get_or_insert_with(SecurityContext::default);
    // A privileged container escalates by definition; the API rejects the combination with `false`.
    if sc.privileged != Some(true) {
        sc.allow_privilege_escalation.get_or_insert(false);
    }
    let caps = sc.capabilities.get_or_insert_with(Capabilities::default);
    caps.drop.get_or_insert_with(|| vec!["ALL".into()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_what_is_unset() {
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        restrict(&mut pod);
        let sc = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        let c = pod.containers[0]
            .security_context
            .as_ref()
            .expect("container");
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(
            c.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()])
        );
    }

    #[test]
    fn keeps_what_the_user_set() {
        let mut pod = PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(false),
                run_as_user: Some(0),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: "app".into(),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(true),
                    capabilities: Some(Capabilities {
                        add: Some(vec!["NET_BIND_SERVICE".into()]),
                        drop: Some(vec![]),
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        restrict(&mut pod);
        let sc = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(sc.run_as_non_root, Some(false));
        assert_eq!(sc.run_as_user, Some(0));
        let c = pod.containers[0]
            .security_context
            .as_ref()
            .expect("container");
        assert_eq!(c.allow_privilege_escalation, Some(true));
        let caps = c.capabilities.as_ref().expect("capabilities");
        assert_eq!(caps.drop, Some(vec![]));
        assert_eq!(caps.add, Some(vec!["NET_BIND_SERVICE".to_string()]));
    }

    #[test]
    fn privileged_containers_get_no_escalation_setting() {
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                security_context: Some(SecurityContext {
                    privileged: Some(true),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        restrict(&mut pod);
        let c = pod.containers[0]
            .security_context
            .as_ref()
            .expect("container");
        assert_eq!(c.allow_privilege_escalation, None);
    }
}
