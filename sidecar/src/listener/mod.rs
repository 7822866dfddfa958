//! Listeners: where client requests enter: HTTP (`http.rs`), WebSocket (`ws/`, on the HTTP port)
//! and gRPC (`grpc.rs`), sharing the route table, broker and router through [`Edge`].

pub(crate) mod accept;
pub mod grpc;
pub mod http;
pub(crate) mod reply;
pub mod tls;
pub mod ws;

use crate::broker::Broker;
use crate::metrics::{EventLabel, Metrics};
use crate::middleware::Stack;
use crate::router::Router;
use crate::routes::RouteTable;
use std::sync::Arc;

/// What every listener needs: the compiled routes, the broker and the router.
pub struct Edge {
    /// HTTP routes.
    pub table: RouteTable,
    /// Admission bound.
    pub broker: Broker,
    /// Manager connections; shared with the admin server's `/routes` and the control-plane follower.
    pub router: Arc<Router>,
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
}
