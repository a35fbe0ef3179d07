//! The scheduler, as the floors below it reach it: a user-level thread's
//! main flow that suspends (`cth`), and a wait for a one-sided operation
//! (`cmi::rdma`), run the scheduler on top of themselves until their wait
//! is over, but sit below `csd` (DESIGN.md §3; the floors are in
//! `tests/layering.rs`). `csd` installs its entry points here when a PE
//! starts (`csd::init_pe`); they are the same functions for every PE and
//! job, so one process-wide slot holds them.
//!
//! # Invariants
//!
//! Installed before any PE's start function runs, never changed after
//! (a later install is the same functions). The calls run on the calling
//! PE's thread; the slot itself is read by any thread.
use std::sync::OnceLock;

use super::pe::Pe;

/// The scheduler's entry points for the floors below it.
pub(crate) struct Scheduler {
    /// Runs `pe`'s scheduler until `done` holds (or the job ends, which
    /// leaves the PE's code as every scheduler loop does).
    pub run_until: fn(pe: &Pe, done: &dyn Fn() -> bool),
    /// Delivers up to `n` messages, waiting for them; returns how many ran
    /// (`CsdScheduler(n)`).
    pub run_count: fn(n: usize) -> usize,
}

static SCHEDULER: OnceLock<Scheduler> = OnceLock::new();

/// Makes `scheduler` the one the floors below it run (`csd::init_pe`).
pub(crate) fn install(scheduler: Scheduler) {
    // Every PE installs the same functions: the first one stays.
    let _ = SCHEDULER.set(scheduler);
}

fn scheduler() -> &'static Scheduler {
    SCHEDULER
        .get()
        .expect("the scheduler runs only on a PE that the runtime started")
}

/// Runs `pe`'s scheduler until `done` holds (see [`Scheduler::run_until`]).
pub(crate) fn run_until(pe: &Pe, done: &dyn Fn() -> bool) {
    (scheduler().run_until)(pe, done)
}

/// Delivers up to `n` messages (see [`Scheduler::run_count`]).
pub(crate) fn run_count(n: usize) -> usize {
    (scheduler().run_count)(n)
}
