//! A PE's inbox: an unbounded multi-producer, single-consumer FIFO queue
//! whose common case is a bounded ring of one-cache-line slots.
//!
//! # Why a ring
//!
//! The inbox is on the latency path of every PE-to-PE message. Measured on
//! this machine (round trip of a ping-pong through two queues, raw cache-line
//! ping-pong 0.15-0.19 µs): crossbeam's `SegQueue` 0.9-2.4 µs, Vyukov's linked
//! MPSC queue (`net::mpsc`) 0.73-0.77 µs, a ring of one-line slots
//! 0.43-0.44 µs. In the ring the consumer polls the one line the producer
//! writes (the slot: sequence number and value) and nothing is allocated.
//!
//! # Structure (after Vyukov's bounded MPMC queue, with a ticketed overflow)
//!
//! Every push takes a *ticket* `t` (`tail.fetch_add(1)`); the consumer takes
//! values in ticket order. Ticket `t` belongs to slot `t % C`. A slot's `seq`
//! says what it holds: `seq == t` — free for ticket `t`; `seq == t + 1` —
//! holds the value of ticket `t`. The consumer, after taking ticket `t`'s
//! value, sets `seq = t + C`, freeing the slot for ticket `t + C`.
//!
//! If the slot is not yet free when ticket `t`'s producer comes (the consumer
//! is `C` or more values behind), the producer does not wait — the consumer
//! may be a PE busy sending to this producer's own full inbox — but pushes
//! `(t, value)` to an unbounded overflow queue (`net::mpsc`). The consumer
//! moves overflow entries into a private ordered map and takes ticket `t`
//! from there when the slot does not have it, then frees the slot for
//! `t + C` itself (its producer never will).
//!
//! # Invariants
//!
//! - Tickets are unique; each value is in exactly one place: its slot (seq
//!   `t + 1`), the overflow queue, or the consumer's map.
//! - Only ticket `t`'s producer writes slot `t % C` while its `seq == t`;
//!   only the consumer touches a slot whose `seq == t + 1`.
//! - The consumer's next ticket `n`: every ticket below `n` has been taken,
//!   so slot `n % C` has `seq == n` (free) or `n + 1` (filled).
//! - One producer's tickets increase in push order (a thread's `fetch_add`s
//!   are ordered), so its values come out in the order it pushed them.
//!
//! # Concurrency protocol
//!
//! Producers: any thread. The value is written before the `Release` store of
//! `seq` (or inside the overflow push), and the consumer reads it after an
//! `Acquire` load that sees that store. Between taking a ticket and storing,
//! the queue looks empty from that ticket on; the producer wakes the
//! consumer only after storing (see `csd::idle`), so nothing is lost.
//!
//! Consumer: one thread at a time — `pop` and `is_empty` are `unsafe` with
//! that contract; the runtime calls them only from the owning PE's thread.
//!
//! Checked with loom (`tests` below, under `--cfg loom`), with a 2-slot ring
//! so that the overflow path is explored too; and that `is_quiet` counts
//! every push finished before the look while another producer stalls
//! (the model fails with `is_empty` in its place).
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crossbeam_utils::CachePadded;

use super::mpsc::MpscQueue;
use crate::sync::{AtomicU64, UnsafeCell};

/// Ring slots per inbox: 16 KiB per PE; bursts beyond it overflow.
pub(crate) const INBOX_SLOTS: usize = 256;

/// One cache line: the sequence number the consumer polls and the value.
#[repr(align(64))]
struct Slot<T> {
    seq: AtomicU64,
    value: UnsafeCell<Option<T>>,
}

/// What only the consumer touches.
struct Consumer<T> {
    /// The next ticket to deliver.
    next: u64,
    /// Values that came through the overflow queue, by ticket.
    diverted: BTreeMap<u64, T>,
}

/// An unbounded MPSC FIFO queue. Any thread may push; one thread at a time
/// may pop.
pub(crate) struct Inbox<T> {
    /// The next ticket. Producers only.
    tail: CachePadded<AtomicU64>,
    slots: Box<[Slot<T>]>,
    /// Values whose slot was still taken when their producer came.
    overflow: MpscQueue<(u64, T)>,
    consumer: CachePadded<UnsafeCell<Consumer<T>>>,
    /// The consumer's next ticket, published every [`TAKEN_EVERY`] pops: a
    /// lower bound of how far it got, for [`Inbox::backlog`].
    taken: CachePadded<AtomicU64>,
}

/// Pops between updates of `Inbox::taken` (a store per pop would put a
/// shared cache line on the consumer's fast path).
const TAKEN_EVERY: u64 = 64;

// SAFETY: values of type T move from producer threads to the consumer thread,
// which needs T: Send. Shared state is atomics, slot values handed over by the
// seq protocol above, and the consumer state, touched only through the
// `unsafe` consumer calls whose contract is one consumer at a time.
unsafe impl<T: Send> Send for Inbox<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Inbox<T> {}

