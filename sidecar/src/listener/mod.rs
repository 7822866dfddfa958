//! Listeners: where client requests enter: HTTP (`http.rs`) and gRPC (`grpc.rs`); `ws.rs` slots in
//! beside them, sharing the route table, broker and router through [`Edge`].

mod accept;
pub mod grpc;
pub mod http;
mod reply;

use crate::broker::Broker;
use crate::metrics::{EventLabel, Metrics};
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
}
