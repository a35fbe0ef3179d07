//! Randomized dispatch order (`+randomized_msgq [seed]`): the arrived
//! messages of a PE that Converse does not order among themselves are
//! taken in a seeded random order, so that a program relying on an order
//! nobody promised fails, and fails again with the same seed.
//!
//! # What stays ordered (what Converse promises)
//!
//! - Messages from one sender to this PE run in the order sent (every
//!   layer keeps that order; the trace's arrows rely on it too): arrived
//!   messages are held per sender, and only a sender's oldest is a
//!   candidate.
//! - Arrived messages run before anything in the scheduler queues
//!   (`csd`'s pass order is unchanged: this module orders arrivals only).
//! - The scheduler queue keeps priority order, and the FIFO or LIFO order
//!   among equal priorities that each enqueue call names (the manual's
//!   queueing strategies); only the tie between the node queue and the
//!   PE's queue at equal priority is drawn (`deliver`).
//! - Messages set aside by `deliver_specific_msg` and bundle parts keep
//!   their place (the stash is taken first, as without this flag).
//!
//! What is drawn: which sender's oldest message runs next, among every
//! PE that has one held, the PE itself (self-sends) and, where the caller
//! takes node messages, the node's arrivals (one candidate, taken one at a
//! time since other PEs of the node share them).
//!
//! # Reproducibility
//!
//! The draw depends only on the seed, the PE and the set of candidates at
//! each step, never on the order in which messages reached the inbox: the
//! held senders are kept sorted. A run whose arrivals reach each PE at the
//! same points (one PE; or PEs that wait for their arrivals, as the tests
//! do) dispatches identically under one seed.
//!
//! # Concurrency
//!
//! Owned by its PE (in `SchedState`), used on the PE's thread only.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::msg::Message;

/// A PE's held arrivals and its random stream.
pub(crate) struct Shuffle {
    rng: Cell<u64>,
    /// Per sender PE (the last slot: a sender number out of range),
    /// arrived messages in their order, each with its caller's mark
    /// (see [`Shuffle::hold`]).
    by_sender: RefCell<Vec<VecDeque<(Message, bool)>>>,
    /// The senders with held messages, ascending.
    active: RefCell<Vec<u32>>,
}

/// What [`Shuffle::pick`] chose.
pub(crate) enum Pick {
    /// A held message, with the mark it was held with.
    Held(Message, bool),
    /// The extra candidate the caller offered (the node's arrivals).
    Extra,
}

impl Shuffle {
    /// PE `pe`'s stream of a job seeded `seed` with `num_pes` PEs.
    pub fn new(seed: u64, pe: usize, num_pes: usize) -> Shuffle {
        // Each PE's stream starts apart from the others'.
        let state = mix(seed ^ mix(pe as u64 + 1));
        Shuffle {
            rng: Cell::new(state),
            by_sender: RefCell::new((0..=num_pes).map(|_| VecDeque::new()).collect()),
            active: RefCell::new(Vec::new()),
        }
    }

    /// Holds `m`, an arrived message from PE `src`, behind the others
    /// from the same sender; `mark` comes back with it (the caller's note
    /// of what is still to do when it is taken).
    pub fn hold(&self, src: usize, m: Message, mark: bool) {
        let mut by_sender = self.by_sender.borrow_mut();
        let slot = src.min(by_sender.len() - 1);
        let queue = &mut by_sender[slot];
        if queue.is_empty() {
            let mut active = self.active.borrow_mut();
            let at = active.partition_point(|&s| (s as usize) < slot);
            active.insert(at, slot as u32);
        }
        queue.push_back((m, mark));
    }

    /// Held messages (O(PEs): for reports, not the message path).
    pub fn len(&self) -> usize {
        self.by_sender.borrow().iter().map(VecDeque::len).sum()
    }

    /// True if no message is held.
    pub fn is_empty(&self) -> bool {
        self.active.borrow().is_empty()
    }

    /// Draws the next message among the held senders' oldest and `extra`
    /// (a candidate the caller takes itself: [`Pick::Extra`]); `None` if
    /// there is none.
    pub fn pick(&self, extra: bool) -> Option<Pick> {
        let mut active = self.active.borrow_mut();
        let n = active.len() + usize::from(extra);
        if n == 0 {
            return None;
        }
        let k = self.below(n);
        if k == active.len() {
            return Some(Pick::Extra);
        }
        let slot = active[k] as usize;
        let mut by_sender = self.by_sender.borrow_mut();
        let (m, mark) = by_sender[slot]
            .pop_front()
            .expect("an active sender holds a message");
        if by_sender[slot].is_empty() {
            active.remove(k);
        }
        Some(Pick::Held(m, mark))
    }

