//! The leaf floor: concurrency primitives and the in-process queues.
//!
//! - The primitives used by the lock-free and park/wake code, imported
//!   through this shim so that the same code runs under the `loom` model
//!   checker (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom`).
//! - [`lock`]: the one way the runtime takes a std mutex (a poisoned lock
//!   is taken anyway: a panicking PE ends the job, and the state a mutex
//!   guards here stays consistent between statements).
//! - `inbox` (a PE's multi-producer, single-consumer inbox: a ring of
//!   one-line slots with an unbounded overflow) and `mpsc` (the overflow).
pub(crate) mod inbox;
pub(crate) mod mpsc;
#[cfg(test)]
mod testing;

/// Takes `m`'s lock, poisoned or not (see the module comment for why that
/// is sound here).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`lock`] for the shim's mutex under the model checker (without loom the
/// shim's mutex is std's, and [`lock`] serves both).
#[cfg(loom)]
pub(crate) fn lock_model<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex};

/// `UnsafeCell` with loom's closure API, so loom can check accesses to it.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `UnsafeCell` with loom's closure API (std build: a thin wrapper).
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a raw pointer to the contents; the caller's `unsafe`
    /// block vouches for exclusive access while it dereferences the pointer.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(all(test, loom))]
pub(crate) use loom::{sync::Arc, thread::spawn};
#[cfg(all(test, not(loom)))]
pub(crate) use std::{sync::Arc, thread::spawn};

/// Runs a loom model exploring every interleaving with up to 3 preemptions
/// (loom's recommended bound: the bugs these models look for need few
/// context switches to show, and the unbounded space does not finish).
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}
