//! Ending a job normally from any PE ([`exit`], ConverseExit); an abnormal
//! end is `proc::exit` ([`abort`](crate::abort)).
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
use super::pe::{self, ExitUnwind, Role};

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
        crate::proc::exit::end_process(code)
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
            let code = super::startup::finish_returned_main(code);
            crate::proc::exit::end_process(code)
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
