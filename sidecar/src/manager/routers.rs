//! The router sidecars connected to this manager sidecar, so the app's PUSH events can reach each.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use switchyard_protocol::frame::{Frame, Push};
use tokio::sync::mpsc;

/// A router connection's write queue, and whether its HELLO said it reads a tracestate.
type Outlet = (mpsc::Sender<Frame>, bool);

/// Registry of inbound router connections: their write queues, by connection number.
#[derive(Default)]
pub(crate) struct Routers {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Outlet>>,
}

/// Removes a connection from the registry when it ends.
pub(crate) struct Registered<'a> {
    routers: &'a Routers,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.routers.lock().remove(&self.id);
    }
}

impl Routers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Outlet>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a connection's write queue until the guard drops; `reads_tracestate` from its HELLO.
    pub(crate) fn register(
        &self,
        tx: mpsc::Sender<Frame>,
        reads_tracestate: bool,
    ) -> Registered<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, (tx, reads_tracestate));
        Registered { routers: self, id }
    }

    /// Routers connected now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Queues `push` on every connection whose write queue has room; returns how many took it.
    /// A full queue is skipped rather than waited on: pushes are best effort, answers come first.
    /// A router that does not read a tracestate gets the push without it, in the encoding it reads.
    pub(crate) fn push(&self, push: &Push) -> usize {
        let conns: Vec<Outlet> = self.lock().values().cloned().collect();
        conns
            .iter()
            .filter(|(tx, reads_tracestate)| {
                let mut p = push.clone();
                if !reads_tracestate {
                    p.tracestate.clear();
                }
                tx.try_send(Frame::Push(p)).is_ok()
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn push_reaches_registered_connections_with_room() {
        let routers = Routers::default();
        let (a, mut ra) = mpsc::channel(1);
        let (b, _rb) = mpsc::channel(1);
        let ga = routers.register(a, true);
        let _gb = routers.register(b.clone(), true);
        b.try_send(Frame::Ping { nonce: 0 }).expect("room");
        let p = Push {
            event: "tick".into(),
            traceparent: String::new(),
            tracestate: "a=1".into(),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{}"),
        };
        assert_eq!(routers.push(&p), 1, "the full queue is skipped");
        assert!(matches!(ra.recv().await, Some(Frame::Push(got)) if got == p));
        drop(ga);
        assert_eq!(routers.len(), 1);
        // An older router (its HELLO without the bit) gets the push without the tracestate.
        let (c, mut rc) = mpsc::channel(1);
        let _gc = routers.register(c, false);
        assert_eq!(routers.push(&p), 1);
        match rc.recv().await {
            Some(Frame::Push(got)) => {
                assert_eq!(got.tracestate, "");
                assert_eq!(got.payload, p.payload);
            }
            other => panic!("not a push: {other:?}"),
        }
    }
}
