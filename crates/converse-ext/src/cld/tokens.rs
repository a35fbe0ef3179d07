//! The token queue (the manual's §7.3.2, `cldb.c`): seeds a PE keeps in
//! its scheduler queue in a form from which they can still be taken out
//! and moved to another PE.
//!
//! A seed put here ([`TokenQueue::put`]) gets a [`TokenId`]; the caller
//! enqueues a small *token* message naming the id in the scheduler queue,
//! at the seed's priority. Then either
//! - the token reaches the front of the scheduler queue first: its handler
//!   [`take`](TokenQueue::take)s the seed and runs it there, in the seed's
//!   turn; or
//! - a balancer takes the seed out first ([`get`](TokenQueue::get),
//!   [`take_spread`](TokenQueue::take_spread)) to move it; the token, when
//!   its turn comes, finds nothing and does nothing.
//!
//! Pure data: no messages here, only the bookkeeping, so the property test
//! below checks it against a plain list.
//!
//! # Why no priority queue of its own
//!
//! Every seed is put and taken (by its token) once, but only a few are
//! ever moved, and moving is rare (a steal, a periodic step). So putting
//! and taking are a slab insert and remove, and the priority order is
//! worked out only when seeds are taken out to be moved: then the `k`
//! most urgent live seeds are selected (linear in the seeds held) and
//! sorted, by their priority (`Queueing::prio`, the scheduler's order,
//! compared without allocating) and, among equals, by a sequence number
//! (FIFO seeds count up, LIFO seeds count down, so the order is where the
//! scheduler queue has them). An earlier version kept a second `Cqs` of
//! ids beside the slab; it cost about 20% of a seed's way through the
//! token queue for order that is rarely read. A version that sorted every
//! live seed (with an allocated key each) on every move made `neighbor`
//! four times slower on a breadth-first tree, where a PE holds most of the
//! tree as tokens.
//!
//! # Invariants
//!
//! - Each seed put is handed out exactly once: by `take` of its id, or by
//!   `get`/`take_spread`, never both (its slot is emptied and its
//!   generation bumped when it leaves, so an old id finds nothing even after
//!   the slot is reused).
//! - `live` is the number of seeds here ([`count`](TokenQueue::count),
//!   `CldCountTokens`).
//! - Sequence numbers grow (FIFO) or shrink (LIFO) with every put, so two
//!   seeds of equal priority are ordered as the scheduler orders them.
//!
//! # Concurrency
//!
//! None: each PE owns its queue.
use converse::Queueing;

/// Names one seed put in a [`TokenQueue`]; what the token message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenId {
    index: u32,
    generation: u32,
}

