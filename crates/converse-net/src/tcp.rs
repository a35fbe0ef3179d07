//! The tcp network module: one TCP connection (VC) per pair of processes,
//! non-blocking sockets driven by mio.
//!
//! # Connections
//!
//! A process's business card is `tcp:HOST:PORT`, the address of its
//! listening socket. At start-up process `i` connects to every process
//! `j < i` (`vc_init`) and accepts one connection from every `j > i`.
//! Before a connection becomes a VC, its two ends prove to each other that
//! they hold the job key, without sending it (`tcp_handshake`: a mutual
//! challenge-response), so a stranger, or a process of another job, is
//! refused. `vc_init` only connects and sends the hello;
//! [`TcpModule::accept_peers`] then drives every handshake of the process
//! at once, those it accepts and those it started, without blocking and
//! each accepted connection on its own short clock: a stranger that
//! connects and stays silent never holds up start-up, and no process waits
//! for a peer that is itself waiting (a process answers its peers'
//! handshakes only once in `accept_peers`, after all its `vc_init`s).
//! Each VC then carries frames (`frame`) both ways.
//!
//! # Connecting again
//!
//! A terminated VC may be used again (the spec: "the VC may be used for
//! communication again later"): `vc_init` on both sides connects it again
//! the same way round, through the same handshake. Once start-up is over
//! the listening socket is in the poll set, so `poll` accepts (a stranger
//! is refused as at start-up) and moves the handshakes of connections
//! started or accepted after start-up, with a short poll timeout while any
//! is pending. The new connection replaces the VC's while both of the
//! VC's locks are held: every use of a VC's connection holds one of them
//! (its descriptor is read from an atomic on the hot path, no lock of its
//! own), so none is under way. Both sides then start afresh.
//! A connection whose handshake ends before this side's `vc_init` is kept
//! for it.
//!
//! # Sending
//!
//! A send tries to write at once from the sender's thread (`writev` of the
//! frame header and the data, no copy). What does not fit in the socket
//! buffer is queued on the VC with the owned data; the progress thread writes
//! it when the socket becomes writable. A non-contiguous send (the layer
//! above's copying sends of large messages) gathers straight from the
//! caller's memory when nothing is queued before it, writing on for a
//! moment (`GATHER_STALL`) into a socket the peer is emptying, and copies
//! only what is left. A write that failed with
//! `WouldBlock` guarantees such an event (sockets are registered
//! edge-triggered for both directions once, at start-up). Frames of one VC
//! never interleave: the queue is behind the VC's send lock and a send goes
//! straight to the socket only when the queue is empty.
//!
//! # Receiving
//!
//! The progress thread reads a readable socket until it would block, feeding
//! the bytes to the VC's [`Reassembler`]. While a frame's body is being
//! received it reads straight into the body buffer (the recv-active fast
//! path); otherwise into a 64 KiB buffer passed to `handle`. Whole frames go
//! to [`Upcalls::frame`], in order.
//!
//! # Concurrency protocol
//!
//! - `send` lock: the VC's queue, and writing to its socket.
//! - `recv` lock: the VC's reassembler, and reading from its socket. The
//!   progress thread reads (blocking on the lock: an edge it was woken for
//!   must not be lost) and so do idle PEs (`try_progress`, skipping a VC
//!   being read).
//! - `poll` lock: the mio `Poll`, held by the one thread that waits on it.
//! - Upcalls run with the VC's `recv` lock held (frames) or nothing held.
use crate::sync::lock;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use std::os::fd::AsRawFd;

use super::frame::{FrameHeader, Reassembler};
use super::netmod::{
    NetError, NetModule, OutFrame, PollDir, SendData, SendRequest, Upcalls, check_iov_len,
};
use super::tcp_handshake::{Accepting, Connecting, Step};
use launch_wire::JobKey;

/// How long an accepted connection may take over its handshake before it
/// is refused (a real peer answers at once).
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// How long `connect_to_root` waits for its peer's answer.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// The longest `poll` waits while a VC is being connected again.
const REJOIN_POLL: Duration = Duration::from_millis(1);

/// Connections in their handshake at once beyond which newcomers are
/// refused at once (strangers cannot hold unbounded memory or
/// descriptors).
const MAX_PENDING_HELLOS: usize = 256;

/// How long the progress thread leaves the module to polling PEs
/// ([`NetModule::watch_check`]).
const WATCH_CHECK: Duration = Duration::from_micros(100);

