//! Per-key ordering (`workers.orderingKey`): events with the same key value are delivered one at a
//! time in arrival order; different keys run in parallel.
//!
//! [`KeyedQueue`] is the pure core; [`Lanes`] wraps it with wake-ups for the async workers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// What [`KeyedQueue::enter`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Enter<T> {
    /// The key's lane was idle: run now (the lane is busy until [`KeyedQueue::leave`]).
    Run,
    /// Another event of the key runs: queued behind it.
    Queued,
    /// The queue is at capacity: refused, the item is handed back.
    Full(T),
}

/// Lanes by key: a lane exists while one item of its key runs; it holds the items waiting behind it.
#[derive(Debug)]
pub(super) struct KeyedQueue<T> {
    lanes: HashMap<String, VecDeque<T>>,
    queued: usize,
    capacity: usize,
}

impl<T> KeyedQueue<T> {
    /// An empty queue holding at most `capacity` waiting items over all keys.
    pub(super) fn new(capacity: usize) -> KeyedQueue<T> {
        KeyedQueue {
            lanes: HashMap::new(),
            queued: 0,
            capacity,
        }
    }

    /// An item of `key` arrives.
    pub(super) fn enter(&mut self, key: &str, item: T) -> Enter<T> {
        match self.lanes.get_mut(key) {
            None => {
                self.lanes.insert(key.to_owned(), VecDeque::new());
                Enter::Run
            }
            Some(_) if self.queued >= self.capacity => Enter::Full(item),
            Some(lane) => {
                lane.push_back(item);
                self.queued += 1;
                Enter::Queued
            }
        }
    }

    /// The running item of `key` finished: the next one of that key to run, if any (the lane stays
    /// busy with it); otherwise the lane closes.
    pub(super) fn leave(&mut self, key: &str) -> Option<T> {
        let lane = self.lanes.get_mut(key)?;
        match lane.pop_front() {
            Some(next) => {
                self.queued -= 1;
                Some(next)
            }
            None => {
                self.lanes.remove(key);
                None
            }
        }
    }

    /// Items waiting over all keys.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queued
    }

    /// Keys with an item running.
    #[cfg(test)]
    fn busy_keys(&self) -> usize {
        self.lanes.len()
    }
}

/// The ordering key of a JSON payload: the value at `pointer` (a string as is, other values as JSON
/// text). `None` (no ordering) when the payload is not JSON or has no such field, or it is null.
pub(super) fn key_of(payload: &[u8], pointer: &str) -> Option<String> {
    switchyard_protocol::durable::ordering_key(payload, pointer)
}

/// The queue is at capacity.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Full;

/// Shared lanes of one manager sidecar.
pub(super) struct Lanes {
    queue: Mutex<KeyedQueue<oneshot::Sender<()>>>,
}

