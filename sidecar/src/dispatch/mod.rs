//! The dispatch stage (EDRI's broker and router): what every front door does once a request has
//! become an event. The broker admits it within a bound; the upstream sends it to a manager of its
//! type and waits for the answer. A failure comes back as an [`answer::Failure`](crate::answer::Failure),
//! which the front door renders through the one answer mapping.
//!
//! Used by the router role's HTTP, gRPC and WebSocket listeners and by the manager role's local API,
//! so their stage timing, shedding and failures agree.

mod broker;
mod ce_id;
mod clock;
mod observers;

pub use broker::Broker;
pub(crate) use ce_id::new_ce_id;
pub(crate) use clock::Clock;
pub(crate) use observers::Observers;

use crate::answer::{DEADLINE_SLACK, Failure};
use crate::durable::{DurableError, Fields, Store, Target};
use crate::upstream::subscribers::Sub;
use crate::upstream::{Answered, CallError, Collect, Outgoing, Upstream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use switchyard_crds::subscription::Observe;
use switchyard_protocol::frame::{MAX_PAYLOAD, Response};

/// The broker and the upstream of one process.
pub(crate) struct Dispatch {
    /// Admission bound.
    pub(crate) broker: Broker,
    /// Manager connections; shared with the admin server's `/routes` and the control-plane follower.
    pub(crate) upstream: Arc<Upstream>,
    /// The event store, when the sidecar is given JetStream servers: publishes of the types the
    /// routing table says are durable go there.
    pub(crate) durable: Option<Arc<Store>>,
    /// Copies of requests and answers for the types' `requests`/`responses` subscribers.
    pub(crate) observers: Observers,
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        match e {
            CallError::NoEndpoint => Failure::NoEndpoint,
            CallError::NoCredit => Failure::NoCredit,
            CallError::Timeout => Failure::Timeout,
            CallError::Lost => Failure::Lost,
            CallError::TooLarge { bytes } => Failure::TooLarge { bytes },
            CallError::OverLimit { limit } => Failure::OverLimit { limit },
            CallError::PeerTakesNoStreams { max } => Failure::PeerTakesNoStreams { max },
        }
    }
}

impl Dispatch {
    /// Admits `out` at the broker, sends it to a manager of its type and waits for the app's answer
    /// until `deadline`. Records the stage timestamps in `clock` (`checked` is taken on entry), and
    /// the broker and send spans when the request is traced. An answer the manager sidecar made
    /// itself (the app gave none) is a [`Failure::Manager`], or the deadline when it is that.
    /// The answer is whole: a streamed one is read to its end within the deadline, at most
    /// [`MAX_PAYLOAD`] bytes (the front doors that cannot stream: gRPC, WebSocket, the local API).
    pub(crate) async fn call(
        &self,
        out: Outgoing,
        deadline: Instant,
        clock: &mut Clock,
    ) -> Result<Response, Failure> {
        let event = out.event.clone();
        let answered = self.call_streamed(out, deadline, clock).await?;
        let whole = tokio::time::timeout_at(deadline.into(), answered.whole(MAX_PAYLOAD)).await;
        let result = match whole {
            Err(_) => Err(Failure::Timeout),
            Ok(Ok(resp)) => {
                clock.app = Duration::from_micros(resp.app_us.into());
                Ok(resp)
            }
            Ok(Err(Collect::TooLarge)) => Err(Failure::Manager {
                status: 502,
                detail: format!(
                    "the app's streamed answer is larger than {MAX_PAYLOAD} bytes, the most this protocol takes whole"
                ),
            }),
            Ok(Err(Collect::Reset(code))) => Err(Failure::Manager {
                status: 502,
                detail: format!(
                    "the app's streamed answer was cut ({})",
                    switchyard_protocol::stream::code::name(code)
                ),
            }),
        };
        // call_streamed counted its own failures; these came while the answer was read whole.
        if let Err(f) = &result {
            self.broker.metrics().failed(&event, f.name());
        }
        result
    }

