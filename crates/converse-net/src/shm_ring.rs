//! The shm ring's protocol, apart from the memory it runs over (see the
//! shm module's comment: "Layout" and "Concurrency protocol"): the cells'
//! index arithmetic, publishing and consuming a cell, the producer's
//! `waiting` flag when the ring is full, and a process's `sleeping` flag
//! and wake-up word.
//!
//! The protocol is the provided methods of two traits, [`RingMemory`] (a
//! ring's words and cells) and [`Bell`] (the header words a process sleeps
//! on, and the sleep itself), written against an [`Atomics`] family. The
//! shm module implements them over mapped memory with std's atomics and
//! the futex; the loom model (`tests` below, `--cfg loom`) implements
//! them over a heap allocation with loom's atomics, and a loom mutex and
//! condition variable for the futex, and runs the same methods.
//!
//! The small methods are `#[inline]` and `has_room` is left to the
//! compiler, as the functions they replaced were: over the real ring each
//! compiles to the loads, stores and fences it names, as before.
use crate::sync::{AtomicWord32 as _, AtomicWord64 as _, Atomics};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The `u32` word of a memory's atomics family.
pub(crate) type U32<A> = <A as Atomics>::U32;
/// The `u64` word of a memory's atomics family.
pub(crate) type U64<A> = <A as Atomics>::U64;

/// The sequence word that publishes cell number `i`: `i + 1` (mod 2^32).
#[inline]
pub(crate) fn seq_of(i: u64) -> u32 {
    (i as u32).wrapping_add(1)
}

/// A ring's memory: its consumer index `head`, the producer's `waiting`
/// flag, and `CELLS` cells (a sequence word, a length word, data). Cell
/// number `i` (counted from the ring's start) lives in slot
/// `i % CELLS`.
///
/// The provided methods are the protocol; an implementation gives only
/// the memory. One producer and one consumer: the producer keeps its own
/// index `tail` (the next cell it publishes) and a cached `head`; the
/// consumer's index is `head`, which only it stores.
pub(crate) trait RingMemory {
    /// The atomics the ring's words are.
    type A: Atomics;
    /// Cells in the ring (a power of two).
    const CELLS: usize;

    /// The consumer's index: the number of the next cell it reads.
    fn head(&self) -> &U64<Self::A>;
    /// Non-zero while the producer waits for room.
    fn waiting(&self) -> &U32<Self::A>;
    /// Slot `slot`'s sequence word (`slot < CELLS`).
    fn seq(&self, slot: usize) -> &U32<Self::A>;
    /// Slot `slot`'s length word (`slot < CELLS`).
    fn len(&self, slot: usize) -> &U32<Self::A>;
    /// Calls `f` with a pointer to slot `slot`'s data, to write (`slot <
    /// CELLS`). What `f` may do with it is the caller's to show: the cell
    /// must be the producer's (see [`has_room`](Self::has_room)).
    fn with_data_mut<R>(&self, slot: usize, f: impl FnOnce(*mut u8) -> R) -> R;
    /// Calls `f` with a pointer to slot `slot`'s data, to read: the cell
    /// must be the consumer's (see [`is_ready`](Self::is_ready)).
    fn with_data<R>(&self, slot: usize, f: impl FnOnce(*const u8) -> R) -> R;

    /// The slot cell number `i` lives in.
    #[inline]
    fn slot(i: u64) -> usize {
        i as usize % Self::CELLS
    }

    // ---- the producer ----

    /// Whether the ring has a free cell for cell number `tail`, reloading
    /// `head` (into the producer's cached `head_seen`, never ahead of the
    /// real one) only when the cached one says full. `None`: the consumer
    /// broke the protocol (its `head` is past `tail`).
    ///
    /// When the ring is full this sets `waiting`, fences and looks at
    /// `head` again: a consumer that frees a cell after the fence sees the
    /// flag ([`freed`](Self::freed)), and one that freed it before is seen
    /// here. On `Some(false)` the flag stays set: the consumer clears it
    /// and wakes the producer's process. (The second look also spares the
    /// producer's process a sleep: before sleeping it looks at `head` once
    /// more anyway, `room_now`, which is why the loom model still passes
    /// without this one.)
    fn has_room(&self, head_seen: &mut u64, tail: u64) -> Option<bool> {
        let cells = Self::CELLS as u64;
        if tail.wrapping_sub(*head_seen) < cells {
            return Some(true);
        }
        // `head` is the peer's to write: never trusted to be sane.
        let used = |head: u64| tail.wrapping_sub(head);
        let head = self.head().load(Ordering::Acquire);
        if used(head) > cells {
            return None;
        }
        *head_seen = head;
        if used(head) < cells {
            return Some(true);
        }
        // Full: ask to be woken when a cell frees, then look again (the
        // consumer may have freed one before seeing the flag).
        self.waiting().store(1, Ordering::SeqCst);
        Self::A::fence(Ordering::SeqCst);
        let head = self.head().load(Ordering::Acquire);
        if used(head) > cells {
            return None;
        }
        *head_seen = head;
        if used(head) == cells {
            return Some(false);
        }
        self.waiting().store(0, Ordering::Relaxed);
        Some(true)
    }

    /// True if the ring has room for cell number `tail` now (a fresh look
    /// at `head`, for a producer's process about to sleep).
    #[inline]
    fn room_now(&self, tail: u64) -> bool {
        tail.wrapping_sub(self.head().load(Ordering::Acquire)) < Self::CELLS as u64
    }

