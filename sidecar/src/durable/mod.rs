//! Durable delivery's connection to NATS JetStream, for both sides of an event: publishing (the
//! dispatch stage sends an event of a durable type here instead of over a frame connection, and
//! answers 202 only after the stream's PubAck) and consuming (the manager role pulls its durable
//! types from the consumers this room ensures).
//!
//! Which event types are durable is not this room's business: the routing table says so (the
//! config's destinations locally, the control plane's routes in a cluster), and the dispatch stage
//! hands each durable publish here with its Manager and ordering key. The connection is opened on
//! first use, so a sidecar that is given the servers but never publishes durably (most Managers in a
//! cluster with JetStream) holds no connection.
//!
//! Streams and consumers are created idempotently from the one plan in
//! `switchyard_protocol::durable`: a publisher ensures its destination's stream (so a Manager at zero
//! replicas still takes events), a manager sidecar its stream and consumers. Beside the upstream
//! room, below the dispatch stage.
//!
//! A full stream (its Manager's `durable.maxBytes`, or the events every stream holds at most)
//! refuses a publish with [`DurableError::StreamFull`], naming the limit; it drops nothing stored.
//!
//! The stream's dedupe id is scoped to (event type, publisher, key) (`dedupe.rs`); a publish the
//! stream calls a duplicate is compared with the stored event, and one with other content is
//! refused as a reused key.

mod dedupe;

use crate::metrics::durable::DurableMetrics;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use switchyard_protocol::durable::{
    self as plan, ConsumerPlan, JetStreamConfig, Lane, MAX_STREAM_MESSAGES, StreamLimits,
};
use switchyard_protocol::nats_access as plan_access;

/// Time to open the connection to a server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a JetStream API call (stream and consumer management, PubAck) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Header names of an event kept in a stream: CloudEvents' NATS binding, binary mode.
pub(crate) mod header {
    /// CloudEvents id: the publisher's key, as the app receives it. The stream's `Nats-Msg-Id` is
    /// the key scoped to the event type and the publisher (`dedupe::scoped_id`).
    pub(crate) const CE_ID: &str = "ce-id";
    /// CloudEvents source: the publisher's identity (`/switchyard/<namespace>/<name>`).
    pub(crate) const SOURCE: &str = "ce-source";
    /// Digest of the event's media type and payload (`dedupe::digest`): a duplicate publish with
    /// another is a reused key, refused.
    pub(crate) const DIGEST: &str = "sy-digest";
    /// W3C traceparent of the publisher, as the distributed-tracing extension's attribute. Not the
    /// bare `traceparent`: nats-server takes a sampled one as a request for its own message tracing
    /// and copies every header of the message into a map before finding that its account traces
    /// nothing. That was a fifth of the objects it allocated per durable event, and its garbage
    /// collections are the durable publish tail (`docs/performance-log.md`, "2026-12-04 (late)").
    pub(crate) const TRACEPARENT: &str = "ce-traceparent";
    /// W3C tracestate of the publisher (the same extension).
    pub(crate) const TRACESTATE: &str = "ce-tracestate";
    /// What sidecars stored the two under before; still read, for events they stored.
    pub(crate) const OLD_TRACEPARENT: &str = "traceparent";
    /// See [`OLD_TRACEPARENT`].
    pub(crate) const OLD_TRACESTATE: &str = "tracestate";
    /// Media type of the payload.
    pub(crate) const CONTENT_TYPE: &str = "content-type";
    /// CloudEvents type, on a subscription's copy: its consumer takes every type its pattern
    /// covers, so the type travels with the event (a handled type's subject names it).
    pub(crate) const TYPE: &str = "ce-type";
}

