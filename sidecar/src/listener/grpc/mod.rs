//! The gRPC listener (h2c, or TLS with ALPN h2): `switchyard.v1.Gateway` (`Call`, `CallStream`,
//! `Connect`) and server reflection.
//!
//! A message's `method` names a gRPC route of the Router spec (`routes::grpc`), which maps it to an
//! event type; the event then takes the same path as an HTTP request (the dispatch stage: broker ->
//! upstream -> manager). The app's answer, whatever its status, is the reply; gRPC errors are for
//! requests that never got one (bad payload, unknown method, overload, deadline), rendered from the
//! one answer mapping.
//!
//! Rooms: `message.rs` (one message, from checks to the answer), `gateway.rs` (the tonic service),
//! `call_stream.rs` (an app's streamed answer as server-streamed messages), `connect.rs` (a
//! `Connect` stream), `serve.rs` (connections, middleware gates).

mod call_stream;
mod connect;
mod gateway;
mod message;
mod serve;

pub(crate) use gateway::{ReflectionError, service};
pub(crate) use serve::serve;
