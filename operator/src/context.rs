//! State shared by the controllers.

use crate::controller::sidecar_rollout::{DEFAULT_ROLLOUTS_AT_ONCE, SidecarRollouts};
use crate::metrics::Metrics;
use crate::scope::Scope;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use std::sync::Arc;

/// What a reconcile needs besides the object.
pub(crate) struct Context {
    /// API client.
    pub client: Client,
    /// Emits Kubernetes Events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Inputs of the pure render step that do not come from the resource.
    pub render: crate::render::RenderSettings,
    /// The namespaces watched (`--watch-namespaces`).
    pub scope: Scope,
    /// The pace of sidecar image changes across the mesh (`--sidecar-rollouts-at-once`).
    pub rollouts: SidecarRollouts,
    /// Changes of the mesh's trust (with mesh TLS): every Router and Manager is reconciled again.
    pub trust_changes: Option<tokio::sync::watch::Receiver<u64>>,
}

impl Context {
    /// A context for the given client, reporting events as `identity`.
    pub(crate) fn new(
        client: Client,
        metrics: Arc<Metrics>,
        render: crate::render::RenderSettings,
        identity: String,
        scope: Scope,
    ) -> Self {
        let reporter = Reporter {
            controller: crate::FIELD_MANAGER.into(),
            instance: Some(identity),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            render,
            scope,
            rollouts: SidecarRollouts::new(DEFAULT_ROLLOUTS_AT_ONCE),
            trust_changes: None,
        }
    }

    /// Every Router and Manager is reconciled again when `changes` moves.
    pub(crate) fn with_trust_changes(
        mut self,
        changes: Option<tokio::sync::watch::Receiver<u64>>,
    ) -> Self {
        self.trust_changes = changes;
        self
    }

    /// At most `at_once` Deployments change their sidecar image at a time.
    pub(crate) fn with_rollouts_at_once(mut self, at_once: u16) -> Self {
        self.rollouts = SidecarRollouts::new(at_once);
        self
    }
}