    /// [`Dispatch::call`] with a streamed answer left streaming: the head now, the body as it comes.
    pub(crate) async fn call_streamed(
        &self,
        out: Outgoing,
        deadline: Instant,
        clock: &mut Clock,
    ) -> Result<Answered, Failure> {
        clock.checked = Some(Instant::now());
        if let Some(t) = clock.trace.as_mut() {
            t.broker_start(&out.event, SystemTime::now());
        }
        let event = out.event.clone();
        let result = self.route(out, deadline, clock).await;
        if let Err(f) = &result {
            self.broker.metrics().failed(&event, f.name());
        }
        if let Some(t) = clock.trace.as_mut() {
            t.routed(
                result
                    .as_ref()
                    .map(|r| r.head.status)
                    .map_err(Failure::name),
            );
        }
        result
    }

    async fn route(
        &self,
        mut out: Outgoing,
        deadline: Instant,
        clock: &mut Clock,
    ) -> Result<Answered, Failure> {
        let Some(_admitted) = self.broker.admit() else {
            return Err(Failure::Shed);
        };
        clock.admitted = Some(Instant::now());
        // Waits (within the deadline) for an endpoint when the event type has none ready and the router
        // can ask the operator for one (scale from zero); the broker's admission bounds these waits.
        let Some(pool) = self.upstream.ready_pool(&out.event, deadline).await else {
            clock.call_end = clock.admitted;
            return Err(Failure::NoManager);
        };
        // Traced: the manager's spans hang under the send span, so its context is what travels.
        if let Some(t) = clock.trace.as_mut() {
            out.traceparent = t.send_start(&out.event, &out.ce_id);
        }
        let (asking, answered_to) = self.observers_of(&out);
        if !asking.is_empty() {
            self.observers.request(&self.upstream, asking, &out);
        }
        let result = self
            .upstream
            .call(&pool, &out, deadline, &mut clock.call)
            .await;
        clock.call_end = Some(Instant::now());
        let resp = result?;
        // A streamed answer is read once, by the client: its observers are not sent a copy.
        if !answered_to.is_empty() && resp.body.is_none() && !resp.head.from_mesh {
            self.observers
                .response(&self.upstream, answered_to, &out, &resp.head);
        }
        clock.queue = Duration::from_micros(resp.head.queue_us.into());
        clock.app = Duration::from_micros(resp.head.app_us.into());
        let Answered { head, body } = resp;
        Ok(Answered {
            head: from_manager(head, deadline)?,
            body,
        })
    }

    /// The `requests` and the `responses` subscribers of `out` (none for a streamed request body).
    fn observers_of(&self, out: &Outgoing) -> (Vec<Arc<Sub>>, Vec<Arc<Sub>>) {
        let asking = self.observers.of_request(&self.upstream, out);
        let answered = if out.upload.is_some() {
            Vec::new()
        } else {
            self.upstream.subscribers_of(out, Observe::Responses)
        };
        (asking, answered)
    }

    /// Publishes `out` within the broker's bound: see [`publish_routed`].
    pub(crate) async fn publish(&self, out: Outgoing, deadline: Instant) -> Result<(), Failure> {
        let Some(_admitted) = self.broker.admit() else {
            return Err(Failure::Shed);
        };
        publish_routed(&self.upstream, self.durable.as_deref(), out, deadline).await
    }
}