/// Why the event store did not take an event or a setting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DurableError {
    /// No stream or consumer could be created or found.
    #[error("JetStream {what} `{name}`: {message}")]
    Setup {
        /// `stream` or `consumer`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The server's or the client's words.
        message: String,
    },
    /// The publish was not confirmed stored (no PubAck, or an error in it).
    #[error("not confirmed stored: {0}")]
    NotStored(String),
    /// The confirmation did not come before the deadline.
    #[error("no confirmation from JetStream in time")]
    Timeout,
    /// The key was used for another event (other content) of the same type and publisher within
    /// the duplicate window; nothing was stored.
    #[error("key `{key}` was already used for another event")]
    KeyReused {
        /// The publisher's key (its ce-id).
        key: String,
    },
    /// The stream holds all it may (`limit`); nothing was stored, nothing stored was dropped. It
    /// takes events again as its Manager's app works the backlog down.
    #[error("stream `{stream}` is full: {limit}")]
    StreamFull {
        /// The stream's name.
        stream: String,
        /// The limit it reached.
        limit: Full,
    },
    /// The event with its headers is larger than the server's `max_payload`; nothing was stored.
    #[error("the event's {bytes} bytes are more than the server's max_payload of {max}")]
    TooLarge {
        /// The payload's size.
        bytes: usize,
        /// The server's `max_payload`.
        max: usize,
    },
}

/// The limit a full stream reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its Manager's `durable.maxBytes`, when this sidecar knows it (the server's words say only
    /// that bytes ran out).
    Bytes(Option<u64>),
    /// [`MAX_STREAM_MESSAGES`] events.
    Messages,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Full::Bytes(Some(b)) => write!(f, "{b} bytes, its spec.durable.maxBytes"),
            Full::Bytes(None) => f.write_str("its byte limit"),
            Full::Messages => write!(f, "{MAX_STREAM_MESSAGES} events"),
        }
    }
}

/// Where a durable publish goes: the stream of `manager`, on the lane of the payload's ordering
/// key at the JSON pointer `ordering_key` when the Manager orders by one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The Manager that handles the event type, or that subscribes to it.
    pub(crate) manager: &'a str,
    /// The subscription's pattern when the event is a subscriber's copy: stored under the
    /// subscription's subjects, with its type in a header. `None`: the handler's event.
    pub(crate) subscription: Option<&'a str>,
    /// JSON pointer of its ordering key, if any.
    pub(crate) ordering_key: Option<&'a str>,
    /// Its stream's limits (the Manager's `durable.duplicateWindow` and `durable.maxBytes`).
    pub(crate) stream: StreamLimits,
}

/// What a stream keeps of an event beside its payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    /// Event type.
    pub(crate) event: &'a str,
    /// CloudEvents id: the publisher's key (scoped, it is the `Nats-Msg-Id` the duplicate window
    /// checks).
    pub(crate) ce_id: &'a str,
    /// W3C traceparent of the publisher; empty when none.
    pub(crate) traceparent: &'a str,
    /// W3C tracestate of the publisher; empty when none.
    pub(crate) tracestate: &'a str,
    /// Media type of the payload when it is not JSON.
    pub(crate) content_type: Option<&'a str>,
    /// The publisher the event already names (a dead letter of a durable event keeps its
    /// publisher's `ce-source`); none: this sidecar is the publisher.
    pub(crate) source: Option<&'a str>,
}

/// Who a sidecar is to the JetStream server.
pub(crate) struct Client<'a> {
    /// Its Manager's namespace.
    pub(crate) namespace: &'a str,
    /// Its Manager: the NATS user it is mapped to, and the inbox prefix only that user may read.
    pub(crate) manager: &'a str,
    /// Its identity as a publisher (`/switchyard/<namespace>/<Manager>`): the scope of its keys
    /// and its events' `ce-source`.
    pub(crate) publisher: &'a str,
    /// TLS with the mesh certificate, when the sidecar has one: the server maps the certificate to
    /// the Manager's NATS user. Without it only a server without TLS can be reached.
    pub(crate) tls: Option<rustls::ClientConfig>,
}

