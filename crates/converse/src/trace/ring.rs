//! A PE's trace ring: the last `capacity` events it recorded, written by
//! the PE alone without locks, readable by any thread at any time (the
//! dump at exit and at abort, the watchdog).
//!
//! # Algorithm
//!
//! A ring of two-word slots and a count of events ever written (`head`),
//! read with the per-ring sequence lock of a seqlock, the count standing
//! for the sequence number (Boehm, "Can seqlocks get along with programming
//! language memory models?", MSPC 2012, fig. 6: a release fence before the
//! data stores, an acquire fence after the data loads).
//!
//! Writer (the PE's thread), event number `k`:
//! 1. `fence(Release)`;
//! 2. stores both words of slot `k mod capacity` (`Relaxed`);
//! 3. `head.store(k + 1, Release)`.
//!
//! Reader ([`Ring::snapshot`]): loads `head` (`Acquire`), copies the slots
//! of the last `capacity` events before it, `fence(Acquire)`, loads `head`
//! again, and keeps only the events the writer cannot have overwritten by
//! then: those numbered at least `head₂ + 1 − capacity` (event `head₂`
//! may be half written over event `head₂ − capacity`).
//!
//! If the reader saw any word of event `k`, the writer's fence before it
//! and the reader's fence after it make the second load of `head` see at
//! least `k` (the value stored before that fence), so every overwritten
//! slot is dropped: what a snapshot returns is whole events, never a mix
//! of two. The loom model below checks it.
//!
//! # Costs
//!
//! On x86-64 both fences compile to nothing and every store is a plain
//! `mov`: an event costs three stores and a mask. The ring never
//! allocates after it is made.
//!
//! # Invariants
//!
//! - Only one thread ever calls [`Ring::push`] on a ring (the PE's own):
//!   `push` takes `&self`, so this is the caller's contract, kept by
//!   `trace::Recorder`, which is `!Send` and owned by the PE.
//! - `capacity` is a power of two; `head` only grows.
use crate::sync::{AtomicU64, fence};
use std::sync::atomic::Ordering;

/// One recorded event: two words whose meaning `trace::event` gives.
pub(crate) type Words = [u64; 2];

pub(crate) struct Ring {
    /// `capacity` slots of two words (a power of two of them, at least 2).
    slots: Box<[[AtomicU64; 2]]>,
    /// `capacity - 1`: an event's number masked by it is its slot.
    mask: u64,
    /// Events ever written.
    head: AtomicU64,
}

/// What a reader got: the events still held, oldest first, and how many
/// earlier ones the ring had already overwritten.
pub(crate) struct Snapshot {
    pub events: Vec<Words>,
    /// Events written before the first one returned, lost to wrapping.
    pub lost: u64,
}

impl Ring {
    /// A ring of at least `capacity` events (rounded up to a power of two,
    /// at least 2).
    pub fn new(capacity: usize) -> Ring {
        // `slot`'s unchecked index rests on this being a power of two.
        let capacity = capacity
            .max(2)
            .checked_next_power_of_two()
            .expect("a trace ring's capacity fits a usize");
        Ring {
            slots: (0..capacity)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            mask: capacity as u64 - 1,
            head: AtomicU64::new(0),
        }
    }

