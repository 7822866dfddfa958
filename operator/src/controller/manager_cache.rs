//! The Managers the Router controller renders from: a reflector store of every watched Manager (one
//! per watched namespace), and a readiness flag that any number of reconciles may wait on.
//!
//! Not `Store::wait_until_ready`: kube-runtime keeps one waker there (a oneshot underneath), so with
//! the controller's own runner and several reconciles waiting, all but the last poller sleep forever
//! (seen as an operator that never finished its shutdown).

use crate::scope::{Scope, Target};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use switchyard_crds::Manager;
use tokio::sync::watch;

/// A read view of the cache: one store per watched target (see [`crate::scope`]), each with its
/// own readiness.
#[derive(Clone)]
pub(super) struct ManagerCache {
    stores: Vec<(Target, Store<Manager>, watch::Receiver<bool>)>,
}

impl ManagerCache {
    /// The cache of the Managers in `scope` and the stream that fills it (poll it until shutdown).
    pub(super) fn start(
        client: Client,
        scope: &Scope,
    ) -> (ManagerCache, impl Stream<Item = ()> + Send) {
        let mut stores = Vec::new();
        let mut fills = Vec::new();
        for target in scope.targets() {
            let (store, writer) = reflector::store();
            let (ready_tx, ready) = watch::channel(false);
            let fill = watcher(
                target.api::<Manager>(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(crate::control_plane::observe::strip)
            .reflect(writer)
            .map(move |event| match event {
                Ok(watcher::Event::InitDone) => {
                    ready_tx.send_replace(true);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "manager watch; retrying with backoff"),
            });
            stores.push((target, store, ready));
            fills.push(fill.boxed());
        }
        (ManagerCache { stores }, futures::stream::select_all(fills))
    }

    /// The live Managers of Router `router` in `namespace`, by name (the cache has no order, and the
    /// rendered config must not change with it). Waits for the first complete list: a config rendered
    /// from a half-filled cache would drop routes and roll the router pods. `None` once the cache
    /// is gone (the operator stops).
    pub(super) async fn of_router(&self, namespace: &str, router: &str) -> Option<Vec<Manager>> {
        // A Router is only reconciled in a watched namespace, so its store is there.
        let (_, store, ready) = self.stores.iter().find(|(t, _, _)| t.holds(namespace))?;
        let mut ready = ready.clone();
        ready.wait_for(|r| *r).await.ok()?;
        let mut managers: Vec<Manager> = store
            .state_filter(|m| {
                m.namespace().as_deref() == Some(namespace)
                    && m.spec.router_ref.name == router
                    && m.metadata.deletion_timestamp.is_none()
            })
            .into_iter()
            .map(|m| (*m).clone())
            .collect();
        managers.sort_by_key(ResourceExt::name_any);
        Some(managers)
    }
}
