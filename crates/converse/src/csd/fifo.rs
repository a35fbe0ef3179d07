//! A PE's own FIFO queue (its self-sends): a ring of `Option<T>` slots, a
//! power of two of them, used from one thread and through `&self`.
//!
//! # Why not `RefCell<VecDeque<T>>`
//!
//! Every message a PE sends itself is pushed here and popped by the
//! scheduler: with a `RefCell` borrow flag to set and clear, and
//! `VecDeque`'s wrap-around arithmetic, the pair cost about twice the
//! instructions of this ring (a mask, two index cells, one slot).
//!
//! # Invariants
//!
//! - Slots `head..tail` (indices taken modulo the capacity, which is a power
//!   of two, at least 16) hold `Some`; all others `None`. `tail - head` is
//!   the length, at most the capacity; the indices only grow (wrapping).
//!
//! # Concurrency
//!
//! None: the type is `!Sync` (its cells), so only one thread ever touches
//! it, and each method holds the one mutable reference to the slots only
//! for moves of `Option<T>`: no code of `T` (its `Drop`) runs while it is
//! held, so nothing can call back into the queue meanwhile.
use std::cell::{Cell, UnsafeCell};

pub(crate) struct LocalFifo<T> {
    slots: UnsafeCell<Box<[Option<T>]>>,
    head: Cell<usize>,
    tail: Cell<usize>,
}

impl<T> Default for LocalFifo<T> {
    fn default() -> Self {
        LocalFifo {
            slots: UnsafeCell::new((0..16).map(|_| None).collect()),
            head: Cell::new(0),
            tail: Cell::new(0),
        }
    }
}

impl<T> LocalFifo<T> {
    /// Appends `value`.
    #[inline]
    pub fn push(&self, value: T) {
        let (head, tail) = (self.head.get(), self.tail.get());
        // SAFETY: one thread (the type is `!Sync`); the reference ends before
        // anything but moves runs (see the module comment).
        let slots = unsafe { &mut *self.slots.get() };
        if tail.wrapping_sub(head) == slots.len() {
            self.grow(value);
            return;
        }
        let mask = slots.len() - 1;
        // SAFETY: the length is a power of two, at least 16 (see the
        // invariants), so the mask keeps the index below it.
        let slot = unsafe { slots.get_unchecked_mut(tail & mask) };
        // The slot is `None` (outside `head..tail`): forgetting it, rather
        // than dropping it, leaves no drop code on this path.
        let empty = slot.replace(value);
        debug_assert!(empty.is_none());
        std::mem::forget(empty);
        self.tail.set(tail.wrapping_add(1));
    }

    /// Doubles the ring, then appends `value`.
    #[cold]
    #[inline(never)]
    fn grow(&self, value: T) {
        let (head, tail) = (self.head.get(), self.tail.get());
        // SAFETY: as in `push`.
        let slots = unsafe { &mut *self.slots.get() };
        let old = slots.len();
        let mut bigger: Box<[Option<T>]> = (0..old * 2).map(|_| None).collect();
        for (k, slot) in bigger.iter_mut().take(old).enumerate() {
            *slot = slots[head.wrapping_add(k) & (old - 1)].take();
        }
        bigger[old] = Some(value);
        *slots = bigger;
        self.head.set(0);
        self.tail.set(tail.wrapping_sub(head) + 1);
    }

    /// Removes the first value, if any.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let head = self.head.get();
        if head == self.tail.get() {
            return None;
        }
        // SAFETY: as in `push`.
        let slots = unsafe { &mut *self.slots.get() };
        // SAFETY: the length is a power of two, at least 16 (see the
        // invariants), so the mask keeps the index below it.
        let value = unsafe { slots.get_unchecked_mut(head & (slots.len() - 1)) }.take();
        self.head.set(head.wrapping_add(1));
        value
    }

    /// The number of values queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.tail.get().wrapping_sub(self.head.get())
    }

    /// True if no value is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.get() == self.tail.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_across_growth_and_wrap_around() {
        let q = LocalFifo::default();
        let mut next_in = 0;
        let mut next_out = 0;
        // Interleave pushes and pops so the indices wrap the ring at
        // several sizes.
        for round in 0..40 {
            for _ in 0..(round % 7) * 5 + 1 {
                q.push(Box::new(next_in));
                next_in += 1;
            }
            for _ in 0..(round % 5) * 4 {
                match q.pop() {
                    Some(v) => {
                        assert_eq!(*v, next_out);
                        next_out += 1;
                    }
                    None => assert_eq!(next_out, next_in),
                }
            }
            assert_eq!(q.len(), next_in - next_out);
        }
        while let Some(v) = q.pop() {
            assert_eq!(*v, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(q.is_empty());
    }

    #[test]
    fn values_left_are_dropped_with_the_queue() {
        let marker = std::rc::Rc::new(());
        let q = LocalFifo::default();
        for _ in 0..40 {
            q.push(marker.clone());
        }
        drop(q.pop());
        assert_eq!(std::rc::Rc::strong_count(&marker), 40);
        drop(q);
        assert_eq!(std::rc::Rc::strong_count(&marker), 1);
    }
}
