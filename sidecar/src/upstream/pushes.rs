//! Where PUSH frames from managers go. The trait lives at the connections' level so they need not
//! know who delivers pushes: in the router role the WebSocket listener's subscription hub implements
//! it; the manager role's outbound connections have none and tell managers so in their HELLO.

use std::sync::Arc;
use switchyard_protocol::frame::Push;

/// Takes the PUSH frames that arrive on frame connections. Must not wait: it runs on a connection's
/// reader task.
pub(crate) trait PushSink: Send + Sync {
    /// Hands one push on.
    fn deliver(&self, push: &Push);
}

/// The sink of a process's connections; `None` when it takes no pushes.
pub(crate) type Pushes = Option<Arc<dyn PushSink>>;
