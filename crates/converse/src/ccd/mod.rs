//! Conditions, periodic checks and timers (Ccd), and quiescence detection.
//!
//! # What the scheduler does
//!
//! - **Idle edges.** The first time a scheduler loop finds nothing to do it
//!   raises [`Condition::PROCESSOR_BEGIN_IDLE`]; each further empty look
//!   raises [`Condition::PROCESSOR_STILL_IDLE`]; the first work found after
//!   that raises [`Condition::PROCESSOR_BEGIN_BUSY`] before it runs. (Only
//!   the waiting loops, `schedule_forever`/`schedule_count`, have idle edges;
//!   a poll does not, as in Converse.)
//! - **Polls.** Timers ([`call_fn_after`]), periodic conditions and the
//!   signal conditions are checked in a *poll*. A busy PE polls at most once
//!   per resolution (5 ms by default, see [`set_resolution`]): it reads the
//!   clock every few deliveries (adapted so reads come about four times per
//!   resolution, at most [`CLOCK_EVERY_MAX`] deliveries apart) and polls
//!   when the resolution has passed. An idle PE polls when it would wait, then parks only until the
//!   earliest deadline, so a parked PE still runs its timers on time. None of
//!   this costs anything while nothing is registered (`armed` is false).
//!
//! # Callbacks
//!
//! The manual's callbacks are a `CcdVoidFn` and a `void *arg`; here they are
//! closures that capture what `arg` would point to, and get the wall time
//! ([`wall_timer`](crate::wall_timer)) as their argument:
//! `FnOnce(f64)` for [`call_fn_after`] and [`call_on_condition`],
//! `FnMut(f64)` for [`call_on_condition_keep`]. They run on the PE that
//! registered them.
//!
//! # Invariants
//!
//! - All state is the PE's own (`Cell`/`RefCell` in `Pe`); callbacks run on
//!   the registering PE, as handlers, with no borrow held.
//! - A timer never fires before its time: it fires in the first poll at or
//!   after `registration + delay`.
//! - `armed` is true exactly when a timer is pending or a periodic or signal
//!   condition has callbacks: then the scheduler must look at the clock.
//! - `timers_set` and `timers_fired` only grow; their difference is the
//!   number of pending timers. A timer counts as fired when the poll takes
//!   it out of the heap, just before its callback runs (as a message counts
//!   as processed when its handler starts).
//!
//! # Timers and quiescence
//!
//! A pending [`call_fn_after`] timer is work the PE will do with no message
//! in flight, so quiescence detection counts it like a message the PE sent
//! itself: created when set, processed when it fires, and a PE with one
//! pending does not answer detection waves (see `quiescence`, "Timers").
//! Condition callbacks (periodic, idle-edge, signal, user; once or kept) do
//! not count: they wait for an event that may come forever (a periodic
//! condition) or never (a user condition), and Converse's quiescence is
//! about messages. A periodic callback that sends makes new work, like
//! outside input, after quiescence may already have been reported.
pub mod conditions;
pub mod quiescence;
pub(crate) mod state;

use std::cell::{Cell, RefCell};
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::proc::signals;
use crate::rt::pe::{self, Pe};

pub(crate) use crate::ccd::state::CcdState;
use crate::ccd::state::Timer;
pub use conditions::{
    Condition, call_on_condition, call_on_condition_keep, cancel_call_on_condition, raise_condition,
};

/// What a delay too long to represent becomes: about 34 years, which no
/// job outlives.
const NEVER: Duration = Duration::from_secs(1 << 30);

/// The default (and longest) timer resolution: 5 ms.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_millis(5);

/// At most this many deliveries pass between clock reads on a busy, armed
/// PE. A clock read costs about as much as a small message; 64 makes it
/// negligible when handlers are short.
pub const CLOCK_EVERY_MAX: u32 = 64;

impl CcdState {
    pub fn new() -> CcdState {
        let now = Instant::now();
        CcdState {
            conditions: Default::default(),
            timers: RefCell::new(BinaryHeap::new()),
            next_timer_seq: Cell::new(0),
            resolution: Cell::new(DEFAULT_RESOLUTION),
            next_poll: Cell::new(now),
            periodic_next: RefCell::new(std::array::from_fn(|i| {
                now + Duration::from_millis(conditions::PERIODIC_INTERVALS_MS[i])
            })),
            armed: Cell::new(false),
            ticks: Cell::new(0),
            poll_pending: Cell::new(false),
            clock_every: Cell::new(1),
            last_clock: Cell::new(now),
            idle: Cell::new(false),
            still_idle_raised: Cell::new(false),
            idle_since: Cell::new(None),
            signals_seen: [Cell::new(0), Cell::new(0)],
            quiescence_armed: Cell::new(false),
            timers_set: Cell::new(0),
            timers_fired: Cell::new(0),
        }
    }
}