impl TokenId {
    /// The id as 8 bytes (a token message's payload).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0; 8];
        b[..4].copy_from_slice(&self.index.to_le_bytes());
        b[4..].copy_from_slice(&self.generation.to_le_bytes());
        b
    }

    /// The id in `bytes` (see [`to_bytes`](TokenId::to_bytes)); `None` if
    /// there are fewer than 8.
    pub fn from_bytes(bytes: &[u8]) -> Option<TokenId> {
        let b: &[u8; 8] = bytes.get(..8)?.try_into().ok()?;
        Some(TokenId {
            index: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            generation: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

struct Held<T> {
    seed: T,
    queueing: Queueing,
    /// Place among equal priorities (see the module comment).
    seq: i64,
}

struct Slot<T> {
    generation: u32,
    held: Option<Held<T>>,
}

/// One PE's retrievable seeds (see the module comment).
pub struct TokenQueue<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
    next_seq: i64,
}

impl<T> Default for TokenQueue<T> {
    fn default() -> Self {
        TokenQueue::new()
    }
}

/// The scheduler's order of two held seeds: priority, then place among
/// equals.
fn urgency<T>(a: &Held<T>, b: &Held<T>) -> std::cmp::Ordering {
    a.queueing
        .prio()
        .cmp(&b.queueing.prio())
        .then(a.seq.cmp(&b.seq))
}

fn is_lifo(q: &Queueing) -> bool {
    matches!(
        q,
        Queueing::Lifo | Queueing::ILifo(_) | Queueing::LLifo(_) | Queueing::BLifo(_)
    )
}

impl<T> TokenQueue<T> {
    /// An empty queue.
    pub fn new() -> TokenQueue<T> {
        TokenQueue {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_seq: 1,
        }
    }

    /// The number of seeds here (`CldCountTokens`).
    pub fn count(&self) -> usize {
        self.live
    }

    /// Keeps `seed`, to run at priority `queueing`; returns its id.
    pub fn put(&mut self, seed: T, queueing: Queueing) -> TokenId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 seeds on a PE");
                self.slots.push(Slot {
                    generation: 0,
                    held: None,
                });
                i
            }
        };
        let seq = if is_lifo(&queueing) {
            -self.next_seq
        } else {
            self.next_seq
        };
        self.next_seq += 1;
        let slot = &mut self.slots[index as usize];
        slot.held = Some(Held {
            seed,
            queueing,
            seq,
        });
        self.live += 1;
        TokenId {
            index,
            generation: slot.generation,
        }
    }

    /// The seed of `id` if it is still here (its token's turn came).
    pub fn take(&mut self, id: TokenId) -> Option<T> {
        self.remove(id.index, Some(id.generation))
    }

    /// The most urgent seed here (first in the scheduler's order), taken
    /// out to be moved (`CldGetToken`).
    pub fn get(&mut self) -> Option<T> {
        // One pass for the minimum: a balancer may call this in a loop.
        let best = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.held.as_ref().map(|h| (h, i as u32)))
            .min_by(|a, b| urgency(a.0, b.0))?
            .1;
        self.remove(best, None)
    }

    /// Takes up to `n` seeds out to be moved, spread over the priorities
    /// here so that this PE keeps urgent work too: of the `2n` most urgent
    /// seeds it gives the 2nd, 4th, … and keeps the 1st, 3rd, …; when there
    /// are fewer than `2n`, the shortfall comes from the least urgent of
    /// those kept. Returned most urgent first.
    pub fn take_spread(&mut self, n: usize) -> Vec<T> {
        let n = n.min(self.live);
        if n == 0 {
            return Vec::new();
        }
        let front = self.most_urgent(2 * n);
        let mut give: Vec<bool> = (0..front.len()).map(|i| i % 2 == 1).collect();
        let mut short = n - front.len() / 2;
        for i in (0..front.len()).step_by(2).rev() {
            if short == 0 {
                break;
            }
            give[i] = true;
            short -= 1;
        }
        front
            .into_iter()
            .zip(give)
            .filter(|(_, g)| *g)
            .map(|(i, _)| self.remove(i, None).expect("a live slot"))
            .collect()
    }

    /// The `k` most urgent live slots, most urgent first: a selection,
    /// then a sort of those only (a PE may hold most of a breadth-first
    /// tree as tokens).
    fn most_urgent(&self, k: usize) -> Vec<u32> {
        let mut live: Vec<(&Held<T>, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.held.as_ref().map(|h| (h, i as u32)))
            .collect();
        if k == 0 {
            return Vec::new();
        }
        if live.len() > k {
            live.select_nth_unstable_by(k - 1, |a, b| urgency(a.0, b.0));
            live.truncate(k);
        }
        live.sort_unstable_by(|a, b| urgency(a.0, b.0));
        live.into_iter().map(|(_, i)| i).collect()
    }

    /// Empties slot `index` if it holds a seed (of `generation`, when
    /// given), bumps its generation and frees it.
    fn remove(&mut self, index: u32, generation: Option<u32>) -> Option<T> {
        let slot = self.slots.get_mut(index as usize)?;
        if generation.is_some_and(|g| g != slot.generation) {
            return None;
        }
        let held = slot.held.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.live -= 1;
        Some(held.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The model: live seeds as (priority, place among equals, seed), the
    /// most urgent first.
    #[derive(Default)]
    struct Model {
        seeds: Vec<(i32, i64, u32)>,
        next: i64,
    }

    impl Model {
        fn put(&mut self, prio: i32, lifo: bool, seed: u32) {
            self.next += 1;
            let place = if lifo { -self.next } else { self.next };
            self.seeds.push((prio, place, seed));
            self.seeds.sort_unstable();
        }
        fn remove(&mut self, seed: u32) -> bool {
            let before = self.seeds.len();
            self.seeds.retain(|s| s.2 != seed);
            self.seeds.len() < before
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Put {
            prio: i32,
            lifo: bool,
        },
        /// The token of the k-th id handed out so far runs.
        Take(usize),
        Get,
        Spread(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (-3i32..3, any::<bool>()).prop_map(|(prio, lifo)| Op::Put { prio, lifo }),
            3 => (0usize..400).prop_map(Op::Take),
            1 => Just(Op::Get),
            1 => (0usize..6).prop_map(Op::Spread),
        ]
    }

    fn queueing(prio: i32, lifo: bool) -> Queueing {
        match (prio, lifo) {
            (0, false) => Queueing::Fifo,
            (0, true) => Queueing::Lifo,
            (p, false) => Queueing::IFifo(p),
            (p, true) => Queueing::ILifo(p),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Counts, what `take` finds, and the order of `get` and
        /// `take_spread` all match the model; every seed leaves once.
        #[test]
        fn matches_a_sorted_list(ops in proptest::collection::vec(op(), 1..400)) {
            let mut q = TokenQueue::new();
            let mut model = Model::default();
            let mut ids = Vec::new();
            let mut gone = std::collections::HashSet::new();
            for op in ops {
                match op {
                    Op::Put { prio, lifo } => {
                        let seed = ids.len() as u32;
                        ids.push(q.put(seed, queueing(prio, lifo)));
                        model.put(prio, lifo, seed);
                    }
                    Op::Take(k) => {
                        if ids.is_empty() { continue; }
                        let seed = (k % ids.len()) as u32;
                        let got = q.take(ids[seed as usize]);
                        prop_assert_eq!(got.is_some(), model.remove(seed));
                        if let Some(s) = got {
                            prop_assert_eq!(s, seed);
                            prop_assert!(gone.insert(s));
                        }
                    }
                    Op::Get => {
                        let want = model.seeds.first().map(|s| s.2);
                        prop_assert_eq!(q.get(), want);
                        if let Some(s) = want {
                            model.remove(s);
                            prop_assert!(gone.insert(s));
                        }
                    }
                    Op::Spread(n) => {
                        let n_eff = n.min(model.seeds.len());
                        let front: Vec<u32> =
                            model.seeds.iter().take(2 * n_eff).map(|s| s.2).collect();
                        let mut want: Vec<u32> =
                            front.iter().skip(1).step_by(2).copied().collect();
                        let mut kept: Vec<u32> = front.iter().step_by(2).copied().collect();
                        while want.len() < n_eff {
                            want.push(kept.pop().expect("enough kept"));
                        }
                        let got = q.take_spread(n);
                        let mut got_sorted = got.clone();
                        got_sorted.sort_unstable();
                        let mut want_sorted = want.clone();
                        want_sorted.sort_unstable();
                        prop_assert_eq!(got_sorted, want_sorted);
                        for s in got {
                            model.remove(s);
                            prop_assert!(gone.insert(s));
                        }
                    }
                }
                prop_assert_eq!(q.count(), model.seeds.len());
            }
            // What is left comes out in the model's order.
            let rest: Vec<u32> = std::iter::from_fn(|| q.get()).collect();
            let want: Vec<u32> = model.seeds.iter().map(|s| s.2).collect();
            prop_assert_eq!(rest, want);
        }
    }

    /// Integer, long and bit-vector priorities, FIFO and LIFO: `get` hands
    /// seeds out in the order the scheduler's queue would run them.
    #[test]
    fn every_kind_of_priority_follows_the_scheduler_order() {
        let bits = |b: u32, w: &[u32]| converse::BitPrio::new(b, w).unwrap();
        let kinds = [
            Queueing::Fifo,
            Queueing::IFifo(-5),
            Queueing::LLifo(1 << 40),
            Queueing::BFifo(bits(3, &[0b101 << 29])),
            Queueing::Lifo,
            Queueing::BLifo(bits(1, &[0])),
            Queueing::ILifo(-5),
            Queueing::LFifo(-1),
            Queueing::BFifo(bits(40, &[0x8000_0000, 1 << 24])),
            Queueing::IFifo(3),
        ];
        let mut q = TokenQueue::new();
        let mut cqs = converse::Cqs::new();
        for (i, k) in kinds.iter().enumerate() {
            q.put(i, k.clone());
            cqs.enqueue(i, k.clone());
        }
        let ours: Vec<usize> = std::iter::from_fn(|| q.get()).collect();
        let theirs: Vec<usize> = std::iter::from_fn(|| cqs.dequeue()).collect();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn an_old_id_finds_nothing_in_a_reused_slot() {
        let mut q = TokenQueue::new();
        let a = q.put("a", Queueing::Fifo);
        assert_eq!(q.get(), Some("a"));
        let b = q.put("b", Queueing::Fifo);
        assert_eq!(a.index, b.index, "the slot is reused");
        assert_eq!(q.take(a), None);
        assert_eq!(q.take(b), Some("b"));
        assert_eq!(TokenId::from_bytes(&b.to_bytes()), Some(b));
        assert_eq!(TokenId::from_bytes(&[1, 2, 3]), None);
    }
}
