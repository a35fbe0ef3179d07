//! The per-PE state of the scheduler: the types, on the floor below `rt`,
//! so that `rt::Pe` holds them without naming `csd` (DESIGN.md §3, first
//! rule; the floors are in `tests/layering.rs`), and the accessors the
//! floors between read it through (`cth`'s depths and queue, `ccd`'s
//! handler guard), which touch nothing but these fields.
//!
//! # Invariants
//!
//! The fields are visible to `csd` alone; what they mean, and the code
//! that keeps them, is in `csd`'s other modules (`impl` blocks there).
//! Everything here is touched only by its PE's thread.
use std::cell::{Cell, RefCell, RefMut};
use std::collections::VecDeque;

use crate::csd::cqs::{Cqs, Queueing};
use crate::csd::fifo::LocalFifo;
use crate::csd::shuffle::Shuffle;
use crate::cth::state::Thread;
use crate::msg::Message;

/// A PE's scheduler state (`Pe::sched`). Its fields are `csd`'s; the other
/// subsystems of the machine go through the methods `csd` gives `Pe`.
pub(crate) struct SchedState {
    /// Messages this PE sent to itself, in order.
    pub(in crate::csd) self_queue: LocalFifo<Message>,
    /// Arrived messages set aside (by `deliver_specific_msg`, or unpacked
    /// from a bundle); they run before anything else.
    pub(in crate::csd) stash: RefCell<VecDeque<Message>>,
    /// Arrived messages that routing held back and has since released (a
    /// multicast that came before its group's definition), and small ones
    /// the network handed this PE while it polled (`rt::network`,
    /// "Delivery to the polling PE"); taken before the inbox, so they keep
    /// their place among arrivals.
    pub(in crate::csd) ready: RefCell<VecDeque<Message>>,
    /// A message the network received for this PE while its thread polled
    /// was put in `ready` since the last [`Pe::take_polled`].
    pub(in crate::csd) polled: Cell<bool>,
    /// The PE's scheduler queue (`CsdEnqueue*`): messages and awakened
    /// threads.
    pub(in crate::csd) queue: RefCell<Cqs<Task>>,
    /// Handlers (and runtime deliveries) running on this PE, nested ones
    /// included.
    pub(in crate::csd) handler_depth: Cell<u32>,
    /// Bumped by `exit_scheduler` while a scheduler runs; every scheduler
    /// call running then (each compares with its value at entry) stops once
    /// control is back in it, as in Converse.
    pub(in crate::csd) stop_gen: Cell<u64>,
    /// Scheduler calls running on this PE (nested ones included).
    pub(in crate::csd) sched_depth: Cell<u32>,
    /// `exit_scheduler` was called while no scheduler ran: the next one
    /// started returns at once.
    pub(in crate::csd) stop_pending: Cell<bool>,
    /// `+randomized_msgq`: the arrivals held for a random draw.
    pub(in crate::csd) shuffle: Option<Shuffle>,
    /// This PE has run work from outside the job (a CCS request) since
    /// its last idle wait: the next one parks after the quick polls
    /// (`idle::Patience::Brief`). Cleared by that wait.
    pub(in crate::csd) served_outside: Cell<bool>,
}

/// Work in a PE's scheduler queue: a message or an awakened thread.
pub(crate) enum Task {
    Message(crate::msg::Message),
    Thread(Thread),
}

/// The scheduler's state as the other subsystems read and keep it: a
/// user-level thread carries its own handler and scheduler nesting (`cth`
/// puts it in place as it switches, and swaps the queue's front for a
/// direct switch); a condition callback or quiescence answer runs as a
/// handler (`ccd`). Accessors of this state only, no behaviour: they reach
/// nothing but its own fields.
impl SchedState {
    /// Handlers running on this PE (nested ones included).
    #[inline]
    pub(crate) fn handler_depth(&self) -> u32 {
        self.handler_depth.get()
    }

    /// Scheduler calls running on this PE (nested ones included).
    #[inline]
    pub(crate) fn sched_depth(&self) -> u32 {
        self.sched_depth.get()
    }

    /// Sets both depths: a user-level thread carries its own handler and
    /// scheduler nesting, which `cth` puts in place as it switches.
    #[inline]
    pub(crate) fn set_depths(&self, handler: u32, sched: u32) {
        self.handler_depth.set(handler);
        self.sched_depth.set(sched);
    }

    /// How many times `exit_scheduler` stopped running schedulers.
    #[inline]
    pub(crate) fn stop_gen(&self) -> u64 {
        self.stop_gen.get()
    }

    /// Puts `task` in the scheduler queue, counted as created for
    /// quiescence detection by the caller.
    #[inline]
    pub(crate) fn enqueue(&self, task: Task, queueing: Queueing) {
        self.queue.borrow_mut().enqueue(task, queueing);
    }

    /// The scheduler queue, borrowed mutably (for `cth`'s direct switch,
    /// which swaps its front). The caller runs no handler while it holds
    /// it.
    #[inline]
    pub(crate) fn queue_mut(&self) -> RefMut<'_, Cqs<Task>> {
        self.queue.borrow_mut()
    }

    /// True if a message that arrived, or that this PE sent itself, waits
    /// here (set aside, released, self-sent, or held for a random draw);
    /// the inboxes are `Pe::has_arrivals`'s.
    #[inline]
    pub(crate) fn has_held_arrivals(&self) -> bool {
        !self.stash.borrow().is_empty()
            || !self.ready.borrow().is_empty()
            || !self.self_queue.is_empty()
            || self.shuffle.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Counts a handler (or a callback run like one) as running on this PE
    /// while the returned guard lives.
    #[inline]
    pub(crate) fn enter_handler(&self) -> HandlerRunning<'_> {
        self.handler_depth.set(self.handler_depth.get() + 1);
        HandlerRunning(self)
    }
}

/// Counts a delivery in progress on a PE while it lives (unwinding
/// included): `SchedState::enter_handler`'s guard.
pub(crate) struct HandlerRunning<'a>(&'a SchedState);

impl Drop for HandlerRunning<'_> {
    fn drop(&mut self) {
        self.0.handler_depth.set(self.0.handler_depth.get() - 1);
    }
}
