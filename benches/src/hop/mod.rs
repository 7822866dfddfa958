//! The streamed frame hop (issue 14): today's frame protocol (`switchyard_protocol::frame`) extended
//! with streams ([`wire`]): REQUEST/RESPONSE heads, DATA chunks, TRAILERS, RESET, per-stream WINDOW
//! updates on top of the connection's request credit, written with vectored writes so bodies are never
//! copied ([`writer`]); the router side ([`frames::client`]) and the manager side ([`frames::server`]).
//!
//! Kept from the prototype that chose it over plain HTTP/2 (docs/architecture.md, "The router -> manager
//! hop: frames or HTTP/2"; the comparison itself is at commit d3a8de0): the follow-up (issue 14 item 2)
//! moves this into `protocol/` and the sidecar's `upstream/conn.rs` and `manager/inbound.rs`, and deletes
//! it here. Its server answers as a manager with no app would ([`answer`]).

pub mod answer;
pub mod body;
pub mod frames;
pub mod wire;
pub mod writer;

#[cfg(test)]
mod tests;

use std::time::Duration;

/// What a request asks of the manager side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// The `noop` event: `{}` in, `{"ok":true}` out.
    Noop,
    /// A streamed request body, a small answer back.
    Upload,
    /// A small request, the asked bytes streamed back, timing as a trailer.
    Download,
}

/// Knobs of a connection, the same on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Initial per-stream window, bytes, both directions.
    pub window: u32,
    /// Largest DATA frame, bytes.
    pub max_frame: u32,
    /// Requests in flight the manager allows per connection (CREDIT).
    pub credits: u32,
    /// Size of the chunks a body producer hands the hop.
    pub chunk: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: 256 * 1024,
            max_frame: 16 * 1024,
            credits: 256,
            chunk: 64 * 1024,
        }
    }
}

/// Heartbeat period (the product's frame connections ping every 5 s).
pub const PING_EVERY: Duration = Duration::from_secs(5);
/// A connection silent this long is dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(15);
/// The noop answer, as the example app gives it.
pub const NOOP_ANSWER: &[u8] = br#"{"ok":true}"#;
