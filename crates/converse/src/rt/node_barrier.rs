//! The barrier of the PEs of one node (`CmiNodeBarrier`), which also opens
//! when the job exits, so that a PE waiting in it cannot hang the job when
//! a peer has died or exited.
//!
//! # Why spin first
//!
//! A barrier whose waiters park at once costs a futex wait and a wake-up
//! per round: 40 µs a round on this 2-core machine, where Charm++'s
//! spinning barrier takes 0.26 µs. So a waiter first spins (the pure-spin
//! phase is skipped when the node's PEs outnumber the cores, as in the
//! idle protocol, `csd::idle`), then yields, then parks.
//!
//! # Invariants
//!
//! - `arrived` counts the PEs in the current round, `round` numbers the
//!   rounds. The last PE to arrive sets `arrived` back to 0 *before* it
//!   moves `round` on (Release), so a PE that saw the new round (Acquire)
//!   and arrives at the next barrier counts from 0.
//! - A PE cannot be in two rounds: it reads `round` before it arrives, and
//!   the round cannot end before it arrives.
//!
//! # Concurrency protocol (parking without a lost wake-up)
//!
//! - Waiter, to park: take `parked`, add itself to `sleepers`, SeqCst
//!   fence, read `round`; if the round is not over and the job is not
//!   exiting, wait on `condvar` (which lets go of `parked`).
//! - Last arriver: move `round` on (Release), SeqCst fence, read
//!   `sleepers`; if any, take `parked` and wake every waiter.
//! - The fences order "add to `sleepers`, then read `round`" against
//!   "write `round`, then read `sleepers`" (fences rather than SeqCst
//!   accesses, as in `csd::idle`: loom models SeqCst fences, and treats
//!   SeqCst accesses as AcqRel, which found a false deadlock here), so
//!   one sees the other's write: either the waiter sees
//!   the new round and does not wait, or the arriver sees a sleeper and
//!   wakes it; taking `parked` to wake makes the wake-up come after the
//!   waiter waits (it held `parked` from its check to its wait).
//! - Exit: the job sets its exiting flag, then takes `parked` and wakes
//!   every waiter (`release_all`); a waiter checks the flag holding
//!   `parked`, so the same argument holds.
//!
//! Model-checked with loom (`tests` below, under `--cfg loom`).
#[cfg(not(loom))]
use crate::sync::lock;
#[cfg(loom)]
use crate::sync::lock_model as lock;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::time::Instant;

use crate::csd::idle::{SPIN, YIELD};
use crate::sync::{AtomicU64, Condvar, Mutex, fence};

/// A barrier for the PEs of one node (see the module comment).
pub(crate) struct NodeBarrier {
    size: u64,
    /// PEs arrived in the current round.
    arrived: AtomicU64,
    /// The round number.
    round: AtomicU64,
    /// Waiters that may be parked (see the protocol).
    sleepers: AtomicU64,
    parked: Mutex<()>,
    condvar: Condvar,
}

impl NodeBarrier {
    pub fn new(size: usize) -> NodeBarrier {
        NodeBarrier {
            size: size as u64,
            arrived: AtomicU64::new(0),
            round: AtomicU64::new(0),
            sleepers: AtomicU64::new(0),
            parked: Mutex::new(()),
            condvar: Condvar::new(),
        }
    }

    /// Waits until all the node's PEs arrived (true), or until
    /// `exiting()` is true (false). `oversubscribed` (more PEs than cores
    /// here) skips the pure-spin phase.
    pub fn wait(&self, exiting: impl Fn() -> bool, oversubscribed: bool) -> bool {
        let round = self.round.load(Acquire);
        if self.arrived.fetch_add(1, AcqRel) + 1 == self.size {
            self.arrived.store(0, Relaxed);
            self.round.store(round.wrapping_add(1), Release);
            fence(SeqCst);
            if self.sleepers.load(Relaxed) > 0 {
                let _parked = lock(&self.parked);
                self.condvar.notify_all();
            }
            return true;
        }
        let over = || self.round.load(Acquire) != round;
        if !cfg!(loom) && self.spin_until(&over, &exiting, oversubscribed) {
            return over();
        }
        let mut parked = lock(&self.parked);
        self.sleepers.fetch_add(1, Relaxed);
        fence(SeqCst);
        let passed = loop {
            if self.round.load(Acquire) != round {
                break true;
            }
            if exiting() {
                break false;
            }
            parked = self.condvar.wait(parked).unwrap_or_else(|e| e.into_inner());
        };
        self.sleepers.fetch_sub(1, Release);
        drop(parked);
        // Woken, perhaps on its waker's processor: back to its own (as
        // after the idle protocol's park).
        #[cfg(not(loom))]
        crate::proc::affinity::return_home();
        passed
    }

