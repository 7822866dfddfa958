//! Durable delivery's consuming side: pull this pod's durable event types from their JetStream
//! consumers, deliver each to the app through the workers, and acknowledge only after the app's
//! final answer (2xx, or a 4xx it means). A failed attempt is redelivered after the retry backoff;
//! the last one (`retries.attempts` = MaxDeliver) goes to the dead-letter type and is terminated.
//! An event whose ack never came (a killed pod or app) is redelivered by the server after AckWait.
//!
//! An unordered lane runs up to `maxInFlight` deliveries at once; a partition of an ordering key runs
//! one at a time (its consumer allows one outstanding event over every pod), so a key is in order.

use super::worker::{Attempted, Worker};
use crate::backoff;
use crate::durable::{Store, header};
use async_nats::HeaderMap;
use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::durable::{ConsumerPlan, Lane};
use switchyard_protocol::frame::Request;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest wait between tries to create a consumer or reopen its pull.
const SETUP_RETRY_MAX: Duration = Duration::from_secs(5);

/// The stream this pod's consumers read: its Manager's, created with the Manager's duplicate
/// window (so this pod and every publisher give it the same one).
#[derive(Clone)]
pub(crate) struct OwnStream {
    /// The Manager.
    pub(crate) manager: String,
    /// Its `durable.duplicateWindow`.
    pub(crate) duplicate_window: Duration,
}

/// Starts one pull loop per consumer of this pod's durable types; they stop pulling when `drain`
/// fires and end once their deliveries are acknowledged. Wait on `tracker`.
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
    // consuming sidecar's time. They keep being polled while a pull is reopened.
    let mut deliveries = FuturesUnordered::new();
    let mut failures = 0u32;
    while !drain.is_cancelled() {
        let opened = beside(&mut deliveries, async {
            match store
                .consumer(&own.manager, own.duplicate_window, &plan)
                .await
            {
                Ok(c) => c
                    .stream()
                    .max_messages_per_batch(width)
                    .messages()
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
        let mut messages = match opened {
            Ok(m) => {
                if failures > 0 {
                    tracing::info!(consumer = %plan.name, "pulling durable events");
                }
                failures = 0;
                m
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(consumer = %plan.name, error = %e, "cannot pull durable events; retrying with backoff");
                }
                failures = failures.saturating_add(1);
                let wait = backoff::delay(
                    Duration::from_millis(100),
                    SETUP_RETRY_MAX,
                    failures - 1,
                    fastrand::f64(),
                );
                beside(&mut deliveries, async {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = drain.cancelled() => {},
                    }
                })
                .await;
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                Some(()) = deliveries.next(), if !deliveries.is_empty() => continue,
                // Only as many pulled as can be delivered: a full lane reads no message.
                m = messages.next(), if deliveries.len() < width => m,
                _ = drain.cancelled() => break,
            };
            match next {
                Some(Ok(msg)) => {
                    deliveries.push(handle(&worker, &plan.event, msg, plan.max_deliver, &drain));
                }
                Some(Err(e)) => {
                    tracing::debug!(consumer = %plan.name, error = %e, "pull interrupted; reopening");
                    break;
                }
                None => break,
            }
        }
    }
    // Events pulled and not started are not acknowledged: the server redelivers them after AckWait.
    while deliveries.next().await.is_some() {}
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

async fn handle(
    worker: &Worker,
    event: &str,
    msg: Message,
    max_deliver: i64,
    cancel: &CancellationToken,
) {
    let delivered = msg.info().map(|i| i.delivered).unwrap_or(1).max(1);
    let ev = request_of(event, msg.headers.as_ref(), &msg.payload);
    let ack = match worker.attempt_durable(&ev, cancel).await {
        Attempted::Done(_) => AckKind::Ack,
        // Back to the stream at once, for a pod that is not draining.
        Attempted::Cancelled | Attempted::NotHere => AckKind::Nak(None),
        Attempted::Failed(reason) if delivered >= max_deliver => {
            tracing::warn!(%event, ce_id = %ev.ce_id, attempts = delivered, reason, "durable event failed its last attempt");
            worker.dead_letter_durable(&ev, reason).await;
            AckKind::Term
        }
        Attempted::Failed(reason) => {
            let attempt = u32::try_from(delivered).unwrap_or(u32::MAX);
            tracing::debug!(%event, ce_id = %ev.ce_id, attempt, reason, "durable delivery failed; redelivered after backoff");
            AckKind::Nak(Some(worker.redelivery_delay(attempt)))
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
