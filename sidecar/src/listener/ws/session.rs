//! One WebSocket connection: a reader turning messages into commands, a writer draining the one
//! bounded outbox (replies and pushes), keepalive pings, and the close (client, drain, oversize).
//!
//! Bounds: at most [`MAX_IN_FLIGHT`] commands per connection are between arrival and their reply
//! being queued; at the bound the connection is not read (TCP holds the client back), so a reply is
//! never dropped. Pushes take whatever room the outbox has left and are dropped (counted, announced)
//! when it is full. A client that sends nothing, not even a pong, for [`DEAD_AFTER`] is closed.
//!
//! A session opened with a credential (auth middleware) lives while that credential would still
//! admit a new request: it is closed with 1008 when the token expires, or when a key reload no
//! longer admits it; `refresh` (JWT auth) carries it on with a new token of the same subject.

use super::incoming::{self, Command};
use super::outgoing;
use super::push::{Hub, Outbox, Subscription};
use crate::answer::Answer;
use crate::answer::http::app_status;
use crate::dispatch::{Clock, new_ce_id};
use crate::listener::Edge;
use crate::metrics::EventLabel;
use crate::middleware::{Denial, Grant};
use crate::otel::produce::Session;
use crate::otel::request::{Remote, RequestTrace};
use crate::routes::ws::{WsRoute, WsRoutes};
use crate::shutdown::DRAIN_LIMIT;
use crate::traceparent;
use crate::upstream::Outgoing;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, SplitSink};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use opentelemetry::trace::SpanContext;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

/// Commands of one connection between arrival and their reply being queued.
pub(super) const MAX_IN_FLIGHT: usize = 64;
/// Outbox room beyond the replies' share, for pushes and pings.
const PUSH_ROOM: usize = 192;
/// Push subscriptions per connection.
pub(super) const MAX_SUBSCRIPTIONS: usize = 32;
/// Server ping period.
const PING_EVERY: Duration = Duration::from_secs(10);
/// A connection with no frame from the client for this long is dead.
const DEAD_AFTER: Duration = Duration::from_secs(30);
/// How long a closing connection waits for the client's close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Messages written before a flush.
const WRITE_BATCH: usize = 64;
/// Bytes asked of the socket in one read. tungstenite zeroes this much of its buffer before every
/// read, and its default (128 KiB) made that `memset` a tenth of the router's CPU on small
/// messages; a larger message is still read whole, this much at a time.
const READ_BUFFER: usize = 16 * 1024;

/// The size past which the connection is closed (1009) rather than the message refused with a
/// reply: twice the limit plus 1 KiB, so a message a little too large gets a clear answer while
/// memory per connection stays bounded.
pub(super) fn hard_limit(max: usize) -> usize {
    max.saturating_mul(2).saturating_add(1024)
}

/// Process-unique connection ids, so the hub tells connections apart.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

type Ws = WebSocketStream<TokioIo<Upgraded>>;

/// Why the read loop ended.
enum End {
    /// The router drains: finish replies, close with 1001.
    Drain,
    /// A message over the hard limit: finish replies, close with 1009.
    TooBig,
    /// The client sent a close frame: answer it, drop the pending work.
    ClientClosed,
    /// The client vanished, broke the protocol, or stopped answering pings.
    Gone,
    /// The session's credential lapsed: close with 1008 naming why, drop the pending work.
    Lapsed(Denial),
}

impl End {
    /// How the session closed, for its span.
    fn name(&self) -> &'static str {
        match self {
            End::Drain => "drain",
            End::TooBig => "too_big",
            End::ClientClosed => "client",
            End::Gone => "gone",
            End::Lapsed(_) => "lapsed",
        }
    }
}

/// Resolves when the session's credential lapses.
type Lapse = Pin<Box<dyn Future<Output = Denial> + Send>>;

/// The session's credential and the wait for its lapse.
struct Auth {
    grant: Option<Grant>,
    lapse: Lapse,
}

