//! The manager role: inbound frame connections from routers, workers, delivery to the app.

pub mod app_conns;
pub mod delivery;
pub mod delivery_grpc;
pub mod delivery_http;
pub mod inbound;
pub mod local_api;
pub mod ordering;
pub mod outbound;
pub mod routers;
pub mod worker;
