//! Watches Routers, Managers and manager Pods into reflector caches and republishes every Router's
//! table when any of them changes. Reads only: every replica runs it, leader or not.

use super::directory::{self, Directory};
use super::hub::Hub;
use super::table;
use crate::metrics::Metrics;
use crate::render::meta;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use std::sync::Arc;
use std::time::Duration;
use switchyard_crds::{Manager, Router};
use tokio::sync::Notify;

/// Changes arriving together (a rollout moves many pods) are folded into one recompute.
const SETTLE: Duration = Duration::from_millis(200);

/// Keeps `hub` and `directory` up to date until the future is dropped.
pub async fn run(
    client: Client,
    hub: Arc<Hub>,
    directory: Arc<directory::Current>,
    metrics: Arc<Metrics>,
) {
    let (routers, rw) = reflector::store::<Router>();
    let (managers, mw) = reflector::store::<Manager>();
    let (pods, pw) = reflector::store::<Pod>();
    // Only manager pods: the operator does not cache the cluster's other pods.
    let manager_pods =
        watcher::Config::default().labels(&format!("{}=switchyard-manager", meta::NAME));
    let changed = Arc::new(Notify::new());
    let streams = futures::stream::select_all([
        touch(
            watcher(
                Api::<Router>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(rw),
            "routers",
        ),
        touch(
            watcher(
                Api::<Manager>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(mw),
            "managers",
        ),
        touch(
            watcher(Api::<Pod>::all(client), manager_pods)
                .default_backoff()
                // The table needs labels, IP and readiness; dropping the rest keeps the cache small.
                .modify(|p: &mut Pod| {
                    p.spec = None;
                    p.meta_mut().managed_fields = None;
                    p.meta_mut().annotations = None;
                })
                .reflect(pw),
            "pods",
        ),
    ]);
    let watch = {
        let changed = changed.clone();
        streams.for_each(move |()| {
            changed.notify_one();
            async {}
        })
    };
    let publish = async {
        // Until all three caches are listed, a missing Manager or pod could be a false absence.
        let ready = futures::future::join3(
            routers.wait_until_ready(),
            managers.wait_until_ready(),
            pods.wait_until_ready(),
        )
        .await;
        if ready.0.is_err() || ready.1.is_err() || ready.2.is_err() {
            tracing::error!("control-plane caches closed before they were ready");
            return;
        }
        tracing::info!("control-plane caches synced; serving routing tables");
        loop {
            recompute(&hub, &directory, &metrics, &routers, &managers, &pods);
            changed.notified().await;
            tokio::time::sleep(SETTLE).await;
        }
    };
    futures::join!(watch, publish);
}

fn recompute(
    hub: &Hub,
    directory: &directory::Current,
    metrics: &Metrics,
    routers: &Store<Router>,
    managers: &Store<Manager>,
    pods: &Store<Pod>,
) {
    let (r, m, p) = (routers.state(), managers.state(), pods.state());
    let r: Vec<&Router> = r.iter().map(AsRef::as_ref).collect();
    let m: Vec<&Manager> = m.iter().map(AsRef::as_ref).collect();
    let p: Vec<&Pod> = p.iter().map(AsRef::as_ref).collect();
    // The directory first: a sidecar seeing its new table is then also allowed what it lists.
    directory.set(Directory::build(&r, &m));
    let tables = table::all_tables(&r, &m, &p);
    let count = tables.len();
    let changed = hub.publish(tables);
    metrics.set_routing_tables(count);
    if changed > 0 {
        tracing::debug!(changed, routers = count, "routing tables changed");
    }
}

/// A watch stream reduced to "something happened", errors logged (the backoff retries them).
fn touch<K, S>(stream: S, what: &'static str) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    Box::pin(stream.filter_map(move |ev| {
        // Decided before the future, so the future does not hold the event (and need K: Send).
        let seen = match ev {
            Ok(_) => Some(()),
            Err(e) => {
                tracing::warn!(what, error = %e, "control-plane watch failed; retrying");
                None
            }
        };
        std::future::ready(seen)
    }))
}
