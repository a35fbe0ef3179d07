//! Node-level locks (`CmiNodeLock`) and the node barrier.
//!
//! A [`NodeLock`] is a mutual-exclusion lock the PEs of a node share (put it
//! in a [`Csv`](crate::Csv) or an `Arc`). It may guard data, like
//! `std::sync::Mutex`, and is unlocked when its guard drops ([`unlock`] names
//! that step for readers of the manual). A PE that panics while holding it
//! does not poison it: the job ends anyway.
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::pe;

/// A lock shared by the PEs of a node, optionally guarding a `T`.
#[doc(alias = "CmiNodeLock")]
#[derive(Debug, Default)]
pub struct NodeLock<T = ()> {
    inner: Mutex<T>,
}

/// Proof that the lock is held; gives access to the guarded value. Dropping it
/// unlocks (`CmiUnlock`).
#[derive(Debug)]
pub struct NodeLockGuard<'a, T> {
    inner: MutexGuard<'a, T>,
}

impl<T> NodeLock<T> {
    /// A new, unlocked lock guarding `value` (`CmiCreateLock`).
    #[doc(alias = "CmiCreateLock")]
    pub const fn new(value: T) -> NodeLock<T> {
        NodeLock {
            inner: Mutex::new(value),
        }
    }

    /// Locks, waiting while another PE holds the lock (`CmiLock`).
    #[doc(alias = "CmiLock")]
    pub fn lock(&self) -> NodeLockGuard<'_, T> {
        NodeLockGuard {
            inner: crate::sync::lock(&self.inner),
        }
    }

    /// Locks if no one holds the lock (`CmiTryLock`, which returns 0 on
    /// success): `Some(guard)` on success, `None` if it is held.
    #[doc(alias = "CmiTryLock")]
    pub fn try_lock(&self) -> Option<NodeLockGuard<'_, T>> {
        match self.inner.try_lock() {
            Ok(inner) => Some(NodeLockGuard { inner }),
            Err(TryLockError::Poisoned(e)) => Some(NodeLockGuard {
                inner: e.into_inner(),
            }),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Frees the lock, returning the guarded value (`CmiDestroyLock`). The
    /// borrow checker makes using it afterwards impossible.
    #[doc(alias = "CmiDestroyLock")]
    pub fn destroy(self) -> T {
        self.inner.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// Unlocks by consuming the guard (`CmiUnlock`); the same as dropping it.
#[doc(alias = "CmiUnlock")]
pub fn unlock<T>(guard: NodeLockGuard<'_, T>) {
    drop(guard)
}

impl<T> Deref for NodeLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for NodeLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// Waits until every PE of the calling PE's node has called `node_barrier`
/// (`CmiNodeBarrier`). If the job ends meanwhile, the PE leaves instead of
/// waiting forever (on an `init_returns` main thread, which the runtime does
/// not unwind, it returns; check [`job_exiting`](crate::job_exiting)).
#[doc(alias = "CmiNodeBarrier")]
pub fn node_barrier() {
    let me = pe::current();
    // Borrowed, not cloned: a clone's count is one cache line that every
    // PE of the node would write at every barrier.
    let job = &me.job;
    // The watchdog cannot ask a PE blocked here: it is told where it is.
    let watch = me.trace.watch();
    if let Some(w) = watch {
        w.blocked("a node barrier");
    }
    let passed = job
        .node(me.node)
        .barrier
        .wait(|| job.is_exiting(), job.oversubscribed);
    if let Some(w) = watch {
        w.unblocked();
    }
    if !passed {
        me.leave_if_exiting();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_try_lock_destroy() {
        let l = NodeLock::new(5);
        {
            let mut g = l.lock();
            *g += 1;
            assert!(l.try_lock().is_none());
            unlock(g);
        }
        assert_eq!(*l.try_lock().unwrap(), 6);
        assert_eq!(l.destroy(), 6);
    }
}
