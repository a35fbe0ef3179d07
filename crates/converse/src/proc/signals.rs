//! Signals the runtime counts instead of taking their default action:
//! SIGUSR1 and SIGUSR2 for the signal conditions (`ccd`), SIGQUIT for the
//! watchdog's dump (`rt::watchdog`).
//!
//! The handler only counts the signal (an atomic add, which is
//! async-signal-safe); whoever waits for it compares the count with the
//! one it last saw. Each handler is installed the first time it is asked
//! for, so a program that never asks keeps the signal's default action.
//!
//! For the conditions: every PE with callbacks for one compares the count
//! when it polls and raises the condition from its scheduler; a PE with
//! such callbacks polls at least once per timer resolution, idle or not.
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counted signals, by their `which`.
const SIGNALS: [libc::c_int; 3] = [libc::SIGUSR1, libc::SIGUSR2, libc::SIGQUIT];
/// `which` of SIGUSR1, SIGUSR2 and SIGQUIT.
pub(crate) const USR1: usize = 0;
pub(crate) const USR2: usize = 1;
pub(crate) const QUIT: usize = 2;

static COUNTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
static INSTALLED: [Once; 3] = [Once::new(), Once::new(), Once::new()];

/// How many times signal `which` ([`USR1`], [`USR2`], [`QUIT`]) has
/// arrived since its handler was installed.
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
    if let Some(which) = SIGNALS.iter().position(|&s| s == sig) {
        COUNTS[which].fetch_add(1, Ordering::Release);
    }
}
