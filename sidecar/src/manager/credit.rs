//! The credit bank of one manager pod: the credits granted over all sender connections add up to at
//! most what the pod admits at once (`queueCapacity + maxInFlight`), so a sender holding credit is
//! never shed for the event bound, however many senders there are. Bytes are not credit: the pod's
//! byte budget is held at admission (`worker.rs`), and may refuse a large event whatever credit its
//! sender held (docs/delivery.md says why).
//!
//! With `n` connections each gets at most `ceil(total / (n + 1))`: one share stays in reserve, so a
//! new connection gets what is free up to its share at once. The others shrink towards the new share
//! as their events finish (a returned credit goes to the connection furthest below its share, the
//! finishing one first). Idle senders finish nothing, so while a connection is still below its share
//! with nothing free, the bank asks the senders above theirs for their unused credits back (RECLAIM;
//! a sender answers with what it gave up, RELEASE): without that, a pod's later senders got less
//! than their share, and from the fourth on (the first three idle) nothing, forever. Only senders
//! whose HELLO said they release credit are asked. A connection that ends gives back the credits it
//! held unused at once, and the rest as its admitted events finish.
//!
//! Pure accounting behind a mutex; the frames that carry the grants are the caller's to send.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A connection's id in the bank.
pub(crate) type ConnId = u64;

/// What the bank wants sent, each as `(connection, credits)`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Orders {
    /// CREDIT frames: grants.
    pub(crate) grants: Vec<(ConnId, u32)>,
    /// RECLAIM frames: asks for unused credits back.
    pub(crate) reclaims: Vec<(ConnId, u32)>,
}

impl Orders {
    pub(crate) fn is_empty(&self) -> bool {
        self.grants.is_empty() && self.reclaims.is_empty()
    }
}

#[derive(Default)]
struct Share {
    /// Granted and not yet returned: unused at the sender, or spent on an event not done yet.
    held: u32,
    /// Spent on an admitted event that is not done yet.
    busy: u32,
    /// The sender answers RECLAIM (its HELLO said so).
    releases: bool,
    /// Asked back and not yet answered: no second ask while one is out.
    asked: u32,
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
    /// Orders for other connections (grants to those below their share).
    pub(crate) others: Orders,
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

    /// A new connection: its id and the orders to send (its own first share among them).
    pub(crate) fn join(&self) -> (ConnId, Orders) {
        let mut st = self.state();
        let id = st.next;
        st.next += 1;
        st.conns.insert(id, Share::default());
        let grants = self.rebalance(&mut st, None);
        (id, grants)
    }

    /// Connection `id` ended: its unused credits come back now, its busy ones as they finish.
    pub(crate) fn leave(&self, id: ConnId) -> Orders {
        let mut st = self.state();
        if let Some(share) = st.conns.remove(&id) {
            st.free += share.held.saturating_sub(share.busy);
        }
        self.rebalance(&mut st, None)
    }

