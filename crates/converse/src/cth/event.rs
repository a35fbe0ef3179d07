//! Blocking helpers built on threads: [`Event`] and [`sleep`].
//!
//! Both block only the calling user-level thread (the scheduler goes on
//! running other work) and refuse, through [`check_can_block`], to run where
//! the manual forbids blocking: in a handler and in the start function.
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::{Thread, check_can_block};

/// A one-shot event on one PE: threads [`wait`](Event::wait) until someone
/// [`set`](Event::set)s it. The building block for futures and similar
/// synchronisation between the threads and handlers of a PE.
pub struct Event {
    is_set: Cell<bool>,
    /// Bumped by every `set` that sets the event: a waiter returns once it
    /// changed, even if the event was reset before the waiter ran again.
    generation: Cell<u64>,
    waiters: RefCell<Vec<Thread>>,
}

impl Default for Event {
    fn default() -> Self {
        Event::new()
    }
}

impl Event {
    /// An event that is not set.
    pub fn new() -> Event {
        Event {
            is_set: Cell::new(false),
            generation: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
        }
    }

    /// Blocks the calling thread until the event is set; returns at once if
    /// it is. Aborts in a handler or the start function (see
    /// [`check_can_block`]). On the main flow of an `init_returns` job it
    /// also returns when the job is exiting (check
    /// [`job_exiting`](crate::job_exiting)): that flow cannot be unwound.
    pub fn wait(&self) {
        check_can_block("Event::wait");
        let entry = self.generation.get();
        while !self.is_set.get() && self.generation.get() == entry {
            if leave_main_flow_if_exiting() {
                return;
            }
            let me = Thread::current();
            {
                let mut waiters = self.waiters.borrow_mut();
                if !waiters.contains(&me) {
                    waiters.push(me);
                }
            }
            crate::cth::suspend_as(false);
        }
    }

    /// Sets the event and awakens every thread waiting for it, in the order
    /// they started waiting. Setting a set event does nothing.
    pub fn set(&self) {
        if self.is_set.replace(true) {
            return;
        }
        self.generation.set(self.generation.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for t in waiters {
            t.awaken();
        }
    }

    /// True once [`set`](Event::set) was called (and not [`reset`](Event::reset) since).
    pub fn is_set(&self) -> bool {
        self.is_set.get()
    }

    /// Makes the event not set again, for reuse.
    pub fn reset(&self) {
        self.is_set.set(false);
    }
}

/// Blocks the calling thread for at least `ms` milliseconds, letting the
/// scheduler run other work meanwhile (a timer from
/// [`call_fn_after`](crate::ccd::call_fn_after) awakens it). Aborts in a
/// handler or the start function (see [`check_can_block`]). Like
/// [`Event::wait`], returns early on the main flow of an `init_returns` job
/// that is exiting.
pub fn sleep(ms: f64) {
    check_can_block("sleep");
    let me = Thread::current();
    let done = Rc::new(Cell::new(false));
    let flag = done.clone();
    crate::ccd::call_fn_after(
        move |_| {
            flag.set(true);
            me.awaken();
        },
        ms,
    );
    while !done.get() {
        if leave_main_flow_if_exiting() {
            return;
        }
        crate::cth::suspend_as(false);
    }
}

/// True if the caller, the main flow of an `init_returns` job, must stop
/// waiting because the job is exiting (it cannot be unwound). The main flow
/// of a worker PE unwinds here instead; a coroutine thread goes on waiting
/// (its scheduler unwinds the PE, or teardown unwinds the thread).
fn leave_main_flow_if_exiting() -> bool {
    crate::rt::pe::with(|pe| pe.cth.current().is_main_flow() && pe.leave_if_exiting())
}
