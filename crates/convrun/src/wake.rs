//! Waiting for the launcher's next event, in work that does not grow with
//! the job: every descriptor that can bring news (the signal pipe, the
//! control socket, connections saying hello, control links, a pidfd per
//! process, the processes' output pipes) is registered once in an
//! [`Epoll`] with a [`Token`] naming its process (or slot) and kind, and a
//! wake-up hands back only the events that came. A job of `P` processes
//! makes `O(P)` wake-ups (hellos, requests, output lines, ends, exits); a
//! wake-up that looked at every process would cost `O(P²)` in all (when
//! the loops rebuilt a `poll(2)` list of every descriptor each time, a
//! 1,024-process hello job cost the launcher 0.5-0.7 s of CPU, 2,048
//! processes 1.3 s; with this watch 0.3 s and 0.7 s).
//!
//! The job's descriptors are watched *edge-triggered*: an event says a
//! source became ready, once, and the job remembers it in a [`ReadyList`]
//! until a loop consumes it. That lets a loop that does not handle some
//! kind of event (the grace period reads no link) sleep while such a
//! source stays ready, instead of being woken again and again by it. The
//! output forwarders consume every event at once and watch
//! *level-triggered* ([`crate::output`]).
//!
//! # Invariants
//!
//! - Edge-triggered: whoever handles a source either takes it to
//!   `WouldBlock` (or its end), or keeps it listed as still ready (a
//!   fairness limit stopped it), or notes it as ready but parked (a link
//!   whose process must first take its answers) and lists it again when
//!   the reason is gone; an edge is never dropped.
//! - An event is a hint: a token may outlive its descriptor (a pending
//!   connection's slot reused, a process reaped) and a stale or spurious
//!   event costs one non-blocking attempt, never a wrong action.
//! - Write interest is registered only while lines wait for a link, so an
//!   idle link never wakes anyone.
//! - Where an event source cannot be watched (a kernel without pidfds,
//!   Linux before 5.3, or no signal pipe), the wait is *blind*: capped at
//!   [`BLIND_NAP`], the nap the loops took before, and the processes
//!   without a pidfd are checked by scanning them (an `O(P)` fallback).
//! - The signal pipe is drained (to empty) whenever a wait reports it, so
//!   a signal wakes one wait and no later one (a wait the signal
//!   interrupted returns no event; the pipe's edge is still queued and
//!   ends the next wait at once); the loops read the signal itself with
//!   [`crate::signals::stop_requested`] after every wait.
//!
//! # Concurrency
//!
//! An [`Epoll`] belongs to one thread: the job's, or one output
//! forwarder's. The signal handler only writes the pipe.
use std::collections::VecDeque;
use std::io::{Error, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Child;
use std::time::{Duration, Instant};

/// The longest a wait sleeps while some event source cannot be watched.
pub const BLIND_NAP: Duration = Duration::from_millis(5);

/// The longest any wait sleeps: a safety net, not a clock anything relies
/// on.
pub const LONGEST: Duration = Duration::from_secs(1);

/// Events taken from the kernel per wait at most; the others stay queued
/// there for the next wait (which then does not sleep).
const EVENTS_PER_WAIT: usize = 256;

/// Interest in a source becoming readable, or its peer hanging up.
pub const READ: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Interest in a source taking more bytes.
pub const WRITE: u32 = libc::EPOLLOUT as u32;
/// Edge-triggered (see the module comment).
pub const EDGE: u32 = libc::EPOLLET as u32;

/// What an event is about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Token {
    /// The signal pipe ([`crate::signals`]).
    Signal,
    /// The control socket: connections to accept.
    Listener,
    /// A connection saying hello, by its slot in the start-up's table.
    Pending(usize),
    /// Process `n`'s pidfd: it exited.
    Exit(usize),
    /// Process `n`'s control link.
    Link(usize),
    /// An output forwarder's stream `i`.
    Stream(usize),
}

