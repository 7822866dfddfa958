//! A byte budget for request bodies, shared by every request of a process. The request bound
//! (the broker's queue capacity) counts requests, not bytes: 1024 requests of 16 MiB each would be
//! 16 GiB. So a body takes its bytes from here before it is read (its declared length up front, or
//! frame by frame when it has none) and gives them back when its request is done; a body that does
//! not fit is refused with 503 and Retry-After, never read into memory.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default budget of a process: 256 MiB of request bodies at once.
pub(crate) const DEFAULT_BODY_BUDGET: usize = 256 << 20;

/// The bytes of request bodies a process may hold at once.
#[derive(Clone, Debug)]
pub(crate) struct ByteBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

/// Bytes taken from a [`ByteBudget`]; given back on drop.
#[derive(Debug, Default)]
pub(crate) struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    /// How many bytes this holds.
    pub(crate) fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Moves up to `n` of these bytes into a `Held` of their own (all that is left when fewer).
    pub(crate) fn split(&mut self, n: usize) -> Held {
        let n = n.min(self.bytes());
        if n == self.bytes() {
            return Held(self.0.take());
        }
        Held(self.0.as_mut().and_then(|p| p.split(n)))
    }
}

impl ByteBudget {
    /// A budget of `total` bytes (at least 1).
    pub(crate) fn new(total: usize) -> ByteBudget {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        ByteBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The budget's size.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Bytes free now.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Adds `n` more bytes to `held`, or returns false (and takes nothing) when they are not free
    /// now. Never waits: a full budget means shed, not queue.
    pub(crate) fn grow(&self, held: &mut Held, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let Ok(n) = u32::try_from(n) else {
            return false;
        };
        match self.bytes.clone().try_acquire_many_owned(n) {
            Ok(more) => {
                match &mut held.0 {
                    Some(p) => p.merge(more),
                    None => held.0 = Some(more),
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Waits (first come, first served) until `least` bytes are free and takes them, with as many
    /// more as are free then, up to `most`: what a consumer that can leave its events on a server
    /// reserves before it asks for them. `least` is capped at the whole budget.
    pub(crate) async fn reserve(&self, least: usize, most: usize) -> Held {
        let least = least.clamp(1, self.total);
        let Ok(n) = u32::try_from(least) else {
            return Held::default();
        };
        let Ok(first) = self.bytes.clone().acquire_many_owned(n).await else {
            return Held::default();
        };
        let mut held = Held(Some(first));
        self.top_up(&mut held, most);
        held
    }

    /// Grows `held` towards `most` with what is free now (never waits).
    pub(crate) fn top_up(&self, held: &mut Held, most: usize) {
        let more = most
            .saturating_sub(held.bytes())
            .min(self.bytes.available_permits());
        self.grow(held, more);
    }

    /// Takes `n` bytes, or `None` when they are not free now.
    #[cfg(test)]
    pub(crate) fn take(&self, n: usize) -> Option<Held> {
        let mut held = Held::default();
        self.grow(&mut held, n).then_some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_taken_up_to_the_total_and_given_back_on_drop() {
        let b = ByteBudget::new(100);
        let a = b.take(60).expect("60 of 100");
        assert_eq!(a.bytes(), 60);
        assert!(b.take(41).is_none(), "only 40 left");
        let c = b.take(40).expect("the last 40");
        assert_eq!(b.free(), 0);
        drop(a);
        assert_eq!(b.free(), 60);
        drop(c);
        assert_eq!(b.free(), b.total());
    }

    #[test]
    fn a_body_without_a_length_grows_frame_by_frame_and_a_refused_step_takes_nothing() {
        let b = ByteBudget::new(10);
        let mut held = Held::default();
        assert!(b.grow(&mut held, 4));
        assert!(b.grow(&mut held, 4));
        assert_eq!(held.bytes(), 8);
        assert!(!b.grow(&mut held, 3), "11 > 10");
        assert_eq!(held.bytes(), 8, "the refused step took nothing");
        assert_eq!(b.free(), 2);
        assert!(b.grow(&mut held, 0));
        drop(held);
        assert_eq!(b.free(), 10);
    }

    #[tokio::test]
    async fn a_reservation_waits_for_its_least_takes_what_is_free_up_to_its_most_and_splits() {
        let b = ByteBudget::new(100);
        let mut r = b.reserve(10, 60).await;
        assert_eq!(r.bytes(), 60);
        let other = b.reserve(10, 60).await;
        assert_eq!(other.bytes(), 40, "only 40 were free");
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(30, 30).await.bytes() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing free");
        let part = r.split(25);
        assert_eq!((part.bytes(), r.bytes()), (25, 35));
        drop(r);
        assert_eq!(waiting.await.expect("reserved"), 30);
        let mut rest = part;
        let all = rest.split(99);
        assert_eq!((all.bytes(), rest.bytes()), (25, 0));
        drop((all, other));
        assert_eq!(b.free(), 100);
        assert_eq!(
            b.reserve(500, 500).await.bytes(),
            100,
            "least capped at the budget"
        );
    }

    #[test]
    fn more_than_the_whole_budget_is_never_granted() {
        let b = ByteBudget::new(10);
        assert!(b.take(11).is_none());
        assert!(b.take(usize::MAX).is_none());
        assert_eq!(b.free(), 10);
    }
}