impl PartialEq for Timer {
    fn eq(&self, other: &Timer) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Timer) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Timer) -> std::cmp::Ordering {
        // Reversed: `BinaryHeap` is a max-heap.
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// Calls `callback(wall_time)` on this PE at least `ms` milliseconds from now
/// (`CcdCallFnAfter`): in the first scheduler poll after that time. A
/// negative or NaN delay counts as 0.
///
/// Until it has fired, the timer holds quiescence detection: the job is not
/// quiescent while a timer is pending anywhere, since a timer that will make
/// work is work (Charm++'s detection ignores timers). So a timer that never
/// fires (a huge delay), or a chain of timers that re-arm themselves
/// forever, keeps [`start_quiescence_detection`](crate::start_quiescence_detection)
/// from ever answering. For a heartbeat or a watchdog, which should not
/// hold quiescence, use a kept periodic condition
/// ([`call_on_condition_keep`]) instead: conditions do not count.
///
/// `callback` stands for the manual's `CcdVoidFn fnp` and its `void *arg`
/// (see [Callbacks](self#callbacks)).
#[doc(alias = "CcdCallFnAfter")]
#[doc(alias = "CcdVoidFn")]
pub fn call_fn_after(callback: impl FnOnce(f64) + 'static, ms: f64) {
    let delay = if ms > 0.0 {
        // Huge (or infinite) delays saturate: such a timer never fires.
        Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(NEVER)
    } else {
        Duration::ZERO
    };
    pe::with(|pe| {
        let seq = pe.ccd.next_timer_seq.get();
        pe.ccd.next_timer_seq.set(seq + 1);
        let now = Instant::now();
        pe.ccd.timers.borrow_mut().push(Timer {
            due: now.checked_add(delay.min(NEVER)).unwrap_or(now + NEVER),
            seq,
            callback: Box::new(callback),
        });
        pe.ccd.timers_set.set(pe.ccd.timers_set.get() + 1);
        pe.ccd.armed.set(true);
    })
}

/// Sets the timer resolution to `seconds` and returns the old one, in seconds
/// (`CcdSetResolution`). It cannot be longer than the default, 5 ms; a longer
/// (or non-positive) value is clamped to that range.
#[doc(alias = "CcdSetResolution")]
pub fn set_resolution(seconds: f64) -> f64 {
    pe::with(|pe| {
        let new = if seconds > 0.0 {
            Duration::try_from_secs_f64(seconds)
                .unwrap_or(DEFAULT_RESOLUTION)
                .clamp(Duration::from_nanos(1), DEFAULT_RESOLUTION)
        } else {
            Duration::from_nanos(1)
        };
        let old = pe.ccd.resolution.replace(new);
        pe.ccd
            .next_poll
            .set(pe.ccd.next_poll.get().min(Instant::now() + new));
        old.as_secs_f64()
    })
}

/// Returns the timer resolution to the default, 5 ms; returns the old one in
/// seconds (`CcdResetResolution`).
#[doc(alias = "CcdResetResolution")]
pub fn reset_resolution() -> f64 {
    pe::with(|pe| pe.ccd.resolution.replace(DEFAULT_RESOLUTION).as_secs_f64())
}

/// Sets the resolution to `seconds` only if that is shorter than the current
/// one; returns the resolution before the call, in seconds
/// (`CcdIncreaseResolution`).
#[doc(alias = "CcdIncreaseResolution")]
pub fn increase_resolution(seconds: f64) -> f64 {
    let current = pe::with(|pe| pe.ccd.resolution.get().as_secs_f64());
    if seconds < current {
        set_resolution(seconds)
    } else {
        current
    }
}

/// The current timer resolution, in seconds.
pub fn resolution() -> f64 {
    pe::with(|pe| pe.ccd.resolution.get().as_secs_f64())
}

/// A callback was registered for `cond` on `pe`.
fn on_registered(pe: &Pe, cond: Condition) {
    if let Some(i) = cond.periodic_index()
        && count_callbacks_is_one(pe, cond)
    {
        // The first callback counts the period from now.
        pe.ccd.periodic_next.borrow_mut()[i] =
            Instant::now() + Duration::from_millis(conditions::PERIODIC_INTERVALS_MS[i]);
    }
    if cond == Condition::SIGUSR1 || cond == Condition::SIGUSR2 {
        let which = if cond == Condition::SIGUSR2 {
            signals::USR2
        } else {
            signals::USR1
        };
        signals::install(which);
        if count_callbacks_is_one(pe, cond) {
            // Signals received before the first callback do not count.
            pe.ccd.signals_seen[which].set(signals::count(which));
        }
    }
    if cond == Condition::QUIESCENCE && !pe.ccd.quiescence_armed.replace(true) {
        quiescence::start_quiescence_detection(|| {
            let pe = pe::current();
            pe.ccd.quiescence_armed.set(false);
            // A callback registered while this raise runs starts the next
            // detection (kept callbacks alone do not: that would detect
            // forever).
            conditions::raise(&pe, Condition::QUIESCENCE);
        });
    }
    update_armed(pe);
}

fn count_callbacks_is_one(pe: &Pe, cond: Condition) -> bool {
    pe.ccd.conditions.count(cond) == 1
}

/// Recomputes `armed` for `pe`.
pub(crate) fn update_armed(pe: &Pe) {
    let ccd = &pe.ccd;
    let armed = !ccd.timers.borrow().is_empty()
        || (0..conditions::PERIODIC_COUNT).any(|i| {
            ccd.conditions.has_callbacks(
                Condition::from_number(Condition::PERIODIC.number() + i).expect("in range"),
            )
        })
        || ccd.conditions.has_callbacks(Condition::SIGUSR1)
        || ccd.conditions.has_callbacks(Condition::SIGUSR2);
    ccd.armed.set(armed);
}

/// True if `pe` may create work later without a message: a timer is pending
/// or a periodic, signal or still-idle condition has callbacks. The
/// reduction stall check does not call a job stuck while this holds on any
/// PE. (A pending timer already keeps the PE from answering waves at all;
/// the conditions are what this adds for the stall check: they do not hold
/// user quiescence requests, but may still contribute to a reduction.)
pub(crate) fn expects_work(pe: &Pe) -> bool {
    needs_deadline(pe)
}

/// True if a [`call_fn_after`] timer is pending on `pe`.
pub(crate) fn timers_pending(pe: &Pe) -> bool {
    pe.ccd.timers_set.get() != pe.ccd.timers_fired.get()
}

/// Timers set and fired on `pe` so far, for quiescence detection's counts.
pub(crate) fn timer_counts(pe: &Pe) -> (u64, u64) {
    (pe.ccd.timers_set.get(), pe.ccd.timers_fired.get())
}

/// After a delivery on an armed PE: read the clock now and then, and poll
/// when the resolution has passed.
///
/// How often: every `clock_every` deliveries, adapted after each read (as
/// Converse's `nSkip`) so that reads come about four times per resolution
/// whether handlers take nanoseconds or milliseconds, between 1 and
/// [`CLOCK_EVERY_MAX`] deliveries apart.
#[inline]
pub(crate) fn tick(pe: &Pe) {
    if poll_due(pe) {
        poll(pe, Instant::now());
    }
}

/// Counts a step of a busy PE and reads the clock when it is time; true if
/// a poll is due. A due poll stays due until [`poll`] runs it (a thread
/// switch that asks does not run callbacks itself).
#[inline]
pub(crate) fn poll_due(pe: &Pe) -> bool {
    if pe.ccd.poll_pending.get() {
        return true;
    }
    let ticks = pe.ccd.ticks.get() + 1;
    if ticks < pe.ccd.clock_every.get() {
        pe.ccd.ticks.set(ticks);
        return false;
    }
    pe.ccd.ticks.set(0);
    let now = Instant::now();
    adapt_clock_reads(pe, now);
    let due = now >= pe.ccd.next_poll.get();
    pe.ccd.poll_pending.set(due);
    due
}

/// Adjusts how many deliveries pass between clock reads, from how long the
/// last `clock_every` deliveries took.
fn adapt_clock_reads(pe: &Pe, now: Instant) {
    let ccd = &pe.ccd;
    let elapsed = now.saturating_duration_since(ccd.last_clock.replace(now));
    let target = ccd.resolution.get() / 4;
    let every = ccd.clock_every.get();
    let next = if elapsed.is_zero() {
        every.saturating_mul(2)
    } else {
        let scaled = u128::from(every) * target.as_nanos() / elapsed.as_nanos().max(1);
        u32::try_from(scaled).unwrap_or(u32::MAX)
    };
    ccd.clock_every.set(next.clamp(1, CLOCK_EVERY_MAX));
}

/// Runs due timers, periodic conditions and signal conditions; returns
/// whether it ran any callback.
pub(crate) fn poll(pe: &Pe, now: Instant) -> bool {
    let ccd = &pe.ccd;
    ccd.poll_pending.set(false);
    ccd.next_poll.set(now + ccd.resolution.get());
    let mut ran = false;
    // Timers due now, earliest first. Timers they add wait for a later poll.
    let due: Vec<Timer> = {
        let mut timers = ccd.timers.borrow_mut();
        let mut due = Vec::new();
        while timers.peek().is_some_and(|t| t.due <= now) {
            due.push(timers.pop().expect("peeked"));
        }
        // Fired from here on for quiescence detection: no wave reads this
        // PE between now and the callbacks, which run next.
        ccd.timers_fired
            .set(ccd.timers_fired.get() + due.len() as u64);
        due
    };
    if !due.is_empty() {
        let wall = crate::proc::timer::wall_timer();
        for timer in due {
            let _handler = pe.sched.enter_handler();
            (timer.callback)(wall);
        }
        ran = true;
    }
    for i in 0..conditions::PERIODIC_COUNT {
        let cond = Condition::from_number(Condition::PERIODIC.number() + i).expect("in range");
        if !ccd.conditions.has_callbacks(cond) {
            continue;
        }
        let due = {
            let mut next = ccd.periodic_next.borrow_mut();
            if now < next[i] {
                false
            } else {
                // Fixed rate; after a long stall, start over from now rather
                // than raising it many times in a row.
                let period = Duration::from_millis(conditions::PERIODIC_INTERVALS_MS[i]);
                next[i] += period;
                if next[i] <= now {
                    next[i] = now + period;
                }
                true
            }
        };
        if due {
            ran |= conditions::raise(pe, cond);
        }
    }
    for (which, cond) in [
        (signals::USR1, Condition::SIGUSR1),
        (signals::USR2, Condition::SIGUSR2),
    ] {
        if ccd.conditions.has_callbacks(cond) {
            let count = signals::count(which);
            if ccd.signals_seen[which].replace(count) != count {
                ran |= conditions::raise(pe, cond);
            }
        }
    }
    update_armed(pe);
    ran
}

/// The earliest time an idle `pe` must look again: a timer, a periodic
/// condition with callbacks, or (while signal or still-idle callbacks are
/// registered) one resolution from `now`.
pub(crate) fn next_deadline(pe: &Pe, now: Instant) -> Option<Instant> {
    let ccd = &pe.ccd;
    let mut deadline = ccd.timers.borrow().peek().map(|t| t.due);
    let mut consider = |d: Instant| {
        deadline = Some(deadline.map_or(d, |x| x.min(d)));
    };
    {
        let next = ccd.periodic_next.borrow();
        for (i, &due) in next.iter().enumerate() {
            let cond = Condition::from_number(Condition::PERIODIC.number() + i).expect("in range");
            if ccd.conditions.has_callbacks(cond) {
                consider(due);
            }
        }
    }
    if ccd.conditions.has_callbacks(Condition::SIGUSR1)
        || ccd.conditions.has_callbacks(Condition::SIGUSR2)
        || ccd
            .conditions
            .has_callbacks(Condition::PROCESSOR_STILL_IDLE)
    {
        consider(now + ccd.resolution.get());
    }
    deadline
}

/// True if an idle `pe` needs a clock and a deadline (else it may park
/// without a timeout).
pub(crate) fn needs_deadline(pe: &Pe) -> bool {
    pe.ccd.armed.get()
        || pe
            .ccd
            .conditions
            .has_callbacks(Condition::PROCESSOR_STILL_IDLE)
}

/// The scheduler found nothing to do for the first time since it last had
/// work.
pub(crate) fn begin_idle(pe: &Pe) {
    pe.trace.idle_begin();
    pe.ccd.idle.set(true);
    conditions::raise(pe, Condition::PROCESSOR_BEGIN_IDLE);
}

/// The scheduler looked again and still found nothing: raises still-idle
/// once per wait; returns whether callbacks ran (then the scheduler looks
/// again before it waits, and the next call returns false).
pub(crate) fn still_idle(pe: &Pe) -> bool {
    if !pe.ccd.still_idle_raised.replace(true)
        && conditions::raise(pe, Condition::PROCESSOR_STILL_IDLE)
    {
        return true;
    }
    pe.ccd.still_idle_raised.set(false);
    false
}

/// When the current idle period began (now, if nothing asked before).
pub(crate) fn idle_since(pe: &Pe, now: Instant) -> Instant {
    let since = pe.ccd.idle_since.get().unwrap_or(now);
    pe.ccd.idle_since.set(Some(since));
    since
}

impl Pe {
    /// The scheduler found nothing to do and has not found work since.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.ccd.idle.get()
    }

    /// Timers or periodic conditions are set: the scheduler counts its
    /// steps for [`tick`] (see the module invariants).
    #[inline]
    pub(crate) fn ccd_armed(&self) -> bool {
        self.ccd.armed.get()
    }
}

/// The scheduler found work after being idle.
pub(crate) fn end_idle(pe: &Pe) {
    pe.trace.idle_end();
    pe.ccd.idle.set(false);
    pe.ccd.idle_since.set(None);
    pe.ccd.still_idle_raised.set(false);
    conditions::raise(pe, Condition::PROCESSOR_BEGIN_BUSY);
}