    /// Calls `f` with a pointer to cell number `tail`'s data, to fill it
    /// ([`has_room`](Self::has_room) said so: the cell is the producer's
    /// until [`publish`](Self::publish)).
    #[inline]
    fn fill<R>(&self, tail: u64, f: impl FnOnce(*mut u8) -> R) -> R {
        self.with_data_mut(Self::slot(tail), f)
    }

    /// Publishes cell number `tail`, filled with `len` bytes: its length,
    /// then its sequence word (Release, after the bytes).
    #[inline]
    fn publish(&self, tail: u64, len: usize) {
        let slot = Self::slot(tail);
        self.len(slot).store(len as u32, Ordering::Relaxed);
        self.seq(slot).store(seq_of(tail), Ordering::Release);
    }

    // ---- the consumer ----

    /// The consumer's index (only the consumer stores it).
    #[inline]
    fn consumer_head(&self) -> u64 {
        self.head().load(Ordering::Relaxed)
    }

    /// True if cell number `i` is published (its sequence word says so,
    /// loaded with Acquire: its length and bytes are then visible).
    #[inline]
    fn is_ready(&self, i: u64) -> bool {
        self.seq(Self::slot(i)).load(Ordering::Acquire) == seq_of(i)
    }

    /// Cell number `i`'s length word, as the producer wrote it (unchecked:
    /// the caller bounds it). Only once [`is_ready`](Self::is_ready).
    #[inline]
    fn cell_len(&self, i: u64) -> u32 {
        self.len(Self::slot(i)).load(Ordering::Relaxed)
    }

    /// Calls `f` with a pointer to ready cell number `i`'s data, to read
    /// it (the cell is the consumer's until [`consumed`](Self::consumed)).
    #[inline]
    fn read<R>(&self, i: u64, f: impl FnOnce(*const u8) -> R) -> R {
        self.with_data(Self::slot(i), f)
    }

    /// Hands cell number `head` back to the producer: `head` moves past it
    /// (Release, after the cell's bytes were read).
    #[inline]
    fn consumed(&self, head: u64) {
        self.head().store(head + 1, Ordering::Release);
    }

    /// After a batch of [`consumed`](Self::consumed): true if the producer
    /// waits for room (its flag, which this clears): the caller then wakes
    /// the producer's process. The fence pairs with the one in
    /// [`has_room`](Self::has_room): either the producer sees the new
    /// `head` or this sees its `waiting`.
    #[inline]
    fn freed(&self) -> bool {
        Self::A::fence(Ordering::SeqCst);
        self.waiting().load(Ordering::Relaxed) != 0 && self.waiting().swap(0, Ordering::SeqCst) != 0
    }
}

/// The words a process sleeps on (in its header page): `wake`, bumped by
/// every waker, and `sleeping`, set while the process's progress thread
/// is about to sleep or sleeps; and the sleep on `wake` itself (a futex).
///
/// The provided methods are the protocol: [`sleep_unless`]
/// (Self::sleep_unless) for the sleeper, [`ring`](Self::ring) for a
/// producer that published a cell (or a consumer that freed one).
pub(crate) trait Bell {
    /// The atomics the words are.
    type A: Atomics;

    /// The wake-up word.
    fn word(&self) -> &U32<Self::A>;
    /// Non-zero while the owner sleeps or is about to.
    fn sleeping(&self) -> &U32<Self::A>;
    /// Sleeps unless `word` no longer holds `seen`, until woken or
    /// `timeout` passes; may return early (a futex wait).
    fn wait(&self, seen: u32, timeout: Option<Duration>);
    /// Wakes a thread in [`wait`](Self::wait).
    fn wake_one(&self);

    /// Bumps the wake-up word and wakes a sleeper, whether or not one
    /// sleeps (a wake-up before the sleep makes the sleep return: its
    /// `seen` is old).
    #[inline]
    fn wake_now(&self) {
        self.word().fetch_add(1, Ordering::SeqCst);
        self.wake_one();
    }

    /// The waker's side: after publishing (a cell, freed room), fences and,
    /// if the owner sleeps or is about to, wakes it.
    #[inline]
    fn ring(&self) {
        Self::A::fence(Ordering::SeqCst);
        if self.sleeping().load(Ordering::SeqCst) != 0 {
            self.wake_now();
        }
    }

    /// The sleeper's side: sets `sleeping`, fences, and sleeps on the
    /// wake-up word unless `busy` (the last look for work: cells, room,
    /// announcements) says there is something to do. The fences order
    /// "publish, then look at `sleeping`" against "set `sleeping`, then
    /// look for work", so a waker either is seen by `busy` or sees
    /// `sleeping` and bumps the word, which the wait compares with what it
    /// was before `sleeping` was set. Returns whether it waited; `sleeping`
    /// is clear again on return.
    #[inline]
    fn sleep_unless(&self, busy: impl FnOnce() -> bool, timeout: Option<Duration>) -> bool {
        let seen = self.word().load(Ordering::SeqCst);
        self.sleeping().store(1, Ordering::SeqCst);
        Self::A::fence(Ordering::SeqCst);
        if busy() {
            self.sleeping().store(0, Ordering::Relaxed);
            return false;
        }
        self.wait(seen, timeout);
        self.sleeping().store(0, Ordering::Relaxed);
        true
    }
}

#[cfg(all(test, loom))]
#[path = "shm_ring_loom.rs"]
mod tests;
