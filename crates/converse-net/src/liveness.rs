//! Whether the process at the other end of a TCP connection can still be
//! reached: a host that goes down or is cut off sends no reset and no
//! end of stream, so without this a job waits for it forever.
//!
//! The peer's *kernel* is what is watched, so that a PE busy in a long
//! handler, a process stopped for a while or a loaded machine is never
//! taken for a lost one: its host still answers.
//!
//! - Every watched connection ([`watch`]: the tcp module's VCs, each
//!   process's link to `convrun`, `convrun`'s to each process) is probed
//!   (TCP keepalive) once idle for a third of the timeout, then every
//!   sixth of it.
//! - Its owner asks [`looks_silent`] every [`check_period`]: silent means
//!   nothing at all came from the peer (no byte, no acknowledgement) for
//!   the timeout while data of ours went unacknowledged, keepalive probes
//!   of an idle connection went unanswered, or (its window closed) two
//!   window probes did. Silent at two looks in a row
//!   ([`Suspicion::confirms`]) is a lost peer.
//! - `TCP_USER_TIMEOUT` is not used. Linux ends a connection whose peer's
//!   window stays closed past it although the peer answers every window
//!   probe, and a VC's window closes whenever its PEs have no room for more
//!   (flow control); and on an idle connection it was measured to end it
//!   7.5 s after a cut with a 10 s timeout, so that a partition shorter
//!   than the timeout would not heal. A peer with a closed window answers
//!   its window probes, so it never looks silent; one cut off while its
//!   window is closed is named only once two window probes went
//!   unanswered, which the kernel's backoff may make minutes.
//!
//! A partition shorter than the timeout loses nothing: retransmission and
//! the next probe carry on once the path is back.
//!
//! # Invariants
//!
//! - The timeout is `++peer-timeout` ([`DEFAULT_PEER_TIMEOUT`] unless
//!   given), at least one second; every watched connection of a process
//!   uses the same.
//!
//! # Concurrency
//!
//! Socket options set once, before the connection carries anything, and
//! reads of the kernel's counters; no state here.
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// How long a peer may stay silent, unless `++peer-timeout` says.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// `timeout`, at least a second.
fn floor(timeout: Duration) -> Duration {
    timeout.max(Duration::from_secs(1))
}

/// Has the kernel probe `socket` once idle (see the module comment);
/// [`looks_silent`] then tells whether its peer answers.
pub fn watch(socket: impl AsFd, timeout: Duration) -> io::Result<()> {
    use rustix::net::sockopt;
    let timeout = floor(timeout);
    let secs = |d: Duration| Duration::from_secs(d.as_secs().max(1));
    let fd = socket.as_fd();
    sockopt::set_socket_keepalive(fd, true)?;
    sockopt::set_tcp_keepidle(fd, secs(timeout / 3))?;
    sockopt::set_tcp_keepintvl(fd, secs(timeout / 6))?;
    // The decision is `looks_silent`'s, not a count of probes.
    sockopt::set_tcp_keepcnt(fd, 127)?;
    Ok(())
}

/// Whether a connection looked silent at the last look: a peer is lost
/// only when it looks silent twice in a row (a window probe may be out,
/// unanswered yet, at one look).
#[derive(Debug, Default)]
pub struct Suspicion(std::sync::atomic::AtomicBool);

impl Suspicion {
    /// Records a look (`silent`: what [`looks_silent`] said); true if it
    /// confirms the last one (the peer is lost).
    pub fn confirms(&self, silent: bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if silent {
            self.0.swap(true, Relaxed)
        } else {
            self.0.store(false, Relaxed);
            false
        }
    }
}

/// How often a module asks [`looks_silent`] of its VCs: a sixth of the
/// timeout (a peer is named within the timeout and two periods).
pub fn check_period(timeout: Duration) -> Duration {
    floor(timeout) / 6
}

/// True if nothing came from `socket`'s peer for `timeout` while
/// something of ours (data, or a probe) waits for its answer.
pub fn looks_silent(socket: impl AsFd, timeout: Duration) -> io::Result<bool> {
    // SAFETY: `tcp_info` is plain old data (integers), valid all zeroes.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt(2) on an open socket, writing at most `len` bytes
    // into `info`, which has that many.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let ms = u32::try_from(floor(timeout).as_millis()).unwrap_or(u32::MAX);
    if info.tcpi_last_ack_recv < ms || info.tcpi_last_data_recv < ms {
        return Ok(false);
    }
    if info.tcpi_unacked > 0 {
        // Data sent and not acknowledged: a live peer's kernel
        // acknowledges at once, whatever its program does.
        return Ok(true);
    }
    let mut queued: libc::c_int = 0;
    // SAFETY: ioctl(2) TIOCOUTQ on an open socket writes one int.
    if unsafe { libc::ioctl(socket.as_fd().as_raw_fd(), libc::TIOCOUTQ, &mut queued) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if queued == 0 {
        // Idle: keepalive probes out, none answered.
        info.tcpi_probes > 0
    } else {
        // Data waits for the peer's window to open: the peer answers each
        // window probe (one may be out at a time, answered late: the count
        // is then at most 1); more out is a peer that answers none.
        info.tcpi_probes >= 2
    })
}

/// True if `e` ended a watched connection because its peer stayed silent
/// (or its host became unreachable).
pub fn is_silence(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN)
    )
}

/// What to say of a peer (`who`: "process 3", "the launcher") that stayed
/// silent for `timeout`.
pub fn silence(who: &str, timeout: Duration) -> String {
    format!(
        "no word from {who} for {} s (++peer-timeout): its host is down or cut off",
        floor(timeout).as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_watched_connection_is_probed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        watch(&s, Duration::from_secs(10)).unwrap();
        use rustix::net::sockopt;
        assert!(sockopt::socket_keepalive(&s).unwrap());
        assert_eq!(sockopt::tcp_keepidle(&s).unwrap(), Duration::from_secs(3));
        assert_eq!(sockopt::tcp_keepintvl(&s).unwrap(), Duration::from_secs(1));
        assert_eq!(sockopt::tcp_user_timeout(&s).unwrap(), 0);
        let suspicion = Suspicion::default();
        assert!(!suspicion.confirms(true));
        assert!(suspicion.confirms(true));
        assert!(!suspicion.confirms(false));
        assert!(!suspicion.confirms(true));
        assert!(is_silence(&io::Error::from_raw_os_error(libc::ETIMEDOUT)));
        assert!(!is_silence(&io::Error::from_raw_os_error(libc::ECONNRESET)));
        assert_eq!(
            silence("process 3 (host h2)", Duration::from_secs(30)),
            "no word from process 3 (host h2) for 30 s (++peer-timeout): its host is down or cut off"
        );
    }

    /// A peer that answers is not silent, whether the connection is idle
    /// or its window is closed (the peer reads nothing, for longer than
    /// the timeout): the window probes are answered.
    #[test]
    fn a_peer_that_answers_is_not_silent_even_with_its_window_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_peer, _) = listener.accept().unwrap();
        let timeout = Duration::from_secs(1);
        watch(&s, timeout).unwrap();
        assert!(!looks_silent(&s, timeout).unwrap(), "idle");
        s.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 1 << 16];
        loop {
            match (&s).write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        // Checked as a module would, every sixth of the timeout, for three
        // timeouts.
        for _ in 0..18 {
            std::thread::sleep(check_period(timeout));
            assert!(!looks_silent(&s, timeout).unwrap(), "window closed");
        }
    }
}
