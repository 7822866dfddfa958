//! Durable delivery's consuming side: pull this pod's durable event types from their JetStream
//! consumers, deliver each to the app on a worker slot, and acknowledge only after the app's final
//! answer (2xx, or a 4xx it means). A failed attempt is redelivered after the retry backoff; the
//! last one goes to the dead-letter type and is terminated (`verdict.rs`).
//!
//! **A slot before a pull.** A lane asks the server for as many events as it holds worker slots,
//! taken first from the pod's one budget (`workers.maxInFlight`, shared with direct events and
//! every other lane, in turn), so a pulled event starts at once and the server never redelivers one
//! this pod still holds. An idle lane (its last pull found nothing) waits for its next event with a
//! one-event request and no slot, so an event that arrives then may wait for a slot behind the
//! others: it is the only event a lane ever holds unstarted, and it gets progress acks meanwhile.
//! While an attempt runs, progress acks go every quarter of AckWait, so an attempt longer than
//! AckWait is not redelivered either; AckWait only has to outlast a pod that stopped answering.
//!
//! **A drain releases nothing.** It withdraws the idle requests (an event they brought is still
//! delivered), lets every attempt run to its end and settles it: no event is nak'ed unattempted, so
//! a drain costs no delivery of the count. The count that ends an event is the sidecar's own
//! (`verdict.rs`), so an event whose last delivery died with its pod is dead-lettered on the next.
//!
//! **A subscription's lane** takes the copies publishers stored for one durable subscription: each
//! names its own type (the pattern covers several), and the first time the consumer is made its
//! `startFrom` decides which of the copies stored before then it skips (acked undelivered). The
//! consumer's creation time is the server's and kept with it, so every pod and every restart skips
//! the same ones, and a restart skips nothing that came after.
//!
//! **Bytes before a pull, too.** A pulled event holds its bytes in the pod's byte budget (the one
//! direct admission takes from) until it is settled. A lane reserves them before it asks, waiting
//! for them in turn with the other lanes, and asks the server for no more than it reserved
//! (`max_bytes`, `need.rs`), so a flood of large durable events stays on the server rather than in
//! the pod. Bytes come before slots: a lane never holds a slot while it waits for bytes, so it
//! cannot wait on direct events that hold bytes and wait for a slot. A lane waits for at most half
//! the budget, so it never waits on bytes only an idle pod could give.
//!
//! An unordered lane runs up to `maxInFlight` deliveries at once; a partition of an ordering key runs
//! one at a time (its consumer allows one outstanding event over every pod), so a key is in order.

mod need;
mod pull;
mod verdict;

use super::worker::Worker;
use crate::backoff;
use crate::durable::{DurableError, Store, header};
use crate::net::budget::Held;
use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, Message, consumer::PullConsumer};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use need::Need;
use pull::{Pull, PullError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_protocol::durable::{ConsumerPlan, Lane, StreamLimits};
use switchyard_protocol::frame::Request;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict::{Settle, Step};

/// Longest wait between tries to create a consumer or reopen its pull.
const SETUP_RETRY_MAX: Duration = Duration::from_secs(5);
/// Shortest interval between progress acks of one event.
const MIN_PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// The stream this pod's consumers read: its Manager's, created with the Manager's limits (so
/// this pod and every publisher give it the same ones).
#[derive(Clone)]
pub(crate) struct OwnStream {
    /// The Manager.
    pub(crate) manager: String,
    /// Its `durable.duplicateWindow` and `durable.maxBytes`.
    pub(crate) limits: StreamLimits,
}

/// Starts one pull loop per consumer of this pod's durable types; they stop pulling when `drain`
/// fires and end once their deliveries are settled. Wait on `tracker`.
pub(crate) fn start(
    store: Arc<Store>,
    worker: Arc<Worker>,
    own: &OwnStream,
    plans: Vec<ConsumerPlan>,
    max_in_flight: usize,
    drain: CancellationToken,
    tracker: &TaskTracker,
) {
    for plan in plans {
        let width = match plan.lane {
            Lane::Unordered => max_in_flight.max(1),
            Lane::Partition(_) => 1,
        };
        tracker.spawn(lane(
            store.clone(),
            worker.clone(),
            own.clone(),
            plan,
            width,
            drain.clone(),
        ));
    }
}

/// What a lane does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Its last pull was full: take slots, then ask for that many events there now.
    Busy,
    /// Its last pull found less: wait on the server for one event, without a slot.
    Idle,
}