impl<T> Inbox<T> {
    /// An empty inbox with a ring of `slots` slots, rounded up to a power of
    /// two (a mask instead of a division per access) and at least 2 (with one
    /// slot, "filled by ticket t" and "free for ticket t + 1" would be the
    /// same `seq`).
    pub fn with_slots(slots: usize) -> Inbox<T> {
        let slots = slots.max(2).next_power_of_two();
        Inbox {
            tail: CachePadded::new(AtomicU64::new(0)),
            slots: (0..slots as u64)
                .map(|t| Slot {
                    seq: AtomicU64::new(t),
                    value: UnsafeCell::new(None),
                })
                .collect(),
            overflow: MpscQueue::new(),
            consumer: CachePadded::new(UnsafeCell::new(Consumer {
                next: 0,
                diverted: BTreeMap::new(),
            })),
            taken: CachePadded::new(AtomicU64::new(0)),
        }
    }

    pub fn new() -> Inbox<T> {
        Inbox::with_slots(INBOX_SLOTS)
    }

    #[inline]
    fn slot(&self, ticket: u64) -> &Slot<T> {
        let index = ticket as usize & (self.slots.len() - 1);
        // SAFETY: the length is a power of two, at least 2 (`with_slots`),
        // so the mask keeps `index` below it. (The checked index was 2 of
        // the 7 instructions a look at the inbox costs.)
        unsafe { self.slots.get_unchecked(index) }
    }

    /// Appends `value`. Safe from any thread; never blocks.
    pub fn push(&self, value: T) {
        let ticket = self.tail.fetch_add(1, Relaxed);
        let slot = self.slot(ticket);
        if slot.seq.load(Acquire) == ticket {
            // SAFETY: `seq == ticket`: the slot is free for this ticket, which
            // only we hold, and the consumer does not read it before the
            // store below.
            unsafe { slot.value.with_mut(|v| *v = Some(value)) };
            slot.seq.store(ticket + 1, Release);
        } else {
            self.overflow.push((ticket, value));
        }
    }

    /// About how many values wait to be popped (at most [`TAKEN_EVERY`] too
    /// many). Any thread; for flow control, not for correctness.
    #[inline]
    pub fn backlog(&self) -> u64 {
        self.tail
            .load(Relaxed)
            .saturating_sub(self.taken.load(Relaxed))
    }

    /// Removes the value with the next ticket, if it has been pushed.
    ///
    /// # Safety
    /// No other thread may be in `pop` or `is_empty` on this inbox at the
    /// same time (one consumer).
    #[inline]
    pub unsafe fn pop(&self) -> Option<T> {
        // SAFETY: the consumer state is ours alone (this function's contract).
        unsafe {
            self.consumer.with_mut(|c| {
                let c = &mut *c;
                let ticket = c.next;
                let slot = self.slot(ticket);
                let value = if slot.seq.load(Acquire) == ticket + 1 {
                    // The producer's Release store of `seq` published the
                    // value; until we store `seq` again the slot is ours.
                    slot.value.with_mut(|v| (*v).take())
                } else {
                    self.take_diverted(c, ticket)
                }?;
                slot.seq.store(ticket + self.slots.len() as u64, Release);
                c.next = ticket + 1;
                if c.next % TAKEN_EVERY == 0 {
                    self.taken.store(c.next, Relaxed);
                }
                Some(value)
            })
        }
    }

    /// Ticket `ticket`'s value if it came through the overflow queue.
    ///
    /// # Safety
    /// Consumer only (as `pop`).
    #[inline]
    unsafe fn take_diverted(&self, c: &mut Consumer<T>, ticket: u64) -> Option<T> {
        // SAFETY: we are the overflow queue's single consumer (our contract).
        if c.diverted.is_empty() && unsafe { self.overflow.is_empty() } {
            return None; // the common case: nothing ever overflowed
        }
        // SAFETY: as above.
        unsafe { self.take_diverted_slow(c, ticket) }
    }

    /// # Safety
    /// Consumer only (as `pop`).
    #[cold]
    unsafe fn take_diverted_slow(&self, c: &mut Consumer<T>, ticket: u64) -> Option<T> {
        if let Some(v) = c.diverted.remove(&ticket) {
            return Some(v);
        }
        // SAFETY: as above.
        while let Some((t, v)) = unsafe { self.overflow.pop() } {
            c.diverted.insert(t, v);
        }
        c.diverted.remove(&ticket)
    }

    /// True if no push has begun that the consumer has not taken: no
    /// value waits and no producer holds a ticket it has not published.
    /// Stronger than [`is_empty`](Inbox::is_empty), which looks at the
    /// next ticket only: while a producer is between taking ticket `t` and
    /// publishing it, later tickets may be filled and the inbox still
    /// looks empty. A value pushed by a thread whose push happens before
    /// this call (through a lock, say) has its ticket counted here.
    ///
    /// # Safety
    /// As for [`pop`](Inbox::pop): called by the single consumer only.
    #[inline]
    pub unsafe fn is_quiet(&self) -> bool {
        // SAFETY: consumer state is ours (contract); see `pop`.
        unsafe {
            self.consumer
                .with_mut(|c| self.tail.load(Acquire) == (*c).next)
        }
    }