    /// Connection `id` spent a credit on an event (admitted or not: a refusal is finished at once).
    /// `false` when it held no unused credit: the sender is over what it was granted (grants are
    /// counted here before their frame is sent, so a well-behaved sender never is), and the caller
    /// closes its connection rather than let it grow the pod's queue past its bound.
    pub(crate) fn spent(&self, id: ConnId) -> bool {
        match self.state().conns.get_mut(&id) {
            Some(share) if share.busy < share.held => {
                share.busy += 1;
                true
            }
            _ => false,
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

    /// Connection `id`'s sender answers RECLAIM: it may be asked from now on.
    pub(crate) fn releases(&self, id: ConnId) -> Orders {
        let mut st = self.state();
        match st.conns.get_mut(&id) {
            Some(share) => share.releases = true,
            None => return Orders::default(),
        }
        self.rebalance(&mut st, None)
    }

    /// Connection `id` gave back `credits` it held unused (its answer to a RECLAIM). They are no
    /// longer its own: a request on them afterwards is beyond its credit ([`CreditBank::spent`]).
    pub(crate) fn released(&self, id: ConnId, credits: u32) -> Orders {
        let mut st = self.state();
        let Some(share) = st.conns.get_mut(&id) else {
            return Orders::default();
        };
        share.asked = 0;
        // Never more than it holds unused: a sender cannot give back credit it spent.
        let credits = credits.min(share.held.saturating_sub(share.busy));
        if credits == 0 {
            // Its credits were on their way as requests; asking again now would only ping-pong.
            return Orders::default();
        }
        share.held -= credits;
        st.free += credits;
        self.rebalance(&mut st, None)
    }

    /// A RECLAIM to connection `id` could not be sent: it may be asked again.
    pub(crate) fn unasked(&self, id: ConnId) {
        if let Some(share) = self.state().conns.get_mut(&id) {
            share.asked = 0;
        }
    }

    /// A grant to connection `id` could not be sent (its queue closed): the credits come back.
    pub(crate) fn undeliverable(&self, id: ConnId, credits: u32) {
        let mut st = self.state();
        if let Some(share) = st.conns.get_mut(&id) {
            share.held = share.held.saturating_sub(credits);
        }
        st.free += credits;
    }

    /// Hands free credits to the connections furthest below their share (`skip` got its own
    /// already); if one is still below it, asks those above theirs for their unused credits.
    fn rebalance(&self, st: &mut State, skip: Option<ConnId>) -> Orders {
        let mut orders = Orders::default();
        if st.conns.is_empty() {
            return orders;
        }
        let target = target(self.total, st.conns.len());
        if st.free > 0 {
            orders.grants = Self::grant(st, target, skip);
        }
        // Only when nothing is left to grant: free credit reaches a connection below its share first.
        if st.free == 0 && st.conns.values().any(|s| s.held < target) {
            for (id, share) in st.conns.iter_mut() {
                if !share.releases || share.asked > 0 {
                    continue;
                }
                let excess = share.held.saturating_sub(target.max(share.busy));
                if excess > 0 {
                    share.asked = excess;
                    orders.reclaims.push((*id, excess));
                }
            }
        }
        orders
    }

    fn grant(st: &mut State, target: u32, skip: Option<ConnId>) -> Vec<(ConnId, u32)> {
        let mut grants = Vec::new();
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
            grants.grants,
            vec![(a, 5)],
            "the other half waits for a second sender"
        );
        assert!(bank.spent(a));
        assert_eq!(
            bank.finished(a),
            Returned {
                own: true,
                others: Orders::default()
            }
        );
        assert_eq!(held(&bank), 5);
    }

    #[test]
    fn spending_beyond_what_is_held_is_refused() {
        let bank = CreditBank::new(4);
        let (a, grants) = bank.join();
        assert_eq!(grants.grants, vec![(a, 2)]);
        assert!(bank.spent(a));
        assert!(bank.spent(a));
        assert!(!bank.spent(a), "a third request on two credits");
        assert!(bank.finished(a).own);
        assert!(bank.spent(a), "a returned credit may be spent again");
        assert!(!bank.spent(99), "an unknown connection holds nothing");
    }

    #[test]
    fn a_released_credit_is_no_longer_the_senders() {
        let bank = CreditBank::new(10);
        let (a, _) = bank.join();
        bank.releases(a);
        let (_b, _) = bank.join();
        // Shares drop to 3: c gets the one free credit, and a is asked for the 2 it holds over.
        let (c, orders) = bank.join();
        assert_eq!(orders.grants, vec![(c, 1)]);
        assert_eq!(orders.reclaims, vec![(a, 2)]);
        assert_eq!(bank.released(a, 2).grants, vec![(c, 2)]);
        for _ in 0..3 {
            assert!(bank.spent(a));
        }
        assert!(
            !bank.spent(a),
            "the 2 it gave back went to c: a request on them is over what a holds"
        );
    }

    #[test]
    fn a_second_sender_gets_the_reserve_at_once_and_the_first_shrinks_as_it_finishes() {
        let bank = CreditBank::new(10);
        let (a, _) = bank.join();
        for _ in 0..5 {
            assert!(bank.spent(a));
        }
        // Shares are now ceil(10 / 3) = 4: b gets its share from the reserve although a is busy.
        let (b, grants) = bank.join();
        assert_eq!(grants.grants, vec![(b, 4)]);
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
                        assert!(bank.spent(id));
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
        assert!(bank.spent(a));
        // a holds 3 (it joined alone), 1 busy; b got its share of 2. a's 2 unused come back at
        // once and b rises to its new share, 3; a's busy one comes back to the bank when it finishes.
        let grants = bank.leave(a);
        assert_eq!(grants.grants, vec![(b, 1)]);
        assert_eq!(
            bank.finished(a),
            Returned {
                own: false,
                others: Orders::default()
            }
        );
        assert_eq!(bank.state().free, 3);
    }

    #[test]
    fn idle_senders_are_asked_back_so_every_later_sender_gets_credit() {
        // The bug this fixes: with 1088 credits, senders 4 and 5 of a pod whose first three sit idle
        // got nothing, ever (544 + 363 + 181 were granted and never spent).
        let bank = CreditBank::new(1088);
        let mut ids = Vec::new();
        for _ in 0..5 {
            let (id, _) = bank.join();
            bank.releases(id);
            ids.push(id);
        }
        // Each RECLAIM is answered with what the sender held unused, as a real sender does.
        loop {
            let asks: Vec<(ConnId, u32)> = {
                let st = bank.state();
                st.conns
                    .iter()
                    .filter(|(_, s)| s.asked > 0)
                    .map(|(id, s)| (*id, s.asked))
                    .collect()
            };
            if asks.is_empty() {
                break;
            }
            for (id, asked) in asks {
                bank.released(id, asked);
            }
        }
        let st = bank.state();
        let target = target(1088, 5);
        for id in &ids {
            assert_eq!(st.conns[id].held, target, "connection {id}");
        }
        assert_eq!(st.free, 1088 - 5 * target, "one share stays in reserve");
    }

    #[test]
    fn a_reclaim_goes_only_to_senders_that_release_and_never_takes_busy_credit() {
        let bank = CreditBank::new(10);
        let (a, _) = bank.join();
        for _ in 0..4 {
            bank.spent(a);
        }
        let (b, _) = bank.join();
        let (old, _) = bank.join();
        // a holds 5 (4 busy), b 4 -> 1 free is given to old; nobody else releases yet.
        let orders = bank.releases(b);
        // Shares are ceil(10 / 4) = 3: old is below (1), b has 1 unused above, a's excess is busy.
        assert_eq!(orders.reclaims, vec![(b, 1)]);
        assert!(
            bank.releases(old).reclaims.is_empty(),
            "b was asked already"
        );
        // b gave back only 1; the credit goes to old at once.
        let orders = bank.released(b, 1);
        assert_eq!(orders.grants, vec![(old, 1)]);
        // A sender claiming to give back more than it holds unused gives back only that: the
        // books still add up to the total.
        bank.released(b, 100);
        let st = bank.state();
        let sum: u32 = st.conns.values().map(|s| s.held).sum();
        assert_eq!(sum + st.free, 10);
    }
}
