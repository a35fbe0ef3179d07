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
//! # Invariants
//!
//! - Each seed put is handed out exactly once: by `take` of its id, or by
//!   `get`/`take_spread`, never both (its slot is emptied and its
//!   generation bumped when it leaves, so an old id finds nothing even after
//!   the slot is reused).
//! - `order` holds the id of every seed still here, in priority order
//!   (the scheduler's: `Cqs` with the seed's own [`Queueing`]), plus ids of
//!   seeds already taken by their token ("stale" ids), which `get` skips.
//!   Stale ids never outnumber live ones by more than `SLACK`: past that,
//!   `order` is rebuilt from the live ones, keeping their order.
//! - `live` is the number of seeds here ([`count`](TokenQueue::count),
//!   `CldCountTokens`).
//!
//! # Concurrency
//!
//! None: each PE owns its queue.
use converse::{Cqs, Queueing};

/// Stale ids `order` may hold beyond the live ones before it is rebuilt.
const SLACK: usize = 64;

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

struct Slot<T> {
    generation: u32,
    seed: Option<(T, Queueing)>,
}

/// One PE's retrievable seeds (see the module comment).
pub struct TokenQueue<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    order: Cqs<TokenId>,
    live: usize,
}

impl<T> Default for TokenQueue<T> {
    fn default() -> Self {
        TokenQueue::new()
    }
}

impl<T> TokenQueue<T> {
    /// An empty queue.
    pub fn new() -> TokenQueue<T> {
        TokenQueue {
            slots: Vec::new(),
            free: Vec::new(),
            order: Cqs::new(),
            live: 0,
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
                    seed: None,
                });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        let id = TokenId {
            index,
            generation: slot.generation,
        };
        self.order.enqueue(id, queueing.clone());
        slot.seed = Some((seed, queueing));
        self.live += 1;
        id
    }

    /// The seed of `id` if it is still here (its token's turn came).
    pub fn take(&mut self, id: TokenId) -> Option<T> {
        let seed = self.remove(id)?;
        // Its id stays in `order`, stale; rebuild when they pile up.
        if self.order.len() > 2 * self.live + SLACK {
            self.rebuild();
        }
        Some(seed)
    }

    /// The most urgent seed here (first in the scheduler's order), taken
    /// out to be moved (`CldGetToken`).
    pub fn get(&mut self) -> Option<T> {
        while let Some(id) = self.order.dequeue() {
            if let Some(seed) = self.remove(id) {
                return Some(seed);
            }
        }
        None
    }

    /// Takes up to `n` seeds out to be moved, spread over the priorities
    /// here so that this PE keeps urgent work too: of the `2n` most urgent
    /// seeds it gives the 2nd, 4th, … and keeps the 1st, 3rd, …; when there
    /// are fewer than `2n`, the shortfall comes from the least urgent of
    /// those kept. Returned most urgent first; the kept seeds keep their
    /// places.
    pub fn take_spread(&mut self, n: usize) -> Vec<T> {
        let n = n.min(self.live);
        if n == 0 {
            return Vec::new();
        }
        // The 2n (or all) most urgent live ids, in order.
        let mut front = Vec::with_capacity(2 * n);
        while front.len() < 2 * n {
            match self.order.dequeue() {
                Some(id) if self.is_live(id) => front.push(id),
                Some(_) => {}
                None => break,
            }
        }
        let mut give: Vec<bool> = (0..front.len()).map(|i| i % 2 == 1).collect();
        let mut short = n - front.len() / 2;
        for i in (0..front.len()).step_by(2).rev() {
            if short == 0 {
                break;
            }
            give[i] = true;
            short -= 1;
        }
        // Back in front of their equals, last first, so they keep their
        // order and their places.
        for (id, _) in front.iter().zip(&give).rev().filter(|(_, g)| !**g) {
            let q = &self.slots[id.index as usize]
                .seed
                .as_ref()
                .expect("a live id has its seed")
                .1;
            self.order.enqueue(*id, as_lifo(q));
        }
        front
            .into_iter()
            .zip(give)
            .filter(|(_, g)| *g)
            .map(|(id, _)| self.remove(id).expect("a live id has its seed"))
            .collect()
    }

    fn is_live(&self, id: TokenId) -> bool {
        self.slots
            .get(id.index as usize)
            .is_some_and(|s| s.generation == id.generation && s.seed.is_some())
    }

    /// Empties the slot of `id` (if it is live), bumps its generation and
    /// frees it.
    fn remove(&mut self, id: TokenId) -> Option<T> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        let (seed, _) = slot.seed.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.live -= 1;
        Some(seed)
    }

    /// `order` without its stale ids, the live ones in the same order: they
    /// come out in order and go back in behind their equals.
    fn rebuild(&mut self) {
        let mut ids = Vec::with_capacity(self.live);
        while let Some(id) = self.order.dequeue() {
            if self.is_live(id) {
                ids.push(id);
            }
        }
        for id in ids {
            let q = &self.slots[id.index as usize]
                .seed
                .as_ref()
                .expect("a live id has its seed")
                .1;
            self.order.enqueue(id, as_fifo(q));
        }
    }
}

/// `q`'s priority, placed behind its equals.
fn as_fifo(q: &Queueing) -> Queueing {
    match q {
        Queueing::Fifo | Queueing::Lifo => Queueing::Fifo,
        Queueing::IFifo(p) | Queueing::ILifo(p) => Queueing::IFifo(*p),
        Queueing::LFifo(p) | Queueing::LLifo(p) => Queueing::LFifo(*p),
        Queueing::BFifo(b) | Queueing::BLifo(b) => Queueing::BFifo(b.clone()),
    }
}

/// `q`'s priority, placed in front of its equals.
fn as_lifo(q: &Queueing) -> Queueing {
    match q {
        Queueing::Fifo | Queueing::Lifo => Queueing::Lifo,
        Queueing::IFifo(p) | Queueing::ILifo(p) => Queueing::ILifo(*p),
        Queueing::LFifo(p) | Queueing::LLifo(p) => Queueing::LLifo(*p),
        Queueing::BFifo(b) | Queueing::BLifo(b) => Queueing::BLifo(b.clone()),
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
                prop_assert!(q.order.len() <= 2 * q.live + SLACK + 1);
            }
            // What is left comes out in the model's order.
            let rest: Vec<u32> = std::iter::from_fn(|| q.get()).collect();
            let want: Vec<u32> = model.seeds.iter().map(|s| s.2).collect();
            prop_assert_eq!(rest, want);
        }
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
