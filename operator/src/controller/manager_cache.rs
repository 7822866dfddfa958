//! The Managers the Router controller renders from: a reflector store of every Manager, and a
//! readiness flag that any number of reconciles may wait on.
//!
//! Not `Store::wait_until_ready`: kube-runtime keeps one waker there (a oneshot underneath), so with
//! the controller's own runner and several reconciles waiting, all but the last poller sleep forever
//! (seen as an operator that never finished its shutdown).

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use switchyard_crds::Manager;
use tokio::sync::watch;

/// A read view of the cache.
#[derive(Clone)]
pub struct ManagerCache {
    store: Store<Manager>,
    ready: watch::Receiver<bool>,
}

impl ManagerCache {
    /// The cache and the stream that fills it (poll it until shutdown).
    pub fn start(client: Client) -> (ManagerCache, impl Stream<Item = ()> + Send) {
        let (store, writer) = reflector::store();
        let (ready_tx, ready) = watch::channel(false);
        let fill = watcher(Api::<Manager>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .map(move |event| match event {
                Ok(watcher::Event::InitDone) => {
                    ready_tx.send_replace(true);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "manager watch; retrying with backoff"),
            });
        (ManagerCache { store, ready }, fill)
    }

    /// The live Managers of Router `router` in `namespace`, by name (the cache has no order, and the
    /// rendered config must not change with it). Waits for the first complete list: a config rendered
    /// from a half-filled cache would drop routes and roll the router pods. `None` once the cache
    /// is gone (the operator stops).
    pub async fn of_router(&self, namespace: &str, router: &str) -> Option<Vec<Manager>> {
        let mut ready = self.ready.clone();
        ready.wait_for(|r| *r).await.ok()?;
        let mut managers: Vec<Manager> = self
            .store
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
