//! Listeners: where client requests enter: HTTP (`http.rs`), WebSocket (`ws/`, on the HTTP port)
//! and gRPC (`grpc/`), sharing the route table and the dispatch stage through [`Edge`].

pub(crate) mod access_log;
pub(crate) mod connections;
pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod tls;
pub(crate) mod ws;

use crate::dispatch::Dispatch;
use crate::metrics::{EventLabel, Metrics};
use crate::middleware::Stack;
use crate::routes::http::RouteTable;
use std::sync::Arc;

/// What every listener needs: the compiled routes and the dispatch stage.
pub(crate) struct Edge {
    /// HTTP routes.
    pub table: RouteTable,
    /// Broker and upstream.
    pub dispatch: Dispatch,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Label of requests that matched no route.
    pub unmatched: EventLabel,
    /// Span export; `None` when tracing is off.
    pub otel: Option<Arc<crate::otel::Otel>>,
    /// The WebSocket endpoint, when `listeners.websocket` is set.
    pub ws: Option<ws::WsEdge>,
    /// Edge middleware in spec order (empty when none is configured).
    pub middleware: Stack,
    /// `Timing-Allow-Origin` of every HTTP answer, from the timing middleware's `allowOrigins`.
    pub timing_allow_origin: Option<hyper::header::HeaderValue>,
    /// Bytes of request bodies this process holds at once (`broker.bodyBudgetBytes`).
    pub body_budget: crate::net::budget::ByteBudget,
    /// Open taps (`switchyard tap`): each finished request is offered to them while any is open.
    pub taps: Arc<crate::tap::Taps>,
    /// Whether each HTTP request is logged (`spec.accessLog.enabled`).
    pub access_log: bool,
}
