//! What a sender may still send on one stream: the peer's window, taken chunk by chunk and given
//! back by its WINDOW frames. A reset closes it, so a sender waiting for window stops.

use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

struct State {
    avail: u64,
    closed: bool,
}

/// The send window of one stream.
pub(crate) struct SendWindow {
    state: Mutex<State>,
    more: Notify,
}

impl SendWindow {
    /// A window of `initial` bytes.
    pub(crate) fn new(initial: u32) -> SendWindow {
        SendWindow {
            state: Mutex::new(State {
                avail: initial.into(),
                closed: false,
            }),
            more: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until some window is there and takes up to `want` bytes of it; `None` once closed.
    pub(crate) async fn take(&self, want: usize) -> Option<usize> {
        loop {
            let notified = self.more.notified();
            {
                let mut st = self.state();
                if st.closed {
                    return None;
                }
                if st.avail > 0 {
                    let n = (want as u64).min(st.avail);
                    st.avail -= n;
                    // At most `want`.
                    return Some(n as usize);
                }
            }
            notified.await;
        }
    }

    /// The peer gave `n` more bytes (capped, so a hostile peer cannot overflow it).
    pub(crate) fn add(&self, n: u32) {
        let mut st = self.state();
        st.avail = st.avail.saturating_add(n.into()).min(u64::from(u32::MAX));
        drop(st);
        self.more.notify_waiters();
    }

    /// The stream is over (reset by the peer, or its connection gone): nothing more is sent.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.more.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_sender_waits_for_window_and_stops_on_close() {
        let w = Arc::new(SendWindow::new(10));
        assert_eq!(w.take(6).await, Some(6));
        assert_eq!(w.take(6).await, Some(4));
        let waiting = tokio::spawn({
            let w = w.clone();
            async move { w.take(6).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        w.add(3);
        assert_eq!(waiting.await.expect("joins"), Some(3));
        let waiting = tokio::spawn({
            let w = w.clone();
            async move { w.take(1).await }
        });
        tokio::task::yield_now().await;
        w.close();
        assert_eq!(waiting.await.expect("joins"), None);
    }
}
