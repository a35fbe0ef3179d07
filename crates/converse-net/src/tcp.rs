//! The tcp network module: one TCP connection (VC) per pair of processes,
//! non-blocking sockets driven by mio.
//!
//! # Connections
//!
//! A process's business card is `tcp:HOST:PORT`, the address of its
//! listening socket, which takes connections from `init` on (its queue
//! sized for the job). A VC is connected on first use, by whichever end
//! sends first: the send queues its frame, asks the layer above for the
//! peer's card (`Upcalls::peer_card`, learnt on demand) and starts a
//! non-blocking connect; the frames go once the connection is up. So a
//! job whose processes talk only to their tree neighbours opens O(P)
//! connections, not P². At most `MAX_CONNECTS_IN_FLIGHT` (64) of a process's
//! connects are under way at once; a connect refused or reset by a busy
//! listener is tried again after a pause (`tcp_handshake`), counted, not
//! printed.
//!
//! Before a connection becomes a VC, its two ends prove to each other that
//! they hold the job key, without sending it (`tcp_handshake`: a mutual
//! challenge-response), so a stranger, or a process of another job, is
//! refused; then the acceptor gives its verdict. Two processes may connect
//! to each other at once (a head-to-head, as in MPICH's tcp module): the
//! acceptor decides, under its VC's send lock, from the VC's `Link`:
//!
//! - no connection, or this side lost a head-to-head and awaits the
//!   peer's: *accept*;
//! - this side's own connection is in its handshake: the lower-numbered
//!   process's connection stands, so *lose* if the acceptor is lower
//!   (the connector drops its connection and awaits the acceptor's), else
//!   *accept* (and this side's attempt, which the peer will refuse, no
//!   longer matters: its number is bumped);
//! - a live connection: *refuse* (the connector's VC fails, naming it).
//!
//! The acceptor makes the connection its VC's before it writes *accept*,
//! and the connector sends nothing before it reads it: once either end
//! counts the VC as up, both do, so a process that has nothing queued has
//! every VC it used known to both ends (the process layer's end of job
//! relies on it). Every handshake moves without blocking, on its own
//! clock, driven by `poll` (with a short timeout while any is under way)
//! and, while PEs poll instead, by `try_progress` every few polls.
//!
//! # Connecting again
//!
//! A terminated VC may be used again (the spec: "the VC may be used for
//! communication again later"): `vc_init`, a send, or the peer's new
//! connection makes it a fresh, unconnected VC (`reset_terminated`,
//! holding both of its locks: no I/O is under way, every I/O holding one
//! of them) and connects it as above.
//!
//! # A silent peer
//!
//! A host that goes down or is cut off sends nothing, not even a reset:
//! every VC's socket is probed by the kernel once idle (`liveness`), and
//! the module asks the kernel's counters, every sixth of `peer_timeout`,
//! whether anything came from the peer (`check_liveness`); a peer silent
//! for the timeout at two checks in a row fails its VC as "no word from
//! process N for S s". A partition shorter than that heals by itself; a
//! PE busy in a handler, or a receiver whose window stays closed because
//! its PEs have no room, is never taken for a lost peer (its kernel
//! answers for it).
//!
//! # Cost per peer
//!
//! The VCs a process made are kept in the order made (`made`): polls,
//! flushes and the end walk those, never all the job's processes.
//!
//! # Sending
//!
//! A send tries to write at once from the sender's thread (`writev` of the
//! frame header and the data, no copy). What does not fit in the socket
//! buffer is queued on the VC with the owned data; the progress thread writes
//! it when the socket becomes writable (or when the connection is up). A non-contiguous send (the layer
//! above's copying sends of large messages) gathers straight from the
//! caller's memory when nothing is queued before it, writing on for a
//! moment (`GATHER_STALL`) into a socket the peer is emptying, and copies
//! only what is left. A write that failed with
//! `WouldBlock` guarantees such an event (sockets are registered
//! edge-triggered for both directions once, when they become a VC's). Frames of one VC
//! never interleave: the queue is behind the VC's send lock and a send goes
//! straight to the socket only when the queue is empty.
//!
//! # Receiving
//!
//! The progress thread reads a readable socket until it would block, and a
//! polling PE until a read comes back short of its space (`Drain`: the
//! socket's data is then all taken, and the PE reads again at its next
//! poll), feeding the bytes to the VC's [`Reassembler`]. While a frame's body is being
//! received it reads straight into the body buffer (the recv-active fast
//! path); otherwise into a 64 KiB buffer passed to `handle`. Whole frames go
//! to [`Upcalls::frame`], in order.
//!
//! # Concurrency protocol
//!
//! - `send` lock: the VC's queue, its `Link` and attempt number, and
//!   writing to its socket.
//! - `recv` lock: the VC's reassembler, and reading from its socket. The
//!   progress thread reads (blocking on the lock: an edge it was woken for
//!   must not be lost) and so do idle PEs (`try_progress`, skipping a VC
//!   being read).
//! - `poll` lock: the mio `Poll`, held by the one thread that waits on it.
//! - `handshakes` lock: the handshakes under way, moved by one thread at a
//!   time (others skip it); VC locks are taken only after it is released.
//! - Upcalls run with the VC's `recv` lock held (frames) or nothing held.
use crate::sync::lock;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use std::os::fd::AsRawFd;

use super::admission::Admission;
use super::frame::{FrameHeader, MessageBuffers, Reassembler};
use super::netmod::{
    NetError, NetModule, OutFrame, PollDir, SendData, SendRequest, Upcalls, check_iov_len,
};
use super::tcp_handshake::{Accepting, AcceptorSide, Connecting, Step, Verdict};
use super::throttle::{LOG_BURST, LOG_PERIOD, Say, Throttle};
use launch_wire::JobKey;

/// How long an accepted connection may take over its handshake before it
/// is refused, at least (a real peer answers at once when it runs, but in
/// a job of many processes on few cores it may wait its turn for seconds:
/// the module gives it its connections' time, `connect_wait`, if longer).
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// How long a connection this process starts may take, retries after a
/// busy listener included, and how long a VC whose connection lost a
/// head-to-head waits for the peer's (both processes may be starved of
/// the processor in a job of many).
const CONNECT_WAIT: Duration = Duration::from_secs(30);

/// The longest `poll` waits while a handshake is under way: its sockets'
/// events wake it, but a handshake's clock and a refused connect's next
/// try are looked at no later than this.
const HANDSHAKE_POLL: Duration = Duration::from_millis(20);

/// Connections this process starts at once; more wait for a slot, so that
/// a burst of first sends never floods the peers' listeners.
const MAX_CONNECTS_IN_FLIGHT: usize = 64;

/// Connections in their handshake at once beyond which the oldest gives
/// way to a newcomer (strangers cannot hold unbounded memory or
/// descriptors, nor keep a process out: `admission`): this, or one per
/// process of the job and some, if more (every peer may connect at once).
const MAX_PENDING_HELLOS: usize = 256;

/// Connections taken from the listener in one turn: the handshakes already
/// held get their turn between batches, so that a flood of connects cannot
/// push a real peer out before its hello is read.
const ACCEPTS_PER_TURN: usize = 64;

/// The listen queue: room for every process of the job to connect at once,
/// up to the system's own limit (`somaxconn`), and never below the usual
/// 128.
fn listen_backlog(nodes: usize) -> i32 {
    nodes.clamp(128, 65_535) as i32
}

/// An idle PE's polls between two looks at the listener and the
/// handshakes (an `accept` that finds nothing costs a system call, about
/// a poll's worth: one in 1,024 is noise on the hot path, and a new
/// connection waits at most about a millisecond for it while PEs poll;
/// the progress thread looks at once whenever it watches).
const HANDSHAKE_TICK: usize = 1024;

/// How long the progress thread leaves the module to polling PEs
/// ([`NetModule::watch_check`]).
const WATCH_CHECK: Duration = Duration::from_micros(100);

/// How far one receive reads a VC.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Until the socket would block (or ends): what the progress thread
    /// does for the readable edge it was woken by. An edge reports data
    /// and the peer's end alike, and a read that empties the data does not
    /// report an end that came with it: only reading on finds it.
    UntilWouldBlock,
    /// Until a read of the 64 KiB buffer comes back short of it: the
    /// socket's data is then all taken (the kernel copies until the space
    /// or the queue runs out), and the second read would only say so. For
    /// a polling PE (`try_progress`), which reads again at its next poll
    /// (and the progress thread reads to the end once the PEs stop
    /// polling): a system call saved of every small message on a
    /// ping-pong's path.
    ToShortRead,
}

/// The waker's token; VCs use their peer's number.
const WAKER: Token = Token(usize::MAX);
/// The listening socket's token.
const LISTENER: Token = Token(usize::MAX - 1);
/// Receive buffer (between frame bodies): one per thread that reads, not
/// per VC (a process may hold a VC to every other).
const RECV_BUF: usize = 64 << 10;

thread_local! {
    /// This thread's receive buffer, made at its first read.
    static RECV_BUF_OF_THREAD: std::cell::Cell<Option<Box<[u8]>>> =
        const { std::cell::Cell::new(None) };
}
/// How long a gathering send keeps writing into a full socket, from the
/// caller's memory, before it copies the rest to send later.
const GATHER_STALL: Duration = Duration::from_micros(50);
/// Most queued items, and bytes, one `writev` takes.
const BATCH_ITEMS: usize = 64;
const BATCH_BYTES: usize = 256 << 10;

type Pending = OutFrame;

/// A VC's connection, for one use: called holding the VC's `send` lock
/// with the VC `Up`, or its `recv` lock having seen a descriptor (see
/// "Connections" in the module comment).
fn io(vc: &Vc) -> std::mem::ManuallyDrop<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let fd = vc.fd.load(Ordering::Acquire);
    assert!(fd >= 0, "tcp: I/O on VC {} before it is connected", vc.peer);
    // SAFETY: `fd` is the open descriptor of the stream in `owner`, which
    // closes it only when a terminated VC is connected anew
    // (`reset_terminated`, holding both of the VC's locks, after the VC
    // terminated: no I/O is under way, and every I/O holds one of the
    // locks) or dropped. The `ManuallyDrop` never closes it.
    std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) })
}

/// The addresses of a tcp business card (`tcp:HOST:PORT`), or why none.
fn addresses(card: &str) -> Result<Vec<SocketAddr>, String> {
    let addr = card
        .strip_prefix("tcp:")
        .ok_or_else(|| format!("tcp: `{card}` is no tcp business card"))?;
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("tcp: cannot resolve `{addr}`: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("tcp: `{addr}` names no address"));
    }
    Ok(addrs)
}

