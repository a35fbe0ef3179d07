//! Semaphores and error semaphores (`gamma_signal`, `gamma_sigerr`,
//! `gamma_wait`, `gamma_test`), `gamma_atomic`, and what a handler sees
//! (`gamma_active_port`, `gamma_errno`).
//!
//! # Invariants
//!
//! A semaphore only grows by arrivals and `signal`, and shrinks only by a
//! `wait` that saw it reach its count; the error count of a semaphore is
//! reset by each `wait` on it.
use crate::error::Result;
use crate::node;

/// Adds one to semaphore `sem` (`gamma_signal`), typically from a
/// receiver handler.
#[doc(alias = "gamma_signal")]
pub fn signal(sem: u16) -> Result<()> {
    let n = node::current()?;
    let s = node::user_port(sem)?;
    n.sems[s].set(n.sems[s].get() + 1);
    Ok(())
}

/// Adds one to semaphore `sem`'s error count (`gamma_sigerr`), typically
/// from an error handler.
#[doc(alias = "gamma_sigerr")]
pub fn sigerr(sem: u16) -> Result<()> {
    let n = node::current()?;
    let s = node::user_port(sem)?;
    n.errs[s].set(n.errs[s].get() + 1);
    Ok(())
}

/// Waits until semaphore `sem` reaches `count`, then takes `count` from it
/// (`gamma_wait`). Returns how many errors were signalled on it since the
/// previous wait (the C function returns that count negated, or 0). While
/// waiting the node delivers messages, so handlers run. A wait that can
/// never end (every other node left, nothing pending) is an
/// [`Error::Deadlock`](crate::Error::Deadlock), not a hang.
#[doc(alias = "gamma_wait")]
pub fn wait(sem: u16, count: u64) -> Result<u64> {
    let n = node::current()?;
    let s = node::user_port(sem)?;
    n.wait_until(
        &|| {
            format!(
                "gamma_wait({sem}, {count}) has {} of {count}",
                node::raw().map_or(0, |n| n.sems[s].get())
            )
        },
        &mut |n| n.sems[s].get() >= count,
    )?;
    n.sems[s].set(n.sems[s].get() - count);
    Ok(n.errs[s].replace(0))
}

/// Semaphore `sem`'s value, unchanged (`gamma_test`). Delivers what has
/// arrived first.
#[doc(alias = "gamma_test")]
pub fn test(sem: u16) -> Result<u64> {
    let n = node::current()?;
    let s = node::user_port(sem)?;
    converse::schedule_poll();
    Ok(n.sems[s].get())
}

/// Runs `f` with no receiver or error handler interleaved
/// (`gamma_atomic`): messages arriving meanwhile (if `f` polls) are stored
/// and handled after it returns.
#[doc(alias = "gamma_atomic")]
pub fn atomic<R>(f: impl FnOnce() -> R) -> Result<R> {
    let n = node::current()?;
    n.atomic_depth.set(n.atomic_depth.get() + 1);
    let r = f();
    n.atomic_depth.set(n.atomic_depth.get() - 1);
    if n.atomic_depth.get() == 0 {
        n.drain_all();
    }
    Ok(r)
}

/// Inside a receiver or error handler, the port that triggered it
/// (`gamma_active_port`); `None` elsewhere.
#[doc(alias = "gamma_active_port")]
pub fn active_port() -> Option<u16> {
    node::raw().and_then(|n| n.active_port.get())
}

/// Inside an error handler, the error condition (`gamma_errno`:
/// [`ERR_MSGTOOLONG`](crate::ERR_MSGTOOLONG),
/// [`ERR_SENDFAILURE`](crate::ERR_SENDFAILURE)); 0 elsewhere.
#[doc(alias = "gamma_errno")]
pub fn errno() -> u8 {
    node::raw().map_or(0, |n| n.errno.get())
}
