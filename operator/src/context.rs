//! State shared by the controllers.

use crate::metrics::Metrics;
use crate::scope::Scope;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use std::sync::Arc;

/// What a reconcile needs besides the object.
pub struct Context {
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
}

impl Context {
    /// A context for the given client, reporting events as `identity`.
    pub fn new(
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
        }
    }
}
