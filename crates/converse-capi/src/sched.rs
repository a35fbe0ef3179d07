//! The scheduler and its queue from C: `CsdScheduler` and its forms,
//! `CsdExitScheduler`, `CmiDeliverMsgs`, `CmiDeliverSpecificMsg`, and
//! `CsdEnqueue*` (the buffer enqueued is taken, as an `AndFree` send takes
//! it: the scheduler frees nothing; the handler owns it when it runs).
use std::ffi::{c_int, c_void};

use crate::msgs::take_whole;

/// `CsdScheduler(n)`: `n < 0` schedules until `CsdExitScheduler`, `0`
/// delivers what is ready and returns, `n > 0` delivers `n` messages,
/// waiting for them. Returns, for `n > 0`, how many of the `n` were left
/// when the scheduler was stopped (0 if all were delivered); else 0.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdScheduler(n: c_int) -> c_int {
    c_int::try_from(converse::scheduler(n)).unwrap_or(c_int::MAX)
}

/// `CsdScheduleForever()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdScheduleForever() {
    converse::schedule_forever();
}

/// `CsdScheduleCount(n)`: delivers `n` messages, waiting for them;
/// returns how many were left when the scheduler was stopped (0 if all
/// were delivered).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdScheduleCount(n: c_int) -> c_int {
    let n = crate::nonneg(n, "CsdScheduleCount");
    c_int::try_from(converse::schedule_count(n)).unwrap_or(c_int::MAX)
}

/// `CsdSchedulePoll()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdSchedulePoll() {
    converse::schedule_poll();
}

/// `CsdExitScheduler()`: the innermost running scheduler loop returns.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdExitScheduler() {
    converse::exit_scheduler();
}

/// `CmiDeliverMsgs(n)`: delivers arrived messages only (not the
/// scheduler's queue), up to `n` of them (all if `n < 0`); returns how
/// many of the `n` were left (0 for `n < 0`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiDeliverMsgs(n: c_int) -> c_int {
    let max = usize::try_from(n).unwrap_or(usize::MAX);
    let left = converse::deliver_msgs(max);
    if n < 0 {
        0
    } else {
        c_int::try_from(left).unwrap_or(0)
    }
}

/// `CmiDeliverSpecificMsg(handler)`: waits for a message for `handler`
/// and delivers it (others stay queued, in order).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiDeliverSpecificMsg(handler: c_int) {
    converse::deliver_specific_msg(crate::nonneg(handler, "CmiDeliverSpecificMsg"));
}

/// `CsdEnqueue(msg)`: queues the buffer on the calling PE, FIFO among
/// messages of no priority.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdEnqueue(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::enqueue(unsafe { take_whole(msg, "CsdEnqueue") });
}

/// `CsdEnqueueFifo(msg)`.
///
/// # Safety
/// As [`CsdEnqueue`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdEnqueueFifo(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::enqueue_fifo(unsafe { take_whole(msg, "CsdEnqueueFifo") });
}

/// `CsdEnqueueLifo(msg)`.
///
/// # Safety
/// As [`CsdEnqueue`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdEnqueueLifo(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::enqueue_lifo(unsafe { take_whole(msg, "CsdEnqueueLifo") });
}