/// One sidecar's JetStream connection (opened on first use).
pub(crate) struct Store {
    url: String,
    addrs: Vec<async_nats::ServerAddr>,
    tls: Option<rustls::ClientConfig>,
    inbox_prefix: String,
    js: tokio::sync::OnceCell<jetstream::Context>,
    namespace: String,
    /// This sidecar's identity as a publisher: the scope of its keys and its events' `ce-source`.
    publisher: String,
    replicas: usize,
    /// Streams created or confirmed by this process, with the limits they were given, so a publish
    /// ensures its stream once, and again only when its Manager's limits changed.
    ensured: Mutex<HashMap<String, StreamLimits>>,
    /// The time of each stage of a publish.
    metrics: DurableMetrics,
}

impl Store {
    /// The servers of `config.url` for `client`, checked now and connected to on first use;
    /// publishes are timed into `metrics`. A `tls://` server needs the mesh certificate.
    pub(crate) fn new(
        config: &JetStreamConfig,
        client: Client<'_>,
        metrics: DurableMetrics,
    ) -> Result<Store, DurableError> {
        let addrs = config
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| u.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DurableError::Setup {
                what: "server",
                name: config.url.clone(),
                message: e.to_string(),
            })?;
        if addrs.is_empty() {
            return Err(DurableError::Setup {
                what: "server",
                name: config.url.clone(),
                message: "no server URL".to_owned(),
            });
        }
        if client.tls.is_none() && addrs.iter().any(async_nats::ServerAddr::tls_required) {
            return Err(DurableError::Setup {
                what: "server",
                name: config.url.clone(),
                message: "a tls:// server needs the mesh certificate, and this sidecar has no mesh identity (set SWITCHYARD_IDENTITY)".to_owned(),
            });
        }
        Ok(Store {
            url: config.url.clone(),
            addrs,
            tls: client.tls,
            inbox_prefix: plan_access::inbox_prefix(client.namespace, client.manager),
            js: tokio::sync::OnceCell::new(),
            namespace: client.namespace.to_owned(),
            publisher: client.publisher.to_owned(),
            replicas: usize::from(config.replicas.max(1)),
            ensured: Mutex::default(),
            metrics,
        })
    }

    /// The JetStream context, connecting the first time (the client retries in the background
    /// while no server answers; calls wait within their own deadlines).
    async fn js(&self) -> Result<&jetstream::Context, DurableError> {
        if let Some(js) = self.js.get() {
            return Ok(js);
        }
        // Boxed: the connect future is large, and without the box every publish's future would
        // carry (and copy) room for it.
        Box::pin(self.connect()).await
    }

    /// The JetStream context (connecting the first time), for the consuming side's own pulls.
    pub(crate) async fn context(&self) -> Result<jetstream::Context, DurableError> {
        self.js().await.cloned()
    }

    async fn connect(&self) -> Result<&jetstream::Context, DurableError> {
        self.js
            .get_or_try_init(|| async {
                let mut options = async_nats::ConnectOptions::new()
                    .name("switchyard-sidecar")
                    // Replies (PubAcks, pulled events) come under this prefix, which only this
                    // Manager's NATS user may read (`switchyard_protocol::nats_access`).
                    .custom_inbox_prefix(&self.inbox_prefix)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .request_timeout(Some(REQUEST_TIMEOUT))
                    .retry_on_initial_connect()
                    .event_callback(|event| async move { log_connection_event(&event) });
                if let Some(tls) = &self.tls {
                    // Used whenever the server requires TLS; every reconnect shows the
                    // certificate installed then (the resolver reads the renewed one).
                    options = options.tls_client_config(tls.clone());
                }
                let client = options.connect(self.addrs.as_slice()).await.map_err(|e| {
                    DurableError::Setup {
                        what: "server",
                        name: self.url.clone(),
                        message: e.to_string(),
                    }
                })?;
                tracing::info!(url = %self.url, "connecting to JetStream");
                Ok(jetstream::new(client))
            })
            .await
    }

    /// Creates (or updates to the plan) the stream of `manager` with `limits`; idempotent. Every
    /// party gives a Manager's stream the same limits (its spec's), so they never undo each other's
    /// update.
    pub(crate) async fn ensure_stream(
        &self,
        manager: &str,
        limits: StreamLimits,
    ) -> Result<(), DurableError> {
        let name = plan::stream_name(&self.namespace, manager);
        if self.known(&name, limits) {
            return Ok(());
        }
        // Boxed for the same reason as the connect: it runs once per stream, not per publish.
        Box::pin(self.create_stream(name, manager, limits)).await
    }

    async fn create_stream(
        &self,
        name: String,
        manager: &str,
        limits: StreamLimits,
    ) -> Result<(), DurableError> {
        let config = stream_config(&self.namespace, manager, self.replicas, limits);
        self.js()
            .await?
            .create_or_update_stream(config)
            .await
            .map_err(|e| DurableError::Setup {
                what: "stream",
                name: name.clone(),
                message: e.to_string(),
            })?;
        self.ensured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, limits);
        Ok(())
    }

    fn known(&self, stream: &str, limits: StreamLimits) -> bool {
        self.ensured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(stream)
            == Some(&limits)
    }

    /// Creates (or updates to the plan) one durable pull consumer of `manager`'s stream, whose
    /// limits are `limits`.
    pub(crate) async fn consumer(
        &self,
        manager: &str,
        limits: StreamLimits,
        c: &ConsumerPlan,
    ) -> Result<consumer::PullConsumer, DurableError> {
        self.ensure_stream(manager, limits).await?;
        let name = plan::stream_name(&self.namespace, manager);
        let setup = |e: String| DurableError::Setup {
            what: "consumer",
            name: c.name.clone(),
            message: e,
        };
        let stream = self
            .js()
            .await?
            .get_stream(&name)
            .await
            .map_err(|e| setup(e.to_string()))?;
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(c.name.clone()),
                filter_subject: c.filter_subject.clone(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: c.ack_wait,
                max_deliver: c.max_deliver,
                max_ack_pending: c.max_ack_pending,
                num_replicas: self.replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| setup(e.to_string()))
    }

    /// Stores the event of `fields` and `payload` in the stream of `to` and waits for the PubAck
    /// until `deadline`. A duplicate within the window is acknowledged as kept (it was, the first
    /// time) when it carries the same content, and refused as a reused key when not.
    pub(crate) async fn publish(
        &self,
        to: Target<'_>,
        fields: Fields<'_>,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<(), DurableError> {
        let Target {
            manager,
            subscription,
            ordering_key,
            stream: limits,
        } = to;
        let Fields {
            event,
            ce_id,
            traceparent,
            tracestate,
            content_type,
            source,
        } = fields;
        let publisher = source.unwrap_or(&self.publisher);
        let lane = Lane::of(
            ordering_key
                .and_then(|p| plan::ordering_key(&payload, p))
                .as_deref(),
        );
        let subject = match subscription {
            Some(pattern) => plan::subscription_subject(&self.namespace, manager, pattern, lane),
            None => plan::subject(&self.namespace, manager, event, lane),
        };
        let digest = dedupe::digest(content_type, &payload);
        let bytes = payload.len();
        let within = async {
            let start = Instant::now();
            self.ensure_stream(manager, limits).await?;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(header::CE_ID, ce_id);
            headers.insert(header::SOURCE, publisher);
            headers.insert(header::DIGEST, digest.as_str());
            // None is JSON, as the consumer reads a message without one: no bytes for the usual case.
            if let Some(t) = content_type {
                headers.insert(header::CONTENT_TYPE, t);
            }
            if !traceparent.is_empty() {
                headers.insert(header::TRACEPARENT, traceparent);
            }
            if !tracestate.is_empty() {
                headers.insert(header::TRACESTATE, tracestate);
            }
            if subscription.is_some() {
                headers.insert(header::TYPE, event);
            }
            let msg = jetstream::message::PublishMessage::build()
                .payload(payload)
                .headers(headers)
                .message_id(dedupe::scoped_id(event, publisher, ce_id));
            let js = self.js().await?;
            let ack = js
                .send_publish(subject, msg)
                .await
                .map_err(|e| refused(js, &e, bytes))?;
            let sent = Instant::now();
            self.metrics
                .sent
                .observe(sent.duration_since(start).as_secs_f64());
            let ack = ack
                .await
                .map_err(|e| not_stored(&e, plan::stream_name(&self.namespace, manager), limits))?;
            self.metrics.stored.observe(sent.elapsed().as_secs_f64());
            if ack.duplicate {
                same_event(js, &ack.stream, ack.sequence, &digest, ce_id).await?;
            }
            Ok(())
        };
        match tokio::time::timeout_at(deadline.into(), within).await {
            Ok(r) => r,
            Err(_) => Err(DurableError::Timeout),
        }
    }
}

