//! How fast a new sidecar image reaches the mesh. An operator upgrade changes the sidecar image of
//! every Router and Manager pod template at once; applied as rendered, every mesh Deployment would
//! roll together, and a bad image would take all of them down before anyone could stop it. Here a
//! workload whose live Deployment runs another sidecar image gets the new one only while fewer than
//! `at_once` others are still rolling theirs; until its turn it keeps the image it runs, while every
//! other change to it (the user's) applies at once.
//!
//! State lives in the leading replica's memory: a new leader starts with no rollout counted, so
//! right after a leader change up to twice the bound may roll for a moment. A rollout that never
//! completes (a bad image, a pod that cannot be scheduled) gives its slot back after
//! [`STUCK_AFTER`], the Deployment controller's own default progress deadline, so one broken
//! workload slows the rest rather than stopping them.

use crate::conditions::Rollout;
use crate::render::sidecar;
use k8s_openapi::api::apps::v1::Deployment;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A slot held longer than this is given back (the Deployment default `progressDeadlineSeconds`).
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(600);

/// Deployments changing their sidecar image at a time unless the operator is told otherwise.
pub(crate) const DEFAULT_ROLLOUTS_AT_ONCE: u16 = 2;

/// How soon a workload waiting for its turn is looked at again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Namespace, kind label and name of a Deployment.
pub(crate) type WorkloadKey = (String, &'static str, String);

/// Which sidecar image a Deployment is applied with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The rendered (new) image: no change, a new workload, or its turn came.
    Rendered,
    /// Keep the image it runs; try again after [`RETRY_AFTER`].
    Wait { running: String },
}

/// The sidecar image changes in progress, by workload, and when each started.
#[derive(Debug)]
pub(crate) struct SidecarRollouts {
    at_once: usize,
    started: Mutex<HashMap<WorkloadKey, Instant>>,
}

impl SidecarRollouts {
    /// At most `at_once` (at least one) workloads change their sidecar image at a time.
    pub(crate) fn new(at_once: u16) -> Self {
        SidecarRollouts {
            at_once: usize::from(at_once.max(1)),
            started: Mutex::new(HashMap::new()),
        }
    }

    /// The image `key` is applied with, given the sidecar image its live Deployment runs
    /// (`running`, `None`: no Deployment yet, or one from before the image was recorded) and the
    /// one rendered now.
    pub(crate) fn turn(
        &self,
        key: &WorkloadKey,
        running: Option<&str>,
        rendered: &str,
        now: Instant,
    ) -> Turn {
        let Some(running) = running.filter(|r| *r != rendered) else {
            return Turn::Rendered;
        };
        let mut started = self.lock();
        started.retain(|_, at| now.saturating_duration_since(*at) < STUCK_AFTER);
        if started.contains_key(key) || started.len() < self.at_once {
            started.entry(key.clone()).or_insert(now);
            return Turn::Rendered;
        }
        Turn::Wait {
            running: running.to_owned(),
        }
    }

    /// After an apply: `key`'s Deployment runs `running` and its rollout is `complete` or not. A
    /// workload done rolling the `rendered` image gives its slot back.
    pub(crate) fn observe(
        &self,
        key: &WorkloadKey,
        running: Option<&str>,
        rendered: &str,
        complete: bool,
    ) {
        if complete && running == Some(rendered) {
            self.lock().remove(key);
        }
    }

    /// Paces `deployment`, rendered with the sidecar image `rendered`, whose live Deployment runs
    /// `running`: when it must wait, its template keeps the running image. Returns whether it waits.
    pub(crate) fn pace(
        &self,
        key: &WorkloadKey,
        running: Option<&str>,
        deployment: &mut Deployment,
        rendered: &str,
    ) -> bool {
        match self.turn(key, running, rendered, Instant::now()) {
            Turn::Rendered => false,
            Turn::Wait { running } => {
                tracing::debug!(
                    namespace = %key.0,
                    deployment = %key.2,
                    %running,
                    "sidecar image change waits for its turn"
                );
                sidecar::stamp_image(deployment, &running);
                true
            }
        }
    }

    /// After the apply of a paced Deployment, as the API server returned it.
    pub(crate) fn applied(&self, key: &WorkloadKey, stored: &Deployment, rendered: &str) {
        let running = sidecar::running_image(stored);
        self.observe(
            key,
            running.as_deref(),
            rendered,
            Rollout::of(stored).complete(),
        );
    }

    /// Workloads changing their sidecar image now (the tests count them).
    #[cfg(test)]
    fn in_progress(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkloadKey, Instant>> {
        // The map stays consistent even if a holder panicked: every change is one insert or remove.
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WorkloadKey {
        ("ns".into(), "manager", name.into())
    }

    #[test]
    fn unchanged_and_new_workloads_take_the_rendered_image_without_a_slot() {
        let r = SidecarRollouts::new(1);
        let now = Instant::now();
        assert_eq!(r.turn(&key("a"), Some("v2"), "v2", now), Turn::Rendered);
        assert_eq!(r.turn(&key("b"), None, "v2", now), Turn::Rendered);
        assert_eq!(r.in_progress(), 0);
    }

    #[test]
    fn at_most_the_bound_change_at_once_and_a_completed_one_frees_its_slot() {
        let r = SidecarRollouts::new(2);
        let now = Instant::now();
        assert_eq!(r.turn(&key("a"), Some("v1"), "v2", now), Turn::Rendered);
        assert_eq!(r.turn(&key("b"), Some("v1"), "v2", now), Turn::Rendered);
        let wait = Turn::Wait {
            running: "v1".into(),
        };
        assert_eq!(r.turn(&key("c"), Some("v1"), "v2", now), wait);
        // A workload already rolling keeps its slot when it is reconciled again.
        assert_eq!(r.turn(&key("a"), Some("v2"), "v2", now), Turn::Rendered);
        assert_eq!(r.turn(&key("b"), Some("v1"), "v2", now), Turn::Rendered);
        // Not done yet: the slot stays taken.
        r.observe(&key("a"), Some("v2"), "v2", false);
        assert_eq!(r.turn(&key("c"), Some("v1"), "v2", now), wait);
        r.observe(&key("a"), Some("v2"), "v2", true);
        assert_eq!(r.turn(&key("c"), Some("v1"), "v2", now), Turn::Rendered);
        assert_eq!(r.in_progress(), 2);
    }

    #[test]
    fn a_rollout_that_never_completes_gives_its_slot_back_after_the_deadline() {
        let r = SidecarRollouts::new(1);
        let start = Instant::now();
        assert_eq!(r.turn(&key("a"), Some("v1"), "v2", start), Turn::Rendered);
        let soon = start + STUCK_AFTER - Duration::from_secs(1);
        assert!(matches!(
            r.turn(&key("b"), Some("v1"), "v2", soon),
            Turn::Wait { .. }
        ));
        let late = start + STUCK_AFTER;
        assert_eq!(r.turn(&key("b"), Some("v1"), "v2", late), Turn::Rendered);
    }

    #[test]
    fn a_bound_of_zero_still_lets_one_through() {
        let r = SidecarRollouts::new(0);
        assert_eq!(
            r.turn(&key("a"), Some("v1"), "v2", Instant::now()),
            Turn::Rendered
        );
    }
}
