//! How an idle PE waits for work: spin briefly, then yield, then park; and how
//! a sender wakes it.
//!
//! # Why spin first
//!
//! Waking a parked thread costs a futex system call on both sides; on the
//! virtual machines we run on that is tens of microseconds, two orders of
//! magnitude more than a message handoff between running PEs. A busy job must
//! never pay it, so an idle PE first polls for [`SPIN`] (pure spinning), then
//! for up to [`YIELD`] more it polls between `sched_yield`s (so an
//! oversubscribed PE hands its core to a PE with work), and only then parks.
//! When there are more PEs than cores the pure-spin phase is skipped: a
//! spinning PE would hold a core that a working PE needs.
//!
//! How long to poll is the caller's [`Patience`]. A PE that has run work
//! from outside the job (a CCS request, handed over by the server thread)
//! since its last idle wait parks after the first quick polls of the
//! next one (that one only): the next such request comes at the
//! pace of a client's TCP connection, tens of microseconds at least, and
//! polling meanwhile only takes the processor from the client and the
//! server thread on the same host. Measured (`cargo bench -p converse
//! --bench ccs`, 2 vCPUs, 4 client threads): 0.82-0.84 of the raw
//! server's requests per second parking at once, 0.77-0.79 polling.
//!
//! # Patience while bytes move
//!
//! A PE with a core of its own ([`Patience::Full`]) whose polls moved
//! bytes over the network during the last [`YIELD`] (the caller's `moved`
//! says so: a large message read or written in pieces completes no
//! message for a while) polls for another [`YIELD`] instead of parking.
//! The rest of that message is on its way, and a parked PE hands the
//! network to its process's progress thread: a third thread on cores
//! that the two PEs of a stream already fill, which then does the reading
//! while the PE, once woken, waits for its lock. Measured (`cargo bench -p
//! convrun --bench netmod -- tcp`, 2 vCPUs, 6 runs of each build in
//! turns): `tcp_bw_4MiB` 2.4-4.3 GB/s parking, 2.8-6.2 polling on;
//! `tcp_rtt_4MiB` median 1663 µs, 1412.
//!
//! # The protocol (the race it prevents: a lost wake-up)
//!
//! Sleeper (the PE's own thread), after polling found nothing:
//! 1. `sleeping = true`; SeqCst fence
//! 2. poll again; if work (or exit) is visible: `sleeping = false`, return
//! 3. wait on the condition variable until `notified`, consume it, return
//!
//! Waker (any thread), after making work visible (pushing to a queue):
//! 1. SeqCst fence; read `sleeping` (SeqCst)
//! 2. if it was true and this waker is the one that swaps it to false:
//!    set `notified` under the mutex and signal the condition variable.
//!
//! The two fences order "publish work, then read `sleeping`" against
//! "publish `sleeping`, then look for work": at least one side sees the
//! other's write, so either the sleeper finds the work in step 2 or the waker
//! finds `sleeping` set and notifies.
//!
//! (A variant without the waker's fence, relying on a SeqCst read-modify-write
//! in the inbox push instead, was tried: it measured no faster, and loom found
//! a lost wake-up in its model, so the fence stays.)
//!
//! Node work (a node message, a node-queue entry) may be taken by any PE of
//! the node, so its waker wakes just one sleeping PE. A PE that sleeps in
//! `deliver_specific_msg` waits for its own messages only and would not take
//! node work; it sleeps as [`Sleep::OwnOnly`] instead of [`Sleep::Any`], and
//! [`IdleState::wake_for_node_work`] passes it over. Sleep mode and
//! "sleeping" are one atomic, so a waker never sees one without the other.
//!
//! `notified` is kept under the mutex, so a
//! notification that comes before the sleeper waits is not lost. A stale
//! notification (the sleeper found work in step 2 but a waker had already
//! claimed the wake-up) only causes one early return from a later wait, which
//! the caller treats like any other poll that may find nothing.
//!
//! The protocol is model-checked with loom (`tests` below, under `--cfg loom`).
#[cfg(not(loom))]
use crate::sync::lock;
#[cfg(loom)]
use crate::sync::lock_model as lock;
use std::time::{Duration, Instant};

use crate::sync::{AtomicU8, Condvar, Mutex, fence};
use std::sync::atomic::Ordering::{AcqRel, Relaxed, SeqCst};

/// Pure-spin time before yielding. Long enough to cover a message round trip
/// between two busy PEs many times over, short enough not to matter for CPU use.
pub(crate) const SPIN: Duration = Duration::from_micros(50);
/// Polls before the idle loop first reads the clock.
const QUICK_POLLS: u32 = 128;
/// Time spent polling between `sched_yield`s before parking.
pub(crate) const YIELD: Duration = Duration::from_micros(200);