    /// A draw of 0 or 1 (a tie broken at random).
    pub fn coin(&self) -> bool {
        self.below(2) == 1
    }

    /// A uniform draw below `n` (> 0), by the multiply-shift of Lemire
    /// (the bias, at most `n / 2^64`, does not matter here).
    fn below(&self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }

    /// SplitMix64: a full-period stream from any state.
    fn next(&self) -> u64 {
        let s = self.rng.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.rng.set(s);
        mix(s)
    }
}

/// SplitMix64's output function: a bijective scramble of a 64-bit word.
pub(crate) fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message saying it is the `k`-th from `src`.
    fn msg(src: usize, k: u32) -> Message {
        let mut payload = (src as u32).to_le_bytes().to_vec();
        payload.extend_from_slice(&k.to_le_bytes());
        Message::from_payload(0, &payload)
    }

    fn sender(m: &Message) -> usize {
        u32::from_le_bytes(m.payload()[..4].try_into().unwrap()) as usize
    }

    fn key(m: &Message) -> u32 {
        u32::from_le_bytes(m.payload()[4..8].try_into().unwrap())
    }

    /// Holds 3 senders × 5 messages (in an interleaving given by `order`)
    /// and takes them all: the order taken, as (sender, k).
    fn drain(seed: u64, arrival: &[(usize, u32)]) -> Vec<(usize, u32)> {
        let s = Shuffle::new(seed, 0, 4);
        for &(src, k) in arrival {
            s.hold(src, msg(src, k), k % 2 == 0);
        }
        assert_eq!(s.len(), arrival.len());
        let mut out = Vec::new();
        while let Some(p) = s.pick(false) {
            match p {
                Pick::Held(m, mark) => {
                    assert_eq!(
                        mark,
                        key(&m).is_multiple_of(2),
                        "the mark comes back with it"
                    );
                    out.push((sender(&m), key(&m)))
                }
                Pick::Extra => unreachable!("no extra candidate offered"),
            }
        }
        assert!(s.is_empty());
        out
    }

    fn arrival_a() -> Vec<(usize, u32)> {
        (0..5)
            .flat_map(|k| (1..4).map(move |src| (src, k)))
            .collect()
    }

    #[test]
    fn each_senders_messages_keep_their_order() {
        for seed in 0..20 {
            let out = drain(seed, &arrival_a());
            for src in 1..4 {
                let ks: Vec<u32> = out.iter().filter(|m| m.0 == src).map(|m| m.1).collect();
                assert_eq!(ks, vec![0, 1, 2, 3, 4], "seed {seed}");
            }
        }
    }

    #[test]
    fn one_seed_one_order_whatever_the_arrival_interleaving() {
        let a = arrival_a();
        // The same messages, reaching the inbox sender by sender.
        let mut b = a.clone();
        b.sort();
        assert_eq!(drain(7, &a), drain(7, &b));
    }

    #[test]
    fn seeds_change_the_order() {
        let orders: std::collections::HashSet<Vec<(usize, u32)>> =
            (0..8).map(|seed| drain(seed, &arrival_a())).collect();
        assert!(orders.len() > 4, "8 seeds gave {} orders", orders.len());
    }

    #[test]
    fn the_extra_candidate_is_drawn_too() {
        let s = Shuffle::new(3, 0, 2);
        let mut extra = 0;
        for round in 0..200 {
            s.hold(1, msg(1, round), false);
            match s.pick(true).unwrap() {
                Pick::Extra => extra += 1,
                Pick::Held(..) => {}
            }
            while s.pick(false).is_some() {}
        }
        assert!((60..140).contains(&extra), "{extra} of 200");
    }

    #[test]
    fn out_of_range_senders_share_the_last_slot() {
        let s = Shuffle::new(1, 0, 2);
        s.hold(99, msg(1, 0), false);
        s.hold(usize::MAX, msg(1, 1), false);
        let mut ks = Vec::new();
        while let Some(Pick::Held(m, _)) = s.pick(false) {
            ks.push(key(&m));
        }
        assert_eq!(ks, vec![0, 1]);
    }
}
