//! Conditions and timers (Ccd) from C: `CcdCallOnCondition` and its kept
//! and cancelling forms, `CcdRaiseCondition`, `CcdCallFnAfter` and the
//! timer resolution, over the core's [`Condition`]s.
//!
//! # Invariants
//!
//! - Condition numbers are recent Charm++'s (`converse.h`: `CcdUSER` is
//!   22), mapped one to one onto the core's [`Condition`]s, whose own
//!   numbers differ. The numbers Charm++ has and the core does not raise
//!   (`CcdSCHEDLOOP`, `CcdPROCESSOR_LONG_IDLE`, `CcdPERIODIC_5s`,
//!   `CcdPERIODIC_2minute`, `CcdPERIODIC_5minute`, `CcdTOPOLOGY_AVAIL`),
//!   and any other unknown number, end the job with the call and the
//!   number named: a callback registered for a condition that is never
//!   raised would fail silently.
//! - User conditions run from `CcdUSER` to `CcdUSER` plus the core's
//!   number of user conditions, less one ([`c_user_last`]); the header's
//!   `CcdUSERMAX` (127 by default, as in Charm++) may be raised up to that
//!   when a program defines it first.
//! - A callback is the C function with its `arg`, called as
//!   `fn(arg, wall_time)` (`CcdVoidFn`, the manual's type) or `fn(arg)`
//!   (`CcdCondFn`, recent Charm++'s type for conditions): the header
//!   chooses the entry point by the function's type, so both compile.
//! - Callback indices are the core's, unique on the PE: cancelling an
//!   index that already ran, or a negative one, does nothing.
//!
//! # Concurrency
//!
//! None of its own: callbacks run on the PE that registered them (the
//! core's rule), and `arg` is only ever handed back to them there.
use std::ffi::{c_int, c_void};

use converse::Condition;

/// A timer's or a condition's callback: `void fn(void *arg, double
/// wall_time)` (`CcdVoidFn`).
pub type CcdVoidFn = extern "C-unwind" fn(*mut c_void, f64);

/// A condition's callback without the time: `void fn(void *arg)`
/// (`CcdCondFn`).
pub type CcdCondFn = extern "C-unwind" fn(*mut c_void);

/// `CcdUSER`: the first user condition's C number.
pub const C_USER: c_int = 22;

/// The last user condition's C number the core has room for (517; the
/// header's `CcdUSERMAX` check repeats it).
pub fn c_user_last() -> c_int {
    let room = Condition::USER_MAX.number() - Condition::USER.number();
    C_USER + c_int::try_from(room).expect("a few hundred user conditions")
}

/// The core's condition for C number `n`, or the job ends naming `call`.
fn condition(n: c_int, call: &str) -> Condition {
    let known = match n {
        1 => Some(Condition::PROCESSOR_BEGIN_BUSY),
        2 => Some(Condition::PROCESSOR_BEGIN_IDLE),
        3 => Some(Condition::PROCESSOR_STILL_IDLE),
        5 => Some(Condition::PERIODIC),
        6 => Some(Condition::PERIODIC_10MS),
        7 => Some(Condition::PERIODIC_100MS),
        8 => Some(Condition::PERIODIC_1S),
        10 => Some(Condition::PERIODIC_10S),
        11 => Some(Condition::PERIODIC_1MIN),
        14 => Some(Condition::PERIODIC_10MIN),
        15 => Some(Condition::PERIODIC_1HOUR),
        16 => Some(Condition::PERIODIC_12HOUR),
        17 => Some(Condition::PERIODIC_1DAY),
        18 => Some(Condition::QUIESCENCE),
        20 => Some(Condition::SIGUSR1),
        21 => Some(Condition::SIGUSR2),
        n if (C_USER..=c_user_last()).contains(&n) => {
            Condition::from_number(Condition::USER.number() + (n - C_USER) as usize)
        }
        _ => None,
    };
    known.unwrap_or_else(|| {
        let charm = match n {
            0 => " (Charm++'s CcdSCHEDLOOP)",
            4 => " (Charm++'s CcdPROCESSOR_LONG_IDLE)",
            9 => " (Charm++'s CcdPERIODIC_5s)",
            12 => " (Charm++'s CcdPERIODIC_2minute)",
            13 => " (Charm++'s CcdPERIODIC_5minute)",
            19 => " (Charm++'s CcdTOPOLOGY_AVAIL)",
            _ => "",
        };
        converse::abort(&format!(
            "{call}: condition {n}{charm} is not one converse-rs has (system conditions 1-3, 5-8, 10, 11, 14-18, 20, 21; user conditions CcdUSER {C_USER} to {})",
            c_user_last()
        ))
    })
}

/// The callback `f` or the job ends naming `call`.
fn non_null<F>(f: Option<F>, call: &str) -> F {
    f.unwrap_or_else(|| converse::abort(&format!("{call}: the callback function is null")))
}

/// A core callback index as C's `int`.
fn index_int(index: usize, call: &str) -> c_int {
    c_int::try_from(index).unwrap_or_else(|_| {
        converse::abort(&format!(
            "{call}: more callbacks registered than a C int counts"
        ))
    })
}

