//! Delivery guarantees under crashes, with real sidecar processes (and real NATS JetStream servers)
//! on loopback: an app publishes through its sidecar's local API at a steady rate while the
//! receiving manager sidecar is killed with SIGKILL, then its app, then (durable mode) one server
//! of a 3-node JetStream cluster. Bounded in count and time; each run prints its counts.
//!
//! - durable: every publish answered 202 is delivered at least once; duplicates are counted and
//!   deduplicated by ce-id; none is lost.
//! - default (in memory): every publish is 202 and delivered, or refused with 503; what is lost
//!   after its 202 is only what the killed pod had admitted, all of it among the publishes the
//!   sender reported unconfirmed, whose count is `switchyard_published_unconfirmed_total`.
//! - two senders at full load against one small manager: no event is shed after its 202.

#![allow(clippy::unwrap_used)]

mod common;

use common::nats::{self, NatsServer};
use common::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Publishes per chaos run, and their rate.
const PUBLISHES: usize = 20_000;
const RATE_PER_SEC: u64 = 2_000;
/// Publishes under way at once (the local API takes 1024).
const CONCURRENCY: usize = 128;
/// How long a killed app stays down before its supervisor (the kubelet, here the test) restarts it:
/// well within the receiver's retry budget (20 attempts, backoff up to 500 ms).
const APP_DOWN: Duration = Duration::from_millis(300);
/// Time every 202 gets to show up at the app once publishing is over (in memory).
const SETTLE: Duration = Duration::from_secs(90);
/// A durable backlog drains at the pace of the receiver, and the stream's replication goes through
/// the test's route relays: on two loaded cores, in a debug build, a few hundred events a second,
/// so 20,000 take longer than [`SETTLE`]. The wait is on progress instead: acknowledged events still
/// missing once the app has received nothing new for this long are lost (a redelivery comes
/// within AckWait, 4 s here, and a reopened pull within 5 s)...
const STALLED: Duration = Duration::from_secs(30);
/// ...and within this bound in any case.
const DRAIN_MAX: Duration = Duration::from_secs(300);

/// The receiving Manager: `orders`, delivered durably or not, retried long enough to outlast an app
/// restart.
fn receiver_config(app_port: u16, jetstream: Option<&str>, queue: i32, in_flight: i32) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["events"] = json!(["orders"]);
    cfg["workers"] = json!({
        "maxInFlight": in_flight,
        "queueCapacity": queue,
        "timeout": "2s",
        "retries": {"attempts": 20, "backoff": "20ms", "maxBackoff": "500ms"},
    });
    if let Some(url) = jetstream {
        cfg["durableEvents"] = json!(["orders"]);
        cfg["jetstream"] = json!({"url": url, "replicas": 3});
    }
    cfg
}

/// A publishing Manager (`sender`, handling an unused type, its app never called at `app_port`)
/// whose `orders` go to `handlers`.
fn sender_config(name: &str, app_port: u16, receiver_port: u16, jetstream: Option<&str>) -> Value {
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!(name);
    cfg["events"] = json!([format!("{name}.unused")]);
    let mut dest = json!({"manager": "handlers", "service": "handlers", "port": receiver_port, "podSelector": {}});
    if let Some(url) = jetstream {
        dest["durable"] = json!({});
        cfg["jetstream"] = json!({"url": url, "replicas": 3});
    }
    cfg["destinations"] = json!({ "orders": dest });
    cfg["staticEndpoints"] = json!({"handlers": [format!("127.0.0.1:{receiver_port}")]});
    cfg
}

/// A manager sidecar, restartable on the ports its first life bound (port 0 then).
struct Sidecar {
    cfg: PathBuf,
    dir: PathBuf,
    ports: Option<ManagerPorts>,
    proc: Option<Proc>,
    lives: usize,
    env: &'static [(&'static str, &'static str)],
}