impl Token {
    const KINDS: u64 = 8;

    fn encode(self) -> u64 {
        let (kind, index) = match self {
            Token::Signal => (0, 0),
            Token::Listener => (1, 0),
            Token::Pending(i) => (2, i),
            Token::Exit(n) => (3, n),
            Token::Link(n) => (4, n),
            Token::Stream(i) => (5, i),
        };
        (index as u64) * Token::KINDS + kind
    }

    fn decode(data: u64) -> Option<Token> {
        let index = (data / Token::KINDS) as usize;
        Some(match data % Token::KINDS {
            0 => Token::Signal,
            1 => Token::Listener,
            2 => Token::Pending(index),
            3 => Token::Exit(index),
            4 => Token::Link(index),
            5 => Token::Stream(index),
            _ => return None,
        })
    }
}

/// One event: what it is about, and what became possible. A hang-up or an
/// error counts as both readable and writable: the next read or write says
/// which.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Event {
    pub token: Token,
    pub readable: bool,
    pub writable: bool,
}

/// An epoll(7) instance and the buffer its waits fill.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new() -> std::io::Result<Epoll> {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor
        // (close-on-exec) or -1; nothing is borrowed.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: `fd` was just returned by the kernel; nothing else
            // owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: Token, interest: u32) -> std::io::Result<()> {
        let mut event = libc::epoll_event {
            events: interest,
            u64: token.encode(),
        };
        // SAFETY: `event` is a live, initialised struct the kernel only
        // reads; `fd` is a descriptor the caller holds open.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event) };
        if r < 0 {
            return Err(Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for `interest` (flags of [`READ`], [`WRITE`],
    /// [`EDGE`]); its events carry `token`. A source already ready at once
    /// has its event queued.
    pub fn add(&self, fd: RawFd, token: Token, interest: u32) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Changes what `fd` is watched for, and its token; a source ready for
    /// the new interest has its event queued (so no edge is missed by
    /// adding interest late).
    pub fn modify(&self, fd: RawFd, token: Token, interest: u32) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Stops watching `fd` (closing its last descriptor does too).
    pub fn remove(&self, fd: RawFd) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, Token::Signal, 0)
    }

    /// Sleeps until events come or `timeout` passes (`None`: no deadline),
    /// and returns the events, at most [`EVENTS_PER_WAIT`]. An interruption
    /// (a signal) returns none.
    pub fn wait(&mut self, timeout: Option<Duration>) -> std::io::Result<Vec<Event>> {
        let ms = match timeout {
            // Round up: a wait of 0.4 ms must not become a busy one.
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
            None => -1,
        };
        // SAFETY: `events` is a live array of `events.len()` initialised
        // structs that the kernel may overwrite.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let e = Error::last_os_error();
            return match e.kind() {
                ErrorKind::Interrupted => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        let either = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
        Ok(self.events[..n as usize]
            .iter()
            .filter_map(|e| {
                // Copies out of the (packed) struct, never a reference.
                let (flags, data) = (e.events, e.u64);
                Some(Event {
                    token: Token::decode(data)?,
                    readable: flags & (READ | either) != 0,
                    writable: flags & (WRITE | either) != 0,
                })
            })
            .collect())
    }
}

/// A wait of `until`, as a timeout from now, capped at [`BLIND_NAP`] if
/// `blind`, and at [`LONGEST`] anyway.
pub fn timeout_until(until: Instant, blind: bool) -> Duration {
    let cap = if blind { BLIND_NAP } else { LONGEST };
    until.saturating_duration_since(Instant::now()).min(cap)
}

/// Sources known to be ready that a loop has not consumed yet, in the
/// order they became ready, each listed at most once: the memory of an
/// edge-triggered watch (see the module comment). Sources are numbered
/// (processes, slots); the list holds a flag per number it has seen.
#[derive(Default)]
pub struct ReadyList {
    queue: VecDeque<usize>,
    listed: Vec<bool>,
}

impl ReadyList {
    /// Lists `i` at the back, unless it is listed already.
    pub fn push(&mut self, i: usize) {
        if i >= self.listed.len() {
            self.listed.resize(i + 1, false);
        }
        if !self.listed[i] {
            self.listed[i] = true;
            self.queue.push_back(i);
        }
    }

    /// Takes the source listed first.
    pub fn pop(&mut self) -> Option<usize> {
        let i = self.queue.pop_front()?;
        self.listed[i] = false;
        Some(i)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// A pidfd for `child`, or `None` where the kernel has none (its exit is
/// then watched blind). Opened right after the spawn: the pid is ours
/// until we reap it, so it names this child even if it has exited.
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
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::process::Command;

    #[test]
    fn tokens_round_trip() {
        for t in [
            Token::Signal,
            Token::Listener,
            Token::Pending(0),
            Token::Pending(1023),
            Token::Exit(7),
            Token::Link(100_000),
            Token::Stream(3),
        ] {
            assert_eq!(Token::decode(t.encode()), Some(t));
        }
        assert_eq!(Token::decode(6), None);
    }

    #[test]
    fn a_ready_list_keeps_order_and_lists_once() {
        let mut r = ReadyList::default();
        assert!(r.pop().is_none());
        for i in [5, 2, 5, 9, 2] {
            r.push(i);
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.pop(), Some(5));
        // Taken, it may be listed anew (at the back).
        r.push(5);
        assert_eq!(
            (r.pop(), r.pop(), r.pop(), r.pop()),
            (Some(2), Some(9), Some(5), None)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn an_edge_is_reported_once_and_write_interest_added_late_still_fires() {
        let mut ep = Epoll::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        ep.add(a.as_raw_fd(), Token::Link(3), READ | EDGE).unwrap();
        assert!(ep.wait(Some(Duration::ZERO)).unwrap().is_empty());
        b.write_all(b"x").unwrap();
        let got = ep.wait(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].token, Token::Link(3));
        assert!(got[0].readable && !got[0].writable);
        // Not read: no new edge, no new event (the job's ready list is
        // what remembers it).
        assert!(ep.wait(Some(Duration::ZERO)).unwrap().is_empty());
        // Interest in writing added while the socket has room: reported
        // at once.
        ep.modify(a.as_raw_fd(), Token::Link(3), READ | WRITE | EDGE)
            .unwrap();
        let got = ep.wait(Some(Duration::ZERO)).unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].writable);
        let mut buf = [0u8; 8];
        assert_eq!((&a).read(&mut buf).unwrap(), 1);
        ep.remove(a.as_raw_fd()).unwrap();
        b.write_all(b"y").unwrap();
        assert!(ep.wait(Some(Duration::ZERO)).unwrap().is_empty());
    }

    #[test]
    fn a_wait_ends_when_the_child_exits_not_at_its_deadline() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let Some(pidfd) = pidfd_of(&child) else {
            eprintln!("skipped: no pidfds here (Linux before 5.3, or a seccomp filter)");
            child.wait().unwrap();
            return;
        };
        let mut ep = Epoll::new().unwrap();
        ep.add(pidfd.as_raw_fd(), Token::Exit(4), READ | EDGE)
            .unwrap();
        let t = Instant::now();
        let got = ep.wait(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(got.first().map(|e| e.token), Some(Token::Exit(4)));
        // It slept (the child is gone), and not for long.
        assert!(child.try_wait().unwrap().is_some());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_blind_wait_is_capped_at_the_nap() {
        let far = Instant::now() + Duration::from_secs(20);
        assert_eq!(timeout_until(far, true), BLIND_NAP);
        assert_eq!(timeout_until(far, false), LONGEST);
        assert_eq!(timeout_until(Instant::now(), false), Duration::ZERO);
    }
}
