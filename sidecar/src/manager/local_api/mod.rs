//! The app's local API on localhost (default 127.0.0.1:7071): publish, request and push events.
//! HTTP (`http.rs`) and gRPC (`grpc.rs`, `switchyard.v1.LocalApi`) share one port and this core.

pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod parse;

use super::routers::Routers;
use crate::answer::Answer;
use crate::answer::http::app_status;
use crate::dispatch::{Broker, Clock, Dispatch, new_ce_id};
use crate::durable::Store;
use crate::metrics::{LocalApiLabels, Metrics};
use crate::net::budget::{ByteBudget, DEFAULT_BODY_BUDGET};
use crate::otel::Otel;
use crate::otel::produce::Produce;
use crate::otel::request::{Remote, RequestTrace};
use crate::upstream::{Outgoing, Upstream};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parse::Op;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_protocol::frame::Push;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Calls served at once; past it the app gets 503 + Retry-After (RESOURCE_EXHAUSTED).
pub(crate) const MAX_CALLS: usize = 1024;
/// Largest payload taken from the app: 1 MiB, as at the router's edge.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Time the app has to send a request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections of the app at once; past it a new one is closed at once.
const MAX_CONNECTIONS: usize = 16 * 1024;

/// One call of the app, checked.
pub(crate) struct Call<'a> {
    /// What to do.
    pub op: Op,
    /// Event type.
    pub event: &'a str,
    /// The app's CloudEvents id, if it gave one.
    pub ce_id: Option<String>,
    /// The app's `traceparent`, if any (a new root when absent or invalid).
    pub traceparent: Option<&'a [u8]>,
    /// The app's `tracestate` as carried (empty when none, or when its traceparent is not kept).
    pub tracestate: String,
    /// JSON payload.
    pub payload: Bytes,
    /// Reply deadline of a request.
    pub timeout: Duration,
}

impl Call<'_> {
    /// The app's trace context, as the spans take it.
    fn remote(&self) -> Remote<'_> {
        Remote {
            traceparent: self.traceparent,
            tracestate: &self.tracestate,
        }
    }
}

/// What a call came to.
#[derive(Debug)]
pub(crate) enum Done {
    /// Published: a manager sidecar took the event.
    Accepted {
        /// The event's id.
        ce_id: String,
    },
    /// The reply of a request.
    Reply {
        /// The event's id.
        ce_id: String,
        /// The handler's status.
        status: u16,
        /// Its media type.
        content_type: String,
        /// Its body.
        body: Bytes,
    },
    /// Pushed to this many routers.
    Pushed {
        /// Routers whose connection took the PUSH frame.
        routers: usize,
    },
}

/// The event types a Manager's app may push to WebSocket clients: those the Manager handles and
/// those its spec lists in `push`. Any other is another team's to push, and refused.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pushable(BTreeSet<String>);

impl Pushable {
    /// From the Manager's handled types and its `push` list.
    pub(crate) fn new<'a>(types: impl IntoIterator<Item = &'a str>) -> Pushable {
        Pushable(types.into_iter().map(str::to_owned).collect())
    }

    /// Refuses a push of `event` unless this Manager may push it.
    fn check(&self, event: &str) -> Result<(), Answer> {
        if self.0.contains(event) {
            return Ok(());
        }
        Err(Answer::refusal(
            403,
            format!(
                "this Manager may push only the event types it handles or lists in spec.push ({}); `{event}` is neither",
                self.0.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ))
    }
}

/// The shared core of both protocols: the app's events take the dispatch stage, as a client's do.
pub(crate) struct LocalApi {
    dispatch: Dispatch,
    pushable: Pushable,
    /// Bytes of the app's request bodies held at once.
    pub(crate) body_budget: ByteBudget,
    routers: Arc<Routers>,
    metrics: Arc<Metrics>,
    otel: Option<Arc<Otel>>,
}

impl LocalApi {
    /// The local API over the manager's upstream (the app's outgoing events), the event store for
    /// durable destinations, and its router connections.
    pub(crate) fn new(
        upstream: Arc<Upstream>,
        durable: Option<Arc<Store>>,
        routers: Arc<Routers>,
        pushable: Pushable,
        metrics: Arc<Metrics>,
        otel: Option<Arc<Otel>>,
    ) -> LocalApi {
        LocalApi {
            pushable,
            dispatch: Dispatch {
                broker: Broker::new(MAX_CALLS, metrics.clone()),
                upstream,
                durable,
                observers: crate::dispatch::Observers::new(metrics.clone()),
            },
            body_budget: ByteBudget::new(DEFAULT_BODY_BUDGET),
            routers,
            metrics,
            otel,
        }
    }

    /// Holds at most `bytes` of the app's request bodies at once (the manager's share of its
    /// memory limit for them).
    pub(crate) fn with_body_budget(mut self, bytes: usize) -> LocalApi {
        self.body_budget = ByteBudget::new(bytes);
        self
    }

    /// Counts a finished call.
    pub(crate) fn count(&self, op: Op, status: u16) {
        self.metrics
            .local_api
            .get_or_create(&LocalApiLabels {
                op: op.as_str(),
                status,
            })
            .inc();
    }

