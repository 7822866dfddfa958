//! A bare JetStream publisher, the floor under the sidecar's durable publish: `-c` publishes in flight
//! on one async-nats connection (as one sidecar holds one), each waiting for its PubAck, with what the
//! sidecar sends (`Nats-Msg-Id` = a fresh ce-id, the `ce-id` header, a fresh sampled
//! `ce-traceparent`, no `content-type` for a JSON payload, the same payload) into a stream configured
//! as the sidecars create theirs (`switchyard_protocol::durable`: work queue, file storage, the
//! duplicate window, new messages refused when full). The stream is emptied first and deleted after
//! the run; nothing consumes it, so its cap is set above what one run can publish (at the sidecars'
//! cap of 1,000,000 a run at ~80,000/s filled it within its 12 s, and every publish after that was
//! refused with "maximum messages exceeded", 10077: the errors earlier runs reported). A failed
//! publish is reported by kind on stderr, so errors are never anonymous.

use super::{RETRY_PAUSE, Tally, Window};
use anyhow::{Context, bail};
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use std::time::Duration;
use switchyard_protocol::durable::{self as plan, Lane};
use tokio::time::Instant;

/// Namespace and Manager the bench's stream is named after (no Switchyard uses it).
const NAMESPACE: &str = "bench";
const MANAGER: &str = "bare";
/// Past it a publish is refused, never an old event dropped (as the sidecars' streams); room for
/// a run of two minutes at 80,000/s, as this stream is never consumed.
const MAX_MESSAGES: i64 = 10_000_000;

/// The longest a run waits, after its window, for a Manager's consumer to take what it published.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// How often the stream is asked how much it still holds while draining.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// The publisher's connection and where it publishes.
#[derive(Clone)]
pub struct Publisher {
    js: jetstream::Context,
    /// The stream published into, and whether it is the bench's own (deleted when the run ends).
    stream: String,
    own: bool,
    subject: String,
    payload: Bytes,
}

impl Publisher {
    /// Connects to `url`, creates (or updates) the stream, empties it, and publishes `payload` to
    /// event type `event`'s unordered subject.
    pub async fn start(
        url: &str,
        event: &str,
        payload: Bytes,
        into: Option<(&str, &str)>,
    ) -> anyhow::Result<Publisher> {
        // `into`: (namespace, Manager) of a sidecar's stream, published into as it is (for a
        // comparison with its consumer running); the bench's own stream otherwise.
        if let Some((ns, manager)) = into {
            let js = jetstream::new(
                async_nats::ConnectOptions::new()
                    .name("switchyard-load")
                    .connect(url)
                    .await
                    .with_context(|| format!("connecting to {url}"))?,
            );
            let stream = plan::stream_name(ns, manager);
            js.get_stream(&stream)
                .await
                .with_context(|| format!("no stream of Manager {ns}/{manager}"))?;
            return Ok(Publisher {
                js,
                stream,
                own: false,
                subject: plan::subject(ns, manager, event, Lane::Unordered),
                payload,
            });
        }
        let client = async_nats::ConnectOptions::new()
            .name("switchyard-load")
            .connect(url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        let js = jetstream::new(client);
        let name = plan::stream_name(NAMESPACE, MANAGER);
        js.create_or_update_stream(stream::Config {
            name: name.clone(),
            subjects: vec![plan::stream_subjects(NAMESPACE, MANAGER)],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: 1,
            duplicate_window: plan::DUPLICATE_WINDOW,
            max_messages: MAX_MESSAGES,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .context("creating the bench stream")?;
        js.get_stream(&name)
            .await
            .context("finding the bench stream")?
            .purge()
            .await
            .context("emptying the bench stream")?;
        Ok(Publisher {
            js,
            stream: name,
            own: true,
            subject: plan::subject(NAMESPACE, MANAGER, event, Lane::Unordered),
            payload,
        })
    }

    /// Leaves the server as the run found it, so the next run (on the same server, in the same
    /// bench) is not measured beside this one's leftovers: the bench's own stream is deleted (its
    /// messages and its duplicate window's ids: a run at 70,000/s leaves some 800,000 of each), and
    /// a Manager's stream is waited on until its consumer has taken everything. Returns the seconds
    /// that took.
    pub async fn finish(&self) -> anyhow::Result<f64> {
        let start = Instant::now();
        if self.own {
            self.js
                .delete_stream(&self.stream)
                .await
                .with_context(|| format!("deleting the bench stream {}", self.stream))?;
            return Ok(start.elapsed().as_secs_f64());
        }
        let mut stream = self
            .js
            .get_stream(&self.stream)
            .await
            .with_context(|| format!("finding stream {}", self.stream))?;
        loop {
            let left = stream
                .info()
                .await
                .with_context(|| format!("reading stream {}", self.stream))?
                .state
                .messages;
            if left == 0 {
                return Ok(start.elapsed().as_secs_f64());
            }
            if start.elapsed() > DRAIN_LIMIT {
                bail!(
                    "stream {} still holds {left} events {}s after the run: its consumer fell behind",
                    self.stream,
                    DRAIN_LIMIT.as_secs()
                );
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }

    async fn publish_once(&self, ce_id: &str) -> bool {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("ce-id", ce_id);
        // As the sidecar's: a new sampled root when its client sent none.
        let traceparent = format!(
            "00-{:032x}-{:016x}-01",
            fastrand::u128(1..),
            fastrand::u64(1..)
        );
        headers.insert("ce-traceparent", traceparent.as_str());
        let msg = jetstream::message::PublishMessage::build()
            .payload(self.payload.clone())
            .headers(headers)
            .message_id(ce_id);
        let failed = match self.js.send_publish(self.subject.clone(), msg).await {
            Ok(ack) => match ack.await {
                Ok(_) => return true,
                Err(e) => format!("PubAck {:?}: {e}", e.kind()),
            },
            Err(e) => format!("send {:?}: {e}", e.kind()),
        };
        eprintln!("jetstream publish failed: {failed}");
        false
    }
}

/// One publish in flight at a time, each with a new id, until the window ends.
pub async fn worker(p: Publisher, w: Window, id: usize) -> Tally {
    let mut tally = Tally::new();
    let mut n = 0u64;
    while Instant::now() < w.end {
        n += 1;
        let ce_id = format!("{:016x}{id:08x}{n:08x}", fastrand::u64(..));
        let sent = Instant::now();
        let ok = p.publish_once(&ce_id).await;
        tally.count(&w, sent, ok);
        if !ok {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    tally
}