/// How long an idle PE polls before it parks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Spin for [`SPIN`], then yield until [`YIELD`]: a PE with a core of
    /// its own.
    Full,
    /// Yield until [`YIELD`], no pure spin: more PEs than cores.
    Shared,
    /// The quick polls only: the work expected next comes from outside
    /// the job.
    Brief,
}

impl Patience {
    /// [`Patience::Shared`] if the job's PEs outnumber the cores, else
    /// [`Patience::Full`].
    pub(crate) fn of(oversubscribed: bool) -> Patience {
        if oversubscribed {
            Patience::Shared
        } else {
            Patience::Full
        }
    }
}

/// `IdleState::sleeping`: awake (or polling).
const AWAKE: u8 = 0;
/// How a PE sleeps: what may wake it (its value is `IdleState::sleeping`'s
/// while it sleeps, never [`AWAKE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Sleep {
    /// Any work wakes it: its own messages, node work, timers.
    Any = 1,
    /// Only messages sent to this PE wake it (`deliver_specific_msg`).
    OwnOnly = 2,
}

/// The idle state of one PE. Shared between the PE (sleeper) and every
/// thread that may give it work (wakers).
pub(crate) struct IdleState {
    /// [`AWAKE`] except while the PE is in steps 1-3 of the sleeper
    /// protocol, when it says what wakes it ([`Sleep::Any`] or [`Sleep::OwnOnly`]).
    sleeping: AtomicU8,
    /// Set by the waker that claimed the wake-up; consumed by the sleeper.
    notified: Mutex<bool>,
    condvar: Condvar,
}

impl IdleState {
    pub fn new() -> IdleState {
        IdleState {
            sleeping: AtomicU8::new(AWAKE),
            notified: Mutex::new(false),
            condvar: Condvar::new(),
        }
    }

    /// True while the PE is parked or about to park.
    #[cfg(all(test, not(loom)))]
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Relaxed) != AWAKE
    }

    /// Wakes the PE if it sleeps. Call after making the work visible.
    /// Returns whether this call woke it.
    pub fn wake(&self) -> bool {
        fence(SeqCst);
        if self.sleeping.load(Relaxed) != AWAKE && self.sleeping.swap(AWAKE, AcqRel) != AWAKE {
            self.notify();
            return true;
        }
        false
    }

    /// Wakes the PE if it sleeps and would take node work (it sleeps as
    /// [`Sleep::Any`]). Call after making the node work visible. Returns whether
    /// this call woke it.
    pub fn wake_for_node_work(&self) -> bool {
        fence(SeqCst);
        if self.sleeping.load(Relaxed) == Sleep::Any as u8
            && self
                .sleeping
                .compare_exchange(Sleep::Any as u8, AWAKE, AcqRel, Relaxed)
                .is_ok()
        {
            self.notify();
            return true;
        }
        false
    }

    fn notify(&self) {
        let mut notified = lock(&self.notified);
        *notified = true;
        self.condvar.notify_one();
    }

    /// Waits until `has_work()` is true, a wake-up arrives, or `timeout`
    /// (counted from about when the wait starts) passes. May return early;
    /// the caller polls again either way. Returns true if it returned
    /// because the timeout passed. `patience` says how long it polls
    /// first; `mode` ([`Sleep::Any`] or [`Sleep::OwnOnly`]) says which wakers may wake it.
    ///
    /// The timeout costs no clock read on the quick path (work that shows
    /// up within the first polls), which is why it is a duration and not an
    /// instant.
    pub fn wait(
        &self,
        has_work: impl Fn() -> bool,
        timeout: Option<Duration>,
        patience: Patience,
        mode: Sleep,
    ) -> bool {
        self.wait_then(has_work, || false, timeout, patience, mode, || {})
    }

    /// [`IdleState::wait`], calling `on_park` once polling gave up, just
    /// before the PE parks (a multi-process job hands the watch over the
    /// network to its progress thread there). `moved` says whether the
    /// PE's polls moved bytes over the network since it was last asked: a
    /// [`Patience::Full`] wait that hears yes at the end of its yield phase
    /// polls another one (see "Patience while bytes move").
    pub fn wait_then(
        &self,
        has_work: impl Fn() -> bool,
        moved: impl Fn() -> bool,
        timeout: Option<Duration>,
        patience: Patience,
        mode: Sleep,
        on_park: impl FnOnce(),
    ) -> bool {
        let mut deadline = None;
        if !cfg!(loom) {
            match self.poll_for_a_while(&has_work, &moved, timeout, &mut deadline, patience) {
                Poll::Work => return false,
                Poll::TimedOut => return true,
                Poll::Park => {}
            }
        }
        let deadline = timeout.map(|t| *deadline.get_or_insert_with(|| Instant::now() + t));
        on_park();
        // Step 1.
        self.sleeping.store(mode as u8, Relaxed);
        fence(SeqCst);
        // Step 2.
        if has_work() {
            self.sleeping.store(AWAKE, Relaxed);
            return false;
        }
        // Step 3.
        let mut timed_out = false;
        let mut notified = lock(&self.notified);
        while !*notified {
            notified = match deadline {
                None => self
                    .condvar
                    .wait(notified)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        timed_out = true;
                        break;
                    }
                    wait_timeout(&self.condvar, notified, deadline - now)
                }
            };
        }
        *notified = false;
        drop(notified);
        self.sleeping.store(AWAKE, Relaxed);
        // Woken, perhaps on its waker's processor: back to its own.
        #[cfg(not(loom))]
        crate::proc::affinity::return_home();
        timed_out
    }

    /// The spin and yield phases: whether work appeared, the timeout passed
    /// (`deadline` is set once the clock is first read), or the caller
    /// should park.
    fn poll_for_a_while(
        &self,
        has_work: &impl Fn() -> bool,
        moved: &impl Fn() -> bool,
        timeout: Option<Duration>,
        deadline: &mut Option<Instant>,
        patience: Patience,
    ) -> Poll {
        // A message between busy PEs usually arrives within a few dozen
        // polls: look that long before paying for the first clock read.
        if patience != Patience::Shared {
            for _ in 0..QUICK_POLLS {
                if has_work() {
                    return Poll::Work;
                }
                std::hint::spin_loop();
            }
        }
        if patience == Patience::Brief {
            return Poll::Park;
        }
        let start = Instant::now();
        *deadline = timeout.map(|t| start + t);
        let spin_until = if patience == Patience::Shared {
            start
        } else {
            start + SPIN
        };
        let mut yield_until = start + YIELD;
        // Only what moves during this wait counts.
        moved();
        let mut polls: u32 = 0;
        let mut looked_home = false;
        loop {
            if has_work() {
                return Poll::Work;
            }
            polls = polls.wrapping_add(1);
            // Reading the clock costs about as much as a poll; do it every 64.
            if !polls.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Poll::TimedOut;
            }
            if now >= yield_until {
                if patience == Patience::Full && moved() {
                    yield_until = now + YIELD;
                } else {
                    return Poll::Park;
                }
            }
            if now >= spin_until {
                // A spin that found nothing may have held the processor
                // from the PE it waits for: the kernel puts a woken thread
                // on its waker's processor, and two PEs there stayed
                // together for up to 20 ms (`proc::affinity`). Once per
                // wait, go back to this PE's own.
                if !looked_home {
                    looked_home = true;
                    #[cfg(not(loom))]
                    crate::proc::affinity::return_home();
                }
                std::thread::yield_now();
            }
        }
    }
}

