//! The queues of the manual's chapter 4: `CdsFifo` (a circular buffer used
//! as a FIFO and a stack) and the C++ template `CkQ`.
//!
//! Both are thin wrappers of [`VecDeque`], kept under the manual's names so
//! that ported code reads as it did; a Rust program would use `VecDeque`
//! itself. Where the C calls return 0 for "empty", these return `None`.
//!
//! # Invariants and concurrency
//!
//! Those of `VecDeque`: a plain value, `Send` when its elements are.
use std::collections::VecDeque;

/// A queue that is also a stack (`CdsFifo`): elements go in at the back
/// ([`enqueue`](CdsFifo::enqueue)) or the front ([`push`](CdsFifo::push)),
/// and come out at the front. Dropping it releases it (`CdsFifo_Destroy`).
#[doc(alias = "CdsFifo_Destroy")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CdsFifo<T> {
    q: VecDeque<T>,
}

impl<T> CdsFifo<T> {
    /// An empty queue (`CdsFifo_Create`).
    #[doc(alias = "CdsFifo_Create")]
    pub fn new() -> CdsFifo<T> {
        CdsFifo { q: VecDeque::new() }
    }

    /// An empty queue with room for `len` elements before it grows
    /// (`CdsFifo_Create_len`).
    #[doc(alias = "CdsFifo_Create_len")]
    pub fn with_len(len: usize) -> CdsFifo<T> {
        CdsFifo {
            q: VecDeque::with_capacity(len),
        }
    }

    /// Appends `elt` at the back (`CdsFifo_Enqueue`).
    #[doc(alias = "CdsFifo_Enqueue")]
    pub fn enqueue(&mut self, elt: T) {
        self.q.push_back(elt);
    }

    /// Takes the front element (`CdsFifo_Dequeue`); `None` if empty.
    #[doc(alias = "CdsFifo_Dequeue")]
    pub fn dequeue(&mut self) -> Option<T> {
        self.q.pop_front()
    }

    /// Takes the front element (`CdsFifo_Pop`): the same as
    /// [`dequeue`](CdsFifo::dequeue), for stack use with
    /// [`push`](CdsFifo::push).
    #[doc(alias = "CdsFifo_Pop")]
    pub fn pop(&mut self) -> Option<T> {
        self.q.pop_front()
    }

    /// Inserts `elt` at the front (`CdsFifo_Push`).
    #[doc(alias = "CdsFifo_Push")]
    pub fn push(&mut self, elt: T) {
        self.q.push_front(elt);
    }

    /// True if empty (`CdsFifo_Empty`).
    #[doc(alias = "CdsFifo_Empty")]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The number of elements (`CdsFifo_Length`).
    #[doc(alias = "CdsFifo_Length")]
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// The front element, left in place (`CdsFifo_Peek`).
    #[doc(alias = "CdsFifo_Peek")]
    pub fn peek(&self) -> Option<&T> {
        self.q.front()
    }

    /// The elements, front to back, as a vector (`CdsFifo_Enumerate` in
    /// Charm++'s sources).
    #[doc(alias = "CdsFifo_Enumerate")]
    pub fn enumerate(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.q.iter().cloned().collect()
    }
}

/// The manual's C++ queue template (`CkQ<T>`): a FIFO with pushes at the
/// front and indexing from the front.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CkQ<T> {
    q: VecDeque<T>,
}

impl<T> CkQ<T> {
    /// An empty queue (`CkQ()`).
    pub fn new() -> CkQ<T> {
        CkQ { q: VecDeque::new() }
    }

    /// An empty queue with room for `initial_size` elements
    /// (`CkQ(int initial_size)`).
    pub fn with_capacity(initial_size: usize) -> CkQ<T> {
        CkQ {
            q: VecDeque::with_capacity(initial_size),
        }
    }

    /// The number of elements (`length`).
    pub fn length(&self) -> usize {
        self.q.len()
    }

    /// True if empty (`isEmpty`).
    #[doc(alias = "isEmpty")]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Removes and returns the front element (`deq`); `None` if empty (the
    /// C++ one returns a default value).
    pub fn deq(&mut self) -> Option<T> {
        self.q.pop_front()
    }

    /// Appends at the back (`enq`).
    pub fn enq(&mut self, elt: T) {
        self.q.push_back(elt);
    }

    /// Inserts at the front (`push`).
    pub fn push(&mut self, elt: T) {
        self.q.push_front(elt);
    }
}

impl<T> std::ops::Index<usize> for CkQ<T> {
    type Output = T;

    /// The `n`th element from the front (`operator[]`).
    ///
    /// # Panics
    /// If `n` is not below the length.
    fn index(&self, n: usize) -> &T {
        &self.q[n]
    }
}

impl<T> std::ops::IndexMut<usize> for CkQ<T> {
    fn index_mut(&mut self, n: usize) -> &mut T {
        &mut self.q[n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cds_fifo_is_a_queue_and_a_stack() {
        let mut q = CdsFifo::with_len(2);
        assert!(q.is_empty() && q.dequeue().is_none() && q.peek().is_none());
        q.enqueue(1);
        q.enqueue(2);
        q.push(0);
        assert_eq!((q.len(), q.peek()), (3, Some(&0)));
        assert_eq!(q.enumerate(), vec![0, 1, 2]);
        assert_eq!(q.pop(), Some(0));
        assert_eq!(q.dequeue(), Some(1));
        assert_eq!(q.dequeue(), Some(2));
        assert_eq!(q.pop(), None);
        assert_eq!(CdsFifo::<u8>::new(), CdsFifo::default());
    }

    #[test]
    fn a_ckq_enqueues_at_the_back_pushes_at_the_front_and_indexes_from_the_front() {
        let mut q = CkQ::with_capacity(1);
        q.enq('b');
        q.enq('c');
        q.push('a');
        assert_eq!(q.length(), 3);
        assert_eq!((q[0], q[1], q[2]), ('a', 'b', 'c'));
        q[1] = 'B';
        assert_eq!(q.deq(), Some('a'));
        assert_eq!(q.deq(), Some('B'));
        assert_eq!(q.deq(), Some('c'));
        assert!(q.is_empty() && q.deq().is_none());
        assert_eq!(CkQ::<u8>::new(), CkQ::default());
    }
}