    /// Serves one call. Traced, a publish or push is a PRODUCER span under the app's
    /// `traceparent` and a request the SERVER span of the dispatch stage's spans.
    pub(crate) async fn call(&self, mut call: Call<'_>) -> Result<Done, Answer> {
        if call.op == Op::Push {
            self.pushable.check(call.event)?;
        }
        let ce_id = match call.op {
            Op::Push => None,
            Op::Publish | Op::Request => Some(call.ce_id.take().unwrap_or_else(new_ce_id)),
        };
        let (produce, traceparent) = match (&self.otel, call.op) {
            (Some(otel), Op::Publish | Op::Push) => {
                let (span, tp) = Produce::start(
                    otel,
                    call.remote(),
                    call.op.as_str(),
                    call.event,
                    ce_id.as_deref(),
                );
                (Some(span), tp)
            }
            _ => (None, crate::traceparent::extract_or_new(call.traceparent)),
        };
        let result = match (call.op, ce_id) {
            (Op::Publish, Some(ce_id)) | (Op::Request, Some(ce_id)) => {
                self.send(&call, ce_id, traceparent).await
            }
            _ => {
                let routers = self.routers.push(&Push {
                    event: call.event.to_owned(),
                    traceparent,
                    tracestate: call.tracestate,
                    content_type: crate::edge::JSON.to_owned(),
                    payload: call.payload,
                });
                Ok(Done::Pushed { routers })
            }
        };
        if let Some(span) = produce {
            span.finish(result.as_ref().map(|_| 202).map_err(|a| a.detail.as_str()));
        }
        result
    }

    async fn send(
        &self,
        call: &Call<'_>,
        ce_id: String,
        traceparent: String,
    ) -> Result<Done, Answer> {
        let out = Outgoing {
            headers: Vec::new(),
            upload: None,
            content_type: None,
            event: Arc::from(call.event),
            ce_id: ce_id.clone(),
            traceparent,
            tracestate: call.tracestate.clone(),
            payload: call.payload.clone(),
        };
        if call.op == Op::Publish {
            let deadline = Instant::now() + parse::SEND_DEADLINE;
            return match self.dispatch.publish(out, deadline).await {
                Ok(()) => Ok(Done::Accepted { ce_id }),
                Err(f) => Err(Answer::of(&f, call.event, parse::SEND_DEADLINE)),
            };
        }
        let deadline = Instant::now() + call.timeout;
        let trace = self
            .otel
            .as_ref()
            .map(|o| RequestTrace::local_request(o, call.remote(), call.event));
        let mut clock = Clock::traced(Instant::now(), trace);
        let result = match self.dispatch.call(out, deadline, &mut clock).await {
            Ok(r) => Ok(Done::Reply {
                ce_id,
                status: app_status(r.status),
                content_type: r.content_type,
                body: r.payload,
            }),
            Err(f) => Err(Answer::of(&f, call.event, call.timeout)),
        };
        if let Some(t) = clock.trace.take() {
            t.finish_status(match &result {
                Ok(Done::Reply { status, .. }) => *status,
                Ok(_) => 202,
                Err(a) => a.status,
            });
        }
        result
    }
}

/// Serves HTTP/1.1 and h2c on `listener` until `drain` fires: gRPC calls (`content-type:
/// application/grpc*`) go to the `LocalApi` service, everything else to the HTTP API.
pub(crate) async fn serve(listener: TcpListener, api: Arc<LocalApi>, drain: CancellationToken) {
    let grpc = grpc::service(api.clone());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    // Loopback only (the app), so no TLS, no timers of the edge's (hyper's header timeout
    // stays) and one cap: as many connections as the listener ever held.
    let policy = crate::net::accept::Policy {
        tracker: crate::net::conn::limits::Tracker::new(crate::net::conn::limits::Caps {
            total: MAX_CONNECTIONS,
            per_client: MAX_CONNECTIONS,
        }),
        timeouts: crate::net::conn::timers::Timeouts::NONE,
        meters: crate::net::conn::meters::Meters::new(
            api.metrics.conns.open("local-api"),
            api.metrics.conns.accept_errors("local-api"),
            |reason| api.metrics.conns.refused("local-api", reason),
            |reason| api.metrics.conns.closed("local-api", reason),
        ),
    };
    crate::net::accept::accept_loop(
        listener,
        drain,
        "local-api",
        None,
        policy,
        move |stream, _peer, _conn| {
            let (api, grpc) = (api.clone(), grpc.clone());
            let svc = service_fn(move |req: hyper::Request<Incoming>| {
                let (api, grpc) = (api.clone(), grpc.clone());
                async move {
                    if grpc::is_grpc(&req) {
                        grpc::call(grpc, req).await
                    } else {
                        Ok(http::handle(api, req).await.map(tonic::body::Body::new))
                    }
                }
            });
            builder
                .serve_connection(TokioIo::new(stream), svc)
                .into_owned()
        },
    )
    .await;
}