/// One consumer's lane, until `drain`: open the consumer → loop { take room, bytes and slots →
/// pull → start each event's delivery } → reopen on a failure, with backoff.
async fn lane(
    store: Arc<Store>,
    worker: Arc<Worker>,
    own: OwnStream,
    plan: ConsumerPlan,
    width: usize,
    drain: CancellationToken,
) {
    // The lane's deliveries are polled in this task rather than spawned one task each: a
    // delivery's future is large, and spawning it cost copies measured at about a tenth of the
    // consuming sidecar's time. They keep being polled while the lane waits for slots or events.
    let mut deliveries = FuturesUnordered::new();
    let mut failures = 0u32;
    let mut mode = Mode::Busy;
    let mut need = Need::new(worker.bytes().total());
    while !drain.is_cancelled() {
        let opened = beside(&mut deliveries, open(&store, &own, &plan)).await;
        let (consumer, context) = match opened {
            Ok(c) => c,
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(consumer = %plan.name, error = %e, "cannot pull durable events; retrying with backoff");
                }
                failures = failures.saturating_add(1);
                pause(&mut deliveries, failures, &drain).await;
                continue;
            }
        };
        if failures > 0 {
            tracing::info!(consumer = %plan.name, "pulling durable events");
        }
        let from = Start {
            made: SystemTime::from(consumer.cached_info().created),
        };
        let start = |msg, slot, bytes| handle(&worker, &plan, from, msg, slot, bytes);
        let mut puller = Puller {
            worker: &worker,
            plan: &plan,
            consumer: &consumer,
            context: &context,
            drain: &drain,
            need: &mut need,
            failures: &mut failures,
        };
        while !drain.is_cancelled() {
            // Room in the lane first: a partition has one event out at a time.
            while deliveries.len() >= width {
                deliveries.next().await;
            }
            let room = width - deliveries.len();
            let next = match mode {
                Mode::Busy => puller.busy(&mut deliveries, &start, room).await,
                Mode::Idle => puller.idle(&mut deliveries, &start).await,
            };
            // `None`: drained, or the pull failed and the consumer is opened again.
            let Some(next) = next else { break };
            mode = next;
        }
    }
    // Nothing pulled is left unstarted; every attempt runs to its end and is settled.
    while deliveries.next().await.is_some() {}
}

/// The lane's consumer and the JetStream context its acknowledgements go through.
async fn open(
    store: &Store,
    own: &OwnStream,
    plan: &ConsumerPlan,
) -> Result<(PullConsumer, jetstream::Context), DurableError> {
    let consumer = store.consumer(&own.manager, own.limits, plan).await?;
    let context = store.context().await?;
    Ok((consumer, context))
}

/// A lane's pulls from its open consumer.
struct Puller<'a> {
    worker: &'a Worker,
    plan: &'a ConsumerPlan,
    consumer: &'a PullConsumer,
    context: &'a jetstream::Context,
    drain: &'a CancellationToken,
    need: &'a mut Need,
    /// Failures in a row (0 once a pull succeeds): the backoff before reopening.
    failures: &'a mut u32,
}