/// Why a sent publish was not stored: a full stream (the server's words name the limit it hit), or
/// anything else.
fn not_stored(
    e: &jetstream::context::PublishError,
    stream: String,
    limits: StreamLimits,
) -> DurableError {
    let server = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<jetstream::Error>())
        .map(|s| (s.error_code(), s.to_string()));
    match server.and_then(|(code, words)| full(code, &words, limits)) {
        Some(limit) => DurableError::StreamFull { stream, limit },
        None => DurableError::NotStored(e.to_string()),
    }
}

/// The limit a store refusal reached, when it is a full stream: nats-server answers 503 with
/// JetStream error 10077 (a store failure) and the store's own words, `maximum bytes exceeded` or
/// `maximum messages exceeded`, which no other store failure uses.
fn full(code: jetstream::ErrorCode, words: &str, limits: StreamLimits) -> Option<Full> {
    if code != jetstream::ErrorCode::STREAM_STORE_FAILED {
        return None;
    }
    if words.contains("maximum bytes exceeded") {
        Some(Full::Bytes(limits.max_bytes))
    } else if words.contains("maximum messages exceeded") {
        Some(Full::Messages)
    } else {
        None
    }
}

/// The configuration every party gives the stream of `manager` in `namespace`, with `replicas`
/// and the Manager's `limits`. Pure.
fn stream_config(
    namespace: &str,
    manager: &str,
    replicas: usize,
    limits: StreamLimits,
) -> stream::Config {
    stream::Config {
        name: plan::stream_name(namespace, manager),
        subjects: vec![plan::stream_subjects(namespace, manager)],
        // Each (event type, lane) has one consumer, so an ack removes the event: the stream
        // holds exactly what is not yet delivered.
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        duplicate_window: limits.duplicate_window,
        max_messages: MAX_STREAM_MESSAGES,
        max_bytes: limits.nats_max_bytes(),
        // A full stream refuses the new event: dropping an old one (NATS's default) would lose an
        // event already acknowledged 202. Lowering a limit below what is stored drops nothing
        // either (nats-server trims on update only under DiscardOld).
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    }
}

