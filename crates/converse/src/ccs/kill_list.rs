//! The `ccs_killport` registrations and the notices they get when the job
//! ends (`ccs-protocol.md`, "Built-in handlers": the caller's address, at
//! the port it gave, is sent the 5 bytes `die\n\0`).
//!
//! # Invariants
//!
//! - An address is kept once, however often it is registered: it gets one
//!   notice.
//! - At most [`MAX_KILL_PORTS`] addresses are kept. A registration beyond
//!   that is ignored; the first one ignored is logged (later ones are
//!   not: a client looping on the request must not flood stderr).
//! - The notices are sent once ([`KillList::take`] empties the list), all
//!   at the same time over non-blocking connects, and the whole sending
//!   ends within [`NOTICE_DEADLINE`] however many addresses never answer
//!   (a full accept queue, a host that drops packets). Why one deadline
//!   for all instead of one per address: the job's exit waits for this,
//!   and an abnormal exit must finish within `proc::exit`'s grace for a
//!   second dying thread (3 s) and the launcher's for a process to end
//!   (5 s). A notice that misses the deadline is lost; the caller learns
//!   of the end when the job's connections close instead.
//!
//! # Concurrency protocol
//!
//! The list lives behind the server handle's mutex: the server thread adds
//! to it; whichever thread ends the process (the normal stop, or an
//! at-exit hook on a dying thread) takes it out under the lock and sends
//! the notices without holding the lock.
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// Addresses kept at most. A tool watching a job registers one; a few
/// tools, or one per user of a shared job, stay far below it. Sending the
/// notices costs one socket per address at exit.
pub(crate) const MAX_KILL_PORTS: usize = 64;

/// How long all the notices together may take.
pub(crate) const NOTICE_DEADLINE: Duration = Duration::from_secs(2);

/// The notice's bytes.
const NOTICE: &[u8] = b"die\n\0";

/// What became of a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Kept: it gets a notice.
    New,
    /// Kept already: it gets its one notice.
    Known,
    /// The list is full: ignored. `first` is true for the first
    /// registration ignored (the one to log).
    Full { first: bool },
}

/// Where `ccs_killport` callers want their notice of the job's end.
#[derive(Default)]
pub(crate) struct KillList {
    addrs: Vec<SocketAddr>,
    /// A registration was ignored for want of room.
    refused: bool,
}

impl KillList {
    /// Registers `addr` (see the invariants).
    pub fn add(&mut self, addr: SocketAddr) -> Added {
        if self.addrs.contains(&addr) {
            return Added::Known;
        }
        if self.addrs.len() >= MAX_KILL_PORTS {
            let first = !std::mem::replace(&mut self.refused, true);
            return Added::Full { first };
        }
        self.addrs.push(addr);
        Added::New
    }

    /// Takes the addresses out, in registration order: the list is empty
    /// afterwards, so each is told once.
    pub fn take(&mut self) -> Vec<SocketAddr> {
        std::mem::take(&mut self.addrs)
    }
}

/// Why an address got no notice.
#[derive(Debug)]
pub(crate) enum Missed {
    /// The connection or the write failed.
    Failed(io::Error),
    /// Not done by the deadline.
    Late,
}

impl std::fmt::Display for Missed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missed::Failed(e) => write!(f, "{e}"),
            Missed::Late => write!(f, "not done within {} s", NOTICE_DEADLINE.as_secs()),
        }
    }
}

/// One notice on its way.
struct Notice {
    addr: SocketAddr,
    stream: TcpStream,
    /// Notice bytes written.
    sent: usize,
}

