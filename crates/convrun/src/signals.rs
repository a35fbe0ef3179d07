//! Ctrl-C, SIGTERM and SIGHUP to `convrun` end the whole job: the handler
//! records the signal, and the job's loops ask [`stop_requested`] between
//! their steps and end the processes themselves.
//!
//! # Concurrency
//!
//! The handler runs on whichever thread the signal lands on and only
//! stores to an atomic (async-signal-safe); the job's thread reads it.
use std::sync::atomic::{AtomicI32, Ordering};

/// Signal number that asked `convrun` to end the job (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; `sigaction` is given a zeroed, valid struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The signal that asked to end the job, if one did.
pub fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