/// Why the client did not send a publish: too large for the server it is connected to (the
/// server's `max_payload` is known then; before the first connection it is not, and the publish is
/// only not stored), or anything else.
fn refused(
    js: &jetstream::Context,
    e: &jetstream::context::PublishError,
    bytes: usize,
) -> DurableError {
    let client = js.client();
    if e.kind() == PublishErrorKind::MaxPayloadExceeded
        && client.connection_state() == async_nats::connection::State::Connected
    {
        return DurableError::TooLarge {
            bytes,
            max: client.max_payload(),
        };
    }
    DurableError::NotStored(e.to_string())
}

/// Checks that the event stored at `sequence` of stream `name`, whose scoped id a publish repeated, has
/// the publish's content (`digest`): a retry, kept the first time. Other content is `key` reused
/// for another event. An event delivered (and so removed) already cannot be compared and counts as
/// the retry. One read of the stream's leader, only for duplicates.
async fn same_event(
    js: &jetstream::Context,
    name: &str,
    sequence: u64,
    digest: &str,
    key: &str,
) -> Result<(), DurableError> {
    let unreadable =
        |e: String| DurableError::NotStored(format!("the stored event of a duplicate: {e}"));
    let stored = js
        .get_stream_no_info(name)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    let stored = match stored.get_raw_message(sequence).await {
        Ok(m) => m.headers.get(header::DIGEST).map(|v| v.as_str().to_owned()),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => None,
        Err(e) => return Err(unreadable(e.to_string())),
    };
    match dedupe::replay(stored.as_deref(), digest) {
        dedupe::Replay::Same | dedupe::Replay::Unknown => Ok(()),
        dedupe::Replay::Conflict => Err(DurableError::KeyReused {
            key: key.to_owned(),
        }),
    }
}