impl Auth {
    fn new(grant: Option<Grant>) -> Auth {
        let lapse: Lapse = match grant.clone() {
            Some(g) => Box::pin(async move { g.lapsed().await }),
            None => Box::pin(std::future::pending()),
        };
        Auth { grant, lapse }
    }
}

/// Longest close reason a close frame carries (RFC 6455: 125 bytes of payload, 2 for the code).
const MAX_CLOSE_REASON: usize = 123;

/// The close reason of a lapsed credential: the expiry said as such, a refusal after a key reload
/// as no longer authorized; cut to what a close frame carries.
fn lapse_reason(d: &Denial) -> String {
    let mut reason = if d.reason == "expired" {
        format!("{}; reconnect with a fresh token", d.detail)
    } else {
        format!("no longer authorized: {}", d.detail)
    };
    if reason.len() > MAX_CLOSE_REASON {
        let mut end = MAX_CLOSE_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// Counts the connection in `switchyard_ws_connections` while it lives.
struct Open(Arc<crate::metrics::Metrics>);

impl Open {
    fn count(metrics: &Arc<crate::metrics::Metrics>) -> Open {
        metrics.ws.connections.inc();
        Open(metrics.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.ws.connections.dec();
    }
}

/// The connection's subscriptions; dropping it removes them from the hub.
struct Subs {
    hub: Arc<Hub>,
    conn: u64,
    next: u64,
    events: HashMap<u64, String>,
}

impl Subs {
    /// A new subscription's id, its event type noted.
    fn take(&mut self, event: String) -> u64 {
        let sub = self.next;
        self.next += 1;
        self.events.insert(sub, event);
        sub
    }

    /// Removes every subscription from the hub: no more pushes.
    fn end(&mut self) {
        for (id, event) in self.events.drain() {
            self.hub.remove(self.conn, &event, id);
        }
    }

    /// A new connection's (empty) subscriptions in `hub`.
    fn new(hub: Arc<Hub>) -> Subs {
        Subs {
            hub,
            conn: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            next: 1,
            events: HashMap::new(),
        }
    }
}

impl Drop for Subs {
    fn drop(&mut self) {
        self.end();
    }
}

/// The read half of a session's WebSocket.
type WsStream = futures::stream::SplitStream<WebSocketStream<TokioIo<Upgraded>>>;

/// The session's trace context each message is sent with.
struct SessionContext {
    /// The session span's, which the messages' spans link to (traced only).
    span: Option<SpanContext>,
    /// The upgrade request's tracestate, carried with every message.
    tracestate: Arc<str>,
}

/// Runs one upgraded connection to its end; `traceparent` and `tracestate` are the upgrade
/// request's, `grant` the
/// credential its auth middleware admitted.
pub(super) async fn run(
    edge: Arc<Edge>,
    upgraded: Upgraded,
    traceparent: Option<Vec<u8>>,
    tracestate: String,
    grant: Option<Grant>,
) {
    let Some(ws) = edge.ws.as_ref() else { return };
    let max = ws.routes.max_message;
    let hard = hard_limit(max);
    let stream = accept(upgraded, hard).await;
    let _open = Open::count(&edge.metrics);
    let (session, context) = trace(&edge, &ws.routes.path, traceparent.as_deref(), tracestate);
    let (sink, mut stream) = stream.split();
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT + PUSH_ROOM);
    let gone = CancellationToken::new();
    let writer = tokio::spawn(write_loop(sink, rx, gone.clone()));
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut client = Client {
        subs: Subs::new(ws.hub.clone()),
        auth: Auth::new(grant),
        tx,
        gone,
        context,
        messages: 0,
        last_seen: Instant::now(),
    };
    // Made once for the session, not twice per message: each registers with its token.
    let drained = ws.drain.cancelled();
    let cut = client.gone.clone().cancelled_owned();
    tokio::pin!(drained, cut);
    let mut waits = Waits {
        drained,
        cut,
        ping: ping_timer(),
    };
    // Commands between arrival and their reply, polled in this task rather than spawned: a task
    // each copied the large dispatch future at its spawn and again at its end (about a tenth of
    // the router's CPU on small messages).
    let mut calls = FuturesUnordered::new();

    let end = loop {
        let acquire = slots.clone().acquire_owned();
        let permit = match waits.wake(&mut client, &mut calls, acquire).await {
            Wake::Got(Ok(p)) => p,
            Wake::Got(Err(_)) => break End::Gone,
            Wake::Again => continue,
            Wake::Ended(end) => break end,
        };
        // On `Again` the permit goes back and is taken again on the next turn.
        let next = match waits.wake(&mut client, &mut calls, stream.next()).await {
            Wake::Got(m) => m,
            Wake::Again => continue,
            Wake::Ended(end) => break end,
        };
        client.last_seen = Instant::now();
        match client.on_message(&edge, next, permit, max) {
            Ok(Some(call)) => calls.push(call),
            Ok(None) => {}
            Err(end) => break end,
        }
    };

    // No more pushes: the hub lets go of this outbox.
    client.subs.end();
    if !matches!(end, End::Drain | End::TooBig) {
        // Their replies are not awaited: dropping the commands cancels their work (the router
        // sends CANCEL to the manager).
        calls.clear();
    }
    client
        .close(&end, &edge, &slots, &mut calls, &mut stream, hard)
        .await;
    drop(client.tx);
    client.gone.cancel();
    let _ = writer.await;
    if let Some(s) = session {
        s.finish(client.messages, end.name());
    }
}

/// What a session keeps between messages.
struct Client {
    tx: Outbox,
    /// Fired when the client is gone: the commands in flight stop.
    gone: CancellationToken,
    subs: Subs,
    auth: Auth,
    context: SessionContext,
    /// Text messages read.
    messages: u64,
    /// When the client was last heard from.
    last_seen: Instant,
}

impl Client {
    /// One message read (or how the connection ended): refused, a reply queued, or a command to
    /// run until its reply is queued.
    fn on_message(
        &mut self,
        edge: &Arc<Edge>,
        next: Option<Result<Message, WsError>>,
        permit: OwnedSemaphorePermit,
        max: usize,
    ) -> Result<Option<impl Future<Output = ()> + Send + use<>>, End> {
        let at = self.last_seen;
        match received(next, edge)? {
            Message::Text(text) if text.len() > max => {
                let detail = format!(
                    "the message is {} bytes, over the limit of {max}; it was not parsed, so this reply has no id",
                    text.len()
                );
                refuse(edge, &self.tx, 413, detail, at, permit);
            }
            Message::Text(text) => {
                self.messages += 1;
                let (tx, gone, subs, auth) = (&self.tx, &self.gone, &mut self.subs, &mut self.auth);
                return Ok(on_text(
                    edge,
                    &text,
                    tx,
                    gone,
                    subs,
                    auth,
                    permit,
                    at,
                    &self.context,
                ));
            }
            Message::Binary(_) => {
                let detail = "binary messages are not accepted; send JSON text".to_owned();
                refuse(edge, &self.tx, 415, detail, at, permit);
            }
            // Pings are answered by the protocol layer; pongs only prove the client is alive.
            _ => {}
        }
        Ok(None)
    }

    /// Ends the session as `end` says: cut, or closed with a close frame (after the replies in flight
    /// when draining or refusing an oversize message), read on so the close is clean.
    async fn close<F: Future<Output = ()>>(
        // `&mut`: a shared borrow held across the awaits would need the credential's lapse `Sync`.
        &mut self,
        end: &End,
        edge: &Edge,
        slots: &Arc<Semaphore>,
        calls: &mut FuturesUnordered<F>,
        stream: &mut WsStream,
        hard: usize,
    ) {
        let (tx, gone) = (&self.tx, &self.gone);
        match end {
            End::Gone => gone.cancel(),
            End::Lapsed(d) => {
                edge.metrics.sessions.lapse("websocket", d.reason);
                tracing::debug!(
                    reason = d.reason,
                    "WebSocket session closed: its credential lapsed"
                );
                let frame = CloseFrame {
                    code: CloseCode::Policy,
                    reason: lapse_reason(d).into(),
                };
                // Cut now: the commands in flight are cancelled below, their replies not awaited.
                let _ =
                    tokio::time::timeout(CLOSE_GRACE, tx.send(Message::Close(Some(frame)))).await;
                read_until_close(stream).await;
            }
            End::ClientClosed => {
                gone.cancel();
                // Reading on lets the protocol layer send the close reply it queued.
                let _ = tokio::time::timeout(CLOSE_GRACE, stream.next()).await;
            }
            End::Drain | End::TooBig => {
                let frame = match end {
                    End::Drain => CloseFrame {
                        code: CloseCode::Away,
                        reason: "the router is draining; reconnect".into(),
                    },
                    _ => CloseFrame {
                        code: CloseCode::Size,
                        reason: format!("message larger than {hard} bytes").into(),
                    },
                };
                let too_big = matches!(end, End::TooBig);
                close_after_replies(slots, calls, tx, gone, frame).await;
                calls.clear();
                if too_big {
                    // The rest of the oversize message is unread: closing the socket now would reset
                    // it and the client could lose the close frame. Give it time to read it first.
                    tokio::time::sleep(CLOSE_GRACE).await;
                } else {
                    // Read until the client's close frame (or a short grace) so the close is clean.
                    read_until_close(stream).await;
                }
            }
        }
    }
}

/// What woke the session's loop while it waited for something.
enum Wake<T> {
    /// The session ends.
    Ended(End),
    /// A ping went out or a command finished: wait again.
    Again,
    /// What it waited for.
    Got(T),
}

/// What the session's loop watches whatever else it waits for, first and in this order.
struct Waits<'p, 'd> {
    drained: Pin<&'p mut tokio_util::sync::WaitForCancellationFuture<'d>>,
    cut: Pin<&'p mut tokio_util::sync::WaitForCancellationFutureOwned>,
    ping: tokio::time::Interval,
}

impl Waits<'_, '_> {
    /// Waits for `want`, unless the router drains, the client goes, the credential lapses, a ping
    /// is due, or one of `calls` finishes first.
    async fn wake<T, F: Future<Output = ()>>(
        &mut self,
        client: &mut Client,
        calls: &mut FuturesUnordered<F>,
        want: impl Future<Output = T>,
    ) -> Wake<T> {
        let (lapse, tx, last_seen) = (&mut client.auth.lapse, &client.tx, client.last_seen);
        tokio::select! {
            biased;
            _ = &mut self.drained => Wake::Ended(End::Drain),
            _ = &mut self.cut => Wake::Ended(End::Gone),
            d = lapse => Wake::Ended(End::Lapsed(d)),
            _ = self.ping.tick() => match keepalive(tx, last_seen) {
                true => Wake::Again,
                false => Wake::Ended(End::Gone),
            },
            Some(()) = calls.next(), if !calls.is_empty() => Wake::Again,
            t = want => Wake::Got(t),
        }
    }
}

/// The keepalive timer: a ping every [`PING_EVERY`], the first one period after the start.
fn ping_timer() -> tokio::time::Interval {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping
}

/// The session's span (traced only) and the context its messages are sent with, from the upgrade
/// request's `traceparent` and `tracestate`.
fn trace(
    edge: &Edge,
    path: &str,
    traceparent: Option<&[u8]>,
    tracestate: String,
) -> (Option<Session>, SessionContext) {
    let session = edge.otel.as_ref().map(|o| {
        let remote = Remote {
            traceparent,
            tracestate: &tracestate,
        };
        Session::start(o, remote, path)
    });
    let context = SessionContext {
        span: session.as_ref().map(Session::span_context),
        tracestate: Arc::from(tracestate),
    };
    (session, context)
}

/// The upgraded connection as a WebSocket, its messages and frames bounded by `hard`.
async fn accept(upgraded: Upgraded, hard: usize) -> WebSocketStream<TokioIo<Upgraded>> {
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(hard))
        .max_frame_size(Some(hard));
    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await
}

/// The message read, or how the session ends: the client closed, went away, failed, or sent a
/// message over the hard limit.
fn received(next: Option<Result<Message, WsError>>, edge: &Edge) -> Result<Message, End> {
    match next {
        Some(Ok(Message::Close(_))) => Err(End::ClientClosed),
        None => Err(End::Gone),
        Some(Err(WsError::Capacity(e))) => {
            tracing::debug!(error = %e, "WebSocket message over the limit");
            edge.metrics.ws.message(incoming::INVALID, 413);
            Err(End::TooBig)
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "WebSocket connection failed");
            Err(End::Gone)
        }
        Some(Ok(m)) => Ok(m),
    }
}