impl Puller<'_> {
    /// A busy lane's pull: the least bytes first, then slots, each in turn with every other waiter
    /// of the pod; then as many more bytes as are free, up to the least per slot; then only as
    /// many events as slots and bytes. Each event's delivery starts as it comes. The lane's mode
    /// next, or `None` to reopen (or on drain).
    async fn busy<D: Future<Output = ()>>(
        &mut self,
        deliveries: &mut FuturesUnordered<D>,
        start: &impl Fn(Message, Option<OwnedSemaphorePermit>, Held) -> D,
        room: usize,
    ) -> Option<Mode> {
        let (worker, drain) = (self.worker, self.drain);
        let least = self.need.least();
        let mut reserved = reserve(deliveries, worker, least, least, drain).await?;
        let first = beside(deliveries, async {
            tokio::select! {
                s = worker.slot() => s,
                _ = drain.cancelled() => None,
            }
        })
        .await?;
        let mut slots = vec![first];
        while slots.len() < room {
            match worker.try_slot() {
                Some(s) => slots.push(s),
                None => break,
            }
        }
        worker
            .bytes()
            .top_up(&mut reserved, slots.len().saturating_mul(least));
        let held = reserved.bytes();
        let (asked, max_bytes) = self.need.request(held, slots.len());
        slots.truncate(asked);
        let pull = Pull::start(self.consumer, self.context, (asked, max_bytes), None);
        let mut pull = match beside(deliveries, pull).await {
            Ok(p) => p,
            Err(e) => {
                drop(slots);
                let failures = self.failed(&e);
                pause(deliveries, failures, self.drain).await;
                return None;
            }
        };
        *self.failures = 0;
        let (mut got, mut largest) = (0, 0);
        while let Some(msg) = beside(deliveries, pull.next()).await {
            got += 1;
            let bytes = pay(worker, &mut reserved, &msg);
            largest = largest.max(bytes.bytes());
            deliveries.push(start(msg, slots.pop(), bytes));
        }
        self.need.after(got, largest, pull.over_bytes(), held);
        tracing::trace!(consumer = %self.plan.name, asked, got, "busy pull over");
        // The slots and bytes no event came for go back now.
        drop((slots, reserved));
        Some(match got == asked || pull.over_bytes() {
            true => Mode::Busy,
            false => Mode::Idle,
        })
    }

    /// An idle lane's wait on the server for one event, without a slot. The lane's mode next, or
    /// `None` to reopen (or on drain).
    async fn idle<D: Future<Output = ()>>(
        &mut self,
        deliveries: &mut FuturesUnordered<D>,
        start: &impl Fn(Message, Option<OwnedSemaphorePermit>, Held) -> D,
    ) -> Option<Mode> {
        let worker = self.worker;
        let least = self.need.least();
        let mut reserved = reserve(deliveries, worker, least, 0, self.drain).await?;
        let held = reserved.bytes();
        let (_, max_bytes) = self.need.request(held, 1);
        let (msgs, over) = match idle(
            deliveries,
            self.consumer,
            self.context,
            max_bytes,
            self.drain,
        )
        .await
        {
            Ok(got) => got,
            Err(e) => {
                let failures = self.failed(&e);
                pause(deliveries, failures, self.drain).await;
                return None;
            }
        };
        *self.failures = 0;
        tracing::trace!(consumer = %self.plan.name, got = msgs.len(), "idle pull over");
        let started = !msgs.is_empty();
        let mut largest = 0;
        for msg in msgs {
            let bytes = pay(worker, &mut reserved, &msg);
            largest = largest.max(bytes.bytes());
            // A slot if one is free; else it waits for one with progress acks.
            deliveries.push(start(msg, worker.try_slot(), bytes));
        }
        self.need.after(usize::from(started), largest, over, held);
        // An event that did not fit waits there for a larger reservation.
        Some(match started || over {
            true => Mode::Busy,
            false => Mode::Idle,
        })
    }

    /// A pull failed: counted and logged; returns the failures in a row, for the backoff before
    /// the consumer is opened again.
    fn failed(&mut self, e: &dyn std::fmt::Display) -> u32 {
        *self.failures = self.failures.saturating_add(1);
        tracing::debug!(consumer = %self.plan.name, error = %e, "pull failed; reopening");
        *self.failures
    }
}

/// Bytes from the pod's budget for a pull: at least `least` (waited for, in turn), up to `most`
/// of what is free then, while the lane's `deliveries` go on; `None` on `drain`.
async fn reserve<D>(
    deliveries: &mut FuturesUnordered<D>,
    worker: &Worker,
    least: usize,
    most: usize,
    drain: &CancellationToken,
) -> Option<Held>
where
    D: Future<Output = ()>,
{
    beside(deliveries, async {
        tokio::select! {
            held = worker.bytes().reserve(least, most) => Some(held),
            _ = drain.cancelled() => None,
        }
    })
    .await
}

