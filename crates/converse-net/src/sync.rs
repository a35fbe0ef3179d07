//! The crate's concurrency shims.
//!
//! - [`lock`]: the one way this crate takes a std mutex, poisoned or not.
//!   A private copy of the core's `sync::lock` (three lines), so that this
//!   crate depends on nothing above it. Why ignoring poison is sound here:
//!   a panicking PE or progress thread ends the job, and the state these
//!   mutexes guard (send queues, VC tables) stays consistent between
//!   statements.
//! - [`Atomics`]: the atomic operations the shm ring's protocol
//!   (`shm::ring`) is written against, so that the same protocol code runs
//!   over the real ring in mapped memory ([`StdAtomics`]: std's atomics,
//!   the only ones that may sit in memory another process writes) and
//!   under the `loom` model checker (`LoomAtomics`, in the model's tests
//!   with `--cfg loom` only: loom's atomics in a heap-allocated model of
//!   the ring). Unlike the core's shim, which swaps std's types for
//!   loom's under `cfg(loom)`, this one is a type parameter: the real
//!   ring's atomics are casts of mapped memory and stay std's in a loom
//!   build too.

use std::sync::atomic::Ordering;

/// Takes `m`'s lock, poisoned or not (see the module comment).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A family of atomics: the word types and the fence that goes with them.
pub(crate) trait Atomics {
    type U32: AtomicWord32;
    type U64: AtomicWord64;
    /// A fence that orders this family's atomics.
    fn fence(order: Ordering);
}

/// The operations of a `u32` atomic the ring protocol uses.
pub(crate) trait AtomicWord32 {
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, value: u32, order: Ordering);
    fn swap(&self, value: u32, order: Ordering) -> u32;
    fn fetch_add(&self, value: u32, order: Ordering) -> u32;
}

/// The operations of a `u64` atomic the ring protocol uses.
pub(crate) trait AtomicWord64 {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
}

/// Forwards the word traits to a type's own methods of the same names.
macro_rules! atomic_words {
    ($u32:ty, $u64:ty) => {
        impl AtomicWord32 for $u32 {
            #[inline(always)]
            fn load(&self, order: Ordering) -> u32 {
                <$u32>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, value: u32, order: Ordering) {
                <$u32>::store(self, value, order)
            }
            #[inline(always)]
            fn swap(&self, value: u32, order: Ordering) -> u32 {
                <$u32>::swap(self, value, order)
            }
            #[inline(always)]
            fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
                <$u32>::fetch_add(self, value, order)
            }
        }
        impl AtomicWord64 for $u64 {
            #[inline(always)]
            fn load(&self, order: Ordering) -> u64 {
                <$u64>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, value: u64, order: Ordering) {
                <$u64>::store(self, value, order)
            }
        }
    };
}

atomic_words!(std::sync::atomic::AtomicU32, std::sync::atomic::AtomicU64);

/// std's atomics: the real ring's.
pub(crate) struct StdAtomics;

impl Atomics for StdAtomics {
    type U32 = std::sync::atomic::AtomicU32;
    type U64 = std::sync::atomic::AtomicU64;
    #[inline(always)]
    fn fence(order: Ordering) {
        std::sync::atomic::fence(order)
    }
}

#[cfg(all(test, loom))]
atomic_words!(loom::sync::atomic::AtomicU32, loom::sync::atomic::AtomicU64);

/// loom's atomics: the model's (its tests, `--cfg loom` only).
#[cfg(all(test, loom))]
pub(crate) struct LoomAtomics;

#[cfg(all(test, loom))]
impl Atomics for LoomAtomics {
    type U32 = loom::sync::atomic::AtomicU32;
    type U64 = loom::sync::atomic::AtomicU64;
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
}