    /// The spin and yield phases: true once the round is over or the job
    /// exits, false when the waiter should park.
    fn spin_until(
        &self,
        over: &impl Fn() -> bool,
        exiting: &impl Fn() -> bool,
        oversubscribed: bool,
    ) -> bool {
        let start = Instant::now();
        let spin_until = if oversubscribed { start } else { start + SPIN };
        let yield_until = start + YIELD;
        let mut polls: u32 = 0;
        loop {
            if over() {
                return true;
            }
            polls = polls.wrapping_add(1);
            // The clock and the exit flag cost more than a look at the
            // round: every 64 looks.
            if !polls.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            if exiting() {
                return true;
            }
            let now = Instant::now();
            if now >= yield_until {
                return false;
            }
            if now >= spin_until {
                std::thread::yield_now();
            }
        }
    }

    /// Wakes every parked waiter, to look at the job's exiting flag (set
    /// before this is called).
    pub fn release_all(&self) {
        let _parked = lock(&self.parked);
        self.condvar.notify_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn barrier_opens_on_exit() {
        let b = NodeBarrier::new(2);
        assert!(!b.wait(|| true, false));
    }

    /// Rounds in a row, spinning and oversubscribed (parking soon): no PE
    /// leaves a round before every PE arrived in it.
    #[test]
    fn no_pe_leaves_a_round_before_all_arrived() {
        for oversubscribed in [false, true] {
            let pes = 4;
            let b = Arc::new(NodeBarrier::new(pes));
            let arrivals = Arc::new(AtomicU64::new(0));
            let threads: Vec<_> = (0..pes)
                .map(|_| {
                    let (b, arrivals) = (b.clone(), arrivals.clone());
                    std::thread::spawn(move || {
                        for round in 0..2000u64 {
                            arrivals.fetch_add(1, SeqCst);
                            assert!(b.wait(|| false, oversubscribed));
                            let seen = arrivals.load(SeqCst);
                            assert!(seen >= (round + 1) * pes as u64, "round {round}: {seen}");
                            // The next round cannot end before this PE
                            // arrives in it.
                            assert!(seen <= (round + 2) * pes as u64, "round {round}: {seen}");
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
    }

    /// A PE parked in the barrier leaves it when the job exits.
    #[test]
    fn a_parked_pe_leaves_when_the_job_exits() {
        let b = Arc::new(NodeBarrier::new(2));
        let exiting = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (b, exiting) = (b.clone(), exiting.clone());
            std::thread::spawn(move || b.wait(|| exiting.load(SeqCst), true))
        };
        // Past the yield phase: parked.
        std::thread::sleep(YIELD * 10);
        exiting.store(true, SeqCst);
        b.release_all();
        assert!(!waiter.join().unwrap());
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;

    /// Two PEs through two rounds: both pass both, none waits forever (loom
    /// reports a deadlock if one can).
    #[test]
    fn loom_node_barrier_two_rounds() {
        loom::model(|| {
            let b = Arc::new(NodeBarrier::new(2));
            let other = {
                let b = b.clone();
                loom::thread::spawn(move || {
                    assert!(b.wait(|| false, true));
                    assert!(b.wait(|| false, true));
                })
            };
            assert!(b.wait(|| false, true));
            assert!(b.wait(|| false, true));
            other.join().unwrap();
        });
    }

    /// A PE waiting alone leaves when the job exits, wherever the exit
    /// falls in its wait.
    #[test]
    fn loom_node_barrier_opens_on_exit() {
        loom::model(|| {
            let b = Arc::new(NodeBarrier::new(2));
            let exiting = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (b, exiting) = (b.clone(), exiting.clone());
                loom::thread::spawn(move || b.wait(|| exiting.load(SeqCst), true))
            };
            exiting.store(true, SeqCst);
            b.release_all();
            assert!(!waiter.join().unwrap());
        });
    }
}
