//! One tap's queue: lines wait here between the request path, which never waits on it, and the tap's
//! connection, which takes them as fast as its client reads. Bounded in bytes; a line that does not
//! fit is dropped and counted, and so is one over the tap's rate, and the counts reach the client
//! before its next line (or within [`HEARTBEAT`] when nothing else comes), so it learns what it
//! missed.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Bytes of lines one tap holds for its client at most.
pub(crate) const QUEUE_BYTES: usize = 256 * 1024;
/// How long a quiet tap waits before it sends its counts anyway: a client that went away is found
/// out by the write within this time, and its tap closed.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    lines: VecDeque<Bytes>,
    bytes: usize,
    /// Lines that did not fit.
    dropped: u64,
    /// Events over the tap's rate.
    skipped: u64,
    /// The counts the client was last sent.
    told: (u64, u64),
    /// The start of the rate's one-second window, and the events sent in it.
    window: Option<Instant>,
    in_window: u32,
}

/// A tap's lines and counts.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    ready: Notify,
}

impl Queue {
    /// Queues the line `render` makes, unless this second has had `rate` events already (skipped)
    /// or the line does not fit (dropped). Never waits for the client. `render` runs outside the
    /// lock, so a slow render holds up no other request.
    pub(crate) fn offer(&self, rate: u32, now: Instant, render: impl FnOnce() -> Bytes) {
        {
            let mut s = self.lock();
            if s.window
                .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1))
            {
                s.window = Some(now);
                s.in_window = 0;
            }
            if s.in_window >= rate {
                s.skipped += 1;
                drop(s);
                return;
            }
            s.in_window += 1;
        }
        let line = render();
        let mut s = self.lock();
        if s.bytes + line.len() > QUEUE_BYTES {
            s.dropped += 1;
        } else {
            s.bytes += line.len();
            s.lines.push_back(line);
        }
        drop(s);
        self.ready.notify_one();
    }

    /// The next line for the client: the counts when they changed since it was last told, else the
    /// oldest queued line; the counts as they stand after [`HEARTBEAT`] with nothing to send.
    pub(crate) async fn next(&self) -> Bytes {
        loop {
            if let Some(line) = self.take() {
                return line;
            }
            if tokio::time::timeout(HEARTBEAT, self.ready.notified())
                .await
                .is_err()
            {
                let mut s = self.lock();
                s.told = (s.dropped, s.skipped);
                return counts(s.told);
            }
        }
    }

    fn take(&self) -> Option<Bytes> {
        let mut s = self.lock();
        let now = (s.dropped, s.skipped);
        if now != s.told {
            s.told = now;
            return Some(counts(now));
        }
        let line = s.lines.pop_front()?;
        s.bytes -= line.len();
        Some(line)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic under this lock leaves whole lines and counts: the state is still sound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The counts line: totals since the tap opened.
fn counts((dropped, skipped): (u64, u64)) -> Bytes {
    Bytes::from(format!(
        "{{\"kind\":\"counts\",\"dropped\":{dropped},\"skipped\":{skipped}}}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test]
    async fn lines_past_the_byte_bound_are_dropped_and_the_count_comes_first() {
        let q = Queue::default();
        let now = Instant::now();
        let size = QUEUE_BYTES / 4;
        for _ in 0..6 {
            q.offer(u32::MAX, now, || line(size));
        }
        assert_eq!(
            q.next().await,
            Bytes::from_static(b"{\"kind\":\"counts\",\"dropped\":2,\"skipped\":0}\n")
        );
        for _ in 0..4 {
            assert_eq!(q.next().await.len(), size);
        }
        // Room again: nothing more is dropped.
        q.offer(u32::MAX, now, || line(3));
        assert_eq!(q.next().await, line(3));
    }

    #[tokio::test]
    async fn events_over_the_rate_are_skipped_until_the_next_second() {
        let q = Queue::default();
        let t0 = Instant::now();
        for _ in 0..5 {
            q.offer(2, t0, || line(1));
        }
        q.offer(2, t0 + Duration::from_secs(1), || line(2));
        assert_eq!(
            q.next().await,
            Bytes::from_static(b"{\"kind\":\"counts\",\"dropped\":0,\"skipped\":3}\n")
        );
        assert_eq!(q.next().await, line(1));
        assert_eq!(q.next().await, line(1));
        assert_eq!(q.next().await, line(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_tap_sends_its_counts_at_the_heartbeat() {
        let q = Queue::default();
        let got = q.next().await;
        assert_eq!(
            got,
            Bytes::from_static(b"{\"kind\":\"counts\",\"dropped\":0,\"skipped\":0}\n")
        );
    }
}
