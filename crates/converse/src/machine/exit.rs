//! Ending a job: normally from any PE ([`exit`]), abnormally ([`abort`],
//! [`cmi_assert!`](crate::cmi_assert)).
//!
//! `exit(code)` ends the whole job: it records `code` (the first code
//! recorded wins), marks the job exiting and wakes every PE; each PE leaves at
//! its next scheduler step. The calling PE leaves at once: on a PE started by
//! the runtime this unwinds (running destructors) to the runtime, which then
//! finishes that PE. On the thread that called `init_returns` (whose frames
//! the runtime does not own, so it does not unwind them) it finishes the job
//! as the manual's ConverseInit-returns mode says — serving PE 0's messages
//! until the other PEs have returned from their start functions — and ends
//! the process with `code`. Locks held by that thread's callers stay held
//! meanwhile: release them before calling `exit` there.
//!
//! `abort(msg)` prints the message with the PE number to standard error and
//! ends the process at once with a non-zero code: use it for errors the
//! program cannot recover from. Runtime errors (unknown handlers, bad PE
//! numbers, mismatched handler tables) abort the same way.
use std::io::Write;

use super::pe::{self, ExitUnwind, Role};

/// Exit code of a job ended by [`abort`].
pub const ABORT_EXIT_CODE: i32 = 1;

/// Ends the whole job with exit code `code`, from any PE. Does not return.
///
/// On a PE the runtime started (normal and user-calls-scheduler modes, and
/// the other PEs of `init_returns`), the calling PE unwinds out of its code and
/// [`Converse::run`](crate::Converse::run) returns `code` once all PEs have
/// stopped. On the thread that called
/// [`init_returns`](crate::Converse::init_returns), finishes the job as
/// [`finish`](crate::finish) does (it waits for the other PEs' start functions
/// to return), then exits the process with `code`. Called on no PE at all,
/// exits the process with `code`.
#[doc(alias = "ConverseExit")]
pub fn exit(code: i32) -> ! {
    let Some(pe) = pe::try_current() else {
        flush_stdout();
        std::process::exit(code)
    };
    match pe.role {
        Role::Worker => {
            pe.job.exit_everywhere(code);
            drop(pe);
            std::panic::resume_unwind(Box::new(ExitUnwind))
        }
        Role::ReturnedMain => {
            // The other processes end too (this process finishes as
            // `finish` does).
            if let Some(net) = &pe.job.net {
                net.broadcast_exit(code);
            }
            drop(pe);
            let code = crate::machine::startup::finish_returned_main(code);
            flush_stdout();
            std::process::exit(code)
        }
    }
}

/// True once some PE has called [`exit`] (or panicked): the job is ending.
/// PEs the runtime started leave by themselves at their next scheduler step;
/// the code of an `init_returns` main thread, which the runtime does not
/// unwind, can use this to stop polling.
pub fn job_exiting() -> bool {
    pe::with(|pe| pe.job.is_exiting())
}

/// Prints `msg` with the calling PE's number to standard error and ends the
/// job (the whole process) at once with exit code [`ABORT_EXIT_CODE`].
#[doc(alias = "CmiAbort")]
pub fn abort(msg: &str) -> ! {
    flush_stdout();
    let current = pe::try_current();
    let line = match &current {
        Some(pe) => format!("converse: PE {} aborting: {msg}\n", pe.pe),
        None => format!("converse: aborting: {msg}\n"),
    };
    {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
    }
    // CCS clients that asked (`ccs_killport`) learn that the job ends.
    crate::ccs::server::notify_killers_at_exit();
    // The other processes of the job end too, saying why.
    if let Some(net) = current.as_ref().and_then(|pe| pe.job.net.clone()) {
        let who = current.as_ref().map_or(0, |pe| pe.pe);
        net.tell_abort(&format!("PE {who} aborted: {msg}"));
    }
    std::process::exit(ABORT_EXIT_CODE)
}

fn flush_stdout() {
    let _ = std::io::stdout().flush();
}

/// Aborts the job (see [`abort`]) with the expression, file and line if
/// `expr` is false. Compiled out when the crate feature `cmk-optimize` is on
/// (the manual's `CMK_OPTIMIZE`).
#[doc(alias = "CmiAssert")]
#[macro_export]
macro_rules! cmi_assert {
    ($expr:expr $(,)?) => {
        if !$crate::machine::exit::ASSERTS_OFF && !($expr) {
            $crate::abort(&::std::format!(
                "assertion `{}` failed at {}:{}",
                ::std::stringify!($expr),
                ::std::file!(),
                ::std::line!()
            ));
        }
    };
}

/// True when `cmi_assert!` is compiled out.
#[doc(hidden)]
pub const ASSERTS_OFF: bool = cfg!(feature = "cmk-optimize");
