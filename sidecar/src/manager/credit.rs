//! The credit bank of one manager pod: the credits granted over all sender connections add up to at
//! most what the pod admits at once (`queueCapacity + maxInFlight`), so a sender holding credit is
//! never shed, however many senders there are.
//!
//! Credit cannot be taken back once granted, so one share is always kept in reserve for the next
//! sender: with `n` connections each gets at most `ceil(total / (n + 1))`. A new connection gets what
//! is free up to its share at once (the reserve, at least), even when the others sit idle on theirs;
//! the others shrink towards the new share as their events finish (a returned credit goes to the
//! connection furthest below its share, the finishing one first). A connection that ends gives back
//! the credits it held unused at once, and the rest as its admitted events finish.
//!
//! Pure accounting behind a mutex; the frames that carry the grants are the caller's to send.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A connection's id in the bank.
pub(crate) type ConnId = u64;

/// Credits to send: `(connection, credits)`.
pub(crate) type Grants = Vec<(ConnId, u32)>;

#[derive(Default)]
struct Share {
    /// Granted and not yet returned: unused at the sender, or spent on an event not done yet.
    held: u32,
    /// Spent on an admitted event that is not done yet.
    busy: u32,
}

struct State {
    free: u32,
    next: ConnId,
    conns: BTreeMap<ConnId, Share>,
}

/// Credits of one pod, shared by its sender connections.
pub(crate) struct CreditBank {
    total: u32,
    state: Mutex<State>,
}

/// What one finished event's credit became.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Returned {
    /// The finishing connection gets it back (in its answer, or a CREDIT frame).
    pub(crate) own: bool,
    /// Grants to other connections below their share.
    pub(crate) others: Grants,
}

