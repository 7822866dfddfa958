//! Activation: while this router holds requests for an event type that has no ready endpoint, it
//! asks the operator for a pod with the unary `Activate` call, at once and then once a second until
//! the holds end. A separate call rather than an early load report: it says exactly which event
//! type waits, works while the report stream reconnects, and leaves the reports' per-second rates
//! alone.

use super::hold::{Held, HeldCounts, Waiting};
use crate::net::control_plane::ControlPlane;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use switchyard_protocol::control::v1::ActivateRequest;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use tonic::transport::Channel;

/// How often an activation is repeated while requests of its event type are held.
pub(crate) const REPEAT: Duration = Duration::from_secs(1);
/// Longest wait for one `Activate` answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Who asks, where, and how long requests are held.
pub(crate) struct Activator {
    client: ControlPlaneClient<Channel>,
    router: String,
    namespace: String,
    pod: String,
    timeout: Duration,
    held: HeldCounts,
}

impl Activator {
    /// An activator for Router `namespace/router` (pod `pod`) calling the control plane `cp`
    /// (connected on first use), holding requests up to `timeout`.
    pub(crate) fn new(
        cp: &ControlPlane,
        router: &str,
        namespace: &str,
        pod: &str,
        timeout: Duration,
    ) -> Activator {
        Activator {
            client: ControlPlaneClient::new(cp.connect_lazy()),
            router: router.to_owned(),
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            timeout,
            held: HeldCounts::default(),
        }
    }

    /// The activation timeout (`broker.activationTimeout`).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Holds one request for `what`; the first of a series starts the calls.
    pub(crate) fn hold(self: &Arc<Self>, what: &Waiting) -> Held {
        let (held, count, first) = self.held.hold(what);
        if first {
            tokio::spawn(self.clone().signal(what.clone(), count));
        }
        held
    }

    async fn signal(self: Arc<Self>, what: Waiting, count: Arc<AtomicU32>) {
        let mut warned = false;
        let event = &what.event;
        let manager = what.manager.as_deref().unwrap_or_default();
        loop {
            let n = count.load(Ordering::Acquire);
            if n == 0 {
                return;
            }
            let request = ActivateRequest {
                namespace: self.namespace.clone(),
                router: self.router.clone(),
                pod: self.pod.clone(),
                event_type: event.to_string(),
                held: n,
                manager: manager.to_owned(),
            };
            let mut client = self.client.clone();
            match tokio::time::timeout(CALL_TIMEOUT, client.activate(request)).await {
                Ok(Ok(_)) => {
                    tracing::debug!(event = %event, subscriber = %manager, held = n, "activation sent")
                }
                Ok(Err(s)) if !warned => {
                    warned = true;
                    tracing::warn!(event = %event, subscriber = %manager, code = ?s.code(), reason = %s.message(), "activation refused; repeating");
                }
                Err(_) if !warned => {
                    warned = true;
                    tracing::warn!(event = %event, subscriber = %manager, "activation unanswered; repeating");
                }
                _ => {}
            }
            tokio::time::sleep(REPEAT).await;
        }
    }
}
