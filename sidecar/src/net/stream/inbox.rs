//! What a receiver holds of one stream: the chunks that arrived and were not read yet, at most the
//! window it gave the sender. Pushing never waits (the connection's reader does it); a push beyond
//! the window is the sender's overrun, refused. Reading returns window once half of it was consumed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use switchyard_protocol::stream::Trailers;

/// How a stream's direction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// Complete; with the trailers when a TRAILERS frame ended it.
    Done(Option<Trailers>),
    /// Abandoned by the sender (or refused here), with the reset code.
    Reset(u32),
}

/// One step of reading a stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// A chunk, and the window to give back now (0: not yet).
    Data(bytes::Bytes, u32),
    /// The end.
    End(End),
}

/// The sender sent more than the window allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun;

struct State {
    queue: VecDeque<bytes::Bytes>,
    /// Bytes the sender may still send: the window minus what arrived and was not given back.
    allowance: u64,
    /// Bytes read and not yet given back.
    consumed: u64,
    end: Option<End>,
    waker: Option<Waker>,
}

/// The receiving side of one stream.
pub(crate) struct Inbox {
    window: u32,
    state: Mutex<State>,
}

impl Inbox {
    /// An inbox that gave the sender `window` bytes.
    pub(crate) fn new(window: u32) -> Arc<Inbox> {
        Arc::new(Inbox {
            window,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                allowance: window.into(),
                consumed: 0,
                end: None,
                waker: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it inconsistent in a way that matters.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A chunk arrived. Never waits; refuses a chunk beyond the window (and then holds nothing more).
    pub(crate) fn push(&self, data: bytes::Bytes) -> Result<(), Overrun> {
        let mut st = self.state();
        if st.end.is_some() {
            return Ok(());
        }
        let n = data.len() as u64;
        if n > st.allowance {
            st.queue.clear();
            return Err(Overrun);
        }
        st.allowance -= n;
        if !data.is_empty() {
            st.queue.push_back(data);
        }
        wake(&mut st);
        Ok(())
    }

    /// The stream's direction ended (the first end counts).
    pub(crate) fn finish(&self, end: End) {
        let mut st = self.state();
        if st.end.is_none() {
            if matches!(end, End::Reset(_)) {
                // Nothing of a reset stream is read on.
                st.queue.clear();
            }
            st.end = Some(end);
        }
        wake(&mut st);
    }

    /// Bytes held, for tests and bounds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.state().queue.iter().map(bytes::Bytes::len).sum()
    }

    /// The next chunk or the end; `Pending` (and woken) while neither is there.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Item> {
        let mut st = self.state();
        if let Some(data) = st.queue.pop_front() {
            st.consumed += data.len() as u64;
            let give = if st.consumed * 2 >= u64::from(self.window) && st.end.is_none() {
                let g = st.consumed;
                st.consumed = 0;
                st.allowance += g;
                // At most the window, so it fits.
                u32::try_from(g).unwrap_or(u32::MAX)
            } else {
                0
            };
            return Poll::Ready(Item::Data(data, give));
        }
        if let Some(end) = &st.end {
            return Poll::Ready(Item::End(end.clone()));
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// [`Inbox::poll_next`] as a future.
    pub(crate) async fn next(&self) -> Item {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

fn wake(st: &mut State) {
    if let Some(w) = st.waker.take() {
        w.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn window_comes_back_after_half_is_read_not_when_it_arrives() {
        let inbox = Inbox::new(8);
        inbox.push(Bytes::from_static(b"abc")).expect("fits");
        inbox.push(Bytes::from_static(b"defgh")).expect("fits");
        assert_eq!(inbox.held(), 8);
        assert_eq!(inbox.push(Bytes::from_static(b"x")), Err(Overrun));
        let inbox = Inbox::new(8);
        inbox.push(Bytes::from_static(b"abc")).expect("fits");
        inbox.push(Bytes::from_static(b"defgh")).expect("fits");
        assert_eq!(
            inbox.next().await,
            Item::Data(Bytes::from_static(b"abc"), 0)
        );
        assert_eq!(
            inbox.next().await,
            Item::Data(Bytes::from_static(b"defgh"), 8)
        );
        // Given back, so another window's worth fits.
        inbox.push(Bytes::from(vec![0; 8])).expect("fits again");
        inbox.finish(End::Done(None));
        assert!(matches!(inbox.next().await, Item::Data(_, 0)));
        assert_eq!(inbox.next().await, Item::End(End::Done(None)));
    }

    #[tokio::test]
    async fn a_reset_drops_what_was_held_and_ends_the_stream() {
        let inbox = Inbox::new(8);
        inbox.push(Bytes::from_static(b"abc")).expect("fits");
        inbox.finish(End::Reset(1));
        inbox.finish(End::Done(None));
        assert_eq!(inbox.held(), 0);
        assert_eq!(inbox.next().await, Item::End(End::Reset(1)));
    }

    #[tokio::test]
    async fn a_reader_waiting_is_woken_by_a_push() {
        let inbox = Inbox::new(1024);
        let reader = tokio::spawn({
            let inbox = inbox.clone();
            async move { inbox.next().await }
        });
        tokio::task::yield_now().await;
        inbox.push(Bytes::from_static(b"late")).expect("fits");
        assert_eq!(
            reader.await.expect("joins"),
            Item::Data(Bytes::from_static(b"late"), 0)
        );
    }
}