/// Refuses a message that was not parsed: the reply has no id.
fn refuse(
    edge: &Edge,
    tx: &Outbox,
    status: u16,
    detail: String,
    arrived: Instant,
    permit: OwnedSemaphorePermit,
) {
    edge.metrics.ws.message(incoming::INVALID, status);
    let timing = Clock::new(arrived).stages().header_value();
    let text = outgoing::refusal(&Value::Null, &Answer::refusal(status, detail), &timing);
    queue(tx, text, permit);
}

/// Reads until the client's close frame, or for a short grace, so the close is clean.
async fn read_until_close(stream: &mut WsStream) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(m)) = stream.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// Sends a ping; false when the client has been silent too long.
fn keepalive(tx: &Outbox, last_seen: Instant) -> bool {
    if last_seen.elapsed() > DEAD_AFTER {
        tracing::debug!("WebSocket client stopped answering pings; closing");
        return false;
    }
    // A full outbox means the client is not reading; it then misses this ping and times out.
    let _ = tx.try_send(Message::Ping(Bytes::new()));
    true
}

/// Waits for every command's reply to be queued (running `calls` to their ends meanwhile), then
/// queues the close frame.
async fn close_after_replies<F: Future<Output = ()>>(
    slots: &Arc<Semaphore>,
    calls: &mut FuturesUnordered<F>,
    tx: &Outbox,
    gone: &CancellationToken,
    frame: CloseFrame,
) {
    let all = u32::try_from(MAX_IN_FLIGHT).unwrap_or(u32::MAX);
    let done = async {
        let _all = slots.acquire_many(all).await;
        let _ = tx.send(Message::Close(Some(frame))).await;
    };
    let run = async {
        while calls.next().await.is_some() {}
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = done => {}
        _ = run => {}
        _ = gone.cancelled() => {}
        _ = tokio::time::sleep(DRAIN_LIMIT) => {
            tracing::warn!("WebSocket replies still pending at the drain limit");
        }
    }
}