/// The bytes `msg` holds while it is worked on, out of the pull's `reserved` bytes; the request's
/// `max_bytes` keeps them enough, and should the server count otherwise, the rest comes from the
/// budget if it is free (the event is held regardless: it is already here).
fn pay(worker: &Worker, reserved: &mut Held, msg: &Message) -> Held {
    let charge = Need::charge(Pull::size(msg));
    let mut bytes = reserved.split(charge);
    let short = charge - bytes.bytes();
    if short > 0 && !worker.bytes().grow(&mut bytes, short) {
        tracing::debug!(short, "a pulled event's bytes exceed its reservation");
    }
    bytes
}

/// An idle lane's wait for its next event of at most `max_bytes` (with no slot), while its
/// `deliveries` go on: the event when it comes, none when the request expires, and on `drain`
/// whatever the withdrawn request brought before the server heard of it; with whether the server
/// ended the request because the next event did not fit.
async fn idle<D>(
    deliveries: &mut FuturesUnordered<D>,
    consumer: &PullConsumer,
    context: &jetstream::Context,
    max_bytes: usize,
    drain: &CancellationToken,
) -> Result<(Vec<Message>, bool), PullError>
where
    D: Future<Output = ()>,
{
    let mut pull = beside(
        deliveries,
        Pull::start(consumer, context, (1, max_bytes), Some(pull::IDLE_EXPIRES)),
    )
    .await?;
    let came = beside(deliveries, async {
        tokio::select! {
            m = pull.next() => Some(m),
            _ = drain.cancelled() => None,
        }
    })
    .await;
    if let Some(m) = came {
        return Ok((m.into_iter().collect(), pull.over_bytes()));
    }
    pull.stop().await;
    let mut held = Vec::new();
    while let Some(m) = beside(deliveries, pull.next()).await {
        held.push(m);
    }
    if !held.is_empty() {
        // The race a withdrawal has to win: the server sent these before it heard of it.
        tracing::info!(
            events = held.len(),
            "a withdrawn pull request had brought events; delivering them"
        );
    }
    Ok((held, pull.over_bytes()))
}

/// The backoff after the `failures`-th failure in a row to open or pull, while the lane's
/// `deliveries` go on; cut short by `drain`.
async fn pause<D>(deliveries: &mut FuturesUnordered<D>, failures: u32, drain: &CancellationToken)
where
    D: Future<Output = ()>,
{
    let wait = backoff::delay(
        Duration::from_millis(100),
        SETUP_RETRY_MAX,
        failures.saturating_sub(1),
        fastrand::f64(),
    );
    beside(deliveries, async {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {},
            _ = drain.cancelled() => {},
        }
    })
    .await;
}

/// Waits for `until` while the lane's `deliveries` go on.
async fn beside<D, T>(deliveries: &mut FuturesUnordered<D>, until: impl Future<Output = T>) -> T
where
    D: Future<Output = ()>,
{
    let mut until = std::pin::pin!(until);
    loop {
        tokio::select! {
            done = &mut until => return done,
            Some(()) = deliveries.next(), if !deliveries.is_empty() => {}
        }
    }
}

/// Runs `work` while telling the server every `every` that `msg` is being worked on, so its AckWait
/// starts over and it is not redelivered meanwhile.
async fn with_progress<T>(msg: &Message, every: Duration, work: impl Future<Output = T>) -> T {
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                if let Err(e) = msg.ack_with(AckKind::Progress).await {
                    tracing::debug!(error = %e, "progress ack not sent");
                }
            }
        }
    }
}

