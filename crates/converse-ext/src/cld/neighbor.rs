//! `neighbor`: seeds wait as tokens; each PE tells its neighbours in a
//! virtual topology its load, and moves half the difference to one that
//! is lighter (after `cldb.neighbor.c`).
//!
//! # The topology
//!
//! PE `p` of `n` has the neighbours `p ± 2^k (mod n)` for every `2^k < n`:
//! at most `2 log2 n`, and any PE is at most about `log2 n` hops from any
//! other, so work spreads from one PE to all in that many exchanges.
//!
//! # The protocol
//!
//! - A PE reports its load ([`load`](super::load), the scheduler queue's
//!   length) to all its neighbours when it differs from what it last
//!   reported: every 10 ms (`Condition::PERIODIC_10MS`) and as soon as it
//!   becomes idle. When loads stop changing, nothing is sent, so a quiet
//!   job is quiescent.
//! - Every 10 ms, and on a report of an idle neighbour, a PE with tokens compares its load with
//!   each neighbour's last known one, lightest first, and sends a lighter
//!   one half the difference, at most `MAX_GIVE` (256) seeds a step
//!   ([`multiple_send`](super::multiple_send),
//!   which spreads what it gives over its priorities); it then counts the
//!   seeds as that neighbour's, until the next report says otherwise.
//! - Seeds arriving make the PE's next idle edge report again, so a
//!   neighbour's estimate of it does not stay high after the work is done.
//!
//! # Concurrency
//!
//! The state is the PE's own; reports are messages.
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use converse::{Condition, Message};

use super::{Balancer, SeedInfo, Strategy};

/// Most seeds given to one neighbour in one step. Half the difference can
/// be most of a breadth-first tree; moving it all at once costs more than
/// the work it balances, and the next step (10 ms on) moves more if the
/// difference stays.
const MAX_GIVE: usize = 256;

struct State {
    me: usize,
    neighbors: Vec<usize>,
    /// Each neighbour's load as last reported, plus what this PE has sent
    /// it since.
    known: RefCell<Vec<usize>>,
    /// What this PE last reported; `None`: report at the next chance.
    reported: Cell<Option<usize>>,
    report_handler: Cell<usize>,
}

/// The neighbours of PE `p` of `n` (see the module comment).
pub(crate) fn neighbors(p: usize, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut step = 1;
    while step < n {
        for q in [(p + step) % n, (p + n - step) % n] {
            if q != p && !out.contains(&q) {
                out.push(q);
            }
        }
        step *= 2;
    }
    out
}

pub(super) fn make() -> Box<dyn Strategy> {
    let me = converse::my_pe();
    let n = converse::num_pes();
    let neighbors = neighbors(me, n);
    let state = Rc::new(State {
        me,
        known: RefCell::new(vec![0; neighbors.len()]),
        neighbors,
        reported: Cell::new(None),
        report_handler: Cell::new(0),
    });
    let s = Rc::clone(&state);
    state
        .report_handler
        .set(converse::register_handler(move |msg: Message| {
            s.on_report(&msg)
        }));
    if n > 1 {
        let s = Rc::clone(&state);
        converse::call_on_condition_keep(Condition::PERIODIC_10MS, move |_| {
            s.report();
            s.balance();
        });
        let s = Rc::clone(&state);
        converse::call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, move |_| s.report());
    }
    Box::new(Neighbor(state))
}

struct Neighbor(Rc<State>);

impl Strategy for Neighbor {
    fn name(&self) -> &'static str {
        "neighbor"
    }
    fn place(&self, cld: &Balancer, seed: Message, info: SeedInfo) {
        cld.keep(seed, info.queueing);
    }
    fn received(&self, _cld: &Balancer) {
        self.0.reported.set(None);
    }
}

impl State {
    fn report(&self) {
        let load = super::load();
        if self.reported.get() == Some(load) {
            return;
        }
        self.reported.set(Some(load));
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&(self.me as u64).to_le_bytes());
        payload[8..].copy_from_slice(&(load as u64).to_le_bytes());
        for &q in &self.neighbors {
            let msg = Message::from_payload(self.report_handler.get(), &payload);
            converse::sync_send_and_free(q, msg);
        }
        super::count_balance_messages(self.neighbors.len() as u64);
    }

    fn on_report(&self, msg: &Message) {
        let p = msg.payload();
        let word = |at: usize| {
            p.get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let (Some(from), Some(load)) = (word(0), word(8)) else {
            converse::abort(&format!(
                "a malformed neighbor load report ({} bytes) from PE {} on PE {}",
                p.len(),
                msg.src_pe(),
                self.me
            ));
        };
        let Some(i) = self.neighbors.iter().position(|&q| q as u64 == from) else {
            converse::abort(&format!(
                "a neighbor load report from PE {from}, which is not a neighbour of PE {} (its neighbours are {:?})",
                self.me, self.neighbors
            ));
        };
        self.known.borrow_mut()[i] = usize::try_from(load).unwrap_or(usize::MAX);
        // An idle neighbour gets work at once; other differences wait for
        // the periodic step, so crossing reports do not bounce seeds.
        if load == 0 {
            self.balance();
        }
    }

    fn balance(&self) {
        let mut tokens = super::count_tokens();
        if tokens == 0 {
            return;
        }
        let mut mine = super::load();
        let mut order: Vec<usize> = (0..self.neighbors.len()).collect();
        order.sort_by_key(|&i| self.known.borrow()[i]);
        for i in order {
            let theirs = self.known.borrow()[i];
            if mine <= theirs.saturating_add(1) || tokens == 0 {
                break;
            }
            let give = ((mine - theirs) / 2).min(tokens).min(MAX_GIVE);
            let moved = super::multiple_send(self.neighbors[i], give);
            let known = &mut self.known.borrow_mut()[i];
            *known = known.saturating_add(moved);
            mine -= moved;
            tokens -= moved;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::neighbors;

    #[test]
    fn the_topology_is_symmetric_and_connected() {
        for n in 1..40 {
            for p in 0..n {
                let mine = neighbors(p, n);
                assert!(!mine.contains(&p));
                assert!(mine.len() <= 2 * (usize::BITS - n.leading_zeros()) as usize);
                for q in &mine {
                    assert!(neighbors(*q, n).contains(&p), "{p} and {q} of {n}");
                }
            }
            // Everyone is reached from PE 0.
            let mut seen = vec![false; n];
            let mut frontier = vec![0];
            seen[0] = true;
            while let Some(p) = frontier.pop() {
                for q in neighbors(p, n) {
                    if !seen[q] {
                        seen[q] = true;
                        frontier.push(q);
                    }
                }
            }
            assert!(seen.iter().all(|s| *s), "{n} PEs");
        }
        assert_eq!(neighbors(0, 2), vec![1]);
    }
}