/// Publishes `out` the way the current routing table says its type is delivered (the config
/// locally, the control plane's route in a cluster, so a change of its delivery takes effect with
/// the next table): a durable type to its Manager's stream, done once the stream confirmed it
/// (`store`, the sidecar's JetStream servers; without them it is refused, never sent direct);
/// any other to a manager sidecar of its Manager, done once that one admitted it to its queue (its
/// acknowledgement; a refusal from every endpoint is the manager's 503). No broker admission here:
/// the dead letters of an event the worker holds are admitted already.
///
/// Fan-out: every Manager subscribed to the type's publishes (pattern and filter matching) gets
/// it too, once per Manager, in parallel with the handler; done once each of them admitted it (a
/// type with subscribers and no handler is done once they did). A refusal from any is the answer,
/// and a retry sends to all again with the same ce-id: a subscriber that had admitted it may get it
/// twice, none gets it zero times after an `Ok`.
pub(crate) async fn publish_routed(
    upstream: &Upstream,
    store: Option<&Store>,
    out: Outgoing,
    deadline: Instant,
) -> Result<(), Failure> {
    let subs = upstream.subscribers_of(&out, Observe::Published);
    if subs.is_empty() {
        return publish_to_handler(upstream, store, out, deadline).await;
    }
    let copy = out.buffered_copy(out.headers.clone());
    let copies = futures::future::join_all(
        subs.iter()
            .map(|s| publish_to_subscriber(upstream, store, s, &copy, deadline)),
    );
    let handled = async {
        match publish_to_handler(upstream, store, out, deadline).await {
            // Subscribers only: the type needs no handler to be published.
            Err(Failure::NoManager) => Ok(()),
            r => r,
        }
    };
    let (handled, copies) = tokio::join!(handled, copies);
    handled?;
    copies.into_iter().collect()
}

/// [`publish_routed`] to the type's handling Manager only.
async fn publish_to_handler(
    upstream: &Upstream,
    store: Option<&Store>,
    out: Outgoing,
    deadline: Instant,
) -> Result<(), Failure> {
    if let Some((manager, route)) = upstream.durable_of(&out.event) {
        let to = Target {
            manager: &manager,
            subscription: None,
            ordering_key: route.ordering_key.as_deref(),
            stream: route.stream_limits(),
        };
        return store_durably(store, to, &out, deadline).await;
    }
    // Held (within the deadline) while the handler has no pod and can be activated, as a request is.
    let pool = upstream
        .ready_pool(&out.event, deadline)
        .await
        .ok_or(Failure::NoManager)?;
    let ack = upstream.publish(&pool, &out, deadline).await?;
    accepted(ack, deadline)
}

/// A copy of `out` for the subscriber `sub`: stored in its Manager's stream for a durable
/// subscription (done on the PubAck), else sent to one of its pods (done on its admission; a
/// subscriber with no pod is activated and waited for within the deadline).
async fn publish_to_subscriber(
    upstream: &Upstream,
    store: Option<&Store>,
    sub: &Sub,
    out: &Outgoing,
    deadline: Instant,
) -> Result<(), Failure> {
    if let Some(route) = &sub.spec.durable {
        let to = Target {
            manager: &sub.spec.manager,
            subscription: Some(&sub.spec.event),
            ordering_key: route.ordering_key.as_deref(),
            stream: route.stream_limits(),
        };
        return store_durably(store, to, out, deadline).await;
    }
    // A subscriber at zero replicas is activated and waited for, as a handler is.
    let pool = upstream
        .ready_subscriber(sub, &out.event, deadline)
        .await
        .unwrap_or_else(|| sub.pool.clone());
    let ack = upstream.publish(&pool, out, deadline).await?;
    accepted(ack, deadline)
}

/// Stores `out` as `to` says, done once the stream confirmed it; without JetStream servers it is
/// refused, never sent direct (that would lose what its Manager was promised).
async fn store_durably(
    store: Option<&Store>,
    to: Target<'_>,
    out: &Outgoing,
    deadline: Instant,
) -> Result<(), Failure> {
    let Some(store) = store else {
        tracing::warn!(event = %out.event, ce_id = %out.ce_id, manager = %to.manager, "the event is delivered durably but this sidecar has no JetStream server (the operator's --jetstream-url); not sent");
        return Err(Failure::NotKept);
    };
    let fields = Fields {
        event: &out.event,
        ce_id: &out.ce_id,
        traceparent: &out.traceparent,
        tracestate: &out.tracestate,
        content_type: out.content_type.as_deref(),
        source: out
            .headers
            .iter()
            .find(|(n, _)| n == crate::durable::header::SOURCE)
            .map(|(_, v)| v.as_str()),
    };
    store
        .publish(to, fields, out.payload.clone(), deadline)
        .await
        .map_err(|e| durable_failure(&out.event, &out.ce_id, to.manager, e))
}

