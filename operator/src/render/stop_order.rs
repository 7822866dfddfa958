//! How a manager pod, and a router pod, stop without losing a request (pure).
//!
//! The kubelet, stopping a pod, runs every container's preStop hook at once; then it sends SIGTERM
//! to the app containers, and to a native sidecar only after every app container has exited. So:
//!
//! - the sidecar's own preStop hook, `switchyard-sidecar drain` (exec, in the sidecar's image),
//!   asks the manager to drain on loopback: it turns unready, sends GOAWAY to its routers and
//!   finishes every delivery it accepted, up to the sidecar's drain limit (30 s). The drain endpoint
//!   answers loopback callers only: an httpGet hook comes from the node, and so could anyone else.
//! - the app's preStop hook, `GET /drained` on the sidecar's admin port, returns once that drain is
//!   over, so the app is up for every delivery the drain finishes and an idle pod stops at once.
//!   It starts nothing, so the node (or anyone) may ask it. The two hooks start together and the
//!   app's usually arrives first; `/drained` waits a few seconds for the drain to begin before
//!   deciding there is none. (An exec hook in the app could not call the sidecar: the app's image
//!   has no sidecar binary and perhaps no shell.)
//! - the app then gets SIGTERM and stops; the sidecar gets SIGTERM after it, closes the local API
//!   the app could use while it stopped, and exits.
//!
//! The grace period leaves room for the longest the app's hook can wait and both containers' own
//! stop after it. The sidecar is told to wait for its SIGTERM longer than that grace period; a
//! drain no SIGTERM follows (one not started by the pod's stop) ends the sidecar for the kubelet to
//! restart.

use super::sidecar::CONTAINER as SIDECAR;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler, PodSpec, SleepAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use switchyard_protocol::{env, ports};

/// Where the sidecar image has its binary (`deploy/sidecar.Dockerfile`). A path, not a name: the
/// kubelet's exec does not search a PATH in every runtime.
pub(crate) const SIDECAR_BINARY: &str = "/usr/local/bin/switchyard-sidecar";

/// The sidecar's endpoint that waits for its drain (`sidecar::admin`), the app's preStop hook.
pub(crate) const DRAINED_PATH: &str = "/drained";

/// The sidecars' drain limit (`sidecar::shutdown::DRAIN_LIMIT`), in seconds.
pub(crate) const SIDECAR_DRAIN_LIMIT_SECONDS: i64 = 30;

/// How long `/drained` waits for the drain to begin (`sidecar::admin::drain_hook::START_WINDOW`):
/// the sidecar's exec hook starts it a moment after the app's httpGet has arrived.
pub(crate) const DRAINED_START_WINDOW_SECONDS: i64 = 5;

/// How long past the drain limit the drain's waiters allow it (`drain_hook::FINISH_WAIT`).
pub(crate) const DRAIN_ANSWER_MARGIN_SECONDS: i64 = 2;

/// The longest the app's hook waits: for the drain to begin, then for it to end.
pub(crate) const APP_HOOK_MAX_SECONDS: i64 =
    DRAINED_START_WINDOW_SECONDS + SIDECAR_DRAIN_LIMIT_SECONDS + DRAIN_ANSWER_MARGIN_SECONDS;

/// The app's and the sidecar's own stop, after the drain.
pub(crate) const OWN_STOP_SECONDS: i64 = 15;

/// Grace period of manager pods whose template sets none: the longest the app's hook waits plus
/// both containers' own stop. A pod whose drain is quick stops as quickly: this only bounds a
/// stop that hangs.
pub(crate) const TERMINATION_GRACE_SECONDS: i64 = APP_HOOK_MAX_SECONDS + OWN_STOP_SECONDS;

/// How long a router pod keeps serving after it starts terminating, before its sidecar gets SIGTERM
/// and stops accepting. The endpoints controller marks a terminating pod unready at once, but
/// kube-proxy, load balancers and clients that watch endpoints drop it only once that news reaches
/// them; until then new connections still arrive, and a closed listener would refuse them (seen as
/// "connection refused" during every rollout). Istio's `terminationDrainDuration` is 5 s too.
pub(crate) const ROUTER_STOP_DELAY_SECONDS: i64 = 5;

/// Grace period of router pods: the delay, then the drain limit and the sidecar's own stop.
pub(crate) const ROUTER_TERMINATION_GRACE_SECONDS: i64 =
    ROUTER_STOP_DELAY_SECONDS + SIDECAR_DRAIN_LIMIT_SECONDS + OWN_STOP_SECONDS;

/// The router sidecar's preStop hook: the kubelet's own sleep (no binary or shell in the image
/// needed) for [`ROUTER_STOP_DELAY_SECONDS`], serving all the while; the drain starts at SIGTERM.
pub(crate) fn delay_router_stop(side: &mut Container) {
    side.lifecycle
        .get_or_insert_with(Lifecycle::default)
        .pre_stop = Some(LifecycleHandler {
        sleep: Some(SleepAction {
            seconds: ROUTER_STOP_DELAY_SECONDS,
        }),
        ..LifecycleHandler::default()
    });
}

/// How much longer than the grace period the sidecar waits for SIGTERM after its drain: past the
/// grace period the kubelet has killed a pod that is really stopping.
const SIGNAL_WAIT_MARGIN_SECONDS: i64 = 15;