    /// How many events the ring holds at most.
    pub fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    /// The slot of event number `k`.
    #[inline(always)]
    fn slot(&self, k: u64) -> &[AtomicU64; 2] {
        let i = (k & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // SAFETY: `mask` is `slots.len() - 1` (set with `slots` and never
        // changed), so `i` is in bounds.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// Events written so far (wrapped ones included).
    #[cfg(all(test, not(loom)))]
    pub fn written(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Appends an event, overwriting the oldest one if the ring is full.
    /// Only the ring's one writer thread may call it (module invariants).
    #[inline(always)]
    pub fn push(&self, w0: u64, w1: u64) {
        self.push_numbered(|_| [w0, w1]);
    }

    /// [`Ring::push`] of the event `words(k)` makes, `k` its number (the
    /// count of events written before it).
    #[inline(always)]
    pub fn push_numbered(&self, words: impl FnOnce(u64) -> [u64; 2]) {
        // Only this thread stores `head`: its own last store.
        let k = self.head.load(Ordering::Relaxed);
        let [w0, w1] = words(k);
        let slot = self.slot(k);
        fence(Ordering::Release);
        slot[0].store(w0, Ordering::Relaxed);
        slot[1].store(w1, Ordering::Relaxed);
        self.head.store(k + 1, Ordering::Release);
    }

    /// The count of events written so far, for the writer thread (its own
    /// last store).
    #[inline(always)]
    pub fn written_by_writer(&self) -> u64 {
        self.head.load(Ordering::Relaxed)
    }

    /// The events the ring holds now, whole, oldest first (see the module
    /// comment). Any thread may call it, while the writer writes; then the
    /// oldest slot is dropped too, since the writer may be overwriting it.
    /// `writer_done`: the writer has finished (its PE ended): every slot is
    /// whole.
    pub fn snapshot(&self, writer_done: bool) -> Snapshot {
        let first_head = self.head.load(Ordering::Acquire);
        let start = first_head.saturating_sub(self.capacity());
        let mut events: Vec<Words> = (start..first_head)
            .map(|k| {
                let slot = self.slot(k);
                [
                    slot[0].load(Ordering::Relaxed),
                    slot[1].load(Ordering::Relaxed),
                ]
            })
            .collect();
        fence(Ordering::Acquire);
        let second_head = self.head.load(Ordering::Relaxed);
        let next = if writer_done {
            second_head
        } else {
            second_head + 1
        };
        let valid_from = next.saturating_sub(self.capacity());
        let stale = valid_from.saturating_sub(start).min(events.len() as u64) as usize;
        events.drain(..stale);
        Snapshot {
            lost: start + stale as u64,
            events,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_capacity_events_and_counts_the_lost() {
        let ring = Ring::new(3);
        assert_eq!(ring.capacity(), 4);
        for k in 0..3 {
            ring.push(k, !k);
        }
        let s = ring.snapshot(true);
        assert_eq!(s.lost, 0);
        assert_eq!(s.events, vec![[0, !0], [1, !1], [2, !2]]);
        for k in 3..10 {
            ring.push(k, !k);
        }
        let s = ring.snapshot(true);
        assert_eq!(s.lost, 6);
        assert_eq!(s.events, vec![[6, !6], [7, !7], [8, !8], [9, !9]]);
        // A reader that cannot know the writer is done drops the slot the
        // next push would overwrite.
        let s = ring.snapshot(false);
        assert_eq!(s.lost, 7);
        assert_eq!(s.events, vec![[7, !7], [8, !8], [9, !9]]);
        assert_eq!(ring.written(), 10);
    }

    #[test]
    fn a_reader_during_writes_gets_only_whole_events() {
        let ring = std::sync::Arc::new(Ring::new(64));
        let writer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for k in 0..200_000u64 {
                    ring.push(k, k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                }
            })
        };
        let mut seen = 0;
        while !writer.is_finished() {
            let s = ring.snapshot(false);
            for (i, [w0, w1]) in s.events.iter().enumerate() {
                assert_eq!(*w1, w0.wrapping_mul(0x9e37_79b9_7f4a_7c15), "torn event");
                assert_eq!(*w0, s.lost + i as u64, "events out of order");
            }
            seen += s.events.len();
        }
        writer.join().unwrap();
        assert!(seen > 0 || ring.written() == 200_000);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// A reader racing a writer that wraps a two-slot ring sees only whole
    /// events, numbered in order.
    #[test]
    fn loom_snapshot_never_mixes_two_events() {
        loom::model(|| {
            let ring = loom::sync::Arc::new(Ring::new(2));
            let writer = {
                let ring = ring.clone();
                loom::thread::spawn(move || {
                    for k in 0..3u64 {
                        ring.push(k, k + 100);
                    }
                })
            };
            let s = ring.snapshot(false);
            for (i, [w0, w1]) in s.events.iter().enumerate() {
                assert_eq!(*w1, w0 + 100, "torn event");
                assert_eq!(*w0, s.lost + i as u64);
            }
            writer.join().unwrap();
        });
    }
}
