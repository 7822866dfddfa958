//! Memory bounded in bytes below the container's limit, with real processes: a flood of 1 MiB
//! publishes into a slow Manager whose manager sidecar runs in a memory cgroup (v1) of 128 MiB that
//! this test creates and removes. The publisher gets 503s with Retry-After, the sidecar is never
//! OOM-killed, and every publish answered 202 reaches the app.
//!
//! Needs root and cgroup v1's memory controller at /sys/fs/cgroup/memory (the test machine's
//! hybrid layout); without them it fails, saying so.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_protocol::memory::EVENT_OVERHEAD;

const LIMIT: u64 = 128 << 20;
/// Publishes in the flood, and how many are under way at once.
const PUBLISHES: usize = 300;
const CONCURRENCY: usize = 64;
/// Each one's payload: the 1 MiB the local API takes, less room for the JSON around it.
const PAD: usize = (1 << 20) - 64;
/// How long the app takes over each event, and how many it takes at once.
const NAP_MS: u64 = 150;
const IN_FLIGHT: i32 = 4;

/// A v1 memory cgroup under this test's own, removed when dropped (after the processes in it,
/// which are dropped first: declare it before them).
struct MemCgroup {
    dir: PathBuf,
}

impl MemCgroup {
    /// `tag` tells apart the cgroups of this process's tests.
    fn create(limit: u64, tag: &str) -> MemCgroup {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, c, path) = (p.next()?, p.next()?, p.next()?);
                c.split(',').any(|c| c == "memory").then(|| path.to_owned())
            })
            .expect("this test needs cgroup v1's memory controller (no memory line in /proc/self/cgroup)");
        let dir = Path::new("/sys/fs/cgroup/memory")
            .join(rel.trim_start_matches('/'))
            .join(format!("sy-memory-limit-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "creating {} (this test needs root and cgroup v1's memory controller): {e}",
                dir.display()
            )
        });
        let cg = MemCgroup { dir };
        std::fs::write(cg.dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        cg
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap()
    }

    /// `oom_kill N` of `memory.oom_control`: processes the kernel killed for this cgroup's limit.
    fn oom_kills(&self) -> u64 {
        self.read("memory.oom_control")
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .expect("memory.oom_control has an oom_kill line")
    }

    fn peak(&self) -> u64 {
        self.read("memory.max_usage_in_bytes")
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Its processes are gone (killed and reaped before this drops); an empty cgroup is removed.
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("removing {}: {e}", self.dir.display());
        }
    }
}

/// The slow Manager `handlers`: `nap.orders`, 4 at a time, the default queue of 1024 events (which,
/// counted in events alone, admitted 1 GiB of these).
fn receiver_config(app_port: u16) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["events"] = json!(["nap.orders"]);
    cfg["workers"] = json!({
        "maxInFlight": IN_FLIGHT,
        "queueCapacity": 1024,
        "timeout": "10s",
        "retries": {"attempts": 3, "backoff": "20ms", "maxBackoff": "200ms"},
    });
    cfg
}

/// The publishing Manager `sender`, whose `nap.orders` go to `handlers` at `receiver_port`.
fn sender_config(app_port: u16, receiver_port: u16) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!("sender");
    cfg["events"] = json!(["sender.unused"]);
    let dest = json!({"manager": "handlers", "service": "handlers", "port": receiver_port, "podSelector": {}});
    cfg["destinations"] = json!({ "nap.orders": dest });
    cfg["staticEndpoints"] = json!({"handlers": [format!("127.0.0.1:{receiver_port}")]});
    cfg
}

/// The sidecar still runs, and the kernel killed nothing in its cgroup.
fn alive(receiver: &mut Proc, cgroup: &MemCgroup) {
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the kernel OOM-killed the manager sidecar"
    );
    assert!(
        receiver.child.try_wait().unwrap().is_none(),
        "the manager sidecar died:\n{}",
        receiver.log_text()
    );
}