impl Sidecar {
    fn new(dir: &Path, name: &str, cfg: &Value) -> Sidecar {
        let cfg = write_json(dir, &format!("{name}.json"), cfg);
        Sidecar {
            cfg,
            dir: dir.join(name),
            ports: None,
            proc: None,
            lives: 0,
            env: &[],
        }
    }

    /// Starts it and waits for its ready line.
    async fn start(&mut self) {
        self.lives += 1;
        let dir = self.dir.join(format!("life{}", self.lives));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = match self.ports {
            None => spawn_manager(&dir, &self.cfg, self.env),
            Some(ports) => spawn_manager_at(&dir, &self.cfg, ports, self.env),
        };
        let bound = manager_ready(&mut p).await;
        assert!(self.ports.is_none_or(|was| was == bound), "{bound:?}");
        self.ports = Some(bound);
        self.proc = Some(p);
    }

    fn ports(&self) -> ManagerPorts {
        self.ports.expect("started")
    }

    /// SIGKILL: nothing is drained, nothing is flushed.
    fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    fn publish_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/v1/publish/orders",
            self.ports().local_api
        )
    }

    async fn metric(&self, client: &Http, name: &str) -> f64 {
        let r = client
            .get(&format!("http://127.0.0.1:{}/metrics", self.ports().admin))
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&r.body).into_owned();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn log(&self) -> Vec<Value> {
        self.proc.as_ref().map(Proc::log_lines).unwrap_or_default()
    }

    /// The log lines of every life so far.
    fn all_logs(&self) -> Vec<Value> {
        (1..=self.lives)
            .flat_map(|life| {
                let text = std::fs::read_to_string(
                    self.dir.join(format!("life{life}")).join("manager.log"),
                )
                .unwrap_or_default();
                text.lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect::<Vec<Value>>()
            })
            .collect()
    }
}

/// What the publisher was told, per ce-id.
#[derive(Default)]
struct Told {
    accepted: HashSet<String>,
    refused: usize,
    other: BTreeMap<u16, usize>,
}

/// Publishes at `RATE_PER_SEC`, paced from its start; the test runs its crashes between calls of
/// [`Publisher::until`] while the publishes already sent are still under way.
struct Publisher {
    client: Http,
    url: String,
    tag: &'static str,
    next: usize,
    start: Instant,
    told: Arc<Mutex<Told>>,
    limit: Arc<Semaphore>,
    tasks: tokio_util::task::TaskTracker,
}