/// Sets up the stop described above: the pod's grace period when its template has none, the
/// `/drained` hook on every app container without a preStop hook of its own (a user's hook is
/// kept), and the drain hook and SIGTERM wait on the sidecar (an init container named
/// [`SIDECAR`](super::sidecar::CONTAINER)).
pub(crate) fn wait_for_sidecar_drain(pod: &mut PodSpec) {
    let grace = *pod
        .termination_grace_period_seconds
        .get_or_insert(TERMINATION_GRACE_SECONDS);
    for c in &mut pod.containers {
        let lifecycle = c.lifecycle.get_or_insert_with(Lifecycle::default);
        lifecycle.pre_stop.get_or_insert_with(app_hook);
    }
    let sidecar = pod
        .init_containers
        .iter_mut()
        .flatten()
        .find(|c| c.name == SIDECAR);
    if let Some(side) = sidecar {
        drain_on_stop(side, grace);
    }
}

/// The app's preStop hook: `GET /drained` on the sidecar's admin port, from the node. By port
/// number: a named port would be looked up in the app container's own ports. (A grace period of
/// 0 needs no special case: the kubelet runs no hook then.)
pub(crate) fn app_hook() -> LifecycleHandler {
    LifecycleHandler {
        http_get: Some(HTTPGetAction {
            path: Some(DRAINED_PATH.into()),
            port: IntOrString::Int(i32::from(ports::ADMIN)),
            ..HTTPGetAction::default()
        }),
        ..LifecycleHandler::default()
    }
}

/// The sidecar's preStop hook (the drain, asked on loopback from inside its own container) and how
/// long it then waits for SIGTERM, from the pod's `grace`.
fn drain_on_stop(side: &mut Container, grace: i64) {
    side.lifecycle
        .get_or_insert_with(Lifecycle::default)
        .pre_stop = Some(LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(vec![SIDECAR_BINARY.into(), "drain".into()]),
        }),
        ..LifecycleHandler::default()
    });
    let wait = grace.max(0) + SIGNAL_WAIT_MARGIN_SECONDS;
    let vars = side.env.get_or_insert_with(Vec::new);
    vars.retain(|e| e.name != env::SIGNAL_WAIT);
    vars.push(EnvVar {
        name: env::SIGNAL_WAIT.into(),
        value: Some(format!("{wait}s")),
        ..EnvVar::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(app_hook: Option<LifecycleHandler>, grace: Option<i64>) -> PodSpec {
        PodSpec {
            termination_grace_period_seconds: grace,
            init_containers: Some(vec![Container {
                name: SIDECAR.into(),
                ..Container::default()
            }]),
            containers: vec![Container {
                name: "app".into(),
                lifecycle: app_hook.map(|h| Lifecycle {
                    pre_stop: Some(h),
                    ..Lifecycle::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }
    }

    fn pre_stop(c: &Container) -> Option<&LifecycleHandler> {
        c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
    }

    fn sidecar(pod: &PodSpec) -> &Container {
        pod.init_containers
            .iter()
            .flatten()
            .find(|c| c.name == SIDECAR)
            .expect("sidecar")
    }

    fn signal_wait(c: &Container) -> Option<&str> {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == env::SIGNAL_WAIT)
            .and_then(|e| e.value.as_deref())
    }

    #[test]
    fn the_app_waits_for_the_drain_the_sidecar_starts_itself() {
        let mut p = pod(None, None);
        wait_for_sidecar_drain(&mut p);
        assert_eq!(p.termination_grace_period_seconds, Some(52));
        // The app's hook may wait the drain limit and more; both containers then stop.
        const { assert!(APP_HOOK_MAX_SECONDS > SIDECAR_DRAIN_LIMIT_SECONDS) };
        const { assert!(TERMINATION_GRACE_SECONDS >= APP_HOOK_MAX_SECONDS + OWN_STOP_SECONDS) };
        let app = pre_stop(&p.containers[0]).expect("app preStop");
        let get = app.http_get.as_ref().expect("app httpGet preStop");
        assert_eq!(get.path.as_deref(), Some("/drained"));
        assert_eq!(get.port, IntOrString::Int(9901));
        assert!(app.sleep.is_none() && app.exec.is_none(), "{app:?}");
        let side = sidecar(&p);
        let hook = pre_stop(side)
            .and_then(|h| h.exec.as_ref())
            .and_then(|e| e.command.clone())
            .expect("sidecar exec preStop");
        assert_eq!(hook, vec!["/usr/local/bin/switchyard-sidecar", "drain"]);
        // Past the grace period: a pod that is really stopping is killed before the sidecar gives up.
        assert_eq!(signal_wait(side), Some("67s"));
    }

    #[test]
    fn keeps_the_users_hook_and_grace_period() {
        let own = LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["/bin/flush".into()]),
            }),
            ..LifecycleHandler::default()
        };
        let mut p = pod(Some(own.clone()), Some(120));
        wait_for_sidecar_drain(&mut p);
        assert_eq!(p.termination_grace_period_seconds, Some(120));
        assert_eq!(pre_stop(&p.containers[0]), Some(&own));
        // The sidecar still drains on its own, and waits past the longer grace period.
        assert!(pre_stop(sidecar(&p)).is_some_and(|h| h.exec.is_some()));
        assert_eq!(signal_wait(sidecar(&p)), Some("135s"));
    }

    #[test]
    fn a_short_grace_period_keeps_the_wait_hook() {
        // Unlike a sleep, an httpGet hook may outlast the grace period: the kubelet cuts it there.
        for grace in [10, 0] {
            let mut p = pod(None, Some(grace));
            wait_for_sidecar_drain(&mut p);
            assert_eq!(p.termination_grace_period_seconds, Some(grace));
            assert_eq!(pre_stop(&p.containers[0]), Some(&app_hook()), "{grace}");
        }
    }
}