impl OutFrame {
    /// Writes what it can; `Ok(true)` once all is written. Adds the bytes
    /// written to `sent`.
    fn write_to(&mut self, mut stream: &std::net::TcpStream, sent: &mut usize) -> io::Result<bool> {
        let total = self.total();
        while self.written < total {
            let n = match self.rest() {
                ([], data) => stream.write(data),
                (hdr, data) => stream.write_vectored(&[IoSlice::new(hdr), IoSlice::new(data)]),
            };
            match n {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n;
                    *sent += n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// The bytes of `parts` after the first `skip`, as slices.
fn tail<'a>(parts: &[&'a [u8]], mut skip: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(parts.len());
    for &p in parts {
        if skip >= p.len() {
            skip -= p.len();
        } else {
            out.push(&p[skip..]);
            skip = 0;
        }
    }
    out
}

/// Where a VC's connection is (under its send lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Link {
    /// No connection: none yet, or the last one terminated. The next send
    /// (or `vc_init`) starts one.
    #[default]
    Idle,
    /// This side's connection is in its handshake.
    Connecting,
    /// This side's connection lost a head-to-head: the peer's comes, by
    /// `until`.
    Awaiting { until: Instant },
    /// Connected: frames flow.
    Up,
}

#[derive(Default)]
struct SendSide {
    queue: VecDeque<Pending>,
    /// `vc_terminate` was called: close the write side once drained.
    terminate: bool,
    /// The write side is shut down.
    write_closed: bool,
    /// The VC broke, and why: sends fail, naming that cause (a send that
    /// only said the connection was closed could be reported before the
    /// cause, and end the job without naming it).
    failed: Option<String>,
    link: Link,
    /// The number of this side's current connection attempt: bumped when
    /// an attempt stops mattering (the peer's connection was taken
    /// instead), so that its outcome is ignored.
    attempt: u64,
}

struct RecvSide {
    reasm: Reassembler,
    /// The peer closed its side.
    eof: bool,
}

/// A virtual connection to one peer process.
struct Vc {
    peer: usize,
    /// The connection's descriptor, for I/O ([`io`]); -1 until the VC is
    /// connected, replaced when a terminated VC is connected anew.
    fd: AtomicI32,
    /// The connection, which owns `fd` (closed when replaced or dropped).
    owner: Mutex<Option<mio::net::TcpStream>>,
    send: Mutex<SendSide>,
    recv: Mutex<RecvSide>,
    /// Bytes queued in `send` and not yet written: written under the send
    /// lock, read without it ([`NetModule::backlog`]).
    queued: AtomicUsize,
    /// `vc_terminated` was reported.
    terminated: AtomicBool,
    /// The peer closed its side cleanly (`RecvSide::eof` on a read of 0),
    /// readable without the receive lock: [`TcpModule::check_terminated`]
    /// runs from `vc_terminate`, which must not wait for a receiver (one
    /// that delivers a frame holds the lock for as long as the upcall runs,
    /// and an upcall that ends the process never returns).
    read_closed: AtomicBool,
    /// Whether its peer looked silent at the last liveness check (a second
    /// check in a row fails the VC: [`TcpModule::check_liveness`]).
    suspect: crate::liveness::Suspicion,
}

impl Vc {
    fn new(peer: usize, max_payload: usize, buffers: Option<Arc<dyn MessageBuffers>>) -> Vc {
        Vc {
            peer,
            fd: AtomicI32::new(-1),
            owner: Mutex::new(None),
            send: Mutex::new(SendSide::default()),
            recv: Mutex::new(RecvSide {
                reasm: Reassembler::new(peer, max_payload).with_buffers(buffers),
                eof: false,
            }),
            queued: AtomicUsize::new(0),
            terminated: AtomicBool::new(false),
            read_closed: AtomicBool::new(false),
            suspect: crate::liveness::Suspicion::default(),
        }
    }
}

/// Handshakes under way (see "Connections" in the module comment).
struct Handshakes {
    /// Connections this process started: the attempt's number on its VC.
    connecting: Vec<(Connecting, u64)>,
    /// Connects waiting for a slot: (peer, attempt, addresses).
    waiting: VecDeque<(usize, u64, Vec<SocketAddr>)>,
    /// Accepted connections in their handshake, each with its admission
    /// key.
    accepting: Vec<(u64, Accepting)>,
    /// Who keeps a slot among `accepting` when a flood fills them.
    admission: Admission<u64>,
    /// The admission key of the next connection accepted.
    next_accepted: u64,
    /// VCs whose connection lost a head-to-head: (peer, attempt, until).
    awaiting: Vec<(usize, u64, Instant)>,
}

impl Handshakes {
    /// This process's own connections under way.
    fn own(&self) -> usize {
        self.connecting.len() + self.waiting.len() + self.awaiting.len()
    }
}

/// The tcp network module of one process.
pub struct TcpModule {
    me: usize,
    nodes: usize,
    /// The job key every connection's handshake proves.
    key: JobKey,
    card: String,
    listener: TcpListener,
    /// Per peer, its VC once it has one.
    vcs: Box<[OnceLock<Arc<Vc>>]>,
    /// The peers with a VC, in the order their VCs were made (appended
    /// under `made_lock`, read without it up to `made_len`): what polls,
    /// flushes and the end walk, so that their cost follows the peers
    /// this process talks to, never the job's size.
    made: Box<[AtomicUsize]>,
    made_len: AtomicUsize,
    made_lock: Mutex<()>,
    poll: Mutex<Poll>,
    registry: Registry,
    waker: Waker,
    upcalls: OnceLock<Arc<dyn Upcalls>>,
    max_payload: usize,
    /// The layer above has room again after refusing it: read every VC at
    /// the next poll (their edges were consumed while it had none).
    resume: AtomicBool,
    handshakes: Mutex<Handshakes>,
    /// About how many handshakes are under way, and how many of them are
    /// this process's own connections (never too low for long: polls read
    /// them without the lock).
    handshake_count: AtomicUsize,
    own_attempts: AtomicUsize,
    /// Idle polls, for [`HANDSHAKE_TICK`].
    polls: AtomicUsize,
    /// Bytes read from every VC so far (`NetModule::bytes_received`).
    received: AtomicU64,
    /// The listener may hold connections not yet taken (see
    /// `drive_handshakes`).
    to_accept: AtomicBool,
    /// How long a connection this process starts may take.
    connect_wait: Duration,
    /// How long a VC's peer may stay silent (`liveness`).
    peer_timeout: Duration,
    /// When the module was made: the clock of `next_check`.
    born: Instant,
    /// When the VCs are next asked whether their peers went silent, in
    /// milliseconds after `born`.
    next_check: AtomicU64,
    /// The lines about refused connections, at most one per [`LOG_PERIOD`]
    /// (strangers choose how many there are).
    refusals: Mutex<Throttle>,
}

impl TcpModule {
    /// `net_module_init`: binds the listening socket on `bind` (port 0: any)
    /// and returns the module; its card is [`NetModule::business_card`].
    /// `advertise` is the host name peers should use to reach it. The
    /// module takes connections from then on.
    pub fn init(
        me: usize,
        nodes: usize,
        key: JobKey,
        bind: SocketAddr,
        advertise: &str,
        max_payload: usize,
    ) -> Result<TcpModule, NetError> {
        crate::limits::raise_descriptor_limit(nodes);
        let listener = TcpListener::bind(bind)
            .map_err(|e| NetError::local(format!("tcp: cannot listen on {bind}: {e}")))?;
        // Again, with a queue sized for the job: Linux takes a second
        // `listen` as a new backlog.
        rustix::net::listen(&listener, listen_backlog(nodes))
            .map_err(|e| NetError::local(format!("tcp: cannot listen on {bind}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::local(format!("tcp: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| NetError::local(format!("tcp: {e}")))?
            .port();
        let poll = Poll::new().map_err(|e| NetError::local(format!("tcp: epoll: {e}")))?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(|e| NetError::local(format!("tcp: epoll: {e}")))?;
        let waker = Waker::new(&registry, WAKER)
            .map_err(|e| NetError::local(format!("tcp: waker: {e}")))?;
        registry
            .register(
                &mut SourceFd(&listener.as_raw_fd()),
                LISTENER,
                Interest::READABLE,
            )
            .map_err(|e| NetError::local(format!("tcp: epoll: {e}")))?;
        Ok(TcpModule {
            me,
            nodes,
            key,
            card: format!("tcp:{advertise}:{port}"),
            listener,
            vcs: (0..nodes).map(|_| OnceLock::new()).collect(),
            made: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            made_len: AtomicUsize::new(0),
            made_lock: Mutex::new(()),
            poll: Mutex::new(poll),
            registry,
            waker,
            upcalls: OnceLock::new(),
            max_payload,
            resume: AtomicBool::new(false),
            handshakes: Mutex::new(Handshakes {
                connecting: Vec::new(),
                waiting: VecDeque::new(),
                accepting: Vec::new(),
                admission: Admission::for_job(nodes, MAX_PENDING_HELLOS),
                next_accepted: 0,
                awaiting: Vec::new(),
            }),
            refusals: Mutex::new(Throttle::with_burst(LOG_PERIOD, LOG_BURST)),
            handshake_count: AtomicUsize::new(0),
            own_attempts: AtomicUsize::new(0),
            polls: AtomicUsize::new(0),
            received: AtomicU64::new(0),
            to_accept: AtomicBool::new(false),
            connect_wait: CONNECT_WAIT,
            peer_timeout: crate::liveness::DEFAULT_PEER_TIMEOUT,
            born: Instant::now(),
            next_check: AtomicU64::new(0),
        })
    }

    /// The module, its connections given `wait` to connect (retries after a
    /// busy listener included) instead of `CONNECT_WAIT`, 30 s.
    pub fn with_connect_wait(mut self, wait: Duration) -> TcpModule {
        self.connect_wait = wait;
        self
    }

    /// The module, a VC's peer given `timeout` of silence before the VC
    /// fails naming it (`liveness`) instead of
    /// [`crate::liveness::DEFAULT_PEER_TIMEOUT`].
    pub fn with_peer_timeout(mut self, timeout: Duration) -> TcpModule {
        self.peer_timeout = timeout;
        self
    }

    /// Sets who hears about frames and connection events. Must be called
    /// before any VC is connected.
    pub fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        let _ = self.upcalls.set(upcalls);
    }

    fn upcalls(&self) -> &dyn Upcalls {
        &**self.upcalls.get().expect("tcp: upcalls set before use")
    }

    /// The layer above's message buffers, for a new VC's reassembly.
    fn message_buffers(&self) -> Option<Arc<dyn MessageBuffers>> {
        self.upcalls.get().and_then(|u| u.message_buffers())
    }

    /// Waits until the VCs to `peers` are up (connected by either end), or
    /// fails at `deadline` naming those that are not; moves the handshakes
    /// itself meanwhile. Nothing else needs it: VCs connect on first use.
    pub fn accept_peers(&self, peers: &[usize], deadline: Instant) -> Result<(), NetError> {
        loop {
            let absent: Vec<usize> = peers
                .iter()
                .copied()
                .filter(|&p| !self.vc(p).is_ok_and(|vc| lock(&vc.send).link == Link::Up))
                .collect();
            if absent.is_empty() {
                return Ok(());
            }
            if let Some(failed) = absent
                .iter()
                .find(|&&p| self.vc(p).is_ok_and(|vc| lock(&vc.send).failed.is_some()))
            {
                return Err(NetError::peer(*failed, "tcp: the connection failed"));
            }
            if Instant::now() >= deadline {
                let absent: Vec<String> = absent.iter().map(|p| p.to_string()).collect();
                return Err(NetError::local(format!(
                    "tcp: process {} waited in vain for process(es) {} to connect",
                    self.me,
                    absent.join(", ")
                )));
            }
            if !self.drive_handshakes(true) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// The VC to `peer`, made if it has none yet.
    fn vc_or_make(&self, peer: usize) -> Result<&Arc<Vc>, NetError> {
        if peer >= self.nodes || peer == self.me {
            return Err(NetError::peer(
                peer,
                format!(
                    "tcp: no such peer of process {} in a job of {} processes",
                    self.me, self.nodes
                ),
            ));
        }
        Ok(self.vcs[peer].get_or_init(|| {
            let _made = lock(&self.made_lock);
            let at = self.made_len.load(Ordering::Relaxed);
            self.made[at].store(peer, Ordering::Relaxed);
            // Publishes the entry: a reader that sees the length sees it.
            self.made_len.store(at + 1, Ordering::Release);
            Arc::new(Vc::new(peer, self.max_payload, self.message_buffers()))
        }))
    }

    /// The VCs made so far, in the order they were made.
    fn made_vcs(&self) -> impl Iterator<Item = &Arc<Vc>> {
        let len = self.made_len.load(Ordering::Acquire);
        self.made[..len]
            .iter()
            .filter_map(|p| self.vcs[p.load(Ordering::Relaxed)].get())
    }

    /// Starts connecting the VC to `peer` (attempt `attempt`, its send side
    /// now `Connecting`), at `card`, or at the card the layer above has for
    /// it. A failure fails the VC.
    fn connect_vc(&self, vc: &Vc, attempt: u64, card: Option<&str>) -> Result<(), NetError> {
        let peer = vc.peer;
        let addrs = match card {
            Some(card) => Ok(card.to_string()),
            None => self.upcalls().peer_card(peer, "tcp:").map_err(|e| e.what),
        }
        .and_then(|card| addresses(&card));
        let addrs = match addrs {
            Ok(addrs) => addrs,
            Err(why) => return Err(self.fail_vc(vc, why)),
        };
        let mut hs = lock(&self.handshakes);
        if hs.connecting.len() < MAX_CONNECTS_IN_FLIGHT {
            if let Err(why) = self.start_attempt(&mut hs, peer, attempt, addrs) {
                drop(hs);
                return Err(self.fail_vc(vc, why));
            }
        } else {
            hs.waiting.push_back((peer, attempt, addrs));
        }
        self.count_handshakes(&hs);
        drop(hs);
        // The progress thread may be waiting with no deadline: it must
        // move the handshake on.
        self.wake();
        Ok(())
    }

    /// Starts attempt `attempt` to connect to `peer` at `addrs` (a slot is
    /// free in `hs`, which is locked), on this module's clock and poll set;
    /// why not if it cannot start.
    fn start_attempt(
        &self,
        hs: &mut Handshakes,
        peer: usize,
        attempt: u64,
        addrs: Vec<SocketAddr>,
    ) -> Result<(), String> {
        let until = Instant::now() + self.connect_wait;
        let conn = Connecting::start(
            self.me,
            self.nodes,
            peer,
            addrs,
            until,
            Some(&self.registry),
        )
        .map_err(|why| format!("tcp: cannot connect ({why})"))?;
        hs.connecting.push((conn, attempt));
        Ok(())
    }

    /// Fails `vc` (its queue is dropped, sends fail from now on) and tells
    /// the layer above why; returns the error for the caller.
    fn fail_vc(&self, vc: &Vc, why: String) -> NetError {
        let why = if why.starts_with("tcp: ") {
            why
        } else {
            format!("tcp: {why}")
        };
        {
            let mut side = lock(&vc.send);
            side.failed = Some(why.clone());
            side.queue.clear();
            vc.queued.store(0, Ordering::Relaxed);
        }
        self.upcalls().vc_failed(vc.peer, why.clone());
        NetError::peer(vc.peer, why)
    }

    /// Moves every handshake on as far as it goes without blocking: takes
    /// new connections from the listener (if `listener`: it had an event,
    /// or may have), answers and decides accepted
    /// ones, ends this side's, starts waiting connects, and fails VCs whose
    /// peer did not connect back in time. True if anything moved.
    fn drive_handshakes(&self, listener: bool) -> bool {
        if listener {
            // Kept until a thread takes the listener's connections: the
            // listener's edge is gone once seen, and the thread that saw
            // it may find another at work here.
            self.to_accept.store(true, Ordering::Release);
        }
        let Ok(mut hs) = self.handshakes.try_lock() else {
            // Another thread is at it (and looks at `to_accept` next).
            return false;
        };
        let mut moved = false;
        // A batch at most: the rest after the handshakes' turn (a flag set
        // meanwhile by another thread is looked at below).
        let mut more = false;
        if self.to_accept.swap(false, Ordering::AcqRel) {
            (moved, more) = self.accept_new(&mut hs);
        }
        // Decisions and installs happen after the list is walked, outside
        // its lock (they take VC locks, and fail VCs through upcalls).
        let mut accepted: Vec<(Accepting, usize)> = Vec::new();
        let mut i = 0;
        while i < hs.accepting.len() {
            let me = self.me;
            let step = hs.accepting[i].1.advance(&self.key, me, self.nodes, |c| {
                if c == me {
                    Err(format!("it claims to be process {c}, which is this one"))
                } else {
                    Ok(())
                }
            });
            match step {
                Step::Waiting => i += 1,
                Step::Progress => {
                    moved = true;
                    i += 1;
                }
                Step::Done => {
                    moved = true;
                    let (key, conn) = hs.accepting.swap_remove(i);
                    hs.admission.leave(key);
                    let peer = conn.connector().expect("a finished handshake");
                    accepted.push((conn, peer));
                }
                Step::Lost | Step::Failed(_) | Step::Gone => {
                    moved = true;
                    let (key, conn) = hs.accepting.swap_remove(i);
                    hs.admission.leave(key);
                    if let Step::Failed(why) = step {
                        self.refuse(conn.from(), &why);
                    }
                }
            }
        }
        let mut ended: Vec<(usize, u64, Result<Option<TcpStream>, String>)> = Vec::new();
        let mut i = 0;
        while i < hs.connecting.len() {
            let (conn, attempt) = &mut hs.connecting[i];
            let (peer, attempt) = (conn.peer(), *attempt);
            match conn.advance(&self.key) {
                Step::Waiting => i += 1,
                Step::Progress => {
                    moved = true;
                    i += 1;
                }
                Step::Done => {
                    moved = true;
                    let (conn, _) = hs.connecting.swap_remove(i);
                    ended.push((peer, attempt, Ok(Some(conn.into_stream()))));
                }
                Step::Lost => {
                    moved = true;
                    hs.connecting.swap_remove(i);
                    ended.push((peer, attempt, Ok(None)));
                }
                Step::Failed(why) => {
                    moved = true;
                    hs.connecting.swap_remove(i);
                    ended.push((peer, attempt, Err(why)));
                }
                Step::Gone => unreachable!("only an acceptor's connection is gone"),
            }
        }
        // Looked at after the lock is released (they take VC locks).
        let awaiting = std::mem::take(&mut hs.awaiting);
        while hs.connecting.len() < MAX_CONNECTS_IN_FLIGHT {
            let Some((peer, attempt, addrs)) = hs.waiting.pop_front() else {
                break;
            };
            moved = true;
            if let Err(why) = self.start_attempt(&mut hs, peer, attempt, addrs) {
                ended.push((peer, attempt, Err(why)));
            }
        }
        drop(hs);
        for (conn, peer) in accepted {
            self.decide(conn, peer);
        }
        for (peer, attempt, outcome) in ended {
            self.attempt_ended(peer, attempt, outcome);
        }
        let now = Instant::now();
        let mut still = Vec::new();
        for (peer, attempt, until) in awaiting {
            let Some(vc) = self.vcs[peer].get() else {
                continue;
            };
            let current = {
                let side = lock(&vc.send);
                side.attempt == attempt && matches!(side.link, Link::Awaiting { .. })
            };
            // Connected (or failed) meanwhile: nothing to wait for.
            if !current {
                continue;
            }
            if now < until {
                still.push((peer, attempt, until));
            } else {
                self.fail_vc(
                    vc,
                    format!(
                        "process {peer} did not connect back within {} s (both ends connected at once and its connection stands)",
                        self.connect_wait.as_secs()
                    ),
                );
            }
        }
        let mut hs = lock(&self.handshakes);
        hs.awaiting.extend(still);
        self.count_handshakes(&hs);
        drop(hs);
        self.say_held_refusals(false);
        if more {
            self.to_accept.store(true, Ordering::Release);
        }
        if self.to_accept.load(Ordering::Acquire) {
            // A listener edge came while this thread held the handshakes:
            // the poller takes the connections.
            self.wake();
        }
        moved
    }

    /// An accepted connection from `peer` proved the job key: decides
    /// whether it becomes the VC (see "Connections" in the module comment),
    /// tells the connector, and installs it if so.
    fn decide(&self, conn: Accepting, peer: usize) {
        let Ok(vc) = self.vc_or_make(peer) else {
            self.refuse(conn.from(), "it is no peer of this process");
            return;
        };
        if vc.terminated.load(Ordering::Acquire) {
            // The peer connects a terminated VC anew.
            self.reset_terminated(vc);
        }
        let mut side = lock(&vc.send);
        let verdict = if side.failed.is_some() {
            Verdict::Refuse
        } else {
            let ours = match side.link {
                Link::Idle | Link::Awaiting { .. } => AcceptorSide::Free,
                Link::Connecting => AcceptorSide::Connecting,
                Link::Up => AcceptorSide::Up,
            };
            Verdict::decide(self.me, peer, ours)
        };
        if let Err(e) = conn.send_verdict(verdict) {
            drop(side);
            self.refuse(conn.from(), &format!("writing its verdict: {e}"));
            return;
        }
        match verdict {
            Verdict::Accept => {
                // This side's own attempt, if one is under way, no longer
                // matters (the peer would refuse it): dropped.
                let abandoned = (side.link == Link::Connecting).then_some(side.attempt);
                side.attempt += 1;
                let stream = conn.into_stream();
                // Out of the handshakes' token, into the VC's.
                let _ = self.registry.deregister(&mut SourceFd(&stream.as_raw_fd()));
                self.install(vc, side, stream);
                if let Some(attempt) = abandoned {
                    self.cancel_attempt(peer, attempt);
                }
            }
            // The connector is a process of the job (it proved the key)
            // whose attempt no longer matters: no stranger to report.
            Verdict::Lose | Verdict::Refuse => {}
        }
    }

    /// Publishes the handshake counts of `hs` (under its lock).
    fn count_handshakes(&self, hs: &Handshakes) {
        let own = hs.own();
        self.own_attempts.store(own, Ordering::Release);
        self.handshake_count
            .store(own + hs.accepting.len(), Ordering::Release);
    }

    /// Drops this side's attempt `attempt` to connect to `peer`, wherever
    /// it is (its socket closes).
    fn cancel_attempt(&self, peer: usize, attempt: u64) {
        let mut hs = lock(&self.handshakes);
        hs.connecting
            .retain(|(c, a)| !(c.peer() == peer && *a == attempt));
        hs.waiting
            .retain(|(p, a, _)| !(*p == peer && *a == attempt));
        self.count_handshakes(&hs);
    }

    /// This side's attempt `attempt` to connect to `peer` ended: with the
    /// VC's connection (`Some`), lost to the peer's (`None`), or failed.
    /// An attempt that no longer matters is dropped.
    fn attempt_ended(&self, peer: usize, attempt: u64, outcome: Result<Option<TcpStream>, String>) {
        let Some(vc) = self.vcs[peer].get() else {
            return;
        };
        let mut side = lock(&vc.send);
        if side.attempt != attempt || side.link != Link::Connecting {
            return;
        }
        match outcome {
            Ok(Some(stream)) => self.install(vc, side, stream),
            Ok(None) => {
                let until = Instant::now() + self.connect_wait;
                side.link = Link::Awaiting { until };
                drop(side);
                lock(&self.handshakes).awaiting.push((peer, attempt, until));
            }
            Err(why) => {
                drop(side);
                self.fail_vc(vc, why);
            }
        }
    }

    /// Makes `stream` the connection of `vc` (its send side locked as
    /// `side`), which is `Up` from now on, and writes what was queued
    /// while it connected.
    fn install(&self, vc: &Vc, mut side: MutexGuard<'_, SendSide>, stream: TcpStream) {
        let stream = match self.ready_stream(vc.peer, stream) {
            Ok(stream) => stream,
            Err(e) => {
                drop(side);
                self.fail_vc(vc, e.what);
                return;
            }
        };
        vc.fd.store(stream.as_raw_fd(), Ordering::Release);
        *lock(&vc.owner) = Some(stream);
        side.link = Link::Up;
        // Frames queued while connecting go now; a failure fails the VC.
        let _ = self.drain_or_fail(vc, side);
    }

    /// Makes terminated `vc` a new, unconnected VC (its old connection is
    /// closed): the next send, `vc_init`, or the peer's connection connects
    /// it anew.
    fn reset_terminated(&self, vc: &Vc) {
        // Receive then send: the order the receive path takes them in.
        let mut recv = lock(&vc.recv);
        let mut send = lock(&vc.send);
        if !vc.terminated.load(Ordering::Acquire) {
            return;
        }
        let mut owner = lock(&vc.owner);
        vc.fd.store(-1, Ordering::Release);
        // The old connection closes here: no I/O holds it (both locks).
        *owner = None;
        *recv = RecvSide {
            reasm: Reassembler::new(vc.peer, self.max_payload).with_buffers(self.message_buffers()),
            eof: false,
        };
        *send = SendSide {
            attempt: send.attempt + 1,
            ..SendSide::default()
        };
        vc.queued.store(0, Ordering::Release);
        vc.read_closed.store(false, Ordering::Release);
        vc.terminated.store(false, Ordering::Release);
    }

    /// Accepts up to [`ACCEPTS_PER_TURN`] connections waiting on the
    /// listener into `hs`, the oldest held giving way when the slots are
    /// full (`admission`); says whether there were any, and whether the
    /// batch was full (more may wait).
    fn accept_new(&self, hs: &mut Handshakes) -> (bool, bool) {
        for taken in 0..ACCEPTS_PER_TURN {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    let wait = HELLO_WAIT.max(self.connect_wait);
                    let far = Instant::now() + wait;
                    let registered = self.registry.register(
                        &mut SourceFd(&stream.as_raw_fd()),
                        Connecting::TOKEN,
                        Interest::READABLE,
                    );
                    let conn =
                        match registered.and_then(|()| Accepting::new(stream, from, wait, far)) {
                            Ok(conn) => conn,
                            Err(e) => {
                                self.refuse(from, &e.to_string());
                                continue;
                            }
                        };
                    let key = hs.next_accepted;
                    hs.next_accepted += 1;
                    if let Some(old) = hs.admission.admit(key, from.ip())
                        && let Some(k) = hs.accepting.iter().position(|(o, _)| *o == old)
                    {
                        // Closed by the drop (a real process's side connects
                        // again).
                        let (_, evicted) = hs.accepting.swap_remove(k);
                        self.refuse(
                            evicted.from(),
                            "it gave way to a newer connection (too many are in their handshake at once)",
                        );
                    }
                    hs.accepting.push((key, conn));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (taken > 0, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A connection reset before it was taken, or a passing
                // shortage of descriptors: the listener stays, and the
                // next look tries again.
                Err(_) => return (taken > 0, false),
            }
        }
        (true, true)
    }

    /// Logs a refused connection (it is dropped, which closes it); the job
    /// goes on. A stranger chooses how many there are: the first
    /// [`LOG_BURST`] of a period are said in full, then one line per
    /// [`LOG_PERIOD`] counts the others.
    fn refuse(&self, from: SocketAddr, why: &str) {
        let say = lock(&self.refusals).hit(Instant::now());
        match say {
            Say::Line => eprintln!(
                "converse: process {}: refused a connection from {from}: {why}",
                self.me
            ),
            Say::Count(n) => self.say_refused_count(n),
            Say::Quiet => {}
        }
    }

    /// The summary line of `n` refused connections.
    fn say_refused_count(&self, n: u64) {
        eprintln!(
            "converse: process {}: refused {n} more connection(s) in the last {} s (the last from strangers or late handshakes; each is closed)",
            self.me,
            LOG_PERIOD.as_secs()
        );
    }

    /// Says the refusals held back, if their period has passed (or, at the
    /// end, `all` of them).
    fn say_held_refusals(&self, all: bool) {
        let held = {
            let mut log = lock(&self.refusals);
            if all {
                log.rest()
            } else {
                log.due(Instant::now())
            }
        };
        if let Some(n) = held {
            self.say_refused_count(n);
        }
    }

    /// `stream`, connected to `peer`, made ready to be a VC's: blocking
    /// reads off, non-blocking, no Nagle, registered for both directions
    /// under the peer's token.
    fn ready_stream(
        &self,
        peer: usize,
        stream: TcpStream,
    ) -> Result<mio::net::TcpStream, NetError> {
        let fail = |e: io::Error| NetError::peer(peer, format!("tcp: {e}"));
        stream.set_read_timeout(None).map_err(fail)?;
        stream.set_nonblocking(true).map_err(fail)?;
        stream.set_nodelay(true).map_err(fail)?;
        crate::liveness::watch(&stream, self.peer_timeout).map_err(fail)?;
        let mut stream = mio::net::TcpStream::from_std(stream);
        self.registry
            .register(
                &mut stream,
                Token(peer),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(fail)?;
        Ok(stream)
    }

    fn vc(&self, peer: usize) -> Result<&Arc<Vc>, NetError> {
        self.vcs
            .get(peer)
            .and_then(|v| v.get())
            .ok_or_else(|| NetError::peer(peer, "tcp: no connection to this process"))
    }

    /// Puts `p` at the end of `vc`'s queue and writes what the socket
    /// takes. Returns true if the queue is empty after that: `p` and its
    /// continuation were sent at once.
    fn send_pending(&self, vc: &Vc, p: Pending) -> Result<bool, NetError> {
        self.send_pending_when(vc, p, true)
    }

    /// As [`TcpModule::send_pending`]; with `now` false, writes only once
    /// the queue holds a batch (the caller flushes soon).
    fn send_pending_when(&self, vc: &Vc, p: Pending, now: bool) -> Result<bool, NetError> {
        let mut side = lock(&vc.send);
        if let Some(why) = &side.failed {
            return Err(NetError::peer(vc.peer, why.clone()));
        }
        if side.write_closed || side.terminate {
            return Err(NetError::peer(vc.peer, "tcp: send on a closed connection"));
        }
        let queued = vc.queued.fetch_add(p.total(), Ordering::Relaxed) + p.total();
        side.queue.push_back(p);
        if side.link != Link::Up {
            return self.connect_on_first_use(vc, side);
        }
        if !now && queued < BATCH_BYTES && side.queue.len() < BATCH_ITEMS {
            return Ok(false);
        }
        self.drain_or_fail(vc, side)
    }

    /// A frame was queued on `vc`, which is not connected: starts its
    /// connection if none is under way. The frame waits in the queue (not
    /// sent: `Ok(false)`) until the connection is up.
    fn connect_on_first_use(
        &self,
        vc: &Vc,
        mut side: MutexGuard<'_, SendSide>,
    ) -> Result<bool, NetError> {
        if side.link != Link::Idle {
            return Ok(false);
        }
        side.link = Link::Connecting;
        let attempt = side.attempt;
        // The card may take a round trip to the launcher: not under the
        // VC's lock.
        drop(side);
        self.connect_vc(vc, attempt, None).map(|()| false)
    }

    /// Sends `header` then the concatenation of `iov`: written straight
    /// from the caller's memory when nothing is queued before it; what the
    /// socket does not take (all of it, behind a queue) is copied and
    /// queued. Returns true if nothing is left queued.
    fn gather(
        &self,
        vc: &Vc,
        req: SendRequest,
        header: FrameHeader,
        iov: &[&[u8]],
    ) -> Result<bool, NetError> {
        let mut side = lock(&vc.send);
        if let Some(why) = &side.failed {
            return Err(NetError::peer(vc.peer, why.clone()));
        }
        if side.write_closed || side.terminate {
            return Err(NetError::peer(vc.peer, "tcp: send on a closed connection"));
        }
        if side.link != Link::Up {
            // Copied and queued until the connection is up.
            let mut body = Vec::with_capacity(header.len as usize);
            iov.iter().for_each(|part| body.extend_from_slice(part));
            let p = Pending::frame(header, SendData::Bytes(body), Some(req));
            vc.queued.fetch_add(p.total(), Ordering::Relaxed);
            side.queue.push_back(p);
            return self.connect_on_first_use(vc, side);
        }
        let head = header.encode();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(iov.len() + 1);
        parts.push(&head);
        parts.extend(iov.iter().copied().filter(|p| !p.is_empty()));
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut written = 0;
        // Set at the first full socket: how long to keep trying.
        let mut stalled_since: Option<Instant> = None;
        let failed = if side.queue.is_empty() {
            loop {
                let slices: Vec<IoSlice<'_>> = tail(&parts, written)
                    .into_iter()
                    .map(IoSlice::new)
                    .collect();
                match (&*io(vc)).write_vectored(&slices) {
                    Ok(0) => break Some(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => {
                        written += n;
                        stalled_since = None;
                        if written == total {
                            break None;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // A socket the peer is emptying takes more within
                    // microseconds: keep writing from the caller's memory
                    // rather than copy the rest (a stream then runs at the
                    // socket's rate); a peer that stopped reading gets the
                    // rest as a copy, after a short wait.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let since = *stalled_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= GATHER_STALL {
                            break None;
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) => break Some(e),
                }
            }
        } else {
            None
        };
        if let Some(e) = failed {
            return Err(self.fail_send(vc, side, e));
        }
        let p = if written == total {
            // All sent: the request completes (or its continuation's data
            // goes next).
            match req.data_sent() {
                None => return Ok(side.queue.is_empty()),
                Some(more) => Pending {
                    header: None,
                    data: more,
                    written: 0,
                    req: Some(req),
                },
            }
        } else {
            // The rest, header bytes included if the socket took fewer than
            // a header's, as one owned body.
            Pending {
                header: None,
                data: SendData::Bytes(tail(&parts, written).concat()),
                written: 0,
                req: Some(req),
            }
        };
        // Behind a queue or a continuation, `p` may go at once.
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
        self.drain_or_fail(vc, side)
    }

    /// Writes what is queued on `vc` (its send side locked) as far as the
    /// socket takes it. Returns true if the queue is then empty; a failed
    /// write fails the VC.
    fn drain_or_fail(&self, vc: &Vc, mut side: MutexGuard<'_, SendSide>) -> Result<bool, NetError> {
        match Self::drain(vc, &mut side) {
            Ok(_) => Ok(side.queue.is_empty()),
            Err(e) => Err(self.fail_send(vc, side, e)),
        }
    }

    /// A write to `vc` failed: the VC fails (its queue is dropped) and the
    /// layer above hears why.
    fn fail_send(&self, vc: &Vc, mut side: MutexGuard<'_, SendSide>, e: io::Error) -> NetError {
        let why = self.failure_of(vc.peer, "send", &e);
        side.failed = Some(why.clone());
        side.queue.clear();
        drop(side);
        self.upcalls().vc_failed(vc.peer, why.clone());
        NetError::peer(vc.peer, why)
    }

    /// Asks, at most once per `liveness::check_period`, whether each
    /// connected VC's peer went silent (`liveness::looks_silent`); a VC
    /// found so at two checks in a row fails, naming its peer. Costs one
    /// look at a clock between checks, and a system call or two per VC at
    /// each.
    fn check_liveness(&self) {
        let now = self.born.elapsed().as_millis() as u64;
        let next = self.next_check.load(Ordering::Relaxed);
        if now < next {
            return;
        }
        let period = crate::liveness::check_period(self.peer_timeout).as_millis() as u64;
        if self
            .next_check
            .compare_exchange(next, now + period, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // Another thread checks.
            return;
        }
        for vc in self.made_vcs() {
            // Under the send lock the VC is up and its descriptor is its
            // own (`io`); a VC whose lock is busy is looked at next time.
            let Ok(side) = vc.send.try_lock() else {
                continue;
            };
            if side.link != Link::Up || side.failed.is_some() || vc.fd.load(Ordering::Acquire) < 0 {
                continue;
            }
            let silent =
                crate::liveness::looks_silent(&*io(vc), self.peer_timeout).unwrap_or(false);
            if !vc.suspect.confirms(silent) {
                continue;
            }
            // Nothing more is written to it, nor waited for from it.
            let who = match io(vc).peer_addr() {
                Ok(addr) => format!("process {} at {}", vc.peer, addr.ip()),
                Err(_) => format!("process {}", vc.peer),
            };
            let _ = io(vc).shutdown(Shutdown::Both);
            drop(side);
            self.fail_vc(vc, crate::liveness::silence(&who, self.peer_timeout));
        }
    }

    /// Why the VC to `peer` failed, from the error `e` of an `op` on its
    /// socket: silence past the peer timeout is said as such
    /// (`liveness`), naming the peer.
    fn failure_of(&self, peer: usize, op: &str, e: &io::Error) -> String {
        if crate::liveness::is_silence(e) {
            crate::liveness::silence(&format!("process {peer}"), self.peer_timeout)
        } else {
            format!("{op} failed: {e}")
        }
    }

    /// A fully written pending item: completes its request, queueing the
    /// request's next data first if its continuation has more.
    fn complete(p: Pending, queue: &mut VecDeque<Pending>) {
        if let Some(more) = p.complete() {
            queue.push_front(more);
        }
    }

    /// Writes queued items, in order, until the socket is full or the queue
    /// empty (called with the send lock held: items never interleave).
    /// Returns whether anything was written.
    fn drain(vc: &Vc, side: &mut SendSide) -> io::Result<bool> {
        if side.link != Link::Up {
            // Written once the connection is up (`install`).
            return Ok(false);
        }
        let mut sent = 0;
        let result = loop {
            if side.queue.len() > 1 {
                match Self::write_batch(vc, side, &mut sent) {
                    Ok(true) => continue,
                    Ok(false) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
            let Some(front) = side.queue.front_mut() else {
                break Ok(());
            };
            match front.write_to(&io(vc), &mut sent) {
                Ok(true) => {
                    let done = side.queue.pop_front().expect("front exists");
                    let before = side.queue.len();
                    Self::complete(done, &mut side.queue);
                    if side.queue.len() > before {
                        let more = side.queue.front().expect("just pushed").total();
                        vc.queued.fetch_add(more, Ordering::Relaxed);
                    }
                }
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        vc.queued.fetch_sub(sent, Ordering::Relaxed);
        result.map(|()| sent > 0)
    }

    /// Writes the front of the queue, several items in one `writev` (many
    /// small messages cost one system call, not one each). Returns false
    /// when the socket is full. A batch ends after an item whose request
    /// has a continuation, so that the continuation's data follows it.
    fn write_batch(vc: &Vc, side: &mut SendSide, sent: &mut usize) -> io::Result<bool> {
        let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(BATCH_ITEMS * 2);
        let mut bytes = 0;
        for p in side.queue.iter().take(BATCH_ITEMS) {
            let hdr: &[u8] = p.header.as_ref().map_or(&[], |h| &h[..]);
            let data = p.data.as_slice();
            if p.written < hdr.len() {
                iov.push(IoSlice::new(&hdr[p.written..]));
                iov.push(IoSlice::new(data));
            } else {
                iov.push(IoSlice::new(&data[p.written - hdr.len()..]));
            }
            bytes += p.total() - p.written;
            if bytes >= BATCH_BYTES || p.req.as_ref().is_some_and(SendRequest::has_continuation) {
                break;
            }
        }
        let mut n = loop {
            match (&*io(vc)).write_vectored(&iov) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        };
        drop(iov);
        *sent += n;
        // Hand the written bytes out to the items, completing the whole ones.
        while n > 0 {
            let front = side
                .queue
                .front_mut()
                .expect("written bytes belong to queued items");
            let left = front.total() - front.written;
            if n < left {
                front.written += n;
                break;
            }
            n -= left;
            let done = side.queue.pop_front().expect("front exists");
            let before = side.queue.len();
            Self::complete(done, &mut side.queue);
            if side.queue.len() > before {
                let more = side.queue.front().expect("just pushed").total();
                vc.queued.fetch_add(more, Ordering::Relaxed);
            }
        }
        Ok(true)
    }

    /// Writes what is queued on `vc` until the socket is full; closes the
    /// write side once drained if the VC is terminating.
    fn flush(&self, vc: &Vc) -> bool {
        self.flush_locked(vc, lock(&vc.send))
    }

    fn flush_locked(&self, vc: &Vc, mut side: MutexGuard<'_, SendSide>) -> bool {
        let moved = match Self::drain(vc, &mut side) {
            Ok(moved) => moved,
            Err(e) => {
                self.fail_send(vc, side, e);
                return true;
            }
        };
        if side.queue.is_empty() && side.terminate && !side.write_closed && side.link == Link::Up {
            side.write_closed = true;
            let _ = io(vc).shutdown(Shutdown::Write);
            drop(side);
            self.check_terminated(vc);
        }
        moved
    }

    /// Reports `vc_terminated` once both directions are closed.
    fn check_terminated(&self, vc: &Vc) {
        // The receiver publishes `read_closed` before it takes `send` to
        // look at `terminate`; this takes `send` before it reads
        // `read_closed`: of two racing checks, the later one sees both.
        let send = lock(&vc.send);
        let closed = send.write_closed && vc.read_closed.load(Ordering::SeqCst);
        if closed && !vc.terminated.swap(true, Ordering::AcqRel) {
            let _ = self.registry.deregister(&mut SourceFd(&io(vc).as_raw_fd()));
            drop(send);
            self.upcalls().vc_terminated(vc.peer);
        }
    }

    /// Reads `vc` until it would block, delivering whole frames.
    fn receive(&self, vc: &Vc) -> bool {
        self.receive_locked(vc, lock(&vc.recv), Drain::UntilWouldBlock)
    }

    /// [`TcpModule::receive`] with the VC's receive side already locked,
    /// reading as far as `drain` says.
    fn receive_locked(&self, vc: &Vc, mut guard: MutexGuard<'_, RecvSide>, drain: Drain) -> bool {
        let upcalls = self.upcalls();
        let peer = vc.peer;
        let side = &mut *guard;
        if side.eof || vc.fd.load(Ordering::Acquire) < 0 {
            // Closed, or not connected yet.
            return false;
        }
        let mut moved = false;
        loop {
            // Flow control: the layer above has no room for more; the data
            // waits in the socket (and the sender's) until it has.
            if !upcalls.room() {
                return moved;
            }
            // The recv-active fast path: straight into the frame's body,
            // which is not zeroed first.
            let direct = side.reasm.receive_body(
                &mut |space| rustix::io::read(&*io(vc), space).map(|(filled, _)| filled),
                |h, body| upcalls.arrived(peer, h, body),
            );
            // See `Drain`: whether a short read of the 64 KiB buffer ends
            // the loop. A large body read straight into its message reads
            // on until the socket would block in any case: its sender is
            // still writing (stopping at its short reads cost a 4 MiB
            // round trip 5-15%).
            let result = match direct {
                Some(read) => read.map(|n| (n, false, None)).map_err(io::Error::from),
                None => RECV_BUF_OF_THREAD.with(|cell| {
                    // Taken for the read and its frames, then handed back:
                    // a nested receive on this thread (none is known) would
                    // get a buffer of its own.
                    let mut buf = cell
                        .take()
                        .unwrap_or_else(|| vec![0; RECV_BUF].into_boxed_slice());
                    let read = (&*io(vc)).read(&mut buf).map(|n| {
                        let framed = if n == 0 {
                            Ok(())
                        } else {
                            side.reasm
                                .handle(&buf[..n], |h, body| upcalls.arrived(peer, h, body))
                        };
                        (
                            n,
                            drain == Drain::ToShortRead && n < buf.len(),
                            framed.err(),
                        )
                    });
                    cell.set(Some(buf));
                    read
                }),
            };
            match result {
                Ok((0, _, _)) => {
                    side.eof = true;
                    vc.read_closed.store(true, Ordering::SeqCst);
                    let truncated = side.reasm.finish();
                    drop(guard);
                    match truncated {
                        Err(e) => upcalls.vc_failed(peer, e.to_string()),
                        Ok(()) => {
                            let terminating = lock(&vc.send).terminate;
                            if terminating {
                                self.check_terminated(vc);
                            } else {
                                upcalls.vc_failed(peer, "connection closed by the peer".into());
                            }
                        }
                    }
                    return true;
                }
                Ok((n, drained, None)) => {
                    self.received.fetch_add(n as u64, Ordering::Relaxed);
                    if drained {
                        return true;
                    }
                    moved = true;
                }
                Ok((_, _, Some(e))) => {
                    side.eof = true;
                    let _ = io(vc).shutdown(Shutdown::Both);
                    drop(guard);
                    upcalls.vc_failed(peer, e.to_string());
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return moved,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    side.eof = true;
                    drop(guard);
                    upcalls.vc_failed(peer, self.failure_of(peer, "receive", &e));
                    return true;
                }
            }
        }
    }
}

impl NetModule for TcpModule {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn business_card(&self) -> String {
        self.card.clone()
    }

    fn connect_to_root(&self, peer: usize, card: &str) -> Result<(), NetError> {
        self.vc_init(peer, card)?;
        self.accept_peers(&[peer], Instant::now() + self.connect_wait)
    }

    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError> {
        let vc = self.vc_or_make(peer)?;
        if vc.terminated.load(Ordering::Acquire) {
            // A VC used again after it terminated: connected anew, by
            // whichever end gets there first.
            self.reset_terminated(vc);
        }
        let mut side = lock(&vc.send);
        if side.link != Link::Idle || side.failed.is_some() {
            // Connected, or being connected, already.
            return Ok(());
        }
        side.link = Link::Connecting;
        let attempt = side.attempt;
        drop(side);
        self.connect_vc(vc, attempt, Some(card))
    }

    fn connected_peers(&self) -> Vec<usize> {
        self.made_vcs().map(|vc| vc.peer).collect()
    }

    fn vc_destroy(&self, peer: usize) {
        if let Ok(vc) = self.vc(peer) {
            let side = lock(&vc.send);
            if side.link == Link::Up {
                let _ = self.registry.deregister(&mut SourceFd(&io(vc).as_raw_fd()));
                let _ = io(vc).shutdown(Shutdown::Both);
            }
        }
    }

    fn vc_terminate(&self, peer: usize) {
        let Ok(vc) = self.vc(peer) else { return };
        lock(&vc.send).terminate = true;
        // Drain now if possible; the rest on writable events.
        self.flush(vc);
    }

    fn ordering(&self) -> bool {
        true
    }

    fn isend_contig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        data: SendData,
    ) -> Result<(), NetError> {
        let p = Pending::frame(header, data, Some(req));
        self.send_pending(self.vc_or_make(peer)?, p).map(|_| ())
    }

    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError> {
        let req = SendRequest::new();
        let p = Pending::frame(header, data, Some(req.clone()));
        let sent = self.send_pending(self.vc_or_make(peer)?, p)?;
        Ok((!sent).then_some(req))
    }

    fn send_noncontig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        iov: &[&[u8]],
    ) -> Result<(), NetError> {
        check_iov_len(self.name(), peer, &header, iov)?;
        self.gather(self.vc_or_make(peer)?, req, header, iov)
            .map(|_| ())
    }

    fn gathers(&self) -> bool {
        true
    }

    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError> {
        // Handshakes move on their own clocks, not on events; so do the
        // liveness checks, once a VC is made.
        let handshakes = self.handshake_count.load(Ordering::Acquire) > 0;
        let timeout = if handshakes {
            Some(timeout.map_or(HANDSHAKE_POLL, |t| t.min(HANDSHAKE_POLL)))
        } else if self.made_len.load(Ordering::Acquire) > 0 {
            let period = crate::liveness::check_period(self.peer_timeout);
            Some(timeout.map_or(period, |t| t.min(period)))
        } else {
            timeout
        };
        self.check_liveness();
        let mut poll = lock(&self.poll);
        let mut events = Events::with_capacity(64);
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(NetError::local(format!("tcp: epoll_wait: {e}"))),
        }
        drop(poll);
        let mut moved = false;
        let listener = events.iter().any(|e| e.token() == LISTENER);
        if listener
            || handshakes
            || self.to_accept.load(Ordering::Acquire)
            || events.iter().any(|e| e.token() == Connecting::TOKEN)
        {
            moved |= self.drive_handshakes(listener);
        }
        if self.resume.swap(false, Ordering::AcqRel) {
            // Receiving paused for room: read every VC now, events or not.
            for vc in self.made_vcs() {
                moved |= self.receive(vc);
            }
        }
        for event in events.iter() {
            let Token(peer) = event.token();
            if peer == WAKER.0 || peer == LISTENER.0 || peer == Connecting::TOKEN.0 {
                continue;
            }
            let Some(vc) = self.vcs.get(peer).and_then(|v| v.get()) else {
                continue;
            };
            let readable = event.is_readable() || event.is_read_closed() || event.is_error();
            let writable = event.is_writable() || event.is_write_closed();
            if dir == PollDir::OutFirst && writable {
                moved |= self.flush(vc);
            }
            if readable {
                moved |= self.receive(vc);
            }
            if dir == PollDir::InFirst && writable {
                moved |= self.flush(vc);
            }
        }
        Ok(moved)
    }

    fn post_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<bool, NetError> {
        let p = Pending::frame(header, data, None);
        self.send_pending_when(self.vc_or_make(peer)?, p, false)
            .map(|empty| !empty)
    }

    fn flush_all(&self) -> bool {
        let mut moved = false;
        for vc in self.made_vcs() {
            if vc.queued.load(Ordering::Relaxed) > 0 {
                moved |= self.flush(vc);
            }
        }
        moved
    }

    fn has_queued(&self) -> bool {
        // Frames that wait for their connection leave when it is up (the
        // handshake's events move it): only a connected VC's count here.
        self.made_vcs()
            .any(|vc| vc.queued.load(Ordering::Relaxed) > 0 && vc.fd.load(Ordering::Relaxed) >= 0)
    }

    fn settled(&self) -> bool {
        // A VC connecting or awaiting is one of this side's attempts; the
        // peer's own attempts are the peer's to wait for.
        self.made_vcs().all(|vc| {
            let side = lock(&vc.send);
            matches!(side.link, Link::Up | Link::Idle) || side.failed.is_some()
        })
    }

    fn backlog(&self, peer: usize) -> usize {
        self.vcs
            .get(peer)
            .and_then(|v| v.get())
            .map_or(0, |vc| vc.queued.load(Ordering::Relaxed))
    }

    fn resume_receiving(&self) {
        self.resume.store(true, Ordering::Release);
        self.wake();
    }

    fn try_progress(&self) -> bool {
        let mut moved = false;
        for vc in self.made_vcs() {
            // Skip a VC being read elsewhere: that reader takes it all.
            if let Ok(guard) = vc.recv.try_lock() {
                moved |= self.receive_locked(vc, guard, Drain::ToShortRead);
            }
            // Queued sends go on too (a sender that moved on to other work
            // leaves them to whoever polls).
            if let Ok(side) = vc.send.try_lock()
                && !side.queue.is_empty()
            {
                moved |= self.flush_locked(vc, side);
            }
        }
        // While PEs poll, the progress thread leaves the module to them: a
        // peer's new connection, and this side's handshakes, are theirs to
        // move too, every few polls.
        let polls = self.polls.load(Ordering::Relaxed).wrapping_add(1);
        self.polls.store(polls, Ordering::Relaxed);
        // This process's own connections move at every poll: a PE may be
        // waiting for one (a peer's are the peer's to hurry).
        if polls.is_multiple_of(HANDSHAKE_TICK) || self.own_attempts.load(Ordering::Relaxed) > 0 {
            moved |= self.drive_handshakes(polls.is_multiple_of(HANDSHAKE_TICK));
            self.check_liveness();
        }
        moved
    }

    fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// Shorter than shm's: what a PE that stops polling leaves unread
    /// waits in the socket, whose buffer then fills and holds the sender.
    /// Measured on a stream of 4 MiB messages: 1.5-1.6 GB/s with 1 ms,
    /// 3.7-4.1 GB/s with 100 µs (a 4 MiB round trip 2.7-3.0 ms and
    /// 1.8-2.0 ms); over shm the shorter period cost bandwidth instead
    /// (the progress thread took the processor from polling PEs).
    fn watch_check(&self) -> Duration {
        WATCH_CHECK
    }

    fn bytes_received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    fn finalize(&self) {
        self.say_held_refusals(true);
        for vc in self.made_vcs() {
            let side = lock(&vc.send);
            if side.link == Link::Up && vc.fd.load(Ordering::Acquire) >= 0 {
                let _ = self.registry.deregister(&mut SourceFd(&io(vc).as_raw_fd()));
                let _ = io(vc).shutdown(Shutdown::Both);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameKind;
    use crate::netmod::DataAvail;

    /// What a module reported, in order.
    #[derive(Default)]
    struct Record {
        frames: Mutex<Vec<(usize, FrameHeader, Vec<u8>)>>,
        events: Mutex<Vec<String>>,
    }

    impl Upcalls for Record {
        fn frame(&self, peer: usize, header: FrameHeader, body: Vec<u8>) {
            lock(&self.frames).push((peer, header, body));
        }
        fn vc_terminated(&self, peer: usize) {
            lock(&self.events).push(format!("terminated {peer}"));
        }
        fn vc_failed(&self, peer: usize, why: String) {
            lock(&self.events).push(format!("failed {peer}: {why}"));
        }
    }

    /// The test job's key.
    fn key() -> JobKey {
        JobKey::from_bytes([0x12; 32])
    }

    type Side = (Arc<TcpModule>, Arc<Record>);

    fn module(me: usize, nodes: usize) -> Side {
        module_with(me, nodes, key())
    }

    fn module_with(me: usize, nodes: usize, key: JobKey) -> Side {
        let m = TcpModule::init(
            me,
            nodes,
            key,
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1",
            1 << 24,
        )
        .unwrap();
        let rec = Arc::new(Record::default());
        m.set_upcalls(rec.clone());
        (Arc::new(m), rec)
    }

    /// Two connected modules, processes 0 and 1.
    fn pair() -> (Side, Side) {
        let a = module(0, 2);
        let b = module(1, 2);
        b.0.vc_init(0, &a.0.business_card()).unwrap();
        let acceptor = a.0.clone();
        let accepted = std::thread::spawn(move || {
            acceptor.accept_peers(&[1], Instant::now() + Duration::from_secs(5))
        });
        if let Err(e) =
            b.0.accept_peers(&[0], Instant::now() + Duration::from_secs(5))
        {
            panic!("{e}: {:?}", lock(&b.1.events));
        }
        accepted.join().unwrap().unwrap();
        (a, b)
    }

    /// The address of `m`'s listening socket.
    fn addr_of(m: &TcpModule) -> String {
        m.business_card().strip_prefix("tcp:").unwrap().to_string()
    }

    fn header(kind: FrameKind, len: usize, tag: u32) -> FrameHeader {
        FrameHeader {
            kind,
            flags: 0,
            len: len as u32,
            src: 7,
            tag,
        }
    }

    /// Polls both modules until `done` or 10 s.
    fn poll_until(mods: &[&TcpModule], done: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < end, "timed out");
            for m in mods {
                m.poll(PollDir::InFirst, Some(Duration::from_millis(5)))
                    .unwrap();
            }
        }
    }

    #[test]
    fn frames_arrive_whole_and_in_order_through_every_send_call() {
        let ((a, ra), (b, _rb)) = pair();
        assert!(b.ordering());
        // istart_contig: small frames go at once.
        for i in 0..100u32 {
            let body = vec![i as u8; (i as usize * 37) % 300];
            let r = b
                .istart_contig(
                    0,
                    header(FrameKind::Control, body.len(), i),
                    SendData::Bytes(body),
                )
                .unwrap();
            assert!(r.is_none(), "a small frame goes at once");
        }
        // isend_contig with a request, a large body.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let req = SendRequest::new();
        b.isend_contig(
            0,
            req.clone(),
            header(FrameKind::Control, big.len(), 100),
            SendData::Bytes(big.clone()),
        )
        .unwrap();
        // send_noncontig: the iovecs make one body.
        let parts: [&[u8]; 3] = [b"abc", b"", b"defgh"];
        b.send_noncontig(
            0,
            SendRequest::new(),
            header(FrameKind::Control, 8, 101),
            &parts,
        )
        .unwrap();
        poll_until(&[&a, &b], || {
            lock(&ra.frames).len() == 102 && req.is_complete()
        });
        let frames = lock(&ra.frames);
        for (i, (peer, h, body)) in frames.iter().enumerate().take(100) {
            assert_eq!((*peer, h.tag, h.src), (1, i as u32, 7));
            assert_eq!(body, &vec![i as u8; (i * 37) % 300]);
        }
        assert_eq!(frames[100].2, big);
        assert_eq!(frames[101].2, b"abcdefgh");
        assert!(req.completion_flag().load(Ordering::Acquire));
        assert!(
            b.send_noncontig(
                0,
                SendRequest::new(),
                header(FrameKind::Control, 9, 0),
                &parts
            )
            .is_err(),
            "a length that disagrees with the iovecs is refused"
        );
    }

    #[test]
    fn a_gathered_send_frees_the_callers_memory_and_keeps_its_place() {
        let ((a, ra), (b, _rb)) = pair();
        assert!(b.gathers());
        // Larger than the sockets' buffers: written from the caller's
        // memory until the socket is full (nobody reads yet), the rest
        // copied.
        let mut big: Vec<u8> = (0..12_000_000u32).map(|i| (i % 253) as u8).collect();
        let expected = big.clone();
        let head = [9u8; 5];
        let req = SendRequest::new();
        b.send_noncontig(
            0,
            req.clone(),
            header(FrameKind::Control, head.len() + big.len(), 1),
            &[&head, &big],
        )
        .unwrap();
        assert!(b.backlog(0) > 0, "the socket could not take it all");
        // The caller's memory is free again.
        big.iter_mut().for_each(|x| *x = 0);
        // Frames sent after it, gathered or not, come after it.
        b.istart_contig(
            0,
            header(FrameKind::Control, 3, 2),
            SendData::Bytes(vec![1, 2, 3]),
        )
        .unwrap();
        b.send_noncontig(
            0,
            SendRequest::new(),
            header(FrameKind::Control, 4, 3),
            &[b"ab", b"", b"cd"],
        )
        .unwrap();
        poll_until(&[&a, &b], || {
            lock(&ra.frames).len() == 3 && req.is_complete()
        });
        let frames = lock(&ra.frames);
        assert_eq!(
            frames.iter().map(|f| f.1.tag).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(&frames[0].2[..5], &head);
        assert!(
            frames[0].2[5..] == expected[..],
            "the gathered body arrived intact"
        );
        assert_eq!(frames[1].2, [1, 2, 3]);
        assert_eq!(frames[2].2, b"abcd");
        assert_eq!(b.backlog(0), 0);
    }

    #[test]
    fn a_continuation_sends_more_data_before_completing() {
        let ((a, ra), (b, _rb)) = pair();
        // A frame of 6 bytes whose body comes in three pieces: the header
        // and "ab" now, then "cd" and "ef" from the continuation.
        let mut more = vec![b"ef".to_vec(), b"cd".to_vec()];
        let req = SendRequest::with_continuation(Some(Box::new(move || match more.pop() {
            Some(bytes) => DataAvail::More(SendData::Bytes(bytes)),
            None => DataAvail::Complete,
        })));
        b.isend_contig(
            0,
            req.clone(),
            header(FrameKind::Control, 6, 1),
            SendData::Bytes(b"ab".to_vec()),
        )
        .unwrap();
        poll_until(&[&a, &b], || lock(&ra.frames).len() == 1);
        assert_eq!(lock(&ra.frames)[0].2, b"abcdef");
        assert!(req.is_complete());
    }

    #[test]
    fn terminate_completes_after_pending_sends_drain() {
        let ((a, ra), (b, rb)) = pair();
        // More than the socket buffers hold: some of it is queued.
        let big = vec![5u8; 16 << 20];
        let queued = b
            .istart_contig(
                0,
                header(FrameKind::Control, big.len(), 0),
                SendData::Bytes(big),
            )
            .unwrap();
        assert!(queued.is_some(), "16 MiB does not fit in a socket buffer");
        b.vc_terminate(0);
        assert!(
            lock(&rb.events).is_empty(),
            "terminate does not block or finish early"
        );
        assert!(
            b.istart_contig(0, header(FrameKind::Control, 0, 0), SendData::Bytes(vec![]))
                .is_err(),
            "no sends after terminate"
        );
        poll_until(&[&a, &b], || !lock(&ra.frames).is_empty());
        assert_eq!(lock(&ra.frames)[0].2.len(), 16 << 20);
        assert!(queued.unwrap().is_complete());
        // The receiver saw the end of stream after the frame; it terminates
        // too, and both report it.
        a.vc_terminate(1);
        poll_until(&[&a, &b], || {
            lock(&ra.events).iter().any(|e| e == "terminated 1")
                && lock(&rb.events).iter().any(|e| e == "terminated 0")
        });
        // Before it terminated, the receiver saw a plain end of stream
        // (whether that is a fault is the layer above's call); no broken
        // frame.
        assert!(
            lock(&ra.events)
                .iter()
                .all(|e| !e.starts_with("failed") || e == "failed 1: connection closed by the peer"),
            "{:?}",
            lock(&ra.events)
        );
    }

    /// A fake process 1: connects to `a` with a valid handshake (it holds
    /// the key), then writes `bytes` and closes.
    fn fake_peer_sends(bytes: &[u8]) -> Arc<Record> {
        let (a, ra) = module(0, 2);
        let addr: SocketAddr = addr_of(&a).parse().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let mut conn = Connecting::start(1, 2, 0, vec![addr], until, None).unwrap();
        let acceptor = a.clone();
        let accepted = std::thread::spawn(move || {
            acceptor.accept_peers(&[1], Instant::now() + Duration::from_secs(5))
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match conn.advance(&key()) {
                Step::Done => break,
                Step::Failed(why) => panic!("{why}"),
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                _ => panic!("no answer"),
            }
        }
        accepted.join().unwrap().unwrap();
        let mut s = conn.into_stream();
        s.set_nonblocking(false).unwrap();
        s.write_all(bytes).unwrap();
        drop(s);
        poll_until(&[&a], || !lock(&ra.events).is_empty());
        ra
    }

    #[test]
    fn a_truncated_frame_is_reported_naming_the_peer() {
        let whole = crate::frame::encode_frame(FrameKind::Message, 0, 1, 0, &[9; 100]);
        let ra = fake_peer_sends(&whole[..50]);
        let events = lock(&ra.events);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0].starts_with("failed 1: malformed data from process 1: stream ended inside a frame: 50 of 116 bytes"),
            "{events:?}"
        );
        assert!(lock(&ra.frames).is_empty());
    }

    #[test]
    fn garbage_is_reported_naming_the_peer() {
        let ra = fake_peer_sends(b"GET / HTTP/1.1\r\n\r\n");
        let events = lock(&ra.events);
        assert!(
            events[0].starts_with("failed 1: malformed data from process 1: bad frame magic"),
            "{events:?}"
        );
    }

    #[test]
    fn a_closed_connection_is_a_failure_unless_terminating() {
        let ra = fake_peer_sends(&[]);
        assert_eq!(
            *lock(&ra.events),
            vec!["failed 1: connection closed by the peer".to_string()]
        );
    }

    /// A connection's first bytes, as a connecting process `from` of a
    /// `nodes`-process job writes them to process `to`, with nonce `nonce`.
    fn raw_hello(from: u32, to: u32, nodes: u32, nonce: [u8; 16]) -> Vec<u8> {
        let mut h = b"CVRSTCP3".to_vec();
        for word in [from, to, nodes, 0] {
            h.extend_from_slice(&word.to_le_bytes());
        }
        h.extend_from_slice(&nonce);
        h
    }

    /// A stranger without the key cannot become a process's VC, whatever
    /// it sends: a hello of the right form and a made-up proof, a proof
    /// made for another acceptor nonce (one recorded from an earlier
    /// connection), a process of another job (another key), garbage. The
    /// real process 1, connecting after them all, is accepted: refusals
    /// delay nothing.
    #[test]
    fn only_a_process_that_proves_the_key_is_accepted() {
        let (a, _ra) = module(0, 3);
        let addr = addr_of(&a);
        let nonce = [7u8; 16];
        // A made-up proof.
        let mut made_up = TcpStream::connect(&addr).unwrap();
        made_up.write_all(&raw_hello(1, 0, 3, nonce)).unwrap();
        // A replayed proof: right key, but for an acceptor nonce of
        // another connection.
        let mut replayed = TcpStream::connect(&addr).unwrap();
        replayed.write_all(&raw_hello(1, 0, 3, nonce)).unwrap();
        let old = launch_wire::Nonce::from_bytes([9; 16]);
        let mut ids = [0u8; 12];
        ids[..4].copy_from_slice(&1u32.to_le_bytes());
        ids[8..].copy_from_slice(&3u32.to_le_bytes());
        let stale = key().proof(
            launch_wire::Role::TcpConnector,
            &[&nonce, old.as_bytes(), &ids],
        );
        // Garbage.
        let mut garbage = TcpStream::connect(&addr).unwrap();
        garbage.write_all(&[0xff; 40]).unwrap();
        // A process 1 of another job.
        let (other, other_rec) = module_with(1, 3, JobKey::from_bytes([0x34; 32]));
        other.vc_init(0, &a.business_card()).unwrap();
        let other_job = std::thread::spawn(move || {
            other.accept_peers(&[0], Instant::now() + Duration::from_secs(5))
        });
        // The real process 1, after them.
        let (real, _) = module(1, 3);
        let card = a.business_card();
        let joiner = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            real.vc_init(0, &card).unwrap();
            real.accept_peers(&[0], Instant::now() + Duration::from_secs(5))
                .map(|()| real)
        });
        let strangers = std::thread::spawn(move || {
            // Each answer is a nonce and the acceptor's proof; the
            // strangers send their proof after it.
            let mut answer = [0u8; 48];
            made_up.read_exact(&mut answer).unwrap();
            made_up.write_all(&[0x55; 32]).unwrap();
            replayed.read_exact(&mut answer).unwrap();
            replayed.write_all(stale.as_bytes()).unwrap();
            (made_up, replayed, garbage)
        });
        a.accept_peers(&[1], Instant::now() + Duration::from_secs(4))
            .expect("process 1 joins while strangers are refused");
        assert!(a.vcs[1].get().is_some());
        let _real = joiner
            .join()
            .unwrap()
            .expect("process 1 sees process 0 prove the key");
        let e = other_job.join().unwrap().unwrap_err();
        assert_eq!(e.peer, Some(0));
        let events = lock(&other_rec.events);
        assert!(
            events.len() == 1 && events[0].contains("does not prove the job key"),
            "{events:?}"
        );
        // The strangers were closed, not made VCs.
        let (mut made_up, mut replayed, mut garbage) = strangers.join().unwrap();
        for s in [&mut made_up, &mut replayed, &mut garbage] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            assert!(matches!(s.read_to_end(&mut rest), Ok(0) | Err(_)), "closed");
        }
    }

    /// A process that never connects is named when the deadline passes.
    /// A terminated VC is connected again by `vc_init` on both sides, in
    /// either order, its handshake driven by `poll` (the spec's "may be
    /// used for communication again later"); frames flow both ways on the
    /// new connection, and a stranger is still refused.
    /// `ckpt_shutdown` closes every connection, as `finalize` does: the
    /// peer sees its VC closed.
    #[test]
    fn ckpt_shutdown_closes_every_connection() {
        let ((a, _ra), (b, rb)) = pair();
        a.ckpt_shutdown();
        poll_until(&[&b], || {
            lock(&rb.events)
                .iter()
                .any(|e| e == "failed 0: connection closed by the peer")
        });
    }

    /// After `ckpt_shutdown` on both sides, modules made anew for the same
    /// processes (`net_module_init` again, as a restarted process does)
    /// connect and move frames both ways.
    #[test]
    fn modules_made_anew_after_ckpt_shutdown_connect_again() {
        for round in 0..2u32 {
            let ((a, ra), (b, rb)) = pair();
            for (m, to, tag) in [(&a, 1, 10 + round), (&b, 0, 20 + round)] {
                m.istart_contig(
                    to,
                    header(FrameKind::Control, 1, tag),
                    SendData::Bytes(vec![1]),
                )
                .unwrap();
            }
            poll_until(&[&a, &b], || {
                lock(&ra.frames).len() == 1 && lock(&rb.frames).len() == 1
            });
            assert_eq!(lock(&ra.frames)[0].1.tag, 20 + round);
            assert_eq!(lock(&rb.frames)[0].1.tag, 10 + round);
            a.ckpt_shutdown();
            b.ckpt_shutdown();
        }
    }

    #[test]
    fn a_terminated_vc_is_connected_again() {
        for acceptor_first in [true, false] {
            let ((a, ra), (b, rb)) = pair();
            let send = |m: &TcpModule, to: usize, tag: u32| {
                m.istart_contig(
                    to,
                    header(FrameKind::Control, 3, tag),
                    SendData::Bytes(vec![tag as u8; 3]),
                )
                .unwrap();
            };
            send(&b, 0, 1);
            poll_until(&[&a, &b], || lock(&ra.frames).len() == 1);
            a.vc_terminate(1);
            b.vc_terminate(0);
            poll_until(&[&a, &b], || {
                lock(&ra.events).as_slice() == ["terminated 1"]
                    && lock(&rb.events).as_slice() == ["terminated 0"]
            });
            assert!(
                b.istart_contig(
                    0,
                    header(FrameKind::Control, 1, 9),
                    SendData::Bytes(vec![0])
                )
                .is_err()
            );
            // A stranger that says it is process 1 cannot prove the key.
            let mut stranger = TcpStream::connect(addr_of(&a)).unwrap();
            let _ = stranger.write_all(&[0u8; 40]);
            if acceptor_first {
                a.vc_init(1, &b.business_card()).unwrap();
                b.vc_init(0, &a.business_card()).unwrap();
            } else {
                b.vc_init(0, &a.business_card()).unwrap();
                // The peer's connection may come before this side's
                // `vc_init`: it is taken, and `vc_init` finds it up.
                poll_until(&[&a, &b], || {
                    a.vc(1).is_ok_and(|vc| lock(&vc.send).link == Link::Up)
                });
                a.vc_init(1, &b.business_card()).unwrap();
            }
            // Sends wait until the new connection is up.
            poll_until(&[&a, &b], || {
                a.vc(1)
                    .is_ok_and(|vc| !vc.terminated.load(Ordering::Acquire))
                    && b.vc(0)
                        .is_ok_and(|vc| !vc.terminated.load(Ordering::Acquire))
            });
            send(&a, 1, 2);
            send(&b, 0, 3);
            poll_until(&[&a, &b], || {
                lock(&ra.frames).len() == 2 && lock(&rb.frames).len() == 1
            });
            assert_eq!(lock(&ra.frames)[1].1.tag, 3);
            assert_eq!(lock(&rb.frames)[0].1.tag, 2);
            assert_eq!(lock(&rb.frames)[0].2, [2, 2, 2]);
            assert!(
                lock(&ra.events).iter().all(|e| !e.starts_with("failed")),
                "{:?}",
                lock(&ra.events)
            );
            drop(stranger);
        }
    }

    #[test]
    fn a_missing_peer_is_named() {
        let (a, _ra) = module(0, 3);
        let err = a
            .accept_peers(&[1, 2], Instant::now() + Duration::from_millis(300))
            .unwrap_err();
        assert!(
            err.what
                .contains("waited in vain for process(es) 1, 2 to connect"),
            "{err}"
        );
    }

    /// Strangers that connect and stay silent, or send half a hello, do not
    /// hold up start-up: the real peer connecting after them is accepted
    /// long before their own clock runs out.
    #[test]
    fn silent_connections_do_not_hold_up_a_real_peer() {
        let a = module(0, 2);
        let addr = addr_of(&a.0);
        let silent: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
        let mut half = TcpStream::connect(&addr).unwrap();
        half.write_all(b"CVRS").unwrap();
        let b = module(1, 2);
        let card = a.0.business_card();
        let joiner = std::thread::spawn(move || {
            // Connects after the strangers are queued.
            std::thread::sleep(Duration::from_millis(100));
            b.0.vc_init(0, &card).unwrap();
            b.0.accept_peers(&[0], Instant::now() + Duration::from_secs(5))
                .unwrap();
            b
        });
        // A deadline shorter than a stranger's clock: met only if the
        // strangers' silence blocks nothing.
        a.0.accept_peers(&[1], Instant::now() + HELLO_WAIT - Duration::from_secs(1))
            .expect("process 1 is accepted while strangers stay silent");
        assert!(a.0.vcs[1].get().is_some(), "process 1's VC is installed");
        let _b = joiner.join().unwrap();
        drop((silent, half));
    }

    /// Strangers that hold more silent connections than the listener has
    /// handshake slots, opening a new one for each closed, keep no real
    /// peer out: the oldest gives way to a newcomer, and a peer whose
    /// connection was closed before its verdict connects again. (Before,
    /// newcomers past the slots were refused instead, each on its own
    /// line: the multi-process `siege_worker_*` cases count the lines.)
    #[test]
    fn a_flood_of_strangers_does_not_keep_a_real_peer_out() {
        let a = module(0, 2);
        let addr = addr_of(&a.0);
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut held: Vec<TcpStream> = Vec::new();
                let mut opened = 0usize;
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    held.retain_mut(|s| matches!(s.read(&mut buf), Err(e) if e.kind() == io::ErrorKind::WouldBlock));
                    let to: SocketAddr = addr.parse().unwrap();
                    while held.len() < MAX_PENDING_HELLOS + 44 {
                        // A full listen queue drops the connect (its SYN
                        // is sent again a second later): given up on.
                        let Ok(s) = TcpStream::connect_timeout(&to, Duration::from_millis(50))
                        else {
                            break;
                        };
                        s.set_nonblocking(true).unwrap();
                        held.push(s);
                        opened += 1;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                opened
            })
        };
        let b = module(1, 2);
        let card = a.0.business_card();
        let joiner = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            b.0.vc_init(0, &card).unwrap();
            b.0.accept_peers(&[0], Instant::now() + Duration::from_secs(20))
                .unwrap();
            b
        });
        a.0.accept_peers(&[1], Instant::now() + Duration::from_secs(20))
            .expect("process 1 is accepted while strangers flood the slots");
        let _b = joiner.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let opened = flood.join().unwrap();
        assert!(
            opened > MAX_PENDING_HELLOS,
            "the flood opened only {opened}"
        );
    }

    /// A process connecting to several peers waits for none of them in
    /// `vc_init`: process 2 starts its handshakes with 0 and 1 before
    /// either accepts, and all three end in `accept_peers`, in any order.
    #[test]
    fn handshakes_end_in_accept_peers_in_any_order() {
        let mods: Vec<Side> = (0..3).map(|me| module(me, 3)).collect();
        let cards: Vec<String> = mods.iter().map(|m| m.0.business_card()).collect();
        for (me, m) in mods.iter().enumerate() {
            for (peer, card) in cards.iter().enumerate().filter(|&(p, _)| p != me) {
                m.0.vc_init(peer, card).unwrap();
            }
        }
        // The highest process first: it could not have ended its
        // handshakes inside `vc_init`.
        let waiters: Vec<_> = mods
            .iter()
            .rev()
            .map(|m| {
                let m = m.0.clone();
                std::thread::spawn(move || {
                    let peers: Vec<usize> = (0..3).filter(|&p| p != m.me).collect();
                    m.accept_peers(&peers, Instant::now() + Duration::from_secs(5))
                })
            })
            .collect();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        for (me, m) in mods.iter().enumerate() {
            for peer in (0..3).filter(|&p| p != me) {
                assert!(m.0.vcs[peer].get().is_some(), "{me} to {peer}");
            }
        }
    }

    #[test]
    fn connecting_to_a_dead_address_names_the_peer() {
        // A port that was just free: nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (b, rb) = module(1, 3);
        let b = Arc::new(
            Arc::into_inner(b)
                .unwrap()
                .with_connect_wait(Duration::from_millis(300)),
        );
        // Refused connects are tried again (a listener may be busy) until
        // the connection's time runs out, then the VC fails naming it.
        b.vc_init(0, &format!("tcp:127.0.0.1:{port}")).unwrap();
        poll_until(&[&b], || !lock(&rb.events).is_empty());
        let events = lock(&rb.events).clone();
        assert!(
            events[0].starts_with(&format!(
                "failed 0: tcp: cannot connect to 127.0.0.1:{port} ("
            )),
            "{events:?}"
        );
        assert!(crate::counts::tcp_connect_retries() > 0);
        assert!(
            b.istart_contig(
                0,
                header(FrameKind::Control, 1, 1),
                SendData::Bytes(vec![1])
            )
            .is_err()
        );
        // A card of another module fails the VC at once.
        b.vc_init(2, "shm:/x").unwrap_err();
        assert!(
            lock(&rb.events)[1].contains("is no tcp business card"),
            "{:?}",
            lock(&rb.events)
        );
    }

    /// A first send connects the VC through the card the layer above
    /// gives, asking for it once; frames sent before the connection is up
    /// wait and arrive in order; the other end sends back on the VC it
    /// accepted, with no card of its own.
    #[test]
    fn a_first_send_connects_through_the_peer_card() {
        struct Cards {
            rec: Record,
            cards: Mutex<Vec<String>>,
            asked: Mutex<Vec<usize>>,
        }
        impl Upcalls for Cards {
            fn frame(&self, peer: usize, header: FrameHeader, body: Vec<u8>) {
                self.rec.frame(peer, header, body)
            }
            fn vc_terminated(&self, peer: usize) {
                self.rec.vc_terminated(peer)
            }
            fn vc_failed(&self, peer: usize, why: String) {
                self.rec.vc_failed(peer, why)
            }
            fn peer_card(&self, peer: usize, prefix: &str) -> Result<String, NetError> {
                assert_eq!(prefix, "tcp:");
                lock(&self.asked).push(peer);
                Ok(lock(&self.cards)[peer].clone())
            }
        }
        let make = |me| {
            let m = Arc::new(
                TcpModule::init(
                    me,
                    3,
                    key(),
                    "127.0.0.1:0".parse().unwrap(),
                    "127.0.0.1",
                    1 << 24,
                )
                .unwrap(),
            );
            let up = Arc::new(Cards {
                rec: Record::default(),
                cards: Mutex::new(Vec::new()),
                asked: Mutex::new(Vec::new()),
            });
            m.set_upcalls(up.clone());
            (m, up)
        };
        let mods: Vec<_> = (0..3).map(make).collect();
        let cards: Vec<String> = mods.iter().map(|(m, _)| m.business_card()).collect();
        for (_, up) in &mods {
            *lock(&up.cards) = cards.clone();
        }
        let (a, ua) = &mods[0];
        let (c, uc) = &mods[2];
        for tag in 0..50u32 {
            c.istart_contig(
                0,
                header(FrameKind::Control, 4, tag),
                SendData::Bytes(tag.to_le_bytes().to_vec()),
            )
            .unwrap();
        }
        poll_until(&[a, c], || lock(&ua.rec.frames).len() == 50);
        let tags: Vec<u32> = lock(&ua.rec.frames).iter().map(|f| f.1.tag).collect();
        assert_eq!(tags, (0..50).collect::<Vec<_>>());
        assert_eq!(*lock(&uc.asked), [0], "one card look-up per peer");
        // Process 0 answers on the connection it accepted.
        a.istart_contig(
            2,
            header(FrameKind::Control, 1, 99),
            SendData::Bytes(vec![7]),
        )
        .unwrap();
        poll_until(&[a, c], || lock(&uc.rec.frames).len() == 1);
        assert!(lock(&ua.asked).is_empty(), "no card needed to answer");
        assert_eq!(a.connected_peers(), [2]);
        assert_eq!(c.connected_peers(), [0]);
        // Process 1 was never talked to: nobody has a VC to it.
        assert!(mods[1].0.connected_peers().is_empty());
        assert!(lock(&ua.rec.events).is_empty() && lock(&uc.rec.events).is_empty());
    }

    /// Two processes that send to each other first at the same moment end
    /// with one connection, whichever way the race goes, and every frame
    /// arrives in order.
    #[test]
    fn a_head_to_head_ends_with_one_connection() {
        for round in 0..20 {
            let ((a, ra), (b, rb)) = (module(0, 2), module(1, 2));
            let (card_a, card_b) = (a.business_card(), b.business_card());
            let started = crate::counts::tcp_connections_started();
            let (a2, b2) = (a.clone(), b.clone());
            let ta = std::thread::spawn(move || a2.vc_init(1, &card_b).unwrap());
            let tb = std::thread::spawn(move || b2.vc_init(0, &card_a).unwrap());
            ta.join().unwrap();
            tb.join().unwrap();
            for tag in 0..10u32 {
                a.istart_contig(
                    1,
                    header(FrameKind::Control, 1, tag),
                    SendData::Bytes(vec![1]),
                )
                .unwrap();
                b.istart_contig(
                    0,
                    header(FrameKind::Control, 1, tag),
                    SendData::Bytes(vec![2]),
                )
                .unwrap();
            }
            poll_until(&[&a, &b], || {
                lock(&ra.frames).len() == 10 && lock(&rb.frames).len() == 10
            });
            for rec in [&ra, &rb] {
                let tags: Vec<u32> = lock(&rec.frames).iter().map(|f| f.1.tag).collect();
                assert_eq!(tags, (0..10).collect::<Vec<_>>(), "round {round}");
                assert!(
                    lock(&rec.events).is_empty(),
                    "round {round}: {:?}",
                    lock(&rec.events)
                );
            }
            // Other tests may connect meanwhile: at least two started here.
            assert!(crate::counts::tcp_connections_started() >= started + 2);
        }
    }
}
