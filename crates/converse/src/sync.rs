//! Concurrency primitives used by the lock-free and park/wake code, imported
//! through this shim so that the same code runs under the `loom` model checker
//! (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom`).
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