impl Lanes {
    /// Lanes holding at most `capacity` waiting events.
    pub(super) fn new(capacity: usize) -> Arc<Lanes> {
        Arc::new(Lanes {
            queue: Mutex::new(KeyedQueue::new(capacity)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeyedQueue<oneshot::Sender<()>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place in `key`'s lane. Must be called in arrival order (the connection's reader does).
    pub(super) fn enter(self: &Arc<Self>, key: String) -> Result<Turn, Full> {
        let (tx, rx) = oneshot::channel();
        let wait = match self.lock().enter(&key, tx) {
            Enter::Run => None,
            Enter::Queued => Some(rx),
            Enter::Full(_) => return Err(Full),
        };
        Ok(Turn {
            lanes: self.clone(),
            key,
            wait,
        })
    }

    /// Hands the lane of `key` to the next waiter still there, or closes it.
    fn pass_on(&self, key: &str) {
        loop {
            let next = self.lock().leave(key);
            match next {
                None => return,
                // A waiter that gave up (cancelled, deadline) dropped its receiver: skip it.
                Some(tx) => {
                    if tx.send(()).is_ok() {
                        return;
                    }
                }
            }
        }
    }
}

/// A place in a lane; dropping it lets the next event of the key run.
pub(crate) struct Turn {
    lanes: Arc<Lanes>,
    key: String,
    wait: Option<oneshot::Receiver<()>>,
}

impl Turn {
    /// Resolves when the events of the same key that arrived earlier are done.
    pub(crate) async fn ready(&mut self) {
        if let Some(rx) = self.wait.as_mut() {
            // The sender is only dropped without sending when the lanes themselves are gone.
            let _ = rx.await;
            self.wait = None;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        match self.wait.take() {
            None => self.lanes.pass_on(&self.key),
            Some(mut rx) => {
                // Still waiting: leave the line. If the turn was handed over meanwhile, pass it on.
                rx.close();
                if rx.try_recv().is_ok() {
                    self.lanes.pass_on(&self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn same_key_waits_in_order_other_keys_run() {
        let mut q = KeyedQueue::new(10);
        assert_eq!(q.enter("a", 1), Enter::Run);
        assert_eq!(q.enter("a", 2), Enter::Queued);
        assert_eq!(q.enter("b", 3), Enter::Run);
        assert_eq!(q.enter("a", 4), Enter::Queued);
        assert_eq!(q.queued(), 2);
        assert_eq!(q.busy_keys(), 2);
        assert_eq!(q.leave("a"), Some(2));
        assert_eq!(q.leave("a"), Some(4));
        assert_eq!(q.leave("a"), None);
        assert_eq!(q.leave("b"), None);
        assert_eq!(q.busy_keys(), 0);
        assert_eq!(q.queued(), 0);
        // A closed lane opens again for the next arrival.
        assert_eq!(q.enter("a", 5), Enter::Run);
    }

    #[test]
    fn bounded_over_all_keys() {
        let mut q = KeyedQueue::new(1);
        assert_eq!(q.enter("a", 1), Enter::Run);
        assert_eq!(q.enter("b", 2), Enter::Run);
        assert_eq!(q.enter("a", 3), Enter::Queued);
        assert_eq!(q.enter("b", 4), Enter::Full(4));
        assert_eq!(q.leave("a"), Some(3));
        assert_eq!(q.enter("b", 4), Enter::Queued);
    }

    #[test]
    fn leave_of_unknown_key_is_nothing() {
        let mut q: KeyedQueue<u8> = KeyedQueue::new(1);
        assert_eq!(q.leave("x"), None);
    }

    #[test]
    fn keys_from_payloads() {
        let p = br#"{"customer":{"id":"c1"},"n":7,"z":null}"#;
        assert_eq!(key_of(p, "/customer/id").as_deref(), Some("c1"));
        assert_eq!(key_of(p, "/n").as_deref(), Some("7"));
        assert_eq!(key_of(p, "/z"), None);
        assert_eq!(key_of(p, "/missing"), None);
        assert_eq!(key_of(b"not json", "/n"), None);
    }

    #[tokio::test]
    async fn turns_follow_arrival_and_skip_abandoned_waiters() {
        let lanes = Lanes::new(8);
        let first = lanes.enter("k".into()).expect("room");
        let mut second = lanes.enter("k".into()).expect("room");
        let abandoned = lanes.enter("k".into()).expect("room");
        let mut fourth = lanes.enter("k".into()).expect("room");
        let mut other = lanes.enter("o".into()).expect("room");
        tokio::time::timeout(Duration::from_secs(5), other.ready())
            .await
            .expect("another key runs at once");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second.ready())
                .await
                .is_err(),
            "second waits for first"
        );
        drop(abandoned);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second.ready())
            .await
            .expect("second's turn");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), fourth.ready())
            .await
            .expect("the abandoned waiter is skipped");
        drop(fourth);
        assert_eq!(lanes.lock().busy_keys(), 1);
        drop(other);
        assert_eq!(lanes.lock().busy_keys(), 0);
    }

    #[tokio::test]
    async fn a_waiter_dropped_after_its_turn_came_passes_it_on() {
        let lanes = Lanes::new(8);
        let first = lanes.enter("k".into()).expect("room");
        let second = lanes.enter("k".into()).expect("room");
        let mut third = lanes.enter("k".into()).expect("room");
        drop(first); // second's turn is signalled, but second never awaited it
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), third.ready())
            .await
            .expect("third runs");
    }
}