/// The answer to a durable publish the store did not take: a reused key and an event too large
/// for the server are the client's to fix (409, 413); a full stream (503 naming its limit) and
/// anything else may be retried.
fn durable_failure(event: &str, ce_id: &str, manager: &str, e: DurableError) -> Failure {
    match e {
        DurableError::StreamFull { stream, limit } => {
            tracing::warn!(%event, %ce_id, %stream, %limit, "durable publish refused: the stream is full");
            Failure::StreamFull {
                manager: manager.to_owned(),
                limit: limit.to_string(),
            }
        }
        DurableError::KeyReused { key } => {
            tracing::debug!(%event, %ce_id, "durable publish refused: its key was used for another event");
            Failure::KeyReused { key }
        }
        DurableError::TooLarge { bytes, max } => Failure::StoreTooLarge { bytes, max },
        e => {
            tracing::warn!(%event, %ce_id, error = %e, "durable publish not confirmed");
            Failure::NotKept
        }
    }
}

/// A manager's acknowledgement of a publish: 202 admitted, anything else its refusal.
pub(crate) fn accepted(ack: Response, deadline: Instant) -> Result<(), Failure> {
    if ack.status == 202 && ack.from_mesh {
        return Ok(());
    }
    from_manager(ack, deadline)?;
    // An app answer to a publish cannot happen (the manager acknowledges it); never count it as kept.
    Err(Failure::Lost)
}

/// The app's answer, or the manager sidecar's own refusal turned into a failure: its 504 near the
/// deadline is the deadline (whichever sidecar's timer fired first, the client hears one thing).
fn from_manager(resp: Response, deadline: Instant) -> Result<Response, Failure> {
    if !resp.from_mesh {
        return Ok(resp);
    }
    if resp.status == 504 && deadline.saturating_duration_since(Instant::now()) < DEADLINE_SLACK {
        return Err(Failure::Timeout);
    }
    Err(Failure::Manager {
        status: resp.status,
        detail: problem_detail(&resp.payload),
    })
}

/// The `detail` of a manager's problem body (its own, so well-formed); the status's title otherwise.
fn problem_detail(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("detail")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "the Manager did not deliver the event".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn response(status: u16, from_mesh: bool, payload: &'static [u8]) -> Response {
        Response {
            headers: Vec::new(),
            id: 1,
            status,
            queue_us: 0,
            app_us: 0,
            content_type: crate::problem::CONTENT_TYPE.into(),
            payload: Bytes::from_static(payload),
            returns_credit: false,
            from_mesh,
            more: false,
        }
    }

    #[test]
    fn the_apps_answers_pass_whatever_their_status() {
        let far = Instant::now() + Duration::from_secs(10);
        let r = from_manager(response(504, false, b"{}"), far).expect("the app's");
        assert_eq!(r.status, 504);
        assert!(from_manager(response(503, false, b"{}"), far).is_ok());
    }

    #[test]
    fn the_managers_own_answers_are_failures_and_its_late_504_is_the_deadline() {
        let far = Instant::now() + Duration::from_secs(10);
        let body = br#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the Manager's queue is full; retry shortly"}"#;
        assert_eq!(
            from_manager(response(503, true, body), far).map(|r| r.status),
            Err(Failure::Manager {
                status: 503,
                detail: "the Manager's queue is full; retry shortly".into()
            })
        );
        let body = br#"{"status":504,"detail":"the handler app did not answer within 5s"}"#;
        assert_eq!(
            from_manager(response(504, true, body), far).map(|r| r.status),
            Err(Failure::Manager {
                status: 504,
                detail: "the handler app did not answer within 5s".into()
            })
        );
        let now = Instant::now();
        assert_eq!(
            from_manager(response(504, true, body), now).map(|r| r.status),
            Err(Failure::Timeout)
        );
        assert_eq!(
            from_manager(response(502, true, b"not json"), far).map(|r| r.status),
            Err(Failure::Manager {
                status: 502,
                detail: "the Manager did not deliver the event".into()
            })
        );
    }
}