/// The event a stream message (its `headers` and `payload`) carries, as the workers deliver it.
fn request_of(event: &str, headers: Option<&HeaderMap>, payload: &Bytes) -> Request {
    // The first of `names` the message has; a trace context stored by an older sidecar is under
    // the bare W3C names.
    let get = |names: &[&str]| {
        headers
            .and_then(|h| names.iter().find_map(|n| h.get(*n)))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default()
    };
    let content_type = get(&[header::CONTENT_TYPE]);
    // The publisher's identity, as it stored it: it replaces this Manager's own as the app's
    // `ce-source`, so (source, id) names one event however many publishers reuse a key.
    let source = get(&[header::SOURCE]);
    Request {
        headers: if source.is_empty() {
            Vec::new()
        } else {
            vec![(header::SOURCE.to_owned(), source)]
        },
        id: 0,
        flags: 0,
        deadline_ms: 0,
        event: event.to_owned(),
        ce_id: get(&[header::CE_ID]),
        traceparent: get(&[header::TRACEPARENT, header::OLD_TRACEPARENT]),
        // Checked like a frame's: a stream is written by sidecars, but read as outside input.
        tracestate: switchyard_protocol::tracestate::accept([get(&[
            header::TRACESTATE,
            header::OLD_TRACESTATE,
        ])
        .as_bytes()]),
        content_type: if content_type.is_empty() {
            crate::edge::JSON.to_owned()
        } else {
            content_type
        },
        payload: payload.clone(),
    }
}

/// When a lane's consumer was made, by the server's clock: where a subscription's `startFrom`
/// counts from.
#[derive(Debug, Clone, Copy)]
struct Start {
    made: SystemTime,
}

/// The event type of `msg` on `plan`'s lane: the lane's own for a handled type; for a
/// subscription's, the one the copy names, if its pattern covers it (a stream is written by
/// sidecars, but read as outside input).
fn event_of<'a>(plan: &'a ConsumerPlan, headers: Option<&'a HeaderMap>) -> Option<&'a str> {
    if plan.start.is_none() {
        return Some(&plan.event);
    }
    let named = headers?.get(header::TYPE)?.as_str();
    (switchyard_crds::event_type::EventType::check(named).is_ok()
        && switchyard_crds::subscription::pattern_matches(&plan.event, named))
    .then_some(named)
}

/// The event type `msg` is delivered as, with its slot back; `None` (the slot let go first) when
/// it is not delivered: stored before its subscription's `startFrom` (acked), or naming no event
/// type its subscription covers (terminated).
async fn to_deliver(
    plan: &ConsumerPlan,
    from: Start,
    msg: &Message,
    info: Option<&jetstream::message::Info<'_>>,
    slot: Option<OwnedSemaphorePermit>,
) -> Option<(String, Option<OwnedSemaphorePermit>)> {
    if let (Some(start), Some(i)) = (plan.start, info)
        && start.skips(SystemTime::from(i.published), from.made)
    {
        drop(slot);
        tracing::debug!(consumer = %plan.name, "stored before the subscription's startFrom; skipped");
        if let Err(e) = msg.ack().await {
            tracing::debug!(error = %e, "ack of a skipped event not sent; it comes again and is skipped again");
        }
        return None;
    }
    let Some(event) = event_of(plan, msg.headers.as_ref()) else {
        drop(slot);
        tracing::warn!(consumer = %plan.name, "a stored copy names no event type its subscription covers; dropped");
        if let Err(e) = msg.ack_with(AckKind::Term).await {
            tracing::debug!(error = %e, "termination not sent");
        }
        return None;
    };
    Some((event.to_owned(), slot))
}

