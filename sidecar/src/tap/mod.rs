//! Live taps of the events through this sidecar (`switchyard tap`, as `linkerd viz tap`): the
//! request path offers each event it finishes to the open taps, and each tap's connection sends the
//! ones its filter takes as JSON lines (`record`), through a queue bounded in bytes (`queue`).
//!
//! Costs: with nobody tapping, the request path reads one atomic ([`Taps::watching`]) and copies
//! nothing. With taps open, a finished event is matched against each (at most [`MAX_TAPS`]),
//! rendered once per tap that takes it, and queued without waiting: a tap whose client reads
//! slowly loses lines, counted and reported to it, and never slows a request.
//!
//! Served by the admin port to clients inside the pod only (see `admin`): in a cluster, through
//! the API server's `pods/portforward`, which RBAC authorizes.

mod filter;
mod queue;
mod record;

pub(crate) use filter::Filter;
pub(crate) use record::{Seen, copy_fields, copy_headers, now_ms};

use arc_swap::ArcSwap;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Taps open at once on one sidecar, at most: with [`queue::QUEUE_BYTES`] each, the most memory
/// taps can hold.
pub(crate) const MAX_TAPS: usize = 4;

/// One open tap: its filter and its queue.
struct Watch {
    filter: Filter,
    queue: queue::Queue,
}

/// The open taps of one sidecar.
pub(crate) struct Taps {
    /// `router` or `manager`, as the lines say.
    role: &'static str,
    /// Header names (lower case) whose values this sidecar never copies: the credentials its own
    /// middleware reads (API-key headers), beside [`record::ALWAYS_HIDDEN`].
    hidden: Vec<String>,
    /// How many are open: the request path's one check.
    open: AtomicUsize,
    /// The most payload bytes an open tap asks for: what a record copies.
    payload: AtomicUsize,
    /// The open taps, read without a lock on the request path.
    list: ArcSwap<Vec<Arc<Watch>>>,
    /// Serializes opening and closing.
    edit: Mutex<()>,
}

/// Why a tap is not opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// [`MAX_TAPS`] are open already.
    #[error("{MAX_TAPS} taps are open on this sidecar already, the most it serves at once")]
    Busy,
}

impl Taps {
    /// No taps yet, for a sidecar of `role` that hides the values of `hidden` header names.
    pub(crate) fn new(role: &'static str, hidden: Vec<String>) -> Arc<Taps> {
        Arc::new(Taps {
            role,
            hidden: hidden.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            open: AtomicUsize::new(0),
            payload: AtomicUsize::new(0),
            list: ArcSwap::from_pointee(Vec::new()),
            edit: Mutex::new(()),
        })
    }

    /// Whether any tap is open: the request path copies an event only then.
    #[inline]
    pub(crate) fn watching(&self) -> bool {
        self.open.load(Ordering::Relaxed) != 0
    }

    /// How many payload bytes a record should copy.
    pub(crate) fn payload_wanted(&self) -> usize {
        self.payload.load(Ordering::Relaxed)
    }

    /// The header names whose values a record never copies (beyond the credentials every tap hides).
    pub(crate) fn hidden(&self) -> &[String] {
        &self.hidden
    }

    /// Offers `seen` to every open tap. Never waits for a tap's client.
    pub(crate) fn publish(&self, seen: &Seen) {
        let now = Instant::now();
        for w in self.list.load().iter() {
            if w.filter.matches(seen) {
                w.queue.offer(w.filter.max_rps, now, || {
                    seen.render(self.role, &w.filter.hide, w.filter.payload)
                });
            }
        }
    }

    /// Opens a tap with `filter`; it closes when the returned [`Tap`] drops.
    pub(crate) fn open(self: &Arc<Self>, filter: Filter) -> Result<Tap, OpenError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let list = self.list.load_full();
        if list.len() >= MAX_TAPS {
            return Err(OpenError::Busy);
        }
        let watch = Arc::new(Watch {
            filter,
            queue: queue::Queue::default(),
        });
        let mut next = Vec::clone(&list);
        next.push(watch.clone());
        self.replace(next);
        Ok(Tap {
            taps: self.clone(),
            watch,
        })
    }

    fn close(&self, watch: &Arc<Watch>) {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let next: Vec<_> = self
            .list
            .load()
            .iter()
            .filter(|w| !Arc::ptr_eq(w, watch))
            .cloned()
            .collect();
        self.replace(next);
    }

    /// Installs `next` and the counts the request path reads (called under `edit`).
    fn replace(&self, next: Vec<Arc<Watch>>) {
        let payload = next.iter().map(|w| w.filter.payload).max().unwrap_or(0);
        self.payload.store(payload, Ordering::Relaxed);
        self.open.store(next.len(), Ordering::Relaxed);
        self.list.store(Arc::new(next));
    }
}

/// One open tap; closed on drop.
pub(crate) struct Tap {
    taps: Arc<Taps>,
    watch: Arc<Watch>,
}

impl Tap {
    /// The first line: what this tap is and its bounds.
    pub(crate) fn hello(&self) -> Bytes {
        let f = &self.watch.filter;
        let mut line = serde_json::to_vec(&serde_json::json!({
            "kind": "tapping",
            "role": self.taps.role,
            "max_rps": f.max_rps,
            "payload": f.payload,
            "queue_bytes": queue::QUEUE_BYTES,
        }))
        .unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    /// The next line for the client (see [`queue::Queue::next`]).
    pub(crate) async fn next(&self) -> Bytes {
        self.watch.queue.next().await
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.taps.close(&self.watch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(event: &str) -> Seen {
        Seen {
            event: Arc::from(event),
            status: 200,
            ..Seen::default()
        }
    }

    #[tokio::test]
    async fn taps_open_and_close_and_see_only_what_they_filter() {
        let taps = Taps::new("router", Vec::new());
        assert!(!taps.watching());
        let a = taps
            .open(Filter::parse(Some("type=a&payload=9")).expect("filter"))
            .expect("open");
        let all = taps.open(Filter::default()).expect("open");
        assert!(taps.watching());
        assert_eq!(taps.payload_wanted(), 9);
        taps.publish(&seen("b"));
        taps.publish(&seen("a"));
        let v: serde_json::Value = serde_json::from_slice(&a.next().await).expect("json");
        assert_eq!(v["type"], "a");
        let v: serde_json::Value = serde_json::from_slice(&all.next().await).expect("json");
        assert_eq!(v["type"], "b");
        drop(a);
        assert_eq!(taps.payload_wanted(), 0);
        drop(all);
        assert!(!taps.watching());
    }

    #[test]
    fn no_more_than_max_taps_open() {
        let taps = Taps::new("manager", Vec::new());
        let open: Vec<_> = (0..MAX_TAPS)
            .map(|_| taps.open(Filter::default()).expect("open"))
            .collect();
        assert!(matches!(taps.open(Filter::default()), Err(OpenError::Busy)));
        drop(open);
        assert!(taps.open(Filter::default()).is_ok());
    }
}
