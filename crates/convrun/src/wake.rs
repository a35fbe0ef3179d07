//! Waiting for the launcher's next event instead of sleeping a fixed nap:
//! a loop gathers the descriptors that can bring it news (the control
//! socket, connections saying hello, control links, a pidfd per running
//! process, the signal pipe) into a [`Watch`] and sleeps in `poll(2)` until
//! one is ready or its deadline passes; then it does its non-blocking sweep
//! as before. A job's start-up and end therefore cost no nap: `convrun`
//! answers a hello or an exit as soon as it happens.
//!
//! # Invariants
//!
//! - A loop watches a descriptor only while its sweep consumes what makes
//!   it ready (a link at end of file and a reaped process's pidfd are left
//!   out), else the loop would spin.
//! - Where an event source cannot be watched (a kernel without pidfds,
//!   Linux before 5.3), the watch is *blind*: the wait is capped at
//!   [`BLIND_NAP`], the nap the loops took before.
//! - The signal pipe is drained whenever a wait ends on it or on an
//!   interruption, so a signal wakes one wait and no later one; the loops
//!   read the signal itself with [`crate::signals::stop_requested`] after
//!   every wait.
//!
//! # Concurrency
//!
//! The job's thread only; the signal handler writes the pipe.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Child;
use std::time::{Duration, Instant};

/// The longest a wait sleeps while some event source cannot be watched.
pub const BLIND_NAP: Duration = Duration::from_millis(5);

/// The longest any wait sleeps: a safety net, not a clock anything relies
/// on.
const LONGEST: Duration = Duration::from_secs(1);

/// What one wait watches.
pub struct Watch {
    fds: Vec<libc::pollfd>,
    /// Some event source could not be watched.
    blind: bool,
}

impl Watch {
    /// A watch of the signal pipe alone.
    pub fn new() -> Watch {
        let mut w = Watch::nothing();
        match crate::signals::wake_fd() {
            Some(fd) => w.add(fd),
            None => w.blind = true,
        }
        w
    }

    /// A watch of nothing (only the deadline ends its wait).
    fn nothing() -> Watch {
        Watch {
            fds: Vec::new(),
            blind: false,
        }
    }

    /// Also wakes when `fd` is readable (or at end of file, or in error).
    pub fn add(&mut self, fd: RawFd) {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }

    /// Also wakes when the process behind `pidfd` exits; `None` (no pidfd)
    /// makes the watch blind.
    pub fn add_exit(&mut self, pidfd: Option<&OwnedFd>) {
        match pidfd {
            Some(fd) => self.add(fd.as_raw_fd()),
            None => self.blind = true,
        }
    }

    /// Sleeps until something watched is ready or `until` passes (at most
    /// [`BLIND_NAP`] if the watch is blind, and never over a second).
    pub fn wait(mut self, until: Instant) {
        let cap = if self.blind { BLIND_NAP } else { LONGEST };
        let timeout = until.saturating_duration_since(Instant::now()).min(cap);
        // Round up: a wait of 0.4 ms must not become a busy `poll(0)`.
        let ms = timeout.as_micros().div_ceil(1000) as libc::c_int;
        // SAFETY: `fds` is a live, initialised array of `fds.len()`
        // pollfds that `poll` may write the `revents` of.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n > 0 {
            if let Some(fd) = crate::signals::wake_fd() {
                if self.fds.iter().any(|p| p.fd == fd && p.revents != 0) {
                    crate::signals::drain_wake();
                }
            }
        } else if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                // A signal (the loop reads it next); its byte too.
                crate::signals::drain_wake();
            } else {
                // Out of memory for the poll, say: no busy loop, the nap
                // the loops took before.
                std::thread::sleep(timeout.min(BLIND_NAP));
            }
        }
    }
}

/// A pidfd for `child`, or `None` where the kernel has none (the watches
/// of its exit are then blind). Opened right after the spawn: the pid is
/// ours until we reap it, so it names this child even if it has exited.
pub fn pidfd_of(child: &Child) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
    // descriptor (close-on-exec) or -1; nothing is borrowed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_wait_ends_when_the_child_exits_not_at_its_deadline() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let Some(pidfd) = pidfd_of(&child) else {
            eprintln!("skipped: no pidfds here (Linux before 5.3, or a seccomp filter)");
            child.wait().unwrap();
            return;
        };
        let t = Instant::now();
        let mut w = Watch::nothing();
        w.add_exit(Some(&pidfd));
        w.wait(t + Duration::from_secs(20));
        // It slept (the child is gone), and not until the one-second
        // safety net.
        assert!(child.try_wait().unwrap().is_some());
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_blind_wait_is_capped_at_the_nap() {
        let t = Instant::now();
        let mut w = Watch::nothing();
        w.add_exit(None);
        w.wait(t + Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_millis(900));
    }
}
