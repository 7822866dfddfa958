//! A history run: a 3-node NATS cluster (R3 streams), a publisher sidecar, the handler Manager
//! `orders` and the durable subscriber `billing` (2 pods each), a load of publishes with ordering
//! keys and keys reused across two types, and faults on a schedule. Returns the recorded history.

use super::cluster::Cluster;
use super::pods::Pod;
use super::record::{EventId, Fault, History, Publish, Receiver, Target};
use crate::common::*;
use http_body_util::Full;
use hyper::Request;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::durable as plan;

pub const TYPES: [&str; 2] = ["ordered", "shipped"];
/// The publishing Managers: both use the same ce-ids and key names, each in its own scope.
const PUBLISHERS: [&str; 2] = ["front", "kiosk"];
/// Publishing tasks per publisher; each owns `KEYS` ordering keys and publishes each key's events
/// one after the other (the next only after the previous one's final answer).
const WORKERS: usize = 4;
const KEYS: usize = 3;
/// Attempts per event (a 503 is retried with the same ce-id and payload, as a client should).
const ATTEMPTS: usize = 8;
/// How long a killed process stays down, a paused node stopped, a partition cut.
const DOWN: Duration = Duration::from_secs(1);
const NATS_DOWN: Duration = Duration::from_secs(2);
const PARTITIONED: Duration = Duration::from_secs(3);
/// Load before each fault, so every fault lands on events in flight.
const BETWEEN: Duration = Duration::from_secs(1);