/// Sends `die\n\0` to every address of `addrs` at once, giving up on those
/// not done at `deadline`; returns the addresses that got no notice and
/// why. Blocks at most until `deadline`.
pub(crate) fn send_notices(addrs: &[SocketAddr], deadline: Instant) -> Vec<(SocketAddr, Missed)> {
    let mut missed = Vec::new();
    if addrs.is_empty() {
        return missed;
    }
    let mut poll = match Poll::new() {
        Ok(p) => p,
        Err(e) => {
            return addrs
                .iter()
                .map(|&a| {
                    (
                        a,
                        Missed::Failed(io::Error::new(e.kind(), format!("epoll: {e}"))),
                    )
                })
                .collect();
        }
    };
    let mut open: HashMap<Token, Notice> = HashMap::new();
    for (i, &addr) in addrs.iter().enumerate() {
        // Non-blocking: the connect is only started here.
        let started = TcpStream::connect(addr).and_then(|mut stream| {
            poll.registry()
                .register(&mut stream, Token(i), Interest::WRITABLE)
                .map(|()| stream)
        });
        match started {
            Ok(stream) => {
                open.insert(
                    Token(i),
                    Notice {
                        addr,
                        stream,
                        sent: 0,
                    },
                );
            }
            Err(e) => missed.push((addr, Missed::Failed(e))),
        }
    }
    let mut events = Events::with_capacity(addrs.len().max(1));
    while !open.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        match poll.poll(&mut events, Some(deadline - now)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                for (_, n) in open.drain() {
                    let why = io::Error::new(e.kind(), format!("epoll: {e}"));
                    missed.push((n.addr, Missed::Failed(why)));
                }
                break;
            }
        }
        for event in events.iter() {
            let token = event.token();
            let Some(notice) = open.get_mut(&token) else {
                continue;
            };
            match advance(notice) {
                Ok(false) => {}
                Ok(true) => {
                    // Dropped: the kernel delivers the bytes, then the
                    // end of the stream.
                    open.remove(&token);
                }
                Err(e) => {
                    let n = open.remove(&token).expect("present");
                    missed.push((n.addr, Missed::Failed(e)));
                }
            }
        }
    }
    // Those still open are closed here, their connects abandoned.
    missed.extend(open.into_values().map(|n| (n.addr, Missed::Late)));
    missed
}

/// Moves `notice` on after its socket became writable: true once every
/// byte is written.
fn advance(notice: &mut Notice) -> io::Result<bool> {
    // mio's non-blocking connect: a writable socket has either connected
    // or failed (its error is pending); a spurious wake-up has neither.
    if let Some(e) = notice.stream.take_error()? {
        return Err(e);
    }
    match notice.stream.peer_addr() {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
        Err(e) => return Err(e),
    }
    while notice.sent < NOTICE.len() {
        match notice.stream.write(&NOTICE[notice.sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => notice.sent += n,
            // Writable again later (edge-triggered: the event comes).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn the_list_keeps_each_address_once_and_at_most_the_bound() {
        let mut list = KillList::default();
        assert_eq!(list.add(addr(1)), Added::New);
        assert_eq!(list.add(addr(1)), Added::Known);
        assert_eq!(list.add(SocketAddr::from(([127, 0, 0, 2], 1))), Added::New);
        for port in 2..MAX_KILL_PORTS as u16 {
            assert_eq!(list.add(addr(port)), Added::New);
        }
        // Full: the next is refused (logged), and so are the later ones
        // (not logged); known ones are still known.
        assert_eq!(list.add(addr(1000)), Added::Full { first: true });
        assert_eq!(list.add(addr(1001)), Added::Full { first: false });
        assert_eq!(list.add(addr(5)), Added::Known);
        let taken = list.take();
        assert_eq!(taken.len(), MAX_KILL_PORTS);
        assert_eq!(taken[0], addr(1), "in registration order");
        assert!(!taken.contains(&addr(1000)));
        assert!(list.take().is_empty(), "told once");
    }

    #[test]
    fn a_listener_gets_the_notice_and_a_closed_port_is_reported() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let good = listener.local_addr().unwrap();
        // A port nobody listens on (bound, never listening: refused).
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_addr = closed.local_addr().unwrap();
        drop(closed);
        let missed = send_notices(&[good, closed_addr], Instant::now() + NOTICE_DEADLINE);
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, NOTICE);
        assert_eq!(missed.len(), 1, "{missed:?}");
        assert_eq!(missed[0].0, closed_addr);
        assert!(matches!(missed[0].1, Missed::Failed(_)), "{missed:?}");
    }
}
