//! The Managers of a history run as pods on loopback: a manager sidecar process and its test app
//! each, either killable with -9 and restartable.

use crate::common::*;
use crate::history::record::{Delivery, EventId};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub struct Pod {
    pub manager: &'static str,
    pub name: String,
    pub app: Arc<TestApp>,
    cfg: PathBuf,
    dir: PathBuf,
    proc: Option<Proc>,
    lives: usize,
    pub local_api: u16,
}

impl Pod {
    /// A pod of `manager` whose config `cfg` is built for its app's port.
    pub async fn start(
        dir: &Path,
        manager: &'static str,
        index: usize,
        cfg: impl FnOnce(u16) -> serde_json::Value,
    ) -> Pod {
        let name = format!("{manager}-{index}");
        let app = TestApp::start().await;
        let cfg = write_json(dir, &format!("{name}.json"), &cfg(app.port));
        let mut pod = Pod {
            manager,
            dir: dir.join(&name),
            name,
            app,
            cfg,
            proc: None,
            lives: 0,
            local_api: 0,
        };
        pod.start_sidecar().await;
        pod
    }

    /// Starts its sidecar (again) and waits for its ready line.
    pub async fn start_sidecar(&mut self) {
        self.lives += 1;
        let dir = self.dir.join(format!("life{}", self.lives));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = spawn_manager(&dir, &self.cfg, &[]);
        self.local_api = manager_ready(&mut p).await.local_api;
        self.proc = Some(p);
    }

    /// SIGKILL of the sidecar: nothing drained, nothing acked.
    pub fn kill_sidecar(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// A rollout of the pod: SIGTERM, the sidecar drains (its attempts finish and are acked,
    /// nothing is released unattempted) and exits, then a new sidecar starts. Returns its exit code.
    pub async fn roll(&mut self) -> Option<i32> {
        let code = match self.proc.as_mut() {
            Some(p) => {
                p.sigterm();
                p.wait_exit(std::time::Duration::from_secs(45)).await
            }
            None => None,
        };
        self.kill_sidecar();
        self.start_sidecar().await;
        code
    }

    /// Every delivery of `types` its app saw, in every life.
    pub fn deliveries(&self, t0: Instant, types: &[&str]) -> Vec<Delivery> {
        let events = self.app.state.events.lock().unwrap().clone();
        events
            .iter()
            .filter(|e| types.contains(&e.header("ce-type")))
            .map(|e| {
                let body: serde_json::Value =
                    serde_json::from_slice(&e.body).unwrap_or(serde_json::Value::Null);
                Delivery {
                    manager: self.manager.to_owned(),
                    pod: self.name.clone(),
                    event: EventId {
                        ce_type: e.header("ce-type").to_owned(),
                        source: e.header("ce-source").to_owned(),
                        id: e.header("ce-id").to_owned(),
                    },
                    key: body["key"].as_str().unwrap_or("").to_owned(),
                    seq: body["seq"].as_u64().unwrap_or(u64::MAX),
                    at: e.at.saturating_duration_since(t0),
                }
            })
            .collect()
    }
}