/// The faults, in the order a run injects them (round robin): the first four are the short run's.
#[derive(Clone, Copy, Debug)]
enum Kind {
    KillSidecar(&'static str),
    KillStreamLeader,
    KillApp(&'static str),
    Partition,
    Pause,
    KillNats,
    KillMetaLeader,
    Rollout(&'static str),
}

const SCHEDULE: [Kind; 10] = [
    Kind::KillSidecar("orders-0"),
    Kind::KillStreamLeader,
    Kind::KillApp("billing-1"),
    Kind::Partition,
    Kind::Rollout("orders-1"),
    Kind::Pause,
    Kind::KillNats,
    Kind::KillSidecar("billing-0"),
    Kind::KillMetaLeader,
    Kind::KillApp("orders-1"),
];

fn manager_cfg(name: &str, app_port: u16, url: &str) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!(name);
    cfg["jetstream"] = json!({"url": url, "replicas": 3});
    // AckWait is the timeout plus 2 s: a killed pod's events come back within 4 s. Retries outlast
    // an app's restart, so nothing is dead-lettered.
    cfg["workers"] = json!({
        "maxInFlight": 16, "queueCapacity": 64, "timeout": "2s", "orderingKey": "/key",
        "retries": {"attempts": 20, "backoff": "20ms", "maxBackoff": "500ms"},
    });
    if name == "orders" {
        cfg["events"] = json!(TYPES);
        cfg["durableEvents"] = json!(TYPES);
    } else {
        cfg["events"] = json!([format!("{name}.own")]);
        cfg["subscriptions"] = json!(TYPES.map(|t| json!({"event": t, "delivery": "durable"})));
    }
    cfg
}

/// The publisher's table as the operator renders it: durable routes to `orders` and a durable
/// subscription of `billing` per type; no frame is ever sent to `nowhere`.
fn front_cfg(name: &str, app_port: u16, url: &str, nowhere: u16) -> Value {
    let mut cfg = manager_cfg(name, app_port, url);
    cfg["subscriptions"] = json!([]);
    let dest = |m: &str| json!({"manager": m, "service": m, "port": nowhere, "podSelector": {}, "durable": {"orderingKey": "/key"}});
    let mut subscribers = serde_json::Map::new();
    let mut destinations = serde_json::Map::new();
    for t in TYPES {
        destinations.insert(t.into(), dest("orders"));
        subscribers.insert(
            format!("{t}@billing"),
            json!({"subscription": {"event": t, "delivery": "durable"}, "destination": dest("billing")}),
        );
    }
    cfg["destinations"] = Value::Object(destinations);
    cfg["subscribers"] = Value::Object(subscribers);
    let at = json!([format!("127.0.0.1:{nowhere}")]);
    cfg["staticEndpoints"] = json!({"orders": at, "billing": at});
    cfg
}

pub struct World {
    t0: Instant,
    cluster: Cluster,
    pods: Vec<Pod>,
    fronts: Vec<Pod>,
    js: async_nats::jetstream::Context,
    http: Http,
    faults: Vec<Fault>,
    _nowhere: ClosedPort,
}

impl World {
    pub async fn start(dir: &Path) -> World {
        let cluster = Cluster::start(dir).await;
        let url = cluster.urls();
        let nowhere = ClosedPort::new();
        let mut fronts = Vec::new();
        for name in PUBLISHERS {
            fronts.push(Pod::start(dir, name, 0, |p| front_cfg(name, p, &url, nowhere.port)).await);
        }
        let mut pods = Vec::new();
        for m in ["orders", "billing"] {
            for i in 0..2 {
                pods.push(Pod::start(dir, m, i, |p| manager_cfg(m, p, &url)).await);
            }
        }
        let servers: Vec<async_nats::ServerAddr> =
            url.split(',').map(|u| u.parse().unwrap()).collect();
        let js = async_nats::jetstream::new(async_nats::connect(servers).await.unwrap());
        World {
            t0: Instant::now(),
            cluster,
            pods,
            fronts,
            js,
            http: Http::new(),
            faults: Vec::new(),
            _nowhere: nowhere,
        }
    }

    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    fn pod(&mut self, name: &str) -> &mut Pod {
        self.pods.iter_mut().find(|p| p.name == name).unwrap()
    }

    /// Publishes until `stop`, recording every attempt.
    pub fn publish(&self, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Publish>> {
        let (t0, http) = (self.t0, self.http.clone());
        let apis: Vec<(u16, &'static str)> = self
            .fronts
            .iter()
            .map(|f| (f.local_api, f.manager))
            .collect();
        tokio::spawn(async move {
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for (api, publisher) in apis.into_iter().flat_map(|a| [a; WORKERS]) {
                let w = tasks.len() % WORKERS;
                let (stop, http, log) = (stop.clone(), http.clone(), log.clone());
                tasks.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("k{w}-{}", n % KEYS as u64);
                        let seq = n / KEYS as u64;
                        let id = format!("e{w}-{n}");
                        // Every fourth ce-id (over all of the worker's keys, as 4 and `KEYS` are
                        // coprime) is reused for the second type: two events, one key.
                        let types: &[&str] = if n.is_multiple_of(4) {
                            &TYPES
                        } else {
                            &TYPES[..1]
                        };
                        for t in types {
                            let event = EventId {
                                ce_type: (*t).into(),
                                source: format!("/switchyard/default/{publisher}"),
                                id: id.clone(),
                            };
                            publish_event(&http, api, t0, event, &key, seq, &log).await;
                        }
                        n += 1;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            Arc::try_unwrap(log).unwrap().into_inner().unwrap()
        })
    }

    /// Injects fault `n` of the schedule, heals it and waits for the cluster to be healthy again.
    pub async fn fault(&mut self, n: usize) {
        // Each round of the schedule moves every node fault on by one node.
        let node = (n + n / SCHEDULE.len()) % 3;
        tokio::time::sleep(BETWEEN).await;
        let start = self.now();
        let (what, target) = match SCHEDULE[n % SCHEDULE.len()] {
            Kind::KillSidecar(pod) => {
                let p = self.pod(pod);
                p.kill_sidecar();
                tokio::time::sleep(DOWN).await;
                p.start_sidecar().await;
                let m = p.manager.to_owned();
                (format!("kill -9 sidecar {pod}"), Target::Manager(m))
            }
            Kind::KillApp(pod) => {
                let p = self.pod(pod);
                p.app.kill();
                tokio::time::sleep(DOWN).await;
                p.app.listen().await;
                let m = p.manager.to_owned();
                (format!("kill -9 app {pod}"), Target::Manager(m))
            }
            Kind::Rollout(pod) => {
                let p = self.pod(pod);
                let code = p.roll().await;
                assert_eq!(code, Some(0), "{pod}'s sidecar drained and exited");
                let m = p.manager.to_owned();
                (
                    format!("rollout {pod} (SIGTERM, drain)"),
                    Target::Graceful(m),
                )
            }
            Kind::KillNats => (self.kill_node(node).await, Target::Nats),
            Kind::KillStreamLeader => {
                let leader = self.stream_leader().await;
                let i = self.cluster.index(&leader).unwrap_or(node);
                (
                    format!("{} (orders' stream leader)", self.kill_node(i).await),
                    Target::Nats,
                )
            }
            Kind::KillMetaLeader => {
                let leader = self.meta_leader().await;
                let i = self.cluster.index(&leader).unwrap_or(node);
                (
                    format!("{} (meta leader)", self.kill_node(i).await),
                    Target::Nats,
                )
            }
            Kind::Pause => {
                self.cluster.pause(node);
                tokio::time::sleep(NATS_DOWN).await;
                self.cluster.resume(node);
                (format!("SIGSTOP n{node} for {NATS_DOWN:?}"), Target::Nats)
            }
            Kind::Partition => {
                self.cluster.partition(node, true);
                tokio::time::sleep(PARTITIONED).await;
                self.cluster.partition(node, false);
                (
                    format!("partition n{node} for {PARTITIONED:?}"),
                    Target::Nats,
                )
            }
        };
        // Healed once every node says so again: a fault's effects (a node catching up, routes
        // reconnecting, leaders elected) last past the moment it was undone.
        self.cluster.wait_healthy(Duration::from_secs(90)).await;
        let end = self.now();
        self.faults.push(Fault {
            what,
            target,
            start,
            end,
        });
    }

    async fn kill_node(&mut self, i: usize) -> String {
        self.cluster.kill(i);
        tokio::time::sleep(NATS_DOWN).await;
        self.cluster.restart(i);
        format!("kill -9 n{i} for {NATS_DOWN:?}")
    }

    /// The server leading `orders`' stream, as JetStream reports it.
    async fn stream_leader(&self) -> String {
        let name = plan::stream_name("default", "orders");
        let mut stream = self.js.get_stream(name).await.unwrap();
        let info = stream.info().await.unwrap();
        info.cluster
            .as_ref()
            .and_then(|c| c.leader.clone())
            .unwrap_or_default()
    }

    /// The JetStream meta leader, from a node's `/jsz`.
    async fn meta_leader(&self) -> String {
        self.cluster.meta_leader(&self.http).await
    }

    /// The history so far: publishes given, deliveries read from every app.
    pub fn history(&self, publishes: &[Publish]) -> History {
        let mut deliveries = Vec::new();
        for p in &self.pods {
            deliveries.extend(p.deliveries(self.t0, &TYPES));
        }
        let types = TYPES.map(str::to_owned).to_vec();
        History {
            publishes: publishes.to_vec(),
            deliveries,
            faults: self.faults.clone(),
            receivers: ["orders", "billing"]
                .map(|m| Receiver {
                    manager: m.into(),
                    types: types.clone(),
                    ordered: true,
                })
                .to_vec(),
        }
    }
}

/// One event: attempts until a 202 or `ATTEMPTS`, each recorded.
async fn publish_event(
    http: &Http,
    api: u16,
    t0: Instant,
    event: EventId,
    key: &str,
    seq: u64,
    log: &Mutex<Vec<Publish>>,
) {
    let body = json!({"key": key, "seq": seq, "type": event.ce_type}).to_string();
    for _ in 0..ATTEMPTS {
        let req = Request::post(format!(
            "http://127.0.0.1:{api}/v1/publish/{}",
            event.ce_type
        ))
        .header("content-type", "application/json")
        .header("ce-id", &event.id)
        .body(Full::new(bytes::Bytes::from(body.clone())))
        .unwrap();
        let sent = t0.elapsed();
        let status = match tokio::time::timeout(Duration::from_secs(15), http.send(req)).await {
            Ok(Ok(r)) => r.status,
            _ => 0,
        };
        log.lock().unwrap().push(Publish {
            event: event.clone(),
            key: key.to_owned(),
            seq,
            status,
            sent,
        });
        if status == 202 {
            return;
        }
        // A client's pause before its retry (the 503 asks for one), not a wait for a condition.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