/// Queues a reply now, or on a task when the outbox is full; the permit is held until it is queued.
fn queue(tx: &Outbox, text: String, permit: OwnedSemaphorePermit) {
    match tx.try_send(Message::text(text)) {
        Ok(()) => drop(permit),
        Err(TrySendError::Full(m)) => {
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(m).await;
                drop(permit);
            });
        }
        Err(TrySendError::Closed(_)) => {}
    }
}

/// Handles one text message: a reply queued now, or a routed command to run until its reply is
/// queued (its permit held until then).
#[allow(clippy::too_many_arguments)] // one message's whole context: splitting it would only move it
fn on_text(
    edge: &Arc<Edge>,
    text: &str,
    tx: &Outbox,
    gone: &CancellationToken,
    subs: &mut Subs,
    auth: &mut Auth,
    permit: OwnedSemaphorePermit,
    start: Instant,
    session: &SessionContext,
) -> Option<impl Future<Output = ()> + Send + use<>> {
    let ws = edge.ws.as_ref()?;
    let parsed = incoming::parse(text, &ws.routes);
    let id = parsed.id;
    let timing = || Clock::new(start).stages().header_value();
    let (status, reply) = match parsed.command {
        Err(bad) => (
            bad.status,
            outgoing::refusal(&id, &Answer::refusal(bad.status, bad.detail), &timing()),
        ),
        Ok(Command::Call { route, payload }) => {
            let trace = edge.otel.as_ref().map(|o| {
                RequestTrace::websocket(o, session.span.as_ref(), &ws.routes.path, &route.command)
            });
            let work = call(
                edge.clone(),
                route,
                id,
                payload,
                session.tracestate.clone(),
                Clock::traced(start, trace),
                tx.clone(),
                gone.clone(),
            );
            return Some(async move {
                work.await;
                drop(permit);
            });
        }
        Ok(Command::Subscribe { event, filter }) => {
            if let Err((status, detail)) = may_subscribe(&ws.routes, subs, auth, &event) {
                let refusal = Answer::refusal(status, detail);
                (status, outgoing::refusal(&id, &refusal, &timing()))
            } else {
                let sub = subs.take(event.clone());
                // The reply is queued first so that it comes before the subscription's pushes.
                queue(tx, outgoing::subscription(&id, sub, &timing()), permit);
                let s = Subscription::new(subs.conn, sub, event, filter, tx.clone());
                subs.hub.add(Arc::new(s));
                edge.metrics.ws.message("subscribe", 200);
                return None;
            }
        }
        Ok(Command::Unsubscribe { subscription }) => match subs.events.remove(&subscription) {
            Some(event) => {
                subs.hub.remove(subs.conn, &event, subscription);
                (200, outgoing::subscription(&id, subscription, &timing()))
            }
            None => {
                let detail = format!("no subscription {subscription} on this connection");
                (
                    404,
                    outgoing::refusal(&id, &Answer::refusal(404, detail), &timing()),
                )
            }
        },
        Ok(Command::Refresh { token }) => match refresh(edge, auth, subs, &token) {
            Ok((expires, ended)) => (200, outgoing::refreshed(&id, expires, &ended, &timing())),
            Err(answer) => (answer.status, outgoing::refusal(&id, &answer, &timing())),
        },
    };
    edge.metrics.ws.message(parsed.label, status);
    queue(tx, reply, permit);
    None
}