    /// True if the value with the next ticket has not been pushed yet.
    ///
    /// # Safety
    /// As for [`pop`](Inbox::pop): called by the single consumer only.
    #[inline]
    pub unsafe fn is_empty(&self) -> bool {
        // SAFETY: consumer state is ours (contract); see `pop`.
        unsafe {
            self.consumer.with_mut(|c| {
                let c = &*c;
                self.slot(c.next).seq.load(Acquire) != c.next + 1
                    && !c.diverted.contains_key(&c.next)
                    && self.overflow.is_empty()
            })
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A producer between taking its ticket and publishing it: the value
    /// pushed after it fills a later ticket, `is_empty` (the next ticket)
    /// says empty, `is_quiet` does not.
    #[test]
    fn a_ticket_taken_but_not_published_keeps_the_inbox_from_quiet() {
        let q: Inbox<u32> = Inbox::with_slots(4);
        // SAFETY: this thread is the only consumer.
        unsafe {
            assert!(q.is_quiet() && q.is_empty());
            // What `push` does first, stopped there.
            let stalled = q.tail.fetch_add(1, Relaxed);
            q.push(7);
            assert!(q.is_empty(), "the next ticket is not published");
            assert!(!q.is_quiet(), "a later ticket is filled");
            // The stalled producer publishes: both come out in order.
            let slot = q.slot(stalled);
            slot.value.with_mut(|v| *v = Some(6));
            slot.seq.store(stalled + 1, Release);
            assert_eq!(q.pop(), Some(6));
            assert_eq!(q.pop(), Some(7));
            assert!(q.is_quiet() && q.is_empty());
        }
    }

    #[test]
    fn fifo_through_ring_and_overflow() {
        for slots in [2, 3, 4, 256] {
            let q = Inbox::with_slots(slots);
            // SAFETY: this thread is the only consumer.
            unsafe {
                assert!(q.is_empty());
                assert_eq!(q.pop(), None::<u32>);
                for round in 0..3 {
                    for i in 0..10 {
                        q.push(round * 100 + i);
                    }
                    assert!(!q.is_empty());
                    for i in 0..10 {
                        assert_eq!(q.pop(), Some(round * 100 + i), "{slots} slots");
                    }
                    assert!(q.is_empty());
                    // Interleaved push/pop keeps the ring in use after overflow.
                    for i in 0..5 {
                        q.push(i);
                        assert_eq!(q.pop(), Some(i));
                    }
                }
            }
        }
    }

    #[test]
    fn drop_frees_remaining_values() {
        // 10 values in a 4-slot ring: some in slots, some in the overflow.
        crate::sync::testing::drop_frees_remaining_values(Inbox::with_slots(4));
    }

    #[test]
    fn producers_keep_their_order_under_overflow() {
        for slots in [2, 64] {
            let q = Inbox::with_slots(slots);
            crate::sync::testing::producers_keep_their_order(q, 3, 20_000);
        }
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;

    /// Two producers, two values each, a 2-slot ring (so some values take
    /// the overflow path), one consumer popping concurrently.
    #[test]
    fn loom_inbox_two_producers() {
        crate::sync::model(|| {
            crate::sync::testing::producers_keep_their_order(Inbox::with_slots(2), 2, 2);
        });
    }

    /// What the polled-arrival shortcut relies on: a push that finished
    /// before the consumer looks (here: a flag after it) keeps the inbox
    /// from quiet, whatever another producer, perhaps stalled between
    /// its ticket and its value, is doing. (`is_empty` fails this: with
    /// the other producer holding ticket 0 unpublished, it says empty.)
    #[test]
    fn loom_quiet_counts_every_push_finished_before_the_look() {
        use crate::sync::{Arc, spawn};
        crate::sync::model(|| {
            let q = Arc::new(Inbox::with_slots(2));
            let pushed = Arc::new(AtomicU64::new(0));
            let a = {
                let q = q.clone();
                spawn(move || q.push(1u32))
            };
            let b = {
                let (q, pushed) = (q.clone(), pushed.clone());
                spawn(move || {
                    q.push(2u32);
                    pushed.store(1, Release);
                })
            };
            // SAFETY: this thread is the inbox's only consumer.
            unsafe {
                if pushed.load(Acquire) == 1 {
                    assert!(!q.is_quiet(), "a finished push is not counted");
                }
                a.join().unwrap();
                b.join().unwrap();
                let mut got = 0;
                while q.pop().is_some() {
                    got += 1;
                }
                assert_eq!(got, 2);
                assert!(q.is_quiet());
            }
        });
    }
}
