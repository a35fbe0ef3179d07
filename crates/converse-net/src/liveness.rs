//! Whether the process at the other end of a TCP connection can still be
//! reached: a host that goes down or is cut off sends no reset and no
//! end of stream, so without this a job waits for it forever.
//!
//! The peer's *kernel* is what is watched, so that a PE busy in a long
//! handler, a process stopped for a while or a loaded machine is never
//! taken for a lost one: its host still answers.
//!
//! - Every watched connection is probed (TCP keepalive) once idle for a
//!   third of the timeout, then every sixth of it.
//! - A control link (each process's to `convrun`, `convrun`'s to each
//!   process: short lines, always read) also has `TCP_USER_TIMEOUT`: bytes
//!   or probes unanswered for the whole timeout end it with `ETIMEDOUT`
//!   ([`watch_link`], [`is_silence`]).
//! - A VC may legitimately go unread for long: its receiver leaves data in
//!   the socket while its PEs have no room for more (flow control), and
//!   Linux ends a connection whose window stays closed past
//!   `TCP_USER_TIMEOUT` even though the peer answers every probe. So a VC
//!   gets the probes only ([`watch_vc`]), and its module asks
//!   [`looks_silent`] every [`check_period`]: silent means nothing at all
//!   came from the peer (no byte, no acknowledgement) for the timeout
//!   while data of ours went unacknowledged, keepalive probes of an idle
//!   connection went unanswered, or (its window closed) two window probes
//!   did. A peer with a closed window answers its window probes, so it
//!   never looks silent; one that is cut off while its window is closed is
//!   named only once two window probes went unanswered, which the
//!   kernel's backoff may make minutes.
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

/// Has the kernel probe `socket` once idle (see the module comment).
fn probe(socket: impl AsFd, timeout: Duration) -> io::Result<()> {
    use rustix::net::sockopt;
    let timeout = floor(timeout);
    let secs = |d: Duration| Duration::from_secs(d.as_secs().max(1));
    let fd = socket.as_fd();
    sockopt::set_socket_keepalive(fd, true)?;
    sockopt::set_tcp_keepidle(fd, secs(timeout / 3))?;
    sockopt::set_tcp_keepintvl(fd, secs(timeout / 6))?;
    // The decision is the timeout's (or `looks_silent`'s), not a count of
    // probes.
    sockopt::set_tcp_keepcnt(fd, 127)?;
    Ok(())
}

/// Watches control link `socket`: the kernel ends it if its peer stays
/// silent for `timeout` (see the module comment).
pub fn watch_link(socket: impl AsFd, timeout: Duration) -> io::Result<()> {
    probe(&socket, timeout)?;
    let ms = u32::try_from(floor(timeout).as_millis()).unwrap_or(u32::MAX);
    rustix::net::sockopt::set_tcp_user_timeout(socket.as_fd(), ms)?;
    Ok(())
}

/// Watches VC `socket`: probed once idle; [`looks_silent`] decides.
pub fn watch_vc(socket: impl AsFd, timeout: Duration) -> io::Result<()> {
    probe(socket, timeout)
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
    fn a_watched_link_has_the_timeouts() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        watch_link(&s, Duration::from_secs(10)).unwrap();
        use rustix::net::sockopt;
        assert!(sockopt::socket_keepalive(&s).unwrap());
        assert_eq!(sockopt::tcp_keepidle(&s).unwrap(), Duration::from_secs(3));
        assert_eq!(sockopt::tcp_keepintvl(&s).unwrap(), Duration::from_secs(1));
        assert_eq!(sockopt::tcp_user_timeout(&s).unwrap(), 10_000);
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
        watch_vc(&s, timeout).unwrap();
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