/// Delivers one pulled event on `slot` (or on the first slot free, when it came without one),
/// holding its `_bytes` of the pod's budget, and settles it with the server. A subscription's copy stored before where it starts is acked
/// undelivered, as is one that names no type its pattern covers (logged: it cannot be delivered,
/// and redelivering it would never change that).
async fn handle(
    worker: &Worker,
    plan: &ConsumerPlan,
    from: Start,
    msg: Message,
    slot: Option<OwnedSemaphorePermit>,
    _bytes: Held,
) {
    let info = msg.info().ok();
    let delivered = info
        .as_ref()
        .and_then(|i| u64::try_from(i.delivered).ok())
        .unwrap_or(1)
        .max(1);
    let Some((event, slot)) = to_deliver(plan, from, &msg, info.as_ref(), slot).await else {
        return;
    };
    let event = event.as_str();
    if delivered > 1 {
        worker.redelivered(event);
    }
    if let Some(i) = info.as_ref() {
        worker.waited(event, SystemTime::from(i.published));
    }
    // Its own copy of the payload: the client reads messages into shared buffers, and a slice
    // kept for the whole delivery would keep the rest of its buffer (other events' bytes,
    // uncounted) alive with it.
    let payload = Bytes::copy_from_slice(&msg.payload);
    let mut msg = msg;
    msg.message.payload = Bytes::new();
    let ev = request_of(event, msg.headers.as_ref(), &payload);
    let every = (plan.ack_wait / 4).max(MIN_PROGRESS_EVERY);
    let settle = match verdict::before(delivered, plan.attempts) {
        Step::DeadLetter(reason) => {
            drop(slot);
            Settle::DeadLetter(reason)
        }
        Step::Attempt => {
            let slot = match slot {
                Some(s) => Some(s),
                None => {
                    let _queued = worker.queued();
                    with_progress(&msg, every, worker.slot()).await
                }
            };
            let Some(slot) = slot else { return };
            let attempted = with_progress(&msg, every, worker.attempt_durable(&ev, slot)).await;
            verdict::after(delivered, plan.attempts, attempted)
        }
    };
    let ack = match settle {
        Settle::Ack => AckKind::Ack,
        Settle::Release => AckKind::Nak(None),
        Settle::Retry(attempt) => {
            tracing::debug!(%event, ce_id = %ev.ce_id, attempt, "durable delivery failed; redelivered after backoff");
            AckKind::Nak(Some(worker.redelivery_delay(attempt)))
        }
        Settle::DeadLetter(reason) => {
            tracing::warn!(%event, ce_id = %ev.ce_id, deliveries = delivered, reason, "durable event failed for good");
            with_progress(&msg, every, worker.dead_letter_durable(&ev, reason)).await;
            AckKind::Term
        }
    };
    if let Err(e) = msg.ack_with(ack).await {
        // The server redelivers after AckWait: a duplicate, never a loss.
        tracing::warn!(%event, ce_id = %ev.ce_id, error = %e, "ack not sent; the event will be redelivered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn an_event_is_read_from_the_cloudevents_headers_it_was_stored_with() {
        let mut h = HeaderMap::new();
        h.insert(header::CE_ID, "e-1");
        h.insert(header::TRACEPARENT, TP);
        h.insert(header::TRACESTATE, "k=v");
        h.insert(header::CONTENT_TYPE, "text/plain");
        let ev = request_of("orders", Some(&h), &Bytes::from_static(b"hi"));
        assert_eq!(ev.event, "orders");
        assert_eq!(ev.ce_id, "e-1");
        assert_eq!(ev.traceparent, TP);
        assert_eq!(ev.tracestate, "k=v");
        assert_eq!(ev.content_type, "text/plain");
        assert_eq!(&ev.payload[..], b"hi");
        assert!(ev.headers.is_empty(), "no source stored: the Manager's own");
        h.insert(header::SOURCE, "/switchyard/shop/cart");
        let ev = request_of("orders", Some(&h), &Bytes::from_static(b"hi"));
        assert_eq!(
            ev.headers,
            vec![("ce-source".to_owned(), "/switchyard/shop/cart".to_owned())]
        );
    }

    #[test]
    fn an_event_stored_by_an_older_sidecar_keeps_its_trace_context() {
        let mut h = HeaderMap::new();
        h.insert(header::CE_ID, "e-2");
        h.insert(header::OLD_TRACEPARENT, TP);
        h.insert(header::OLD_TRACESTATE, "k=v");
        let ev = request_of("orders", Some(&h), &Bytes::new());
        assert_eq!(ev.traceparent, TP);
        assert_eq!(ev.tracestate, "k=v");
        assert_eq!(ev.content_type, crate::edge::JSON, "no content-type: JSON");
    }

    #[test]
    fn a_message_without_headers_is_an_event_without_id_or_trace() {
        let ev = request_of("orders", None, &Bytes::from_static(b"{}"));
        assert_eq!((ev.ce_id.as_str(), ev.traceparent.as_str()), ("", ""));
        assert_eq!(ev.tracestate, "");
    }
}
