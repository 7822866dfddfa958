//! The manager role: inbound frame connections from routers, workers, delivery to the app, and the
//! app's local API for its own events.

pub(crate) mod access;
pub(crate) mod credit;
pub(crate) mod delivery;
pub(crate) mod durable;
pub(crate) mod inbound;
pub(crate) mod local_api;
mod ordering;
pub(crate) mod routers;
pub(crate) mod streamed;
pub(crate) mod worker;