/// `CcdCallFnAfter(fn, arg, msecs)`: calls `fn(arg, wall_time)` on this PE
/// in the first scheduler poll at least `msecs` milliseconds from now.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdCallFnAfter(f: Option<CcdVoidFn>, arg: *mut c_void, msecs: f64) {
    let f = non_null(f, "CcdCallFnAfter");
    converse::call_fn_after(move |now| f(arg, now), msecs);
}

/// `CcdCallFnAfter` with a `CcdCondFn` (`fn(arg)`): the header's choice
/// for a callback of that type.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCcdCallFnAfterCond_(
    f: Option<CcdCondFn>,
    arg: *mut c_void,
    msecs: f64,
) {
    let f = non_null(f, "CcdCallFnAfter");
    converse::call_fn_after(move |_| f(arg), msecs);
}

/// `CcdCallOnCondition(condnum, fn, arg)`: calls `fn(arg, wall_time)` the
/// next time `condnum` is raised on this PE, once; returns an index for
/// `CcdCancelCallOnCondition`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdCallOnCondition(
    condnum: c_int,
    f: Option<CcdVoidFn>,
    arg: *mut c_void,
) -> c_int {
    const CALL: &str = "CcdCallOnCondition";
    let (cond, f) = (condition(condnum, CALL), non_null(f, CALL));
    index_int(
        converse::call_on_condition(cond, move |now| f(arg, now)),
        CALL,
    )
}

/// `CcdCallOnCondition` with a `CcdCondFn` (`fn(arg)`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCcdCallOnConditionCond_(
    condnum: c_int,
    f: Option<CcdCondFn>,
    arg: *mut c_void,
) -> c_int {
    const CALL: &str = "CcdCallOnCondition";
    let (cond, f) = (condition(condnum, CALL), non_null(f, CALL));
    index_int(converse::call_on_condition(cond, move |_| f(arg)), CALL)
}

/// `CcdCallOnConditionKeep(condnum, fn, arg)`: calls `fn(arg, wall_time)`
/// every time `condnum` is raised on this PE, until cancelled; returns an
/// index for `CcdCancelCallOnConditionKeep`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdCallOnConditionKeep(
    condnum: c_int,
    f: Option<CcdVoidFn>,
    arg: *mut c_void,
) -> c_int {
    const CALL: &str = "CcdCallOnConditionKeep";
    let (cond, f) = (condition(condnum, CALL), non_null(f, CALL));
    index_int(
        converse::call_on_condition_keep(cond, move |now| f(arg, now)),
        CALL,
    )
}

/// `CcdCallOnConditionKeep` with a `CcdCondFn` (`fn(arg)`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCcdCallOnConditionKeepCond_(
    condnum: c_int,
    f: Option<CcdCondFn>,
    arg: *mut c_void,
) -> c_int {
    const CALL: &str = "CcdCallOnConditionKeep";
    let (cond, f) = (condition(condnum, CALL), non_null(f, CALL));
    index_int(
        converse::call_on_condition_keep(cond, move |_| f(arg)),
        CALL,
    )
}

fn cancel(condnum: c_int, idx: c_int, call: &str) {
    let cond = condition(condnum, call);
    // A negative index was never given out: nothing to cancel.
    if let Ok(idx) = usize::try_from(idx) {
        converse::cancel_call_on_condition(cond, idx);
    }
}

/// `CcdCancelCallOnCondition(condnum, idx)`: the one-shot callback `idx`
/// of `condnum` will not be called.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdCancelCallOnCondition(condnum: c_int, idx: c_int) {
    cancel(condnum, idx, "CcdCancelCallOnCondition");
}

/// `CcdCancelCallOnConditionKeep(condnum, idx)`: the kept callback `idx`
/// of `condnum` will not be called again.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdCancelCallOnConditionKeep(condnum: c_int, idx: c_int) {
    cancel(condnum, idx, "CcdCancelCallOnConditionKeep");
}

/// `CcdRaiseCondition(condnum)`: calls, on this PE, the callbacks
/// registered for `condnum` before this call (one-shot ones first, then
/// kept ones, each oldest first, as in Charm++).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdRaiseCondition(condnum: c_int) {
    converse::raise_condition(condition(condnum, "CcdRaiseCondition"));
}

/// `CcdSetResolution(seconds)`: the timer resolution (at most 5 ms);
/// returns the old one, in seconds.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdSetResolution(seconds: f64) -> f64 {
    converse::set_resolution(seconds)
}

/// `CcdResetResolution()`: back to the default, 5 ms; returns the old
/// resolution, in seconds.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdResetResolution() -> f64 {
    converse::reset_resolution()
}

/// `CcdIncreaseResolution(seconds)`: sets the resolution only if `seconds`
/// is shorter; returns the resolution before the call, in seconds.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcdIncreaseResolution(seconds: f64) -> f64 {
    converse::increase_resolution(seconds)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_knows_the_last_user_condition() {
        let header = include_str!("../include/converse-rs/threads.h");
        let last = super::c_user_last();
        assert!(
            header.contains(&format!("#if CcdUSERMAX > {last}\n")),
            "threads.h's CcdUSERMAX check is not {last}"
        );
    }
}
