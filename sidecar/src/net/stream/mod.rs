//! Streamed bodies on a frame connection (issue 14), shared by both ends: what a receiver holds of a
//! stream ([`inbox`], bounded by the window it gave), what a sender may still send ([`window`]), and
//! a received stream as an HTTP body ([`body`]). The connection's reader only ever pushes into an
//! inbox, which never waits: a stream's reader that falls behind stops its sender by holding its
//! window back, never the connection.

pub(crate) mod body;
pub(crate) mod inbox;
pub(crate) mod out_body;
pub(crate) mod window;

/// What a stream's consumer tells the peer, through its connection's writer. Implemented by the
/// connection rooms above (the router's `upstream::conn`, the manager's inbound connection).
pub(crate) trait Peer: Send + Sync + 'static {
    /// The consumer took `increment` more bytes off stream `id`: the sender may send that many more.
    fn window(&self, id: u64, increment: u32);
    /// The consumer gave up on stream `id` (dropped its body): the sender stops.
    fn reset(&self, id: u64, code: u32);
}

/// The per-stream window a sidecar takes from a peer (said in its HELLO).
pub(crate) const WINDOW: u32 = switchyard_protocol::stream::DEFAULT_WINDOW;
/// The most window this side believes of a peer: bounds the DATA frames of one stream that can wait
/// in a connection's write queue (a peer's HELLO may say anything).
pub(crate) const MAX_PEER_WINDOW: u32 = 1 << 20;
/// The least: a window below one DATA frame would cut every chunk into slivers.
pub(crate) const MIN_PEER_WINDOW: u32 = 16 * 1024;

/// A peer's advertised window, as this side uses it.
pub(crate) fn peer_window(said: u32) -> u32 {
    said.clamp(MIN_PEER_WINDOW, MAX_PEER_WINDOW)
}

/// DATA frames of one stream that can be queued at once under the largest peer window.
pub(crate) const FRAMES_PER_STREAM: usize =
    MAX_PEER_WINDOW as usize / switchyard_protocol::stream::MAX_DATA + 2;