/// How the polling phases of a wait ended.
enum Poll {
    Work,
    TimedOut,
    Park,
}

#[cfg(not(loom))]
fn wait_timeout<'a>(
    cv: &Condvar,
    g: std::sync::MutexGuard<'a, bool>,
    d: Duration,
) -> std::sync::MutexGuard<'a, bool> {
    cv.wait_timeout(g, d).unwrap_or_else(|e| e.into_inner()).0
}

#[cfg(loom)]
fn wait_timeout<'a>(
    cv: &Condvar,
    g: loom::sync::MutexGuard<'a, bool>,
    _d: Duration,
) -> loom::sync::MutexGuard<'a, bool> {
    // loom has no timed waits; the models never pass a deadline.
    cv.wait(g).unwrap()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn wakes_a_parked_sleeper() {
        let idle = Arc::new(IdleState::new());
        let work = Arc::new(AtomicUsize::new(0));
        let (i2, w2) = (idle.clone(), work.clone());
        let t = std::thread::spawn(move || {
            while w2.load(SeqCst) == 0 {
                i2.wait(|| w2.load(SeqCst) > 0, None, Patience::Full, Sleep::Any);
            }
        });
        // Wait until it parks, then wake it.
        while !idle.is_sleeping() {
            std::thread::sleep(Duration::from_millis(1));
        }
        work.store(1, SeqCst);
        idle.wake();
        t.join().unwrap();
    }

    #[test]
    fn deadline_ends_the_wait() {
        let idle = IdleState::new();
        let start = Instant::now();
        assert!(idle.wait(
            || false,
            Some(Duration::from_millis(5)),
            Patience::Shared,
            Sleep::Any
        ));
        assert!(start.elapsed() >= Duration::from_millis(5));
        assert!(!idle.wait(
            || true,
            Some(Duration::from_millis(5)),
            Patience::Shared,
            Sleep::Any
        ));
        assert!(!idle.is_sleeping());
    }

    /// Polls made before each patience gives up (no work ever shows).
    fn polls_before_parking(patience: Patience) -> usize {
        let polls = std::cell::Cell::new(0);
        let mut deadline = None;
        let outcome = IdleState::new().poll_for_a_while(
            &|| {
                polls.set(polls.get() + 1);
                false
            },
            &|| false,
            None,
            &mut deadline,
            patience,
        );
        assert!(matches!(outcome, Poll::Park));
        polls.get()
    }

    /// How often a wait that finds no work asks whether bytes moved, when
    /// the answer is yes for the first `moving` asks after the one that
    /// starts the wait (which clears what moved before it).
    fn moved_asks_before_parking(patience: Patience, moving: usize) -> usize {
        let asks = std::cell::Cell::new(0);
        let mut deadline = None;
        let outcome = IdleState::new().poll_for_a_while(
            &|| false,
            &|| {
                asks.set(asks.get() + 1);
                asks.get() <= moving + 1
            },
            None,
            &mut deadline,
            patience,
        );
        assert!(matches!(outcome, Poll::Park));
        asks.get()
    }

    #[test]
    fn a_pe_with_its_own_core_polls_on_while_bytes_move() {
        // Full: the starting ask, one per yield phase that saw bytes move
        // (each polls another phase), and the one that finds none.
        assert_eq!(moved_asks_before_parking(Patience::Full, 0), 2);
        assert_eq!(moved_asks_before_parking(Patience::Full, 3), 5);
        // A PE that shares its core parks when its phase ends; Brief never
        // gets to the clock.
        assert_eq!(moved_asks_before_parking(Patience::Shared, 3), 1);
        assert_eq!(moved_asks_before_parking(Patience::Brief, 3), 0);
    }

    #[test]
    fn brief_patience_parks_after_the_quick_polls() {
        assert_eq!(polls_before_parking(Patience::Brief), QUICK_POLLS as usize);
        // The others poll on, reading the clock every 64 polls, until the
        // yield phase ends (however late a loaded host lets them look).
        assert!(polls_before_parking(Patience::Full) >= QUICK_POLLS as usize + 64);
        assert!(polls_before_parking(Patience::Shared) >= 64);
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicUsize;

    use crate::sync::model;

    /// A producer publishes work and wakes; the consumer must never sleep
    /// through it (loom reports a deadlock if it can).
    #[test]
    fn loom_no_lost_wakeup() {
        model(|| {
            let idle = Arc::new(IdleState::new());
            let work = Arc::new(AtomicUsize::new(0));
            let (i2, w2) = (idle.clone(), work.clone());
            let producer = loom::thread::spawn(move || {
                w2.store(1, Relaxed);
                i2.wake();
            });
            while work.load(Relaxed) == 0 {
                idle.wait(
                    || work.load(Relaxed) > 0,
                    None,
                    Patience::Shared,
                    Sleep::Any,
                );
            }
            producer.join().unwrap();
        });
    }

    /// The hot path: a producer pushes to an inbox and wakes; the consumer,
    /// waiting until the inbox is not empty, must never sleep through it and
    /// must then find the value.
    #[test]
    fn loom_inbox_push_wakes_consumer() {
        model(|| {
            let idle = Arc::new(IdleState::new());
            // A full 2-slot ring, so the producer's value overflows.
            let inbox = Arc::new(crate::sync::inbox::Inbox::with_slots(2));
            inbox.push(1u32);
            inbox.push(2u32);
            let (i2, q2) = (idle.clone(), inbox.clone());
            let producer = loom::thread::spawn(move || {
                q2.push(7u32);
                i2.wake();
            });
            loop {
                // SAFETY: this thread is the inbox's only consumer.
                if let Some(v) = unsafe { inbox.pop() } {
                    if v == 7 {
                        break;
                    }
                    continue;
                }
                // SAFETY: as above.
                idle.wait(
                    || !unsafe { inbox.is_empty() },
                    None,
                    Patience::Shared,
                    Sleep::Any,
                );
            }
            producer.join().unwrap();
        });
    }

    /// Two producers, one consumer that waits twice.
    #[test]
    fn loom_two_wakers() {
        model(|| {
            let idle = Arc::new(IdleState::new());
            let work = Arc::new(AtomicUsize::new(0));
            let mut producers = Vec::new();
            for _ in 0..2 {
                let (i2, w2) = (idle.clone(), work.clone());
                producers.push(loom::thread::spawn(move || {
                    w2.fetch_add(1, Relaxed);
                    i2.wake();
                }));
            }
            while work.load(Relaxed) < 2 {
                idle.wait(
                    || work.load(Relaxed) >= 2,
                    None,
                    Patience::Shared,
                    Sleep::Any,
                );
            }
            for p in producers {
                p.join().unwrap();
            }
        });
    }
}
