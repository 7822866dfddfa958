//! The API server's share of a change's propagation: the benchmark watches the pods itself, as the
//! operator does, and notes when its own watch shows each flip. A change's time to the router
//! streams is then split into the API server's path (patch accepted, written to etcd, sent to
//! watchers) and what follows it (the operator's watch, index, hub and streams), which the bars
//! cannot tell apart on a machine where the API server shares the cores.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A flip the benchmark is waiting to see on its own watch.
struct Wanted {
    id: usize,
    ready: bool,
    sent: Instant,
}

/// Flips in flight and when the benchmark's watch saw the ones that arrived.
#[derive(Default)]
pub struct ApiWatch {
    wanted: Mutex<HashMap<String, Wanted>>,
    seen: Mutex<HashMap<usize, Duration>>,
    listed: AtomicBool,
}

impl ApiWatch {
    /// Notes that pod `name` is about to be patched to `ready` as change `id`.
    pub fn expect(&self, name: &str, ready: bool, id: usize) {
        let w = Wanted {
            id,
            ready,
            sent: Instant::now(),
        };
        lock(&self.wanted).insert(name.to_owned(), w);
    }

    /// Whether the watch's initial list is done: flips made before it would be timed by the list
    /// of every pod, not by the API server's watch path.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// From sending each change to the benchmark's watch showing it, by change id.
    pub fn seen(&self) -> HashMap<usize, Duration> {
        lock(&self.seen).clone()
    }

    /// A pod as the watch shows it: a flip is seen once its Ready condition is what was sent.
    fn observe(&self, pod: &Pod) {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True");
        let mut wanted = lock(&self.wanted);
        let name = pod.name_any();
        if let Some(w) = wanted.get(&name)
            && ready == Some(w.ready)
        {
            let (id, took) = (w.id, w.sent.elapsed());
            wanted.remove(&name);
            lock(&self.seen).insert(id, took);
        }
    }
}

/// Watches the manager pods of `api` into `watch` until the task is aborted.
pub async fn run(api: Api<Pod>, watch: Arc<ApiWatch>) {
    let config = watcher::Config::default().labels("app.kubernetes.io/name=switchyard-manager");
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => watch.observe(&pod),
            Ok(watcher::Event::InitDone) => watch.listed.store(true, Ordering::Release),
            Ok(watcher::Event::Delete(_) | watcher::Event::Init) => {}
            Err(e) => eprintln!("[scale] the benchmark's pod watch: {e}"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
