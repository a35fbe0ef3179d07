//! SIGUSR1 and SIGUSR2 for the signal conditions.
//!
//! The handler only counts the signal (an atomic add, which is
//! async-signal-safe); every PE with callbacks for the condition compares the
//! count with the one it last saw when it polls, and raises the condition from
//! its scheduler. A PE with such callbacks polls at least once per timer
//! resolution, idle or not. The handler is installed the first time a
//! callback is registered for the condition, so a program that never asks
//! keeps the signals' default actions.
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static INSTALLED: [Once; 2] = [Once::new(), Once::new()];
const SIGNALS: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// How many times signal `which` (0: SIGUSR1, 1: SIGUSR2) has arrived.
pub(crate) fn count(which: usize) -> u64 {
    COUNTS[which].load(Ordering::Acquire)
}

/// Installs the counting handler for signal `which`, once per process.
pub(crate) fn install(which: usize) {
    INSTALLED[which].call_once(|| {
        // SAFETY: a plain sigaction call with a zeroed, filled-in struct; the
        // handler does only an atomic add.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(SIGNALS[which], &action, std::ptr::null_mut()) != 0 {
                crate::proc::exit::abort(&format!(
                    "cannot install a handler for signal {}: {}",
                    SIGNALS[which],
                    std::io::Error::last_os_error()
                ));
            }
        }
    });
}

extern "C" fn on_signal(sig: libc::c_int) {
    let which = usize::from(sig == libc::SIGUSR2);
    COUNTS[which].fetch_add(1, Ordering::Release);
}