#[derive(Default)]
struct Told {
    accepted: HashSet<String>,
    refused: usize,
    refused_without_retry_after: usize,
    other: Vec<u16>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_1_mib_publishes_into_a_slow_manager_under_128_mib_ends_in_503s_not_an_oom_kill()
{
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let app = TestApp::start().await;
    let cgroup = MemCgroup::create(LIMIT, "direct");
    let cfg = write_json(dir.path(), "handlers.json", &receiver_config(app.port));
    let mut receiver = manager_in(&cgroup, &cfg, &dir.path().join("handlers.log"));
    let ports = manager_ready(&mut receiver).await;
    let budgets = receiver
        .log_line("byte budgets from the memory limit")
        .await;
    assert_eq!(budgets["memory_limit"], "128.0 MiB", "{budgets}");
    assert_eq!(budgets["admitted_events"], "48.0 MiB", "{budgets}");
    let idle = cgroup.peak();
    let no_app = ClosedPort::new();
    let sender_cfg = write_json(
        dir.path(),
        "sender.json",
        &sender_config(no_app.port, ports.listen),
    );
    let sender_dir = dir.path().join("sender");
    std::fs::create_dir_all(&sender_dir).unwrap();
    let (_sender, sender_ports) = start_manager(&sender_dir, &sender_cfg, &[]).await;
    let url = format!(
        "http://127.0.0.1:{}/v1/publish/nap.orders",
        sender_ports.local_api
    );

    let told = Arc::new(Mutex::new(Told::default()));
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let tasks = tokio_util::task::TaskTracker::new();
    let pad = "x".repeat(PAD);
    for i in 0..PUBLISHES {
        let permit = limit.clone().acquire_owned().await.unwrap();
        let (client, url, told) = (client.clone(), url.clone(), told.clone());
        let body = format!("{{\"ms\":{NAP_MS},\"pad\":\"{pad}\"}}");
        tasks.spawn(async move {
            let ce_id = format!("big-{i}");
            let req = hyper::Request::post(&url)
                .header("content-type", "application/json")
                .header("ce-id", &ce_id)
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap();
            let reply = client.send(req).await;
            let mut t = told.lock().unwrap();
            match reply {
                Ok(r) if r.status == 202 => {
                    t.accepted.insert(ce_id);
                }
                Ok(r) if r.status == 503 => {
                    t.refused += 1;
                    if r.header("retry-after").is_none() {
                        t.refused_without_retry_after += 1;
                    }
                }
                Ok(r) => t.other.push(r.status),
                Err(_) => t.other.push(0),
            }
            drop(permit);
        });
    }
    tasks.close();
    tasks.wait().await;
    let told = std::mem::take(&mut *told.lock().unwrap());

    // Alive and never OOM-killed while it held the flood's admitted events.
    alive(&mut receiver, &cgroup);
    // Every 202 reaches the app (delivered after the flood, at the app's pace).
    poll(Duration::from_secs(120), "every 202 delivered", || async {
        let seen: HashSet<String> = app
            .state
            .events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.header("ce-id").to_owned())
            .collect();
        told.accepted
            .iter()
            .all(|id| seen.contains(id))
            .then_some(())
    })
    .await;
    let metrics = metrics_text(&client, ports.admin).await;
    let refused_bytes = metric(
        &metrics,
        "switchyard_admission_refused_total{reason=\"bytes\"}",
    );
    let (oom_kills, peak, failcnt) = (
        cgroup.oom_kills(),
        cgroup.peak(),
        cgroup.read("memory.failcnt"),
    );
    eprintln!(
        "[128 MiB] published {PUBLISHES} x 1 MiB, 202 {}, 503 {}, refused for bytes {refused_bytes}, cgroup peak {:.1} MiB (at ready {:.1} MiB), failcnt {}, oom kills {oom_kills}",
        told.accepted.len(),
        told.refused,
        peak as f64 / f64::from(1 << 20),
        idle as f64 / f64::from(1 << 20),
        failcnt.trim(),
    );
    alive(&mut receiver, &cgroup);
    assert!(told.other.is_empty(), "only 202 or 503: {:?}", told.other);
    assert!(told.refused > 0, "a flood past the byte budget gets 503s");
    assert_eq!(
        told.refused_without_retry_after, 0,
        "every 503 has Retry-After"
    );
    assert!(
        refused_bytes > 0.0,
        "the receiver counts its refusals for bytes"
    );
    assert!(!told.accepted.is_empty(), "some publishes were admitted");
    assert!(peak < LIMIT, "peak {peak} at the limit");
    drop(receiver);
}

/// Durable events the flood stores, each a payload of `PAD` bytes, and how long the app naps over
/// each.
const DURABLE_EVENTS: usize = 120;
const DURABLE_NAP_MS: u64 = 400;
/// The durable Manager's worker slots: more than its byte budget holds of 1 MiB events.
const DURABLE_SLOTS: i32 = 64;

/// Manager `queue`, durable `nap.orders` from the JetStream at `url`, `DURABLE_SLOTS` slots.
fn durable_config(app_port: u16, url: &str) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!("queue");
    cfg["events"] = json!(["nap.orders"]);
    cfg["durableEvents"] = json!(["nap.orders"]);
    cfg["workers"] = json!({
        "maxInFlight": DURABLE_SLOTS,
        "queueCapacity": 4,
        "timeout": "30s",
        "retries": {"attempts": 3, "backoff": "20ms", "maxBackoff": "200ms"},
    });
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