impl CreditBank {
    /// A bank of `total` credits (at least one).
    pub(crate) fn new(total: u32) -> CreditBank {
        let total = total.max(1);
        CreditBank {
            total,
            state: Mutex::new(State {
                free: total,
                next: 1,
                conns: BTreeMap::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The credits of the whole pod.
    pub(crate) fn total(&self) -> u32 {
        self.total
    }

    /// A new connection: its id and the grants to send (its own first share among them).
    pub(crate) fn join(&self) -> (ConnId, Grants) {
        let mut st = self.state();
        let id = st.next;
        st.next += 1;
        st.conns.insert(id, Share::default());
        let grants = self.rebalance(&mut st, None);
        (id, grants)
    }

    /// Connection `id` ended: its unused credits come back now, its busy ones as they finish.
    pub(crate) fn leave(&self, id: ConnId) -> Grants {
        let mut st = self.state();
        if let Some(share) = st.conns.remove(&id) {
            st.free += share.held.saturating_sub(share.busy);
        }
        self.rebalance(&mut st, None)
    }

    /// Connection `id` spent a credit on an event (admitted or not: a refusal is finished at once).
    pub(crate) fn spent(&self, id: ConnId) {
        if let Some(share) = self.state().conns.get_mut(&id) {
            share.busy += 1;
        }
    }

    /// An event spent on connection `id` is done: where its credit goes.
    pub(crate) fn finished(&self, id: ConnId) -> Returned {
        let mut st = self.state();
        let target = target(self.total, st.conns.len());
        let own = match st.conns.get_mut(&id) {
            None => {
                st.free += 1;
                false
            }
            Some(share) => {
                share.busy = share.busy.saturating_sub(1);
                // Still below its share: it keeps the credit (the common case with one sender).
                if share.held <= target {
                    true
                } else {
                    share.held -= 1;
                    st.free += 1;
                    false
                }
            }
        };
        let others = self.rebalance(&mut st, Some(id));
        Returned { own, others }
    }

    /// A grant to connection `id` could not be sent (its queue closed): the credits come back.
    pub(crate) fn undeliverable(&self, id: ConnId, credits: u32) {
        let mut st = self.state();
        if let Some(share) = st.conns.get_mut(&id) {
            share.held = share.held.saturating_sub(credits);
        }
        st.free += credits;
    }

    /// Hands free credits to the connections furthest below their share; `skip` got its own already.
    fn rebalance(&self, st: &mut State, skip: Option<ConnId>) -> Grants {
        let mut grants = Grants::new();
        if st.free == 0 || st.conns.is_empty() {
            return grants;
        }
        let target = target(self.total, st.conns.len());
        let mut wanting: Vec<(u32, ConnId)> = st
            .conns
            .iter()
            .filter(|(id, s)| Some(**id) != skip && s.held < target)
            .map(|(id, s)| (s.held, *id))
            .collect();
        wanting.sort_unstable();
        for (_, id) in wanting {
            if st.free == 0 {
                break;
            }
            let Some(share) = st.conns.get_mut(&id) else {
                continue;
            };
            let give = (target - share.held).min(st.free);
            share.held += give;
            st.free -= give;
            grants.push((id, give));
        }
        grants
    }
}

/// Each connection's share: the total split evenly over the connections plus one share kept for the
/// next, rounded up (grants never exceed what is free, so the sum stays within the total).
fn target(total: u32, conns: usize) -> u32 {
    let n = u32::try_from(conns.max(1)).unwrap_or(u32::MAX);
    total.div_ceil(n.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(bank: &CreditBank) -> u32 {
        bank.state().conns.values().map(|s| s.held).sum()
    }

    #[test]
    fn one_sender_gets_half_and_keeps_it() {
        let bank = CreditBank::new(10);
        let (a, grants) = bank.join();
        assert_eq!(
            grants,
            vec![(a, 5)],
            "the other half waits for a second sender"
        );
        bank.spent(a);
        assert_eq!(
            bank.finished(a),
            Returned {
                own: true,
                others: vec![]
            }
        );
        assert_eq!(held(&bank), 5);
    }

    #[test]
    fn a_second_sender_gets_the_reserve_at_once_and_the_first_shrinks_as_it_finishes() {
        let bank = CreditBank::new(10);
        let (a, _) = bank.join();
        for _ in 0..5 {
            bank.spent(a);
        }
        // Shares are now ceil(10 / 3) = 4: b gets its share from the reserve although a is busy.
        let (b, grants) = bank.join();
        assert_eq!(grants, vec![(b, 4)]);
        // a is over its share: its first finished event's credit goes back to the bank.
        let first = bank.finished(a);
        assert!(!first.own);
        for _ in 0..4 {
            assert!(bank.finished(a).own);
            assert!(held(&bank) <= 10);
        }
        let st = bank.state();
        assert_eq!(st.conns[&a].held, 4);
        assert_eq!(st.conns[&b].held, 4);
        assert_eq!(st.free, 2);
    }

    #[test]
    fn the_sum_held_never_exceeds_the_total_under_churn() {
        let bank = CreditBank::new(7);
        let mut conns = Vec::new();
        let mut busy: Vec<ConnId> = Vec::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for step in 0..5000 {
            match rng.u8(..10) {
                0 if conns.len() < 4 => conns.push(bank.join().0),
                1 if !conns.is_empty() => {
                    let id = conns.swap_remove(rng.usize(..conns.len()));
                    bank.leave(id);
                }
                2..=5 if !conns.is_empty() => {
                    let id = conns[rng.usize(..conns.len())];
                    let st = bank.state();
                    let s = &st.conns[&id];
                    // A well-behaved sender spends only credit it holds.
                    let can = s.held > s.busy;
                    drop(st);
                    if can {
                        bank.spent(id);
                        busy.push(id);
                    }
                }
                _ if !busy.is_empty() => {
                    let id = busy.swap_remove(rng.usize(..busy.len()));
                    bank.finished(id);
                }
                _ => {}
            }
            let st = bank.state();
            let sum: u32 = st.conns.values().map(|s| s.held).sum();
            let in_gone: usize = busy.iter().filter(|id| !st.conns.contains_key(id)).count();
            assert!(sum <= 7, "step {step}: held {sum}");
            // Nothing leaks: held + free + busy events of ended connections is the total.
            assert_eq!(sum + st.free + in_gone as u32, 7, "step {step}");
        }
    }

    #[test]
    fn an_ended_connections_unused_credits_go_to_the_others() {
        let bank = CreditBank::new(6);
        let (a, _) = bank.join();
        let (b, _) = bank.join();
        bank.spent(a);
        // a holds 3 (it joined alone), 1 busy; b got its share of 2. a's 2 unused come back at
        // once and b rises to its new share, 3; a's busy one comes back to the bank when it finishes.
        let grants = bank.leave(a);
        assert_eq!(grants, vec![(b, 1)]);
        assert_eq!(
            bank.finished(a),
            Returned {
                own: false,
                others: vec![]
            }
        );
        assert_eq!(bank.state().free, 3);
    }
}
