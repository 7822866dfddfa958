//! The latest load report of each sidecar pod, kept in memory for the autoscaler. Each report keeps
//! the operator's time of arrival, so a pod that stops reporting ages out instead of counting as its
//! last load forever (sidecar clocks are not trusted for that).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::control::v1::LoadReport;

/// Most pods remembered; reports from further pods are dropped (and counted) rather than grow memory.
/// Manager and router pods both report, so a mesh of 1,000 Managers × 10 pods is already past
/// 10,000 (the scale benchmark hit the former limit of 10,000 with its pods alone, and the refused
/// report stream took 625 pods' load with it). At about 400 bytes a pod, 50,000 are ~20 MB.
pub(crate) const MAX_PODS: usize = 50_000;

/// Latest report per `namespace/pod`, and the pending activations.
pub struct LoadBook {
    latest: Mutex<HashMap<String, (Instant, Arc<LoadReport>)>>,
    /// Activations from routers holding requests for an event type scaled to zero.
    pub activations: super::activation::Activations,
    /// True once the operator shuts down: report streams never end by themselves.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Default for LoadBook {
    fn default() -> Self {
        LoadBook {
            latest: Mutex::default(),
            activations: super::activation::Activations::default(),
            closing: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl LoadBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<LoadReport>)>> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends every report stream (at shutdown).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`LoadBook::close`] was called.
    pub async fn closed(&self) {
        let mut rx = self.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Keeps `report` as its pod's latest. False when the book is full and the pod is new.
    pub fn record(&self, report: LoadReport) -> bool {
        self.record_at(report, Instant::now())
    }

    /// [`LoadBook::record`] with the time of arrival given.
    pub fn record_at(&self, report: LoadReport, at: Instant) -> bool {
        let key = format!("{}/{}", report.namespace, report.pod);
        let mut map = self.lock();
        if map.len() >= MAX_PODS && !map.contains_key(&key) {
            return false;
        }
        map.insert(key, (at, Arc::new(report)));
        true
    }

    /// Forgets a pod whose report stream ended.
    pub fn forget(&self, namespace: &str, pod: &str) {
        self.lock().remove(&format!("{namespace}/{pod}"));
    }

    /// The latest report of a pod.
    pub fn latest(&self, namespace: &str, pod: &str) -> Option<LoadReport> {
        self.lock()
            .get(&format!("{namespace}/{pod}"))
            .map(|(_, r)| LoadReport::clone(r))
    }

    /// The reports that arrived within `max_age` before `now`; older ones are dropped from the book.
    pub fn fresh(&self, now: Instant, max_age: Duration) -> Vec<Arc<LoadReport>> {
        let mut map = self.lock();
        map.retain(|_, (at, _)| now.saturating_duration_since(*at) <= max_age);
        map.values().map(|(_, r)| r.clone()).collect()
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

    #[test]
    fn silent_pods_age_out() {
        let book = LoadBook::default();
        let t0 = Instant::now();
        assert!(book.record_at(report("a", 1), t0));
        assert!(book.record_at(report("b", 1), t0 + Duration::from_secs(4)));
        let fresh = book.fresh(t0 + Duration::from_secs(5), Duration::from_secs(3));
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].pod, "b");
        assert!(book.latest("shop", "a").is_none());
    }
}
