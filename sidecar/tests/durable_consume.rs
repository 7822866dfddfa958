//! The consuming side of durable delivery, with a real nats-server, real manager sidecar processes
//! and the test app: events are stored straight into Manager `queue`'s stream (as a publishing
//! sidecar stores them) and pulled by `queue`'s sidecar.
//!
//! - Several durable types on one worker slot, with a slow app: a lane pulls only on a slot, so no
//!   event waits pulled past AckWait; each is seen once and none is redelivered.
//! - An attempt longer than AckWait is kept by progress acks: seen once.
//! - A poison event that fails every attempt ends in the dead-letter type (Manager `graveyard`'s
//!   stream, which nobody consumes here) and leaves `queue`'s stream.
//! - An event whose pod is killed during each attempt (the app's poison takes the pod down) is
//!   dead-lettered by the pod that receives it after its last attempt, without another attempt.
//! - A drain withdraws the idle lanes' waiting pull requests while events keep being stored: what a
//!   withdrawn request had brought is delivered by the draining pod, the rest by the next one, each
//!   once and none redelivered (an event lost between the server and a withdrawn request would come
//!   back to the next pod after AckWait, as a redelivery).

#![allow(clippy::unwrap_used)]

mod common;

use async_nats::jetstream;
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use switchyard_protocol::durable::{self as plan, Lane};

const NAMESPACE: &str = "default";

/// Manager `queue`: durable `events`, `max_in_flight` slots, `attempts` of `timeout` each, dead
/// letters to type `dead` kept durably in Manager `graveyard`'s stream (`nowhere` is its never
/// listening endpoint).
fn queue_config(
    app_port: u16,
    url: &str,
    events: &[&str],
    workers: (i32, &str, u32),
    nowhere: u16,
) -> Value {
    let (max_in_flight, timeout, attempts) = workers;
    let mut cfg = manager_config(app_port, &Opts::default());
    cfg["name"] = json!("queue");
    cfg["events"] = json!(events);
    cfg["durableEvents"] = json!(events);
    cfg["workers"] = json!({
        "maxInFlight": max_in_flight,
        "queueCapacity": 4,
        "timeout": timeout,
        "retries": {"attempts": attempts, "backoff": "10ms", "maxBackoff": "50ms"},
        "deadLetter": "dead",
    });
    cfg["destinations"] = json!({"dead": {
        "manager": "graveyard", "service": "graveyard", "port": nowhere,
        "podSelector": {}, "durable": {},
    }});
    cfg["staticEndpoints"] = json!({"graveyard": [format!("127.0.0.1:{nowhere}")]});
    cfg["jetstream"] = json!({"url": url, "replicas": 1});
    cfg
}

/// One run: a nats-server, the app, `queue`'s config and a client of the server.
struct Run {
    dir: tempfile::TempDir,
    _servers: Vec<nats::NatsServer>,
    app: std::sync::Arc<TestApp>,
    cfg: PathBuf,
    js: jetstream::Context,
    client: Http,
    lives: usize,
    _nowhere: ClosedPort,
}