impl Publisher {
    fn new(client: &Http, url: String, tag: &'static str) -> Publisher {
        Publisher {
            client: client.clone(),
            url,
            tag,
            next: 0,
            start: Instant::now(),
            told: Arc::default(),
            limit: Arc::new(Semaphore::new(CONCURRENCY)),
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Sends publishes up to (not including) number `upto`, each when it is due.
    async fn until(&mut self, upto: usize) {
        while self.next < upto {
            let i = self.next;
            self.next += 1;
            let due = self.start + Duration::from_micros(i as u64 * 1_000_000 / RATE_PER_SEC);
            tokio::time::sleep_until(due.into()).await;
            let permit = self.limit.clone().acquire_owned().await.unwrap();
            let (client, url, told) = (self.client.clone(), self.url.clone(), self.told.clone());
            let ce_id = format!("{}-{i}", self.tag);
            self.tasks.spawn(async move {
                let req = hyper::Request::post(&url)
                    .header("content-type", "application/json")
                    .header("ce-id", &ce_id)
                    .body(http_body_util::Full::new(bytes::Bytes::from(format!(
                        "{{\"n\":{i}}}"
                    ))))
                    .unwrap();
                let status = client.send(req).await.map(|r| r.status).unwrap_or(0);
                let mut t = told.lock().unwrap();
                match status {
                    202 => {
                        t.accepted.insert(ce_id);
                    }
                    503 => t.refused += 1,
                    s => *t.other.entry(s).or_default() += 1,
                }
                drop(permit);
            });
        }
    }

    /// Waits for every answer.
    async fn finish(self) -> Told {
        self.tasks.close();
        self.tasks.wait().await;
        std::mem::take(&mut *self.told.lock().unwrap())
    }
}

/// The app's restart, `down` after its kill, while publishing goes on.
async fn restart_after(app: &TestApp, down: Duration) {
    tokio::time::sleep(down).await;
    app.listen().await;
}

/// Waits until the app has seen every event acknowledged with a 202, as long as deliveries keep
/// coming; returns the deliveries by ce-id. Panics with why, should they stop with some missing.
async fn every_delivery(
    app: &TestApp,
    told: &Told,
    (receiver, sender): (&Sidecar, &Sidecar),
    client: &Http,
    servers: &[NatsServer],
) -> HashMap<String, usize> {
    let start = Instant::now();
    let mut unseen = Unseen::of(&told.accepted);
    let mut progress = (0, Instant::now());
    loop {
        if unseen.update(app) {
            eprintln!(
                "[durable] every 202 delivered {:?} after the last answer",
                start.elapsed()
            );
            return delivered(app);
        }
        if unseen.scanned > progress.0 {
            progress = (unseen.scanned, Instant::now());
        }
        if progress.1.elapsed() > STALLED || start.elapsed() > DRAIN_MAX {
            let seen = delivered(app);
            let why = undelivered(told, &seen, receiver, sender, client, servers).await;
            panic!(
                "202 but not delivered: nothing new for {:?}, {:?} after the last answer ({} deliveries in all): {why}{}",
                progress.1.elapsed(),
                start.elapsed(),
                unseen.scanned,
                pace(app, start)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The app's deliveries per 5 s, counted from `start` (negative: before it).
fn pace(app: &TestApp, start: Instant) -> String {
    let mut per5s: BTreeMap<i64, usize> = BTreeMap::new();
    for e in app.state.events.lock().unwrap().iter() {
        let secs = match e.at.checked_duration_since(start) {
            Some(after) => after.as_secs() as i64,
            None => -((start - e.at).as_secs() as i64) - 1,
        };
        *per5s.entry(secs.div_euclid(5) * 5).or_default() += 1;
    }
    format!("deliveries per 5 s from the last answer: {per5s:?}\n")
}

/// The acknowledged ce-ids the app has not seen yet. Each update reads only the events that came
/// since the last, so a poll every 20 ms costs what arrived meanwhile rather than all 20,000 events
/// under the lock the app takes for each delivery.
struct Unseen {
    left: HashSet<String>,
    scanned: usize,
}

impl Unseen {
    fn of(accepted: &HashSet<String>) -> Unseen {
        Unseen {
            left: accepted.clone(),
            scanned: 0,
        }
    }

    /// Reads what the app received since the last call; whether every one has come.
    fn update(&mut self, app: &TestApp) -> bool {
        let events = app.state.events.lock().unwrap();
        for e in &events[self.scanned..] {
            self.left.remove(e.header("ce-id"));
        }
        self.scanned = events.len();
        self.left.is_empty()
    }
}

/// Deliveries the app saw, by ce-id.
fn delivered(app: &TestApp) -> HashMap<String, usize> {
    let mut by_id = HashMap::new();
    for e in app.state.events.lock().unwrap().iter() {
        *by_id.entry(e.header("ce-id").to_owned()).or_default() += 1;
    }
    by_id
}

struct Counts {
    published: usize,
    accepted: usize,
    refused: usize,
    delivered: usize,
    duplicates: usize,
    lost: Vec<String>,
}

fn count(told: &Told, published: usize, seen: &HashMap<String, usize>) -> Counts {
    let lost: Vec<String> = told
        .accepted
        .iter()
        .filter(|id| !seen.contains_key(*id))
        .cloned()
        .collect();
    Counts {
        published,
        accepted: told.accepted.len(),
        refused: told.refused,
        delivered: seen.len(),
        duplicates: seen.values().map(|n| n - 1).sum(),
        lost,
    }
}

fn print(mode: &str, c: &Counts) {
    eprintln!(
        "[{mode}] published {}, 202 {}, 503 {}, delivered (distinct ce-ids) {}, duplicates {}, lost after 202 {}",
        c.published,
        c.accepted,
        c.refused,
        c.delivered,
        c.duplicates,
        c.lost.len()
    );
}

/// Why acknowledged events are still missing: how many, which (their numbers say in which phase
/// they were published), what every life of the receiver and the sender logged about them and
/// its warnings, and what the JetStream servers still running say of the consumers.
async fn undelivered(
    told: &Told,
    seen: &HashMap<String, usize>,
    receiver: &Sidecar,
    sender: &Sidecar,
    client: &Http,
    servers: &[NatsServer],
) -> String {
    let mut missing: Vec<&String> = told
        .accepted
        .iter()
        .filter(|id| !seen.contains_key(*id))
        .collect();
    missing.sort_by_key(|id| id.rsplit('-').next().and_then(|n| n.parse::<usize>().ok()));
    let mut out = format!(
        "{} of {} missing, the first: {:?}\n",
        missing.len(),
        told.accepted.len(),
        missing.iter().take(20).collect::<Vec<_>>()
    );
    for (who, lines) in [
        ("receiver", receiver.all_logs()),
        ("sender", sender.all_logs()),
    ] {
        let about: Vec<&Value> = lines
            .iter()
            .filter(|l| {
                l["fields"]["ce_id"]
                    .as_str()
                    .is_some_and(|id| missing.iter().any(|m| m.as_str() == id))
            })
            .take(10)
            .collect();
        let mut warnings: BTreeMap<String, usize> = BTreeMap::new();
        for l in lines.iter().filter(|l| l["level"] != "INFO") {
            let m = l["fields"]["message"].as_str().unwrap_or("?").to_owned();
            *warnings.entry(m).or_default() += 1;
        }
        out += &format!("the {who} said of them: {about:#?}\nits warnings: {warnings:#?}\n");
    }
    let metrics = client
        .get(&format!(
            "http://127.0.0.1:{}/metrics",
            receiver.ports().admin
        ))
        .await
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_else(|e| e.to_string());
    let gauges: Vec<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            [
                "in_flight",
                "queued",
                "admission_budget",
                "held_requests",
                "redeliveries",
                "retries",
                "dead_letter",
                "shed",
            ]
            .iter()
            .any(|m| l.contains(m))
        })
        .collect();
    out += &format!("the receiver's figures: {gauges:#?}\n");
    let last = receiver.log();
    let tail: Vec<String> = last[last.len().saturating_sub(40)..]
        .iter()
        .map(|l| l.to_string())
        .collect();
    out += &format!("the receiver's last lines: {tail:#?}\n");
    for s in servers.iter().filter(|s| s.running()) {
        let jsz = client
            .get(&format!(
                "http://127.0.0.1:{}/jsz?consumers=true",
                s.monitor
            ))
            .await
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .unwrap_or_else(|e| e.to_string());
        out += &format!("server {} /jsz: {jsz}\n", s.port);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_mode_loses_nothing_acknowledged_through_three_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let (mut servers, _routes): (Vec<NatsServer>, _) = nats::cluster(dir.path(), 3).await;
    let url = nats::urls(&servers);
    let app = TestApp::start().await;
    let mut receiver = Sidecar::new(
        dir.path(),
        "handlers",
        &receiver_config(app.port, Some(&url), 64, 16),
    );
    // What its durable lanes did, should an event not arrive.
    receiver.env = &[(
        "RUST_LOG",
        "info,switchyard_sidecar::manager::durable=debug",
    )];
    receiver.start().await;
    let no_app = ClosedPort::new();
    let mut sender = Sidecar::new(
        dir.path(),
        "sender",
        &sender_config("sender", no_app.port, receiver.ports().listen, Some(&url)),
    );
    sender.start().await;
    // The stream exists once the receiver's consumers are pulling: wait for a first event through.
    poll(Duration::from_secs(30), "a first durable event", || async {
        let r = client
            .post(&sender.publish_url(), "application/json", "{}")
            .await
            .ok()?;
        (r.status == 202).then_some(())
    })
    .await;
    poll(
        Duration::from_secs(30),
        "the first event delivered",
        || async { (!app.state.events.lock().unwrap().is_empty()).then_some(()) },
    )
    .await;
    app.state.events.lock().unwrap().clear();

    let mut p = Publisher::new(&client, sender.publish_url(), "d");
    p.until(PUBLISHES / 4).await;
    receiver.kill9();
    receiver.start().await;
    p.until(PUBLISHES / 2).await;
    app.kill();
    tokio::join!(
        p.until(PUBLISHES / 2 + 2_000),
        restart_after(&app, APP_DOWN)
    );
    p.until(3 * PUBLISHES / 4).await;
    servers[0].kill();
    p.until(PUBLISHES).await;
    let told = p.finish().await;
    let settled = every_delivery(&app, &told, (&receiver, &sender), &client, &servers).await;
    let c = count(&told, PUBLISHES, &settled);
    print("durable", &c);
    assert!(told.other.is_empty(), "only 202 or 503: {:?}", told.other);
    assert!(c.lost.is_empty(), "lost after 202: {:?}", c.lost);
    assert!(
        c.accepted > PUBLISHES / 2,
        "most publishes accepted: {}",
        c.accepted
    );
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_mode_loses_only_what_the_killed_pod_had_admitted_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let app = TestApp::start().await;
    let mut receiver = Sidecar::new(
        dir.path(),
        "handlers",
        &receiver_config(app.port, None, 256, 16),
    );
    receiver.start().await;
    let no_app = ClosedPort::new();
    let mut sender = Sidecar::new(
        dir.path(),
        "sender",
        &sender_config("sender", no_app.port, receiver.ports().listen, None),
    );
    sender.start().await;
    poll(Duration::from_secs(30), "the sender connected", || async {
        let r = client
            .post(&sender.publish_url(), "application/json", "{}")
            .await
            .ok()?;
        (r.status == 202).then_some(())
    })
    .await;
    poll(
        Duration::from_secs(30),
        "the first event delivered",
        || async { (!app.state.events.lock().unwrap().is_empty()).then_some(()) },
    )
    .await;
    app.state.events.lock().unwrap().clear();

    let mut p = Publisher::new(&client, sender.publish_url(), "m");
    p.until(PUBLISHES / 3).await;
    receiver.kill9();
    receiver.start().await;
    p.until(2 * PUBLISHES / 3).await;
    app.kill();
    tokio::join!(
        p.until(2 * PUBLISHES / 3 + 2_000),
        restart_after(&app, APP_DOWN)
    );
    p.until(PUBLISHES).await;
    let told = p.finish().await;
    // Settled: every 202 is delivered or among the sender's unconfirmed ones (and those never come).
    let unconfirmed_of = |log: Vec<Value>| -> HashSet<String> {
        log.iter()
            .map(|l| &l["fields"])
            .filter(|f| f["message"] == "acknowledged publish unconfirmed")
            .filter_map(|f| f["ce_id"].as_str().map(str::to_owned))
            .collect()
    };
    let settle_until = Instant::now() + SETTLE;
    let unconfirmed = loop {
        let unconfirmed = unconfirmed_of(sender.log());
        let seen = delivered(&app);
        let missing: Vec<&String> = told
            .accepted
            .iter()
            .filter(|id| !seen.contains_key(*id) && !unconfirmed.contains(*id))
            .collect();
        if missing.is_empty() {
            break unconfirmed;
        }
        if Instant::now() > settle_until {
            let mut few: Vec<_> = missing.into_iter().take(20).collect();
            few.sort();
            let log = receiver.log();
            let why: Vec<&Value> = log
                .iter()
                .filter(|l| few.iter().any(|id| l["fields"]["ce_id"] == id.as_str()))
                .take(10)
                .collect();
            panic!(
                "202 but neither delivered nor reported unconfirmed after {SETTLE:?}: {few:?}; unconfirmed {}; the receiver said: {why:#?}",
                unconfirmed.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let seen = delivered(&app);
    let c = count(&told, PUBLISHES, &seen);
    let metric = sender
        .metric(&client, "switchyard_published_unconfirmed_total")
        .await;
    print("default", &c);
    eprintln!(
        "[default] unconfirmed (admitted in the killed pod, metric) {metric}, of which delivered anyway {}",
        unconfirmed
            .iter()
            .filter(|id| seen.contains_key(*id))
            .count()
    );
    assert!(told.other.is_empty(), "only 202 or 503: {:?}", told.other);
    assert_eq!(
        metric as usize,
        unconfirmed.len(),
        "the metric counts each unconfirmed publish"
    );
    for id in &c.lost {
        assert!(
            unconfirmed.contains(id),
            "{id} lost after 202 but never reported unconfirmed"
        );
    }
    assert!(
        c.accepted > PUBLISHES / 2,
        "most publishes accepted: {}",
        c.accepted
    );
    // The receiver's second life saw none of its first life's queue, so only the kill loses.
    assert!(
        c.lost.len() <= 256 + 16,
        "at most what one pod admits: {}",
        c.lost.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_senders_at_full_load_never_see_an_event_shed_after_its_202() {
    let dir = tempfile::tempdir().unwrap();
    let client = Http::new();
    let app = TestApp::start().await;
    // A small pod: 8 queued + 2 in flight, against 2 x 128 publishers.
    let mut receiver = Sidecar::new(
        dir.path(),
        "handlers",
        &receiver_config(app.port, None, 8, 2),
    );
    receiver.start().await;
    let (no_app, port) = (ClosedPort::new(), receiver.ports().listen);
    let mut a = Sidecar::new(
        dir.path(),
        "a",
        &sender_config("a", no_app.port, port, None),
    );
    let mut b = Sidecar::new(
        dir.path(),
        "b",
        &sender_config("b", no_app.port, port, None),
    );
    a.start().await;
    b.start().await;
    for s in [&a, &b] {
        poll(Duration::from_secs(30), "a sender connected", || async {
            let r = client
                .post(&s.publish_url(), "application/json", "{}")
                .await
                .ok()?;
            (r.status == 202).then_some(())
        })
        .await;
    }
    let (mut pa, mut pb) = (
        Publisher::new(&client, a.publish_url(), "a"),
        Publisher::new(&client, b.publish_url(), "b"),
    );
    tokio::join!(pa.until(3_000), pb.until(3_000));
    let (told_a, told_b) = tokio::join!(pa.finish(), pb.finish());
    let accepted: HashSet<String> = told_a.accepted.union(&told_b.accepted).cloned().collect();
    poll(SETTLE, "every 202 delivered", || async {
        let seen = delivered(&app);
        accepted
            .iter()
            .all(|id| seen.contains_key(id))
            .then_some(())
    })
    .await;
    let shed = receiver.metric(&client, "switchyard_shed_total").await;
    eprintln!(
        "[two senders] published 6000, 202 {}, 503 {}, shed after 202 {shed}",
        accepted.len(),
        told_a.refused + told_b.refused
    );
    assert!(
        told_a.other.is_empty() && told_b.other.is_empty(),
        "{:?} {:?}",
        told_a.other,
        told_b.other
    );
    assert_eq!(
        shed, 0.0,
        "the receiver shed events although every sender had credit"
    );
    assert!(
        !told_a.accepted.is_empty() && !told_b.accepted.is_empty(),
        "both senders got a share"
    );
}
