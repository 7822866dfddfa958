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
use crate::upstream::{Outgoing, Upstream};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parse::Op;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_protocol::frame::Push;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Calls served at once; past it the app gets 503 + Retry-After (RESOURCE_EXHAUSTED).
pub const MAX_CALLS: usize = 1024;
/// Largest payload taken from the app: 1 MiB, as at the router's edge.
pub const MAX_BODY: usize = 1 << 20;
/// Time the app has to send a request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// One call of the app, checked.
pub struct Call<'a> {
    /// What to do.
    pub op: Op,
    /// Event type.
    pub event: &'a str,
    /// The app's CloudEvents id, if it gave one.
    pub ce_id: Option<String>,
    /// The app's `traceparent`, if any (a new root when absent or invalid).
    pub traceparent: Option<&'a [u8]>,
    /// JSON payload.
    pub payload: Bytes,
    /// Reply deadline of a request.
    pub timeout: Duration,
}

/// What a call came to.
#[derive(Debug)]
pub enum Done {
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

/// The shared core of both protocols: the app's events take the dispatch stage, as a client's do.
pub struct LocalApi {
    dispatch: Dispatch,
    routers: Arc<Routers>,
    metrics: Arc<Metrics>,
}

impl LocalApi {
    /// The local API over the manager's upstream (the app's outgoing events), the event store for
    /// durable destinations, and its router connections.
    pub(crate) fn new(
        upstream: Arc<Upstream>,
        durable: Option<Arc<Store>>,
        routers: Arc<Routers>,
        metrics: Arc<Metrics>,
    ) -> LocalApi {
        LocalApi {
            dispatch: Dispatch {
                broker: Broker::new(MAX_CALLS, metrics.clone()),
                upstream,
                durable,
            },
            routers,
            metrics,
        }
    }

    /// Counts a finished call.
    pub fn count(&self, op: Op, status: u16) {
        self.metrics
            .local_api
            .get_or_create(&LocalApiLabels {
                op: op.as_str(),
                status,
            })
            .inc();
    }

    /// Serves one call.
    pub async fn call(&self, call: Call<'_>) -> Result<Done, Answer> {
        let traceparent = crate::traceparent::extract_or_new(call.traceparent);
        if call.op == Op::Push {
            let routers = self.routers.push(&Push {
                event: call.event.to_owned(),
                traceparent,
                content_type: crate::edge::JSON.to_owned(),
                payload: call.payload,
            });
            return Ok(Done::Pushed { routers });
        }
        let ce_id = call.ce_id.unwrap_or_else(new_ce_id);
        let out = Outgoing {
            event: Arc::from(call.event),
            ce_id: ce_id.clone(),
            traceparent,
            payload: call.payload,
        };
        if call.op == Op::Publish {
            let deadline = Instant::now() + parse::SEND_DEADLINE;
            return match self.dispatch.publish(out, deadline).await {
                Ok(()) => Ok(Done::Accepted { ce_id }),
                Err(f) => Err(Answer::of(&f, call.event, parse::SEND_DEADLINE)),
            };
        }
        let deadline = Instant::now() + call.timeout;
        let mut clock = Clock::new(Instant::now());
        match self.dispatch.call(out, deadline, &mut clock).await {
            Ok(r) => Ok(Done::Reply {
                ce_id,
                status: app_status(r.status),
                content_type: r.content_type,
                body: r.payload,
            }),
            Err(f) => Err(Answer::of(&f, call.event, call.timeout)),
        }
    }
}

/// Serves HTTP/1.1 and h2c on `listener` until `drain` fires: gRPC calls (`content-type:
/// application/grpc*`) go to the `LocalApi` service, everything else to the HTTP API.
pub async fn serve(listener: TcpListener, api: Arc<LocalApi>, drain: CancellationToken) {
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
    // Loopback only, so no TLS.
    crate::net::accept::accept_loop(listener, drain, "local-api", None, move |stream, _peer| {
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
    })
    .await;
}
