//! PROTOTYPE (issue 14, item 1), to be deleted once the router -> manager hop is chosen: the hop built
//! two ways, measured the same way.
//!
//! - [`frames`]: today's frame protocol (`switchyard_protocol::frame`) extended with streams ([`wire`]):
//!   REQUEST/RESPONSE heads, DATA chunks, TRAILERS, RESET, per-stream WINDOW updates on top of the
//!   connection's request credit, written with vectored writes so bodies are never copied.
//! - [`h2`]: plain HTTP/2 (h2c) with hyper's http2 client and server, one connection per pod pair,
//!   `max_concurrent_streams` as the credit.
//!
//! Both servers answer as a manager sidecar would with no app behind ([`answer`]); the driver
//! ([`drive`]) runs closed-loop workers in the router-side process; [`compare`] runs the two in
//! interleaved rounds, each measurement in fresh processes, and prints medians.

pub mod answer;
pub mod body;
pub mod compare;
pub mod drive;
pub mod frames;
pub mod full;
pub mod h2;
pub mod relay;
pub mod wire;
pub mod writer;

#[cfg(test)]
mod tests;

use std::time::Duration;

/// Which hop.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// The frame protocol with streams.
    Frames,
    /// HTTP/2 over cleartext TCP.
    H2,
}

impl Proto {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Frames => "frames",
            Proto::H2 => "h2",
        }
    }
}

/// What each request does.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// The `noop` event: `{}` in, `{"ok":true}` out.
    Noop,
    /// `bytes` of request body streamed to the manager, a small answer back.
    Upload,
    /// A small request, `bytes` of answer streamed back, timing as a trailer.
    Download,
}

impl Scenario {
    /// The event type (frames) or path (h2) the request names.
    pub fn event(self) -> &'static str {
        match self {
            Scenario::Noop => "noop",
            Scenario::Upload => "upload",
            Scenario::Download => "download",
        }
    }
}

/// Knobs both hops get the same values of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// Initial per-stream window, bytes, both directions.
    pub window: u32,
    /// Largest DATA frame, bytes.
    pub max_frame: u32,
    /// Requests in flight the manager allows per connection (CREDIT; `max_concurrent_streams`).
    pub credits: u32,
    /// Size of the chunks a body producer hands the hop (an app's writes, a client's reads).
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

/// Heartbeat period on both hops (the product's frame connections ping every 5 s).
pub const PING_EVERY: Duration = Duration::from_secs(5);
/// A connection silent this long after a ping is dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(15);
/// The noop answer, as the example app gives it.
pub const NOOP_ANSWER: &[u8] = br#"{"ok":true}"#;
/// The payload the router sends for a GET without parameters.
pub const EMPTY_EVENT: &[u8] = b"{}";
/// A W3C traceparent of the product's length; each request gets its own span id.
pub fn traceparent(n: u64) -> String {
    format!("00-0af7651916cd43dd8448eb211c80319c-{n:016x}-01")
}
/// A CloudEvents id of the product's shape (a UUID's length), one per request.
pub fn ce_id(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}