/// Durable events pulled count against the byte budget direct admission uses: a flood of 1 MiB
/// events stored in a durable Manager's stream, with more worker slots than its budget holds of
/// them and a slow app, never has more of them in the pod than the budget holds, all are delivered
/// once, and the sidecar's cgroup stays under its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_1_mib_durable_events_into_a_slow_manager_stays_within_its_byte_budget() {
    use switchyard_protocol::durable::{self as plan, Lane};
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let (servers, _relays) = nats::cluster_with(dir.path(), 1, "max_payload: 16842752", "").await;
    let url = nats::urls(&servers);
    let app = TestApp::start().await;
    let cgroup = MemCgroup::create(LIMIT, "durable");
    let cfg = write_json(dir.path(), "queue.json", &durable_config(app.port, &url));
    let mut sidecar = manager_in(&cgroup, &cfg, &dir.path().join("queue.log"));
    let ports = manager_ready(&mut sidecar).await;
    let budgets = sidecar.log_line("byte budgets from the memory limit").await;
    assert_eq!(budgets["admitted_events"], "48.0 MiB", "{budgets}");
    let budget: usize = 48 << 20;
    let js = async_nats::jetstream::new(async_nats::connect(url.as_str()).await.unwrap());
    poll(Duration::from_secs(30), "queue's stream", || {
        let js = js.clone();
        async move {
            js.get_stream(plan::stream_name("default", "queue"))
                .await
                .ok()
        }
    })
    .await;

    // The flood: stored as a publishing sidecar stores them, as fast as the server takes them.
    let body = bytes::Bytes::from(format!(
        "{{\"ms\":{DURABLE_NAP_MS},\"pad\":\"{}\"}}",
        "x".repeat(PAD)
    ));
    let subject = plan::subject("default", "queue", "nap.orders", Lane::Unordered);
    let mut acks = Vec::new();
    for i in 0..DURABLE_EVENTS {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("ce-id", format!("durable-{i}").as_str());
        acks.push(
            js.publish_with_headers(subject.clone(), headers, body.clone())
                .await
                .unwrap(),
        );
    }
    for ack in acks {
        ack.await.unwrap();
    }

    poll(
        Duration::from_secs(120),
        "every durable event delivered",
        || {
            assert_eq!(
                cgroup.oom_kills(),
                0,
                "the kernel OOM-killed the manager sidecar while it held the flood"
            );
            let n = app.state.seen("nap.orders").len();
            std::future::ready((n >= DURABLE_EVENTS).then_some(()))
        },
    )
    .await;
    let seen = app.state.seen("nap.orders");
    let distinct: HashSet<&str> = seen.iter().map(|e| e.header("ce-id")).collect();
    let metrics = metrics_text(&client, ports.admin).await;
    let redelivered = metric(
        &metrics,
        "switchyard_durable_redeliveries_total{event=\"nap.orders\"}",
    );
    // The most the budget holds at once: each event charged its payload, the server's count of
    // its subject and headers, and the per-event overhead.
    let held_at_most = budget / (body.len() + EVENT_OVERHEAD as usize);
    let at_once = app.state.peak("nap.orders");
    let (oom_kills, peak) = (cgroup.oom_kills(), cgroup.peak());
    eprintln!(
        "[128 MiB, durable] {DURABLE_EVENTS} x 1 MiB stored, {} deliveries ({} distinct, {redelivered} redelivered), at most {at_once} at the app at once of {DURABLE_SLOTS} slots (the 48.0 MiB budget holds {held_at_most}), cgroup peak {:.1} MiB, oom kills {oom_kills}",
        seen.len(),
        distinct.len(),
        peak as f64 / f64::from(1 << 20),
    );
    alive(&mut sidecar, &cgroup);
    assert_eq!(
        distinct.len(),
        DURABLE_EVENTS,
        "every stored event delivered"
    );
    assert_eq!(seen.len(), DURABLE_EVENTS, "each once");
    assert_eq!(redelivered, 0.0);
    assert!(
        at_once <= held_at_most,
        "{at_once} durable events held at once, more than the byte budget's {held_at_most}"
    );
    assert!(at_once > 1, "the lane pulls several at once");
    assert!(peak < LIMIT, "peak {peak} at the limit");
    drop(sidecar);
}

/// A manager sidecar with config `cfg` inside `cgroup`, every listener on a port the kernel picks,
/// logging to `log`.
fn manager_in(cgroup: &MemCgroup, cfg: &std::path::Path, log: &std::path::Path) -> Proc {
    Proc::spawn_in_cgroup(
        &cgroup.procs(),
        &[
            "manager",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--local-api-addr",
            "127.0.0.1:0",
        ],
        log.to_path_buf(),
        &[],
    )
}