/// The waker's token; VCs use their peer's number.
const WAKER: Token = Token(usize::MAX);
/// The listening socket's token, once start-up is over (connections that
/// connect a terminated VC again).
const LISTENER: Token = Token(usize::MAX - 1);
/// Receive buffer of a VC (between frame bodies).
const RECV_BUF: usize = 64 << 10;
/// How long a gathering send keeps writing into a full socket, from the
/// caller's memory, before it copies the rest to send later.
const GATHER_STALL: Duration = Duration::from_micros(50);
/// Most queued items, and bytes, one `writev` takes.
const BATCH_ITEMS: usize = 64;
const BATCH_BYTES: usize = 256 << 10;

type Pending = OutFrame;

/// A VC's connection, for one use: called holding the VC's `send` or
/// `recv` lock (see "Connecting again" in the module comment).
fn io(vc: &Vc) -> std::mem::ManuallyDrop<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` is the open descriptor of the stream in `owner`, which
    // closes it only when the VC is connected again (`rejoin_vc`, holding
    // both of the VC's locks, after the VC terminated: no I/O is under
    // way, and every I/O holds one of the locks) or dropped. The
    // `ManuallyDrop` never closes it.
    std::mem::ManuallyDrop::new(unsafe {
        std::net::TcpStream::from_raw_fd(vc.fd.load(Ordering::Acquire))
    })
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

#[derive(Default)]
struct SendSide {
    queue: VecDeque<Pending>,
    /// `vc_terminate` was called: close the write side once drained.
    terminate: bool,
    /// The write side is shut down.
    write_closed: bool,
    /// The VC broke; sends fail.
    failed: bool,
}

struct RecvSide {
    reasm: Reassembler,
    buf: Box<[u8]>,
    /// The peer closed its side.
    eof: bool,
}

/// A virtual connection to one peer process.
struct Vc {
    peer: usize,
    /// The connection's descriptor, for I/O ([`io`]); replaced when a
    /// terminated VC is connected again.
    fd: AtomicI32,
    /// The connection, which owns `fd` (closed when replaced or dropped).
    owner: Mutex<mio::net::TcpStream>,
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
}

/// The tcp network module of one process.
pub struct TcpModule {
    me: usize,
    nodes: usize,
    /// The job key every connection's handshake proves.
    key: JobKey,
    /// Connections `vc_init` started whose handshake is not over
    /// (`accept_peers` ends them).
    connecting: Mutex<Vec<Connecting>>,
    card: String,
    listener: TcpListener,
    vcs: Box<[OnceLock<Arc<Vc>>]>,
    poll: Mutex<Poll>,
    registry: Registry,
    waker: Waker,
    upcalls: OnceLock<Arc<dyn Upcalls>>,
    max_payload: usize,
    /// The layer above has room again after refusing it: read every VC at
    /// the next poll (their edges were consumed while it had none).
    resume: AtomicBool,
    /// After start-up: handshakes of terminated VCs connected again (see
    /// "Connecting again" in the module comment). Connections this process
    /// started, with the instant they must be over by.
    rejoining: Mutex<Vec<(Connecting, Instant)>>,
    /// Connections accepted after start-up, in their handshake.
    accepting: Mutex<Vec<Accepting>>,
    /// About how many are in `rejoining` and `accepting` (never too low
    /// for long: a poll reads it without their locks).
    rejoin_count: AtomicUsize,
    /// Per peer: a terminated VC that `vc_init` asked to connect again, by
    /// the peer's connection (the peer is higher-numbered).
    rejoin_expected: Box<[AtomicBool]>,
    /// The listening socket is in the poll set (start-up is over).
    listening: AtomicBool,
    /// Connections of terminated VCs whose handshake ended before this
    /// side's `vc_init` asked for them: taken by that `vc_init`.
    parked: Mutex<Vec<(usize, TcpStream)>>,
}

impl TcpModule {
    /// `net_module_init`: binds the listening socket on `bind` (port 0: any)
    /// and returns the module; its card is [`NetModule::business_card`].
    /// `advertise` is the host name peers should use to reach it.
    pub fn init(
        me: usize,
        nodes: usize,
        key: JobKey,
        bind: SocketAddr,
        advertise: &str,
        max_payload: usize,
    ) -> Result<TcpModule, NetError> {
        let listener = TcpListener::bind(bind)
            .map_err(|e| NetError::local(format!("tcp: cannot listen on {bind}: {e}")))?;
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
        Ok(TcpModule {
            me,
            nodes,
            key,
            connecting: Mutex::new(Vec::new()),
            card: format!("tcp:{advertise}:{port}"),
            listener,
            vcs: (0..nodes).map(|_| OnceLock::new()).collect(),
            poll: Mutex::new(poll),
            registry,
            waker,
            upcalls: OnceLock::new(),
            max_payload,
            resume: AtomicBool::new(false),
            rejoining: Mutex::new(Vec::new()),
            accepting: Mutex::new(Vec::new()),
            rejoin_count: AtomicUsize::new(0),
            rejoin_expected: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            listening: AtomicBool::new(false),
            parked: Mutex::new(Vec::new()),
        })
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
    fn message_buffers(&self) -> Option<Arc<dyn crate::frame::MessageBuffers>> {
        self.upcalls.get().and_then(|u| u.message_buffers())
    }

    /// Ends start-up's connections: accepts those of the processes of
    /// `peers` (those whose VC this module carries) numbered above this
    /// one, refusing strays, and ends the handshakes `vc_init` started with
    /// those below, until `deadline`. Fails naming the processes whose VC
    /// is not up by then, or a process whose address did not prove the job
    /// key.
    ///
    /// Every handshake moves without blocking, each accepted connection
    /// on its own short clock (`HELLO_WAIT`, 5 s) while the others are
    /// accepted and read: a connection that stays silent (a stranger, or a
    /// port scanner) costs the job nothing but its slot until its clock
    /// runs out.
    pub fn accept_peers(&self, peers: &[usize], deadline: Instant) -> Result<(), NetError> {
        let expected: Vec<usize> = peers.iter().copied().filter(|&p| p > self.me).collect();
        self.handshakes(&expected, deadline)
    }

    /// Accepts the processes of `expected` and ends the connections
    /// `vc_init` started, by `deadline` (see [`TcpModule::accept_peers`]).
    fn handshakes(&self, expected: &[usize], deadline: Instant) -> Result<(), NetError> {
        let mut connecting = std::mem::take(&mut *lock(&self.connecting));
        if expected.is_empty() && connecting.is_empty() {
            return self.listen_after_startup();
        }
        self.listener
            .set_nonblocking(true)
            .map_err(|e| NetError::local(format!("tcp: {e}")))?;
        let mut missing = expected.len();
        let mut pending: Vec<Accepting> = Vec::new();
        while missing > 0 || !connecting.is_empty() {
            let mut progressed = false;
            if missing > 0 {
                progressed |= self.accept_new(&mut pending, deadline)?;
            }
            progressed |= self.advance_accepting(
                &mut pending,
                |c| self.expects(expected, c),
                |conn, peer| {
                    // Two proven connections from one process cannot both
                    // be it: the first stands.
                    match self.expects(expected, peer) {
                        Ok(()) => {
                            self.install_vc(peer, conn.into_stream())?;
                            missing -= 1;
                        }
                        Err(why) => self.refuse(conn.from(), &why),
                    }
                    Ok(())
                },
            )?;
            let mut i = 0;
            while i < connecting.len() {
                match connecting[i].advance(&self.key) {
                    Step::Waiting => i += 1,
                    Step::Progress => {
                        progressed = true;
                        i += 1;
                    }
                    Step::Done => {
                        progressed = true;
                        let conn = connecting.swap_remove(i);
                        self.install_vc(conn.peer(), conn.into_stream())?;
                    }
                    Step::Failed(why) => {
                        let peer = connecting[i].peer();
                        return Err(NetError::peer(peer, format!("tcp: {why}")));
                    }
                }
            }
            if missing == 0 && connecting.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let absent: Vec<String> = expected
                    .iter()
                    .copied()
                    .filter(|&p| self.vcs[p].get().is_none())
                    .chain(connecting.iter().map(Connecting::peer))
                    .map(|p| p.to_string())
                    .collect();
                return Err(NetError::local(format!(
                    "tcp: process {} waited in vain for process(es) {} to connect",
                    self.me,
                    absent.join(", ")
                )));
            }
            if !progressed {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.listen_after_startup()
    }

    /// Start-up is over: the listening socket joins the poll set, where
    /// the connections that connect a terminated VC again come in (and
    /// strangers are refused, as during start-up).
    fn listen_after_startup(&self) -> Result<(), NetError> {
        if self.listening.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.listener
            .set_nonblocking(true)
            .and_then(|()| {
                self.registry.register(
                    &mut SourceFd(&self.listener.as_raw_fd()),
                    LISTENER,
                    Interest::READABLE,
                )
            })
            .map_err(|e| NetError::local(format!("tcp: listening after start-up: {e}")))
    }

    /// After start-up: accepts what waits on the listener and moves every
    /// handshake of a VC connected again one step. True if anything moved.
    fn drive_rejoins(&self) -> bool {
        let mut moved = false;
        let mut accepting = lock(&self.accepting);
        // Each on its own clock; a failing accept leaves the listener for
        // the next poll.
        let far = Instant::now() + HELLO_WAIT;
        moved |= self.accept_new(&mut accepting, far).unwrap_or(false);
        let expects = |c: usize| {
            let terminated = self
                .vcs
                .get(c)
                .and_then(|v| v.get())
                .is_some_and(|vc| vc.terminated.load(Ordering::Acquire));
            if c > self.me && terminated {
                Ok(())
            } else {
                Err(format!(
                    "it claims to be process {c}, whose VC is not terminated (or that \
                     process is not the one to connect)"
                ))
            }
        };
        let rejoined = self.advance_accepting(&mut accepting, expects, |conn, peer| {
            if self.rejoin_expected[peer].swap(false, Ordering::AcqRel) {
                if let Err(e) = self.rejoin_vc(peer, conn.into_stream()) {
                    self.upcalls().vc_failed(peer, e.to_string());
                }
            } else {
                // Before this side's `vc_init`: kept for it (the peer's
                // first frames wait in the socket).
                let mut parked = lock(&self.parked);
                if parked.iter().any(|(p, _)| *p == peer) {
                    self.refuse(conn.from(), "a second connection for one VC");
                } else {
                    parked.push((peer, conn.into_stream()));
                }
            }
            Ok(())
        });
        moved |= rejoined.unwrap_or(true);
        let accepting_left = accepting.len();
        drop(accepting);
        let mut rejoining = lock(&self.rejoining);
        let mut i = 0;
        while i < rejoining.len() {
            let peer = rejoining[i].0.peer();
            match rejoining[i].0.advance(&self.key) {
                Step::Waiting if Instant::now() < rejoining[i].1 => i += 1,
                Step::Waiting => {
                    rejoining.swap_remove(i);
                    self.upcalls()
                        .vc_failed(peer, "tcp: no answer to connecting again".into());
                }
                Step::Progress => {
                    moved = true;
                    i += 1;
                }
                Step::Done => {
                    moved = true;
                    let (conn, _) = rejoining.swap_remove(i);
                    if let Err(e) = self.rejoin_vc(peer, conn.into_stream()) {
                        self.upcalls().vc_failed(peer, e.to_string());
                    }
                }
                Step::Failed(why) => {
                    moved = true;
                    rejoining.swap_remove(i);
                    self.upcalls().vc_failed(peer, format!("tcp: {why}"));
                }
            }
        }
        // Under `rejoining`'s lock: a `vc_init` that pushes after this
        // adds its own.
        self.rejoin_count
            .store(accepting_left + rejoining.len(), Ordering::Release);
        moved
    }

    /// True while a VC is being connected again (poll must not sleep
    /// long: those sockets are not in the poll set).
    fn rejoins_pending(&self) -> bool {
        self.rejoin_count.load(Ordering::Acquire) > 0
    }

    /// Makes `stream` the connection of terminated VC `peer`, which is
    /// open again from now on.
    fn rejoin_vc(&self, peer: usize, stream: TcpStream) -> Result<(), NetError> {
        let vc = self.vc(peer)?;
        let stream = self.ready_stream(peer, stream)?;
        let mut recv = lock(&vc.recv);
        let mut send = lock(&vc.send);
        let mut owner = lock(&vc.owner);
        vc.fd.store(stream.as_raw_fd(), Ordering::Release);
        // The old connection closes here: no I/O holds it (both locks).
        *owner = stream;
        *recv = RecvSide {
            reasm: Reassembler::new(peer, self.max_payload).with_buffers(self.message_buffers()),
            buf: std::mem::take(&mut recv.buf),
            eof: false,
        };
        *send = SendSide::default();
        vc.queued.store(0, Ordering::Release);
        vc.read_closed.store(false, Ordering::Release);
        vc.terminated.store(false, Ordering::Release);
        Ok(())
    }

    /// Moves every accepted connection of `pending` one step through its
    /// handshake (`expects` says which processes may connect now); hands
    /// each finished one to `done` with the process it proved to be, and
    /// refuses those that failed. True if any moved.
    fn advance_accepting(
        &self,
        pending: &mut Vec<Accepting>,
        expects: impl Fn(usize) -> Result<(), String>,
        mut done: impl FnMut(Accepting, usize) -> Result<(), NetError>,
    ) -> Result<bool, NetError> {
        let mut moved = false;
        let mut i = 0;
        while i < pending.len() {
            match pending[i].advance(&self.key, self.me, self.nodes, &expects) {
                Step::Waiting => i += 1,
                Step::Progress => {
                    moved = true;
                    i += 1;
                }
                Step::Done => {
                    moved = true;
                    let conn = pending.swap_remove(i);
                    let peer = conn.connector().expect("a finished handshake");
                    done(conn, peer)?;
                }
                Step::Failed(why) => {
                    moved = true;
                    let conn = pending.swap_remove(i);
                    self.refuse(conn.from(), &why);
                }
            }
        }
        Ok(moved)
    }

    /// Accepts every connection waiting on the listener into `pending`;
    /// true if there was any.
    fn accept_new(
        &self,
        pending: &mut Vec<Accepting>,
        deadline: Instant,
    ) -> Result<bool, NetError> {
        let mut any = false;
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    any = true;
                    if pending.len() >= MAX_PENDING_HELLOS {
                        self.refuse(from, "too many connections are in their handshake at once");
                        continue;
                    }
                    match Accepting::new(stream, from, HELLO_WAIT, deadline) {
                        Ok(conn) => pending.push(conn),
                        Err(e) => self.refuse(from, &e.to_string()),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NetError::local(format!("tcp: accept: {e}"))),
            }
        }
    }

    /// Whether a connection from process `peer` is wanted now: it is one of
    /// `expected` and has no VC yet.
    fn expects(&self, expected: &[usize], peer: usize) -> Result<(), String> {
        if !expected.contains(&peer) {
            Err(format!(
                "it claims to be process {peer}, but that process connects otherwise"
            ))
        } else if self.vcs[peer].get().is_some() {
            Err(format!(
                "it claims to be process {peer}, but that one is connected already"
            ))
        } else {
            Ok(())
        }
    }

    /// Logs a refused connection (it is dropped, which closes it); the job
    /// goes on.
    fn refuse(&self, from: SocketAddr, why: &str) {
        eprintln!(
            "converse: process {}: refused a connection from {from}: {why}",
            self.me
        );
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

    /// Makes `stream` the VC to `peer`: non-blocking, no Nagle, registered
    /// for both directions.
    fn install_vc(&self, peer: usize, stream: TcpStream) -> Result<(), NetError> {
        let stream = self.ready_stream(peer, stream)?;
        let vc = Arc::new(Vc {
            peer,
            fd: AtomicI32::new(stream.as_raw_fd()),
            owner: Mutex::new(stream),
            send: Mutex::new(SendSide::default()),
            recv: Mutex::new(RecvSide {
                reasm: Reassembler::new(peer, self.max_payload)
                    .with_buffers(self.message_buffers()),
                buf: vec![0; RECV_BUF].into_boxed_slice(),
                eof: false,
            }),
            queued: AtomicUsize::new(0),
            terminated: AtomicBool::new(false),
            read_closed: AtomicBool::new(false),
        });
        self.vcs[peer]
            .set(vc)
            .map_err(|_| NetError::peer(peer, "tcp: connected twice"))
    }

    /// Connects to `peer` at the address of its card and sends the
    /// handshake's hello; [`TcpModule::handshakes`] ends it.
    fn start_connect(&self, peer: usize, card: &str) -> Result<(), NetError> {
        let addr = card.strip_prefix("tcp:").ok_or_else(|| {
            NetError::peer(peer, format!("tcp: `{card}` is no tcp business card"))
        })?;
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| NetError::peer(peer, format!("tcp: cannot resolve `{addr}`: {e}")))?
            .collect();
        let conn = Connecting::start(self.me, self.nodes, peer, &addrs).map_err(|why| {
            NetError::peer(peer, format!("tcp: cannot connect to {addr} ({why})"))
        })?;
        lock(&self.connecting).push(conn);
        Ok(())
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
        if side.failed || side.write_closed || side.terminate {
            return Err(NetError::peer(vc.peer, "tcp: send on a closed connection"));
        }
        let queued = vc.queued.fetch_add(p.total(), Ordering::Relaxed) + p.total();
        side.queue.push_back(p);
        if !now && queued < BATCH_BYTES && side.queue.len() < BATCH_ITEMS {
            return Ok(false);
        }
        self.drain_or_fail(vc, side)
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
        if side.failed || side.write_closed || side.terminate {
            return Err(NetError::peer(vc.peer, "tcp: send on a closed connection"));
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
        side.failed = true;
        side.queue.clear();
        drop(side);
        let why = format!("send failed: {e}");
        self.upcalls().vc_failed(vc.peer, why.clone());
        NetError::peer(vc.peer, why)
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
        if side.queue.is_empty() && side.terminate && !side.write_closed {
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
        self.receive_locked(vc, lock(&vc.recv))
    }

    /// [`TcpModule::receive`] with the VC's receive side already locked.
    fn receive_locked(&self, vc: &Vc, mut guard: MutexGuard<'_, RecvSide>) -> bool {
        let upcalls = self.upcalls();
        let peer = vc.peer;
        let side = &mut *guard;
        if side.eof {
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
            let result = match direct {
                Some(read) => read.map(|n| (n, true)).map_err(io::Error::from),
                None => (&*io(vc)).read(&mut side.buf).map(|n| (n, false)),
            };
            match result {
                Ok((0, _)) => {
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
                Ok((_, true)) => moved = true,
                Ok((n, false)) => {
                    moved = true;
                    let RecvSide { reasm, buf, .. } = side;
                    if let Err(e) =
                        reasm.handle(&buf[..n], |h, body| upcalls.arrived(peer, h, body))
                    {
                        side.eof = true;
                        let _ = io(vc).shutdown(Shutdown::Both);
                        drop(guard);
                        upcalls.vc_failed(peer, e.to_string());
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return moved,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    side.eof = true;
                    drop(guard);
                    upcalls.vc_failed(peer, format!("receive failed: {e}"));
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
        self.start_connect(peer, card)?;
        // Only this connection's handshake: the peer answers once it
        // accepts.
        self.handshakes(&[], Instant::now() + CONNECT_WAIT)
    }

    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError> {
        if let Some(vc) = self.vcs.get(peer).and_then(|v| v.get()) {
            // A VC used again after it terminated: connected again the
            // same way round, its handshake driven by `poll`.
            if !vc.terminated.load(Ordering::Acquire) {
                return Err(NetError::peer(peer, "tcp: connected twice"));
            }
            if peer < self.me {
                let addr = card.strip_prefix("tcp:").ok_or_else(|| {
                    NetError::peer(peer, format!("tcp: `{card}` is no tcp business card"))
                })?;
                let addrs: Vec<SocketAddr> = addr
                    .to_socket_addrs()
                    .map_err(|e| {
                        NetError::peer(peer, format!("tcp: cannot resolve `{addr}`: {e}"))
                    })?
                    .collect();
                let conn = Connecting::start(self.me, self.nodes, peer, &addrs).map_err(|why| {
                    NetError::peer(peer, format!("tcp: cannot connect to {addr} ({why})"))
                })?;
                lock(&self.rejoining).push((conn, Instant::now() + CONNECT_WAIT));
                self.rejoin_count.fetch_add(1, Ordering::AcqRel);
            } else {
                let parked = {
                    let mut parked = lock(&self.parked);
                    let at = parked.iter().position(|(p, _)| *p == peer);
                    at.map(|i| parked.swap_remove(i).1)
                };
                match parked {
                    Some(stream) => self.rejoin_vc(peer, stream)?,
                    None => self.rejoin_expected[peer].store(true, Ordering::Release),
                }
            }
            self.wake();
            return Ok(());
        }
        // Lower-numbered peers are connected to now (their handshakes end
        // in `accept_peers`); higher ones connect to this process.
        if peer < self.me {
            self.start_connect(peer, card)
        } else {
            Ok(())
        }
    }

    fn vc_destroy(&self, peer: usize) {
        if let Ok(vc) = self.vc(peer) {
            let _send = lock(&vc.send);
            let _ = self.registry.deregister(&mut SourceFd(&io(vc).as_raw_fd()));
            let _ = io(vc).shutdown(Shutdown::Both);
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
        self.send_pending(self.vc(peer)?, p).map(|_| ())
    }

    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError> {
        let req = SendRequest::new();
        let p = Pending::frame(header, data, Some(req.clone()));
        let sent = self.send_pending(self.vc(peer)?, p)?;
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
        self.gather(self.vc(peer)?, req, header, iov).map(|_| ())
    }

    fn gathers(&self) -> bool {
        true
    }

    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError> {
        // A VC being connected again moves on its own clock, not on events.
        let rejoins = self.listening.load(Ordering::Acquire) && self.rejoins_pending();
        let timeout = if rejoins {
            Some(timeout.map_or(REJOIN_POLL, |t| t.min(REJOIN_POLL)))
        } else {
            timeout
        };
        let mut poll = lock(&self.poll);
        let mut events = Events::with_capacity(64);
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(NetError::local(format!("tcp: epoll_wait: {e}"))),
        }
        drop(poll);
        let mut moved = false;
        if rejoins || events.iter().any(|e| e.token() == LISTENER) {
            moved |= self.drive_rejoins();
        }
        if self.resume.swap(false, Ordering::AcqRel) {
            // Receiving paused for room: read every VC now, events or not.
            for vc in self.vcs.iter().filter_map(|v| v.get()) {
                moved |= self.receive(vc);
            }
        }
        for event in events.iter() {
            let Token(peer) = event.token();
            if peer == WAKER.0 || peer == LISTENER.0 {
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
        self.send_pending_when(self.vc(peer)?, p, false)
            .map(|empty| !empty)
    }

    fn flush_all(&self) -> bool {
        let mut moved = false;
        for vc in self.vcs.iter().filter_map(|v| v.get()) {
            if vc.queued.load(Ordering::Relaxed) > 0 {
                moved |= self.flush(vc);
            }
        }
        moved
    }

    fn has_queued(&self) -> bool {
        self.vcs
            .iter()
            .filter_map(|v| v.get())
            .any(|vc| vc.queued.load(Ordering::Relaxed) > 0)
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
        for vc in self.vcs.iter().filter_map(|v| v.get()) {
            // Skip a VC being read elsewhere: that reader takes it all.
            if let Ok(guard) = vc.recv.try_lock() {
                moved |= self.receive_locked(vc, guard);
            }
            // Queued sends go on too (a sender that moved on to other work
            // leaves them to whoever polls).
            if let Ok(side) = vc.send.try_lock() {
                if !side.queue.is_empty() {
                    moved |= self.flush_locked(vc, side);
                }
            }
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

    fn finalize(&self) {
        for vc in self.vcs.iter().filter_map(|v| v.get()) {
            let _send = lock(&vc.send);
            let _ = self.registry.deregister(&mut SourceFd(&io(vc).as_raw_fd()));
            let _ = io(vc).shutdown(Shutdown::Both);
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
        b.0.vc_init(1, "unused").unwrap();
        let acceptor = a.0.clone();
        let accepted = std::thread::spawn(move || {
            acceptor.accept_peers(&[1], Instant::now() + Duration::from_secs(5))
        });
        b.0.accept_peers(&[0], Instant::now() + Duration::from_secs(5))
            .unwrap();
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
        let mut conn = Connecting::start(1, 2, 0, &[addr]).unwrap();
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
        let mut h = b"CVRSTCP2".to_vec();
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
        let (other, _) = module_with(1, 3, JobKey::from_bytes([0x34; 32]));
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
        assert!(e.what.contains("does not prove the job key"), "{e}");
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
                poll_until(&[&a, &b], || !lock(&a.parked).is_empty());
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
        let (b, _rb) = module(1, 2);
        let err = b.vc_init(0, &format!("tcp:127.0.0.1:{port}")).unwrap_err();
        assert_eq!(err.peer, Some(0));
        assert!(
            err.to_string()
                .starts_with("process 0: tcp: cannot connect to 127.0.0.1:"),
            "{err}"
        );
        let err = b.vc_init(0, "shm:/x").unwrap_err();
        assert!(err.to_string().contains("is no tcp business card"), "{err}");
    }
}