impl Run {
    async fn start(events: &[&str], workers: (i32, &str, u32)) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let (servers, _relays) = nats::cluster(dir.path(), 1).await;
        let url = nats::urls(&servers);
        let app = TestApp::start().await;
        let nowhere = ClosedPort::new();
        let cfg = queue_config(app.port, &url, events, workers, nowhere.port);
        let cfg = write_json(dir.path(), "queue.json", &cfg);
        let js = jetstream::new(async_nats::connect(url.as_str()).await.unwrap());
        Run {
            dir,
            _servers: servers,
            app,
            cfg,
            js,
            client: Http::new(),
            lives: 0,
            _nowhere: nowhere,
        }
    }

    /// A new life of `queue`'s sidecar, once its stream is there.
    async fn sidecar(&mut self) -> (Proc, ManagerPorts) {
        self.lives += 1;
        let dir = self.dir.path().join(format!("life{}", self.lives));
        std::fs::create_dir_all(&dir).unwrap();
        let started = start_manager(&dir, &self.cfg, &[]).await;
        let js = self.js.clone();
        poll(Duration::from_secs(30), "queue's stream", || {
            let js = js.clone();
            async move {
                js.get_stream(plan::stream_name(NAMESPACE, "queue"))
                    .await
                    .ok()
            }
        })
        .await;
        started
    }

    /// Stores an event of `event` with `ce_id` and `body` in `queue`'s stream.
    async fn store(&self, event: &str, ce_id: &str, body: &Value) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("ce-id", ce_id);
        let subject = plan::subject(NAMESPACE, "queue", event, Lane::Unordered);
        self.js
            .publish_with_headers(subject, headers, serde_json::to_vec(body).unwrap().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Events in `manager`'s stream now (0 when it has no stream).
    async fn stored(&self, manager: &str) -> u64 {
        match self
            .js
            .get_stream(plan::stream_name(NAMESPACE, manager))
            .await
        {
            Ok(mut s) => s.info().await.unwrap().state.messages,
            Err(_) => 0,
        }
    }

    /// The ce-ids of the events in `graveyard`'s stream.
    async fn dead_letters(&self) -> Vec<String> {
        let stream = self
            .js
            .get_stream(plan::stream_name(NAMESPACE, "graveyard"))
            .await
            .unwrap();
        let state = stream.cached_info().state.clone();
        let mut ids = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            let m = stream.get_raw_message(seq).await.unwrap();
            ids.push(m.headers.get("ce-id").unwrap().as_str().to_owned());
        }
        ids
    }

    /// How many times the app saw each ce-id of type `event`.
    fn seen(&self, event: &str) -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        for e in self.app.state.seen(event) {
            *seen.entry(e.header("ce-id").to_owned()).or_default() += 1;
        }
        seen
    }

    /// Redeliveries of `event` that the sidecar on `admin` counted.
    async fn redeliveries(&self, admin: u16, event: &str) -> f64 {
        let text = metrics_text(&self.client, admin).await;
        metric(
            &text,
            &format!("switchyard_durable_redeliveries_total{{event=\"{event}\"}}"),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_durable_types_on_one_slot_are_each_delivered_once() {
    // One slot, five types, a second an event: a lane that pulled without a slot would hold the
    // fifth type's event four seconds, past AckWait (1.5 s + 2 s), and see it redelivered.
    let types = ["nap.a", "nap.b", "nap.c", "nap.d", "nap.e"];
    let mut run = Run::start(&types, (1, "1500ms", 3)).await;
    let (_queue, ports) = run.sidecar().await;
    for t in types {
        for i in 0..2 {
            run.store(t, &format!("{t}-{i}"), &json!({"ms": 1000}))
                .await;
        }
    }
    poll(Duration::from_secs(60), "every event acked", || async {
        let seen: usize = types.iter().map(|t| run.app.state.seen(t).len()).sum();
        (seen >= 10 && run.stored("queue").await == 0).then_some(())
    })
    .await;
    for t in types {
        let seen = run.seen(t);
        assert_eq!(seen.len(), 2, "{t}: {seen:?}");
        assert!(seen.values().all(|n| *n == 1), "{t} seen twice: {seen:?}");
        assert_eq!(run.redeliveries(ports.admin, t).await, 0.0, "{t}");
        assert!(run.app.state.peak(t) <= 1, "{t}: more than the one slot");
        // Each receipt's wait in the stream is observed once (the backlog alerts read it).
        let text = metrics_text(&run.client, ports.admin).await;
        let waited = format!("switchyard_durable_wait_seconds_count{{event=\"{t}\"}}");
        assert_eq!(metric(&text, &waited), 2.0, "{t}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_longer_than_ack_wait_is_kept_by_progress_acks() {
    // AckWait is at most 10 s whatever the attempt timeout; this attempt takes 11.5 s. A second
    // slot lets a redelivery run beside the first attempt, where the app would see it.
    let mut run = Run::start(&["nap.long"], (2, "20s", 3)).await;
    let (_queue, ports) = run.sidecar().await;
    run.store("nap.long", "long-1", &json!({"ms": 11_500}))
        .await;
    poll(Duration::from_secs(40), "the event acked", || async {
        (run.app.state.seen("nap.long").len() == 1 && run.stored("queue").await == 0).then_some(())
    })
    .await;
    assert_eq!(run.seen("nap.long").get("long-1"), Some(&1));
    assert_eq!(run.redeliveries(ports.admin, "nap.long").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_event_that_fails_every_attempt_ends_in_the_dead_letter_type() {
    let mut run = Run::start(&["fail"], (2, "2s", 3)).await;
    let (_queue, ports) = run.sidecar().await;
    run.store("fail", "poison-1", &json!({})).await;
    poll(Duration::from_secs(30), "the dead letter kept", || async {
        (run.stored("graveyard").await == 1 && run.stored("queue").await == 0).then_some(())
    })
    .await;
    assert_eq!(run.dead_letters().await, vec!["poison-1".to_owned()]);
    assert_eq!(run.seen("fail").get("poison-1"), Some(&3), "three attempts");
    // The second and third were redeliveries: the metric counts what it should.
    assert_eq!(run.redeliveries(ports.admin, "fail").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_pod_dies_on_each_attempt_is_dead_lettered_after_the_last() {
    // Two attempts of 3 s (AckWait 5 s); the app takes 2.5 s, and the pod is killed during each.
    let mut run = Run::start(&["nap.crash"], (2, "3s", 2)).await;
    let (queue, _) = run.sidecar().await;
    run.store("nap.crash", "crash-1", &json!({"ms": 2_500}))
        .await;
    let mut queue = Some(queue);
    for attempt in 1..=2 {
        poll(
            Duration::from_secs(30),
            &format!("attempt {attempt} under way"),
            || async {
                (run.app.state.seen("nap.crash").len() == attempt
                    && !run.app.state.active("nap.crash").is_empty())
                .then_some(())
            },
        )
        .await;
        // Like kill -9 of the pod: the attempt is never answered to the server.
        drop(queue.take());
        queue = Some(run.sidecar().await.0);
    }
    // The third delivery (after AckWait) goes to the dead-letter type without an attempt.
    poll(Duration::from_secs(30), "the dead letter kept", || async {
        (run.stored("graveyard").await == 1 && run.stored("queue").await == 0).then_some(())
    })
    .await;
    assert_eq!(run.dead_letters().await, vec!["crash-1".to_owned()]);
    assert_eq!(
        run.seen("nap.crash").get("crash-1"),
        Some(&2),
        "two attempts"
    );
    drop(queue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_withdraws_idle_pulls_and_what_they_brought_is_delivered_once() {
    // Four idle lanes, each waiting on the server with a one-event request. Events keep arriving
    // (one every 2 ms, round-robin) while five pods in turn are drained, so some land in the
    // window where the server has sent an event to a request and not yet heard of its withdrawal.
    // Each pod says when it won that race (the count is printed; it is timing, not asserted).
    let types = ["idle.a", "idle.b", "idle.c", "idle.d"];
    const EVENTS: usize = 1_000;
    const PODS: usize = 5;
    let mut run = Run::start(&types, (4, "5s", 3)).await;
    let seen_all = |run: &Run| -> usize { types.iter().map(|t| run.app.state.seen(t).len()).sum() };
    // The first pod makes the stream; its lanes wait idle until the events start.
    let mut next = Some(run.sidecar().await);
    let storing = {
        let js = run.js.clone();
        tokio::spawn(async move {
            for i in 0..EVENTS {
                let t = types[i % types.len()];
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("ce-id", format!("{t}-{i}").as_str());
                let subject = plan::subject(NAMESPACE, "queue", t, Lane::Unordered);
                js.publish_with_headers(subject, headers, b"{}".to_vec().into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut won = 0;
    for pod in 0..PODS {
        let (mut p, ports) = match next.take() {
            Some(first) => first,
            None => run.sidecar().await,
        };
        // Each pod delivers some before its drain starts, as the preStop hook starts it.
        let from = seen_all(&run);
        poll(Duration::from_secs(30), "events flowing", || async {
            (seen_all(&run) >= from + EVENTS / (4 * PODS)).then_some(())
        })
        .await;
        let out = std::process::Command::new(BIN)
            .args([
                "drain",
                "--admin-addr",
                &format!("127.0.0.1:{}", ports.admin),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        p.log_line("drained; waiting for SIGTERM").await;
        p.sigterm();
        assert_eq!(
            p.wait_exit(Duration::from_secs(30)).await,
            Some(0),
            "{}",
            p.log_text()
        );
        won += p
            .log_text()
            .matches("a withdrawn pull request had brought events")
            .count();
        assert!(
            !storing.is_finished(),
            "pod {pod}: the events ran out before its drain"
        );
    }
    storing.await.unwrap();

    // The last pod takes the rest.
    let (_last, ports) = run.sidecar().await;
    poll(Duration::from_secs(60), "every event acked", || async {
        (seen_all(&run) >= EVENTS && run.stored("queue").await == 0).then_some(())
    })
    .await;
    let mut twice = Vec::new();
    for t in types {
        let seen = run.seen(t);
        assert_eq!(seen.len(), EVENTS / types.len(), "{t}: {seen:?}");
        twice.extend(seen.into_iter().filter(|(_, n)| *n > 1));
        assert_eq!(
            run.redeliveries(ports.admin, t).await,
            0.0,
            "{t} redelivered to the last pod"
        );
    }
    assert!(twice.is_empty(), "seen more than once: {twice:?}");
    eprintln!("[test] {PODS} drains during the flow; {won} withdrawn requests had brought events");
}
