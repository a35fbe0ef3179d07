//! The overflow queue behind a PE's inbox (`net::inbox`): an unbounded
//! lock-free multi-producer, single-consumer FIFO queue, after Dmitry
//! Vyukov's "Non-intrusive MPSC node-based queue" (1024cores.net, 2010).
//!
//! It was the inbox itself before the ring of `net::inbox` replaced it on the
//! fast path. Measured then on this machine (ping-pong round trip through two
//! queues; raw cache-line ping-pong 0.15-0.2 µs): crossbeam's `SegQueue`
//! 0.9-2.4 µs, this queue about 0.6-0.75 µs, the ring 0.44 µs. A push is one
//! `swap` plus one store and allocates a node; the consumer polls the link of
//! the last node it took, then reads the new node. It now only takes the
//! values that find their ring slot still occupied, so that the inbox stays
//! unbounded and a sender never waits.
//!
//! # Structure and invariants
//!
//! A singly linked list of heap nodes. `tail` points at the node *before* the
//! next value to pop (initially a value-less stub; afterwards the node whose
//! value was popped last); `head` points at the last node pushed.
//!
//! - Every node reachable from `tail` is live; a node is freed only by the
//!   consumer, after it has moved `tail` past it, which it does only once that
//!   node's `next` is set (so no producer still holds it).
//! - A node's value is written before the node is published (the `Release`
//!   store of `prev.next`), and read only by the consumer after its `Acquire`
//!   load of that pointer.
//!
//! # Concurrency protocol
//!
//! Producers (any thread): allocate a node, `swap` it into `head` (this orders
//! producers: FIFO per producer and a total order overall), then link the
//! previous head to it. Between those two steps the list is briefly "cut": the
//! consumer sees it as empty. That is harmless here: the producer wakes the
//! consumer only after linking (see `csd::idle`), so the consumer will look
//! again.
//!
//! Consumer (one thread at a time, the PE that owns the inbox): `pop` and
//! `is_empty` are `unsafe` because of that rule; the runtime upholds it by
//! calling them only from the owning PE's thread.
//!
//! Checked with loom (`tests` below, under `--cfg loom`).
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicPtr, UnsafeCell};

struct Node<T> {
    next: AtomicPtr<Node<T>>,
    /// `None` in the stub and after the value was taken.
    value: UnsafeCell<Option<T>>,
}

impl<T> Node<T> {
    fn boxed(value: Option<T>) -> *mut Node<T> {
        Box::into_raw(Box::new(Node {
            next: AtomicPtr::new(ptr::null_mut()),
            value: UnsafeCell::new(value),
        }))
    }
}

/// An unbounded MPSC FIFO queue. Any thread may push; one thread at a time
/// may pop.
pub(crate) struct MpscQueue<T> {
    /// The last node pushed. Producers only.
    head: CachePadded<AtomicPtr<Node<T>>>,
    /// The node before the next value. Consumer only.
    tail: CachePadded<AtomicPtr<Node<T>>>,
}

// SAFETY: values of type T move from producer threads to the consumer thread,
// which needs T: Send; the queue's own pointers are managed by the protocol in
// the module comment (atomics for everything shared).
unsafe impl<T: Send> Send for MpscQueue<T> {}
// SAFETY: as above; `pop` and `is_empty`, the only calls that are not safe
// from several threads at once, are `unsafe` with that rule as their contract.
unsafe impl<T: Send> Sync for MpscQueue<T> {}

impl<T> MpscQueue<T> {
    pub fn new() -> MpscQueue<T> {
        let stub = Node::boxed(None);
        MpscQueue {
            head: CachePadded::new(AtomicPtr::new(stub)),
            tail: CachePadded::new(AtomicPtr::new(stub)),
        }
    }

    /// Appends `value`. Safe from any thread.
    pub fn push(&self, value: T) {
        let node = Node::boxed(Some(value));
        let prev = self.head.swap(node, AcqRel);
        // SAFETY: `prev` was the last node pushed (or the stub): it is live,
        // since the consumer frees a node only after that node's `next` is
        // set, and only this producer sets `prev.next` (it alone swapped it
        // out of `head`).
        unsafe { (*prev).next.store(node, Release) };
    }

    /// Removes the oldest value, if one is fully pushed.
    ///
    /// # Safety
    /// No other thread may be in `pop` or `is_empty` on this queue at the
    /// same time (one consumer).
    pub unsafe fn pop(&self) -> Option<T> {
        let tail = self.tail.load(Relaxed);
        // SAFETY: `tail` is live: only the consumer (us, exclusively, by this
        // function's contract) frees nodes, and never the one `tail` holds.
        let next = unsafe { (*tail).next.load(Acquire) };
        if next.is_null() {
            return None;
        }
        self.tail.store(next, Relaxed);
        // SAFETY: `next` is published (Acquire above pairs with the
        // producer's Release), so its value is initialised; no producer
        // touches a node's value after publishing it, and we are the only
        // consumer, so this access is exclusive.
        let value = unsafe { (*next).value.with_mut(|v| (*v).take()) };
        // SAFETY: the old tail's `next` is set, so no producer holds it any
        // more, and `tail` now points past it: nothing can reach it.
        drop(unsafe { Box::from_raw(tail) });
        value
    }

    /// True if no fully pushed value is waiting (reads only the line the
    /// next `pop` reads: the cheapest poll).
    ///
    /// # Safety
    /// As for [`pop`](MpscQueue::pop): called by the single consumer only.
    pub unsafe fn is_empty(&self) -> bool {
        let tail = self.tail.load(Relaxed);
        // SAFETY: `tail` is live (see `pop`).
        unsafe { (*tail).next.load(Acquire).is_null() }
    }
}

impl<T> Drop for MpscQueue<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can use the queue any more.
        while unsafe { self.pop() }.is_some() {}
        let tail = self.tail.load(Relaxed);
        // SAFETY: after draining, `tail` is the last node and nothing else
        // refers to it.
        drop(unsafe { Box::from_raw(tail) });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_single_thread() {
        let q = MpscQueue::new();
        // SAFETY: this thread is the only consumer.
        unsafe {
            assert!(q.is_empty());
            assert_eq!(q.pop(), None::<u32>);
            for i in 0..100 {
                q.push(i);
            }
            assert!(!q.is_empty());
            for i in 0..100 {
                assert_eq!(q.pop(), Some(i));
            }
            assert!(q.is_empty());
        }
    }

    #[test]
    fn drop_frees_remaining_values() {
        crate::sync::testing::drop_frees_remaining_values(MpscQueue::new());
    }

    #[test]
    fn producers_keep_their_order() {
        crate::sync::testing::producers_keep_their_order(MpscQueue::new(), 3, 20_000);
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;

    /// Two producers, two values each, one consumer popping concurrently.
    #[test]
    fn loom_mpsc_two_producers() {
        crate::sync::model(|| {
            crate::sync::testing::producers_keep_their_order(MpscQueue::new(), 2, 2);
        });
    }
}
