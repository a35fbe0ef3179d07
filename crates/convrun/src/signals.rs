//! Ctrl-C, SIGTERM and SIGHUP to `convrun` end the whole job: the handler
//! records the signal and writes a byte to the wake pipe (which the job's
//! waits watch, [`crate::wake`]), and the job's loops ask
//! [`stop_requested`] after every wait and end the processes themselves.
//!
//! # Concurrency
//!
//! The handler runs on whichever thread the signal lands on and only
//! stores to an atomic and writes one byte to a non-blocking pipe (both
//! async-signal-safe, and it keeps `errno`); the job's thread reads them.
use std::sync::atomic::{AtomicI32, Ordering};

/// Signal number that asked `convrun` to end the job (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The wake pipe's read and write ends (-1: no pipe).
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    let fd = WAKE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: errno is thread-local and read and restored around the
        // write, so the interrupted code sees its own; write(2) of one
        // byte from a live static to a non-blocking pipe is
        // async-signal-safe (a full pipe already wakes the waits).
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, b"s".as_ptr().cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP, opens the wake
/// pipe (without one, the waits are blind and cap their sleep), and puts
/// SIGCHLD back to its default: inherited as ignored, the kernel would reap
/// the processes itself, and the launcher would never see them end.
pub fn install() {
    // SAFETY: resetting a signal's disposition to the default.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    let mut ends = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into a live two-int array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0 {
        WAKE_READ.store(ends[0], Ordering::SeqCst);
        WAKE_WRITE.store(ends[1], Ordering::SeqCst);
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics and writes one byte to
        // a pipe, both async-signal-safe; `sigaction` is given a zeroed,
        // valid struct.
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

/// The wake pipe's read end, which a signal makes readable.
pub fn wake_fd() -> Option<libc::c_int> {
    match WAKE_READ.load(Ordering::SeqCst) {
        -1 => None,
        fd => Some(fd),
    }
}

/// Empties the wake pipe, so that the signals it holds wake no later wait.
pub fn drain_wake() {
    let Some(fd) = wake_fd() else { return };
    let mut buf = [0u8; 64];
    // SAFETY: reads into a live local buffer of its length from our own
    // non-blocking pipe; stops at -1 (empty) or 0.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}
