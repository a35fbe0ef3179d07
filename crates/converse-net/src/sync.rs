//! The one way this crate takes a std mutex: [`lock`] takes it poisoned or
//! not. A private copy of the core's `sync::lock` (three lines), so that
//! this crate depends on nothing above it.
//!
//! Why ignoring poison is sound here: a panicking PE or progress thread
//! ends the job, and the state these mutexes guard (send queues, VC
//! tables) stays consistent between statements.

/// Takes `m`'s lock, poisoned or not (see the module comment).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