/// Whether the connection may subscribe to `event`: its credential's claims as the route's
/// subscribe rules ask, under [`MAX_SUBSCRIPTIONS`]; else the refusal's status and why.
fn may_subscribe(
    routes: &WsRoutes,
    subs: &Subs,
    auth: &Auth,
    event: &str,
) -> Result<(), (u16, String)> {
    let claims = auth.grant.as_ref().and_then(Grant::claims);
    if let Some(policy) = &routes.subscribe {
        policy
            .decide(event, claims)
            .map_err(|refusal| (403, refusal.to_string()))?;
    }
    if subs.events.len() >= MAX_SUBSCRIPTIONS {
        let detail = format!(
            "this connection already has {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe first"
        );
        return Err((400, detail));
    }
    Ok(())
}

/// Carries the session on with a new token: checked by the gate that admitted the session, for
/// the same subject (`sub`). The session then lapses at the new token's expiry, and subscriptions
/// the new token no longer allows end. Returns the new expiry (seconds since the epoch) and the
/// ended subscriptions; refused, the session keeps its old token.
fn refresh(
    edge: &Edge,
    auth: &mut Auth,
    subs: &mut Subs,
    token: &str,
) -> Result<(u64, Vec<u64>), Answer> {
    let Some(old) = auth.grant.as_ref().filter(|g| g.expires().is_some()) else {
        return Err(Answer::refusal(
            400,
            "this session was not opened with a JWT; there is no token to refresh",
        ));
    };
    let value = hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        Answer::refusal(
            400,
            "`token` is not a JWT (it has characters a JWT never holds)",
        )
    })?;
    let new = old.renew(value).map_err(|d| {
        edge.metrics.rejected(d.middleware, d.reason);
        Answer::refusal(d.status, d.detail)
    })?;
    let subject = |g: &Grant| g.claims().and_then(|c| c.get("sub")).cloned();
    if subject(&new) != subject(old) {
        return Err(Answer::refusal(
            403,
            "the new token is for another subject (`sub`); open a new session for it",
        ));
    }
    let expires = new
        .expires()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let mut ended: Vec<u64> = match edge.ws.as_ref().and_then(|w| w.routes.subscribe.as_ref()) {
        None => Vec::new(),
        Some(policy) => subs
            .events
            .iter()
            .filter(|(_, event)| policy.decide(event, new.claims()).is_err())
            .map(|(id, _)| *id)
            .collect(),
    };
    ended.sort_unstable();
    for id in &ended {
        if let Some(event) = subs.events.remove(id) {
            subs.hub.remove(subs.conn, &event, *id);
        }
    }
    *auth = Auth::new(Some(new));
    Ok((expires, ended))
}

