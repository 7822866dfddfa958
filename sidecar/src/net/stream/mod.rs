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
/// The most window this side uses of a peer's: bounds the DATA frames of one stream that can wait
/// in a connection's write queue (a peer's HELLO may say anything). Less than a peer allows is
/// always safe; more never is, so a small window is taken as it is.
pub(crate) const MAX_PEER_WINDOW: u32 = 1 << 20;

/// A peer's advertised window, as this side uses it; `None` for 0, which could never send a byte.
pub(crate) fn peer_window(said: u32) -> Option<u32> {
    (said > 0).then(|| said.min(MAX_PEER_WINDOW))
}

/// DATA frames of one stream that can be queued at once under the largest peer window.
pub(crate) const FRAMES_PER_STREAM: usize =
    MAX_PEER_WINDOW as usize / switchyard_protocol::stream::MAX_DATA + 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_window_is_never_exceeded_and_zero_is_no_streams() {
        assert_eq!(peer_window(0), None);
        assert_eq!(peer_window(1), Some(1));
        assert_eq!(peer_window(WINDOW), Some(WINDOW));
        assert_eq!(peer_window(u32::MAX), Some(MAX_PEER_WINDOW));
    }
}
