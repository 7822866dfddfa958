//! The latest load report of each sidecar pod, kept in memory for the autoscaler (a later issue).

use std::collections::HashMap;
use std::sync::Mutex;
use switchyard_protocol::control::v1::LoadReport;

/// Most pods remembered; reports from further pods are dropped (and counted) rather than grow memory.
pub const MAX_PODS: usize = 10_000;

/// Latest report per `namespace/pod`.
#[derive(Default)]
pub struct LoadBook {
    latest: Mutex<HashMap<String, LoadReport>>,
}

impl LoadBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LoadReport>> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `report` as its pod's latest. False when the book is full and the pod is new.
    pub fn record(&self, report: LoadReport) -> bool {
        let key = format!("{}/{}", report.namespace, report.pod);
        let mut map = self.lock();
        if map.len() >= MAX_PODS && !map.contains_key(&key) {
            return false;
        }
        map.insert(key, report);
        true
    }

    /// Forgets a pod whose report stream ended.
    pub fn forget(&self, namespace: &str, pod: &str) {
        self.lock().remove(&format!("{namespace}/{pod}"));
    }

    /// The latest report of a pod.
    pub fn latest(&self, namespace: &str, pod: &str) -> Option<LoadReport> {
        self.lock().get(&format!("{namespace}/{pod}")).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(pod: &str, ts: u64) -> LoadReport {
        LoadReport {
            pod: pod.into(),
            namespace: "shop".into(),
            timestamp_ms: ts,
            ..LoadReport::default()
        }
    }

    #[test]
    fn keeps_the_latest_per_pod_and_forgets() {
        let book = LoadBook::default();
        assert!(book.record(report("a", 1)));
        assert!(book.record(report("a", 2)));
        assert_eq!(book.latest("shop", "a").map(|r| r.timestamp_ms), Some(2));
        book.forget("shop", "a");
        assert!(book.latest("shop", "a").is_none());
    }
}