/// Logs what the NATS client reports of its connection: a lost server and the reconnection, and
/// what it dropped or was refused, which otherwise only show as events arriving late.
fn log_connection_event(event: &async_nats::Event) {
    use async_nats::Event;
    match event {
        Event::Connected => tracing::info!("connected to a JetStream server"),
        Event::Disconnected => {
            tracing::warn!("lost the JetStream server connection; reconnecting")
        }
        Event::SlowConsumer(sid) => tracing::warn!(
            subscription = sid,
            "a JetStream subscription fell behind and the client dropped its messages; the server redelivers them after AckWait"
        ),
        Event::ServerError(e) => {
            tracing::warn!(error = %e, "the JetStream server reported an error")
        }
        Event::ClientError(e) => {
            tracing::warn!(error = %e, "the JetStream client reported an error")
        }
        Event::LameDuckMode | Event::Draining | Event::Closed => {
            tracing::info!(%event, "JetStream connection")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_takes_the_managers_limits_and_refuses_rather_than_drops() {
        let limits = StreamLimits::of(Some(5_000), Some(1 << 30));
        let c = stream_config("shop", "orders", 3, limits);
        assert_eq!(c.name, "SY_shop_orders");
        assert_eq!(c.subjects, ["sy.shop.orders.>"]);
        assert_eq!(c.max_bytes, 1 << 30);
        assert_eq!(c.duplicate_window, Duration::from_secs(5));
        assert_eq!(c.max_messages, MAX_STREAM_MESSAGES);
        assert_eq!(c.num_replicas, 3);
        assert_eq!(c.retention, stream::RetentionPolicy::WorkQueue);
        // The promise of a 202: a full stream refuses the next event, it never drops a kept one.
        assert_eq!(c.discard, stream::DiscardPolicy::New);
        // No byte limit set: JetStream's none, not 0 bytes.
        let none = stream_config("shop", "orders", 1, StreamLimits::default());
        assert_eq!(none.max_bytes, -1);
        assert_eq!(none.duplicate_window, plan::DUPLICATE_WINDOW);
    }

    #[test]
    fn a_full_stream_is_told_from_other_store_failures_and_named() {
        let store = jetstream::ErrorCode::STREAM_STORE_FAILED;
        let limits = StreamLimits::of(None, Some(64 << 20));
        let bytes = "maximum bytes exceeded (code 503, error code 10077)";
        assert_eq!(
            full(store, bytes, limits),
            Some(Full::Bytes(Some(64 << 20)))
        );
        assert_eq!(
            full(store, "maximum messages exceeded", limits),
            Some(Full::Messages)
        );
        // Another store failure, or the words under another code: not a full stream.
        assert_eq!(
            full(store, "message size exceeds maximum allowed", limits),
            None
        );
        assert_eq!(full(jetstream::ErrorCode(10047), bytes, limits), None);
        assert_eq!(
            Full::Bytes(Some(64 << 20)).to_string(),
            "67108864 bytes, its spec.durable.maxBytes"
        );
        assert_eq!(Full::Messages.to_string(), "1000000 events");
    }
}