/// A routed command: the HTTP path's dispatch, then the reply with the stages' timing.
#[allow(clippy::too_many_arguments)] // one message's whole context, as `on_text`
async fn call(
    edge: Arc<Edge>,
    route: Arc<WsRoute>,
    id: Value,
    payload: Bytes,
    tracestate: Arc<str>,
    mut clock: Clock,
    tx: Outbox,
    gone: CancellationToken,
) {
    let deadline = clock.start + route.timeout;
    if let Some(t) = &clock.trace {
        t.matched(None, &route.event);
    }
    let _underway = edge.metrics.arrive(&route.event);
    let out = Outgoing {
        headers: Vec::new(),
        upload: None,
        content_type: None,
        event: route.event.clone(),
        ce_id: new_ce_id(),
        traceparent: traceparent::extract_or_new(None),
        tracestate: tracestate.to_string(),
        payload,
    };
    // A client gone away cancels the work (the router sends CANCEL to the manager).
    let result = tokio::select! {
        r = edge.dispatch.call(out, deadline, &mut clock) => r,
        _ = gone.cancelled() => return,
    };
    // `data` means the app answered; `error` means the mesh did (its own refusal or the manager's).
    let (status, text) = match result {
        Ok(resp) => {
            let status = app_status(resp.status);
            let timing = clock.stages().header_value();
            let text = outgoing::answer(&id, status, &resp.content_type, &resp.payload, &timing);
            (status, text)
        }
        Err(f) => {
            let answer = Answer::of(&f, &route.event, route.timeout);
            let timing = clock.stages().header_value();
            (answer.status, outgoing::refusal(&id, &answer, &timing))
        }
    };
    let total = clock.stages().total;
    if let Some(t) = clock.trace.take() {
        t.finish_status(status);
    }
    edge.metrics.observe(
        &EventLabel(route.event.clone()),
        status,
        total.as_secs_f64(),
    );
    edge.metrics.ws.message(&route.command, status);
    tokio::select! {
        _ = tx.send(Message::text(text)) => {}
        _ = gone.cancelled() => {}
    }
}

/// Owns the socket's write half: writes the outbox in batches until a close frame, an error, or
/// the end of the connection.
async fn write_loop(
    mut sink: SplitSink<Ws, Message>,
    mut rx: mpsc::Receiver<Message>,
    gone: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            biased;
            m = rx.recv() => match m {
                Some(m) => m,
                None => break,
            },
            _ = gone.cancelled() => break,
        };
        let mut closing = matches!(first, Message::Close(_));
        let batch = async {
            sink.feed(first).await?;
            let mut n = 1;
            while !closing && n < WRITE_BATCH {
                let Ok(m) = rx.try_recv() else { break };
                closing = matches!(m, Message::Close(_));
                sink.feed(m).await?;
                n += 1;
            }
            sink.flush().await
        };
        let ok = tokio::select! {
            r = batch => r.is_ok(),
            _ = gone.cancelled() => false,
        };
        if !ok {
            gone.cancel();
            break;
        }
        if closing {
            break;
        }
    }
}
