//! The CCS server thread: accepts clients, reads their requests, hands them
//! to PE 0 (or straight to their PE), and writes the replies back, unless
//! the PE writes its own (`ccs-protocol.md`).
//!
//! # Connections
//!
//! One request per connection. A connection is *reading* (bytes kept until
//! `ccs_wire::parse_incoming` has a whole request), then *waiting* for its
//! reply (or replies, for a broadcast or multicast), then *writing* it;
//! then it is closed. An identity handshake (`ccs-protocol.md`,
//! "Authentication") instead writes the server's salt, reads the client's
//! hash of it (*reading the hash*), and writes the client's new identity.
//!
//! Nothing a client sends can stop the server: a request that does not
//! parse, or fails authentication, is logged and its connection closed; one
//! whose handler or destination is wrong is answered empty, as the protocol
//! says; a client that stalls mid-request is closed after the stall
//! timeout (`++server-stall-timeout`, below); a request whose reply does
//! not come within the reply timeout is closed. The bytes that requests
//! being read may claim are bounded in sum ([`buffer_budget`]): a request
//! that would pass the bound is refused, so many large requests at once
//! cannot exhaust memory.
//!
//! # Clients that hold connections: the stall clock and the cap
//!
//! A request (or handshake message) is read in steps, as
//! `ccs_wire::parse_incoming` asks for them: its first byte, its header,
//! then the rest. The stall clock of a connection being read starts with
//! each step and restarts only when the step is complete, not at every
//! byte: a client that trickles a byte every few seconds is closed like a
//! silent one, the stall timeout after its last complete step. That bounds
//! how long a slow sender holds its connection and the request bytes it
//! reserved ([`buffer_budget`]): a stall timeout per step, and a request
//! has at most five. The price: each step must arrive whole within the
//! stall timeout (at the default 10 s, the data of a 64 MiB request needs
//! 6.4 MB/s).
//!
//! At most `++server-max-connections` ([`DEFAULT_MAX_CONNECTIONS`]) are
//! open at once. At the cap a newcomer is still admitted: the server closes
//! the connection whose client has owed it bytes the longest, i.e. of the
//! connections still reading a request or an identity handshake, the one
//! accepted first. Only when every open connection has sent its whole
//! request (it waits for its reply, or has it written) is the newcomer
//! refused. Both are logged through a [`Throttle`]: the first in full, then
//! at most one line per [`LOG_PERIOD`] counting the others, so clients
//! that keep the cap full cannot flood stderr; so are connections closed
//! for stalling mid-request (a flood of them once gave a line each). Why this policy:
//!
//! - Without it, connections that each send part of a request and are
//!   reopened as the stall timeout closes them keep the cap full, and new
//!   clients find no room most of the time.
//! - A whole request is never given up for a newcomer: its handler may be
//!   running or its reply delayed (`ccs::delay_reply`), work the client is
//!   owed.
//! - Age counts from the accept, which nothing the client sends can move:
//!   trickling, or any pattern of sending, earns no claim on a slot. A
//!   newcomer is the youngest connection, so it is closed only once every
//!   incomplete connection accepted before it is, and `cap - 1` more have
//!   come after it: a normal client, whose request arrives in one or a few
//!   packets, is served unless others open connections faster than its
//!   request arrives.
//! - No timer is added: a deadline on a request's whole read time short
//!   enough to matter would cut off large requests on slow links, and
//!   eviction frees a slot exactly when a newcomer needs one.
//!
//! The connections owing bytes are kept in accept order (`incomplete`,
//! ordered by token: tokens only grow), so finding the oldest costs a
//! lookup, not a scan of every connection.
//!
//! # Start-up
//!
//! The server listens (and says its port) before the PEs have run their
//! start functions, where programs register their CCS handlers. A request
//! for a name not registered yet is held, not refused, until every PE of
//! this process has run its start function (`CcsState::pes_started`), then
//! looked up again; the poll wakes every [`HOLD_POLL`] while one is held.
//! A PE whose start function never returns (user-calls-scheduler mode)
//! cannot hold requests longer than [`HOLD_LIMIT`]. Without this, a client
//! that connects as soon as the port is printed could be answered "no such
//! handler" for a handler the program registers a moment later.
//!
//! # Built-in handlers
//!
//! `ccs_getinfo` is answered here. `ccs_killport` keeps the caller's
//! address and port (once per address, at most
//! [`MAX_KILL_PORTS`](super::kill_list::MAX_KILL_PORTS) of them: see
//! `ccs::kill_list`); when the server stops (the job ends) or the process
//! aborts, each is sent `die\n\0`, all at once under one deadline
//! ([`ServerHandle::notify_killers`]; on an abnormal exit, through the
//! at-exit hook of `proc::exit` that [`notify_killers_at_exit`] is).
//! `perf_monitor` waits for the next full sample of every PE (see
//! `ccs::perf`).
//!
//! # Concurrency protocol
//!
//! The thread owns every connection (and `incomplete`), but one kind: a
//! request for one PE of this process hands its connection over with it,
//! into [`ServerHandle`]'s `direct` map, where whichever comes first takes
//! it: the PE's reply, which writes itself from the PE's thread and closes
//! the connection (if the socket cannot take it all at once, the rest and
//! the connection go back to the thread as an event), or the thread's
//! reply deadline, which closes it unanswered. The reply no longer waits
//! for the thread to be scheduled: the client has it as soon as the
//! handler sent it (the PE still wakes the thread afterwards, see
//! `ServerHandle::reply_direct`). If the thread ends (its poll failed, or
//! the server stops), it marks the handle dead and closes what the map and
//! the event queue still hold; events pushed after that are dropped (their
//! connections closed). Other threads (PEs) otherwise only push replies and samples
//! into the handle's event queue and wake the thread through its mio
//! waker; the kill list is behind its own mutex, read at exit by whichever
//! thread ends the process.
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccs_wire::{HASH_LEN, Incoming, Limits, Parsed, Request};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::ServerError;
use super::auth::{self, Guard};
use super::kill_list::{self, Added, KillList};
use super::perf::{Collector, Sample};
use super::{Reply, Ticket, lock};
use crate::proc::args::ServerFlags;
use crate::rt::job::Job;
use converse_net::throttle::{LOG_PERIOD, Say, Throttle};

/// The largest request data taken by default (`++server-max-request`).
pub(crate) const DEFAULT_MAX_REQUEST: usize = 64 << 20;
/// How long a request may wait for its reply by default
/// (`++server-reply-timeout`).
pub(crate) const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(600);
/// A client that takes this long, in the middle of a request, to complete
/// the next step of it is closed, by default (`++server-stall-timeout`;
/// see the top comment).
pub(crate) const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections at most, by default (`++server-max-connections`).
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The listen backlog: connections the kernel completes before the thread
/// accepts them.
const LISTEN_BACKLOG: i32 = 4096;
/// How often the thread looks at deadlines when nothing happens.
const TICK: Duration = Duration::from_millis(100);
/// How often the poll wakes while a request is held for its handler's
/// registration (see "Start-up" above).
const HOLD_POLL: Duration = Duration::from_millis(2);
/// The longest a request is held for its handler's registration.
const HOLD_LIMIT: Duration = Duration::from_secs(10);
/// Failed kill notices named in full in the log line that reports them.
const MISSED_NAMED: usize = 8;

/// The most request bytes the connections being read may claim together:
/// four requests of the largest size (with their header and a PE list of
/// up to 64 KiB), and at least 1 MiB (so small limits still allow a
/// thousand clients at once). 256 MiB by default.
pub(crate) fn buffer_budget(max_request: usize) -> usize {
    max_request
        .saturating_add(64 << 10)
        .saturating_mul(4)
        .max(1 << 20)
}

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection tokens start here.
const FIRST_CONN: usize = 2;

/// What PEs tell the server thread.
enum Event {
    /// A PE's reply to a request.
    Reply(Ticket, Reply),
    /// A `perf_monitor` sample.
    Sample(Sample),
    /// A direct reply the socket did not take whole: the connection, and
    /// the reply from `at` on, to write as the socket takes it.
    Unfinished(Direct, Vec<u8>, usize),
}

/// The connection of a request handed straight to a PE, until its reply
/// (see "Concurrency protocol").
struct Direct {
    stream: TcpStream,
    peer: SocketAddr,
    /// Its token, and what the poll watches it for (it stays registered,
    /// if it was).
    token: Token,
    watching: Option<Interest>,
    /// An authenticated request's reply starts with this hash.
    reply_hash: Option<[u8; HASH_LEN]>,
    /// When the thread closes it unanswered.
    deadline: Instant,
}

/// What other threads hold of the server.
pub(crate) struct ServerHandle {
    events: Mutex<Vec<Event>>,
    /// The thread has ended: events are dropped, not queued (set and read
    /// under `events`' lock).
    dead: AtomicBool,
    /// Connections of requests handed straight to a PE, by request token.
    direct: Mutex<HashMap<u64, Direct>>,
    waker: Waker,
    /// Where `ccs_killport` callers want their notice of the job's end.
    kill_list: Mutex<KillList>,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Where it listens.
    addr: SocketAddr,
}

impl ServerHandle {
    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers a request with a PE's reply (from any thread): writes it
    /// at once if its connection was handed over with the request, else
    /// queues it for the thread.
    pub(crate) fn push_reply(&self, ticket: Ticket, reply: Reply) {
        let direct = lock(&self.direct).remove(&ticket.token);
        match direct {
            Some(conn) => self.reply_direct(conn, reply),
            // Merged, or its connection timed out (the thread ignores it).
            None => self.push(Event::Reply(ticket, reply)),
        }
    }

    /// Writes `reply` to `conn` from the calling thread and closes it; what
    /// the socket does not take at once goes to the server thread.
    fn reply_direct(&self, conn: Direct, reply: Reply) {
        let Reply::Data(data) = reply else {
            // No reply: closed (dropped) without one.
            return;
        };
        let out = match reply_bytes(conn.reply_hash, data) {
            Ok(out) => out,
            Err(e) => {
                log(&format!(
                    "{e}: the reply to {} not sent; connection closed",
                    conn.peer
                ));
                return;
            }
        };
        let mut at = 0;
        while at < out.len() {
            match (&conn.stream).write(&out[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.push(Event::Unfinished(conn, out, at));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log(&format!("writing to {} failed: {e}", conn.peer));
                    return;
                }
            }
        }
        // Written: closed (and out of the thread's epoll set).
        tracing::debug!(
            peer = %conn.peer,
            conn = conn.token.0,
            "CCS reply written by the PE, connection closed"
        );
        drop(conn);
        // The thread has nothing to do for it, but a wake-up here, after
        // the client has its reply, measured better than none in turns:
        // 0.82-0.84 of the raw server's requests per second and a
        // sequential round trip of 128-135 us, against 0.71-0.88 and
        // 141-221 us without it (the thread then sleeps from accept to
        // accept, and waking it for the next connection took longer).
        let _ = self.waker.wake();
    }

    /// Queues a `perf_monitor` sample (from any thread).
    pub(crate) fn push_sample(&self, sample: Sample) {
        self.push(Event::Sample(sample));
    }

    fn push(&self, event: Event) {
        let mut events = lock(&self.events);
        if self.dead.load(Ordering::Relaxed) {
            // Nobody will take it: dropped here (a connection it holds is
            // closed).
            return;
        }
        events.push(event);
        drop(events);
        let _ = self.waker.wake();
    }

    /// The thread ended: closes the connections it can no longer serve.
    fn abandon(&self) {
        let mut events = lock(&self.events);
        self.dead.store(true, Ordering::Relaxed);
        let queued = std::mem::take(&mut *events);
        drop(events);
        drop(queued);
        let direct = std::mem::take(&mut *lock(&self.direct));
        drop(direct);
    }

    /// Writes `die\n\0` to every `ccs_killport` caller, once (later calls
    /// find the list empty), all at once: it returns within
    /// [`kill_list::NOTICE_DEADLINE`] however many callers do not answer.
    /// Those that got no notice are reported in one line.
    pub fn notify_killers(&self) {
        let list = lock(&self.kill_list).take();
        let missed = kill_list::send_notices(&list, Instant::now() + kill_list::NOTICE_DEADLINE);
        if missed.is_empty() {
            return;
        }
        let mut named: Vec<String> = missed
            .iter()
            .take(MISSED_NAMED)
            .map(|(addr, why)| format!("{addr} ({why})"))
            .collect();
        if missed.len() > MISSED_NAMED {
            named.push(format!("and {} more", missed.len() - MISSED_NAMED));
        }
        log(&format!(
            "cannot tell {} of {} ccs_killport callers that the job ends: {}",
            missed.len(),
            list.len(),
            named.join(", ")
        ));
    }
}

/// The server of this process, while it runs: abnormal exits (an abort, a
/// lost peer or launcher) find it here to send the `ccs_killport` notices,
/// from whatever thread ends the process.
static RUNNING: Mutex<Option<Weak<ServerHandle>>> = Mutex::new(None);

/// Sends the `ccs_killport` notices of this process's server, if it runs
/// one: the at-exit hook every abnormal end of the process runs
/// (registered with the first server of the process).
fn notify_killers_at_exit() {
    let running = lock(&RUNNING).as_ref().and_then(Weak::upgrade);
    if let Some(handle) = running {
        handle.notify_killers();
    }
}

/// Says `text` on stderr as the server's diagnostic (always printed, and
/// a warning event for a program's own subscriber: `proc::log::report!`;
/// the server goes on, or stops while the job goes on).
fn log(text: &str) {
    crate::proc::log::report!(WARN, &format!("converse: ccs: {text}"));
}

/// Starts the server of `job` as `flags` ask, prints the announcement and
/// returns the handle (kept in the job's CCS state).
/// A step `what` of the server's set-up failed with `e`.
fn setup(what: &'static str) -> impl FnOnce(std::io::Error) -> ServerError {
    move |e| ServerError::Setup {
        what,
        source: e.into(),
    }
}

pub(crate) fn start(job: &Arc<Job>, flags: &ServerFlags) -> Result<Arc<ServerHandle>, ServerError> {
    let (keys, otp_lines) = match &flags.auth {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| ServerError::AuthFileUnreadable {
                    path: path.clone(),
                    source: e.into(),
                })?;
            ccs_wire::parse_auth_file(&text, auth::random_key).map_err(|cause| {
                ServerError::AuthFile {
                    path: path.clone(),
                    cause,
                }
            })?
        }
        None => Default::default(),
    };
    let guard = Guard::new(keys);
    // Loopback only, unless asked otherwise or every request must be
    // authenticated (an auth file with a key for level 0).
    let ip: IpAddr = match &flags.bind {
        Some(addr) => addr
            .parse()
            .map_err(|_| ServerError::NotAnAddress(addr.clone()))?,
        None if !guard.accepts_plain() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let listener =
        TcpListener::bind(SocketAddr::new(ip, flags.port)).map_err(|e| ServerError::Listen {
            ip,
            port: flags.port,
            source: e.into(),
        })?;
    // mio listens with a backlog of 128: a thousand clients connecting at
    // once overflow it, and each overflowed SYN costs its client a 1 s
    // retransmit. Listening again only changes the backlog (capped by
    // net.core.somaxconn).
    rustix::net::listen(&listener, LISTEN_BACKLOG).map_err(|e| setup("listen")(e.into()))?;
    let addr = listener.local_addr().map_err(setup("its address"))?;
    if !ip.is_loopback() && guard.accepts_plain() {
        log(&format!(
            "WARNING: the server listens on {ip} without authentication (no auth file, or no key for level 0): anyone who can reach port {} can run this job's CCS handlers",
            addr.port()
        ));
    }
    let poll = Poll::new().map_err(setup("epoll"))?;
    let waker = Waker::new(poll.registry(), WAKER).map_err(setup("waker"))?;
    let handle = Arc::new(ServerHandle {
        events: Mutex::new(Vec::new()),
        direct: Mutex::new(HashMap::new()),
        dead: AtomicBool::new(false),
        waker,
        kill_list: Mutex::new(KillList::default()),
        stop: AtomicBool::new(false),
        thread: Mutex::new(None),
        addr,
    });
    let mut server = Server {
        job: Arc::downgrade(job),
        handle: Arc::downgrade(&handle),
        poll,
        listener,
        conns: HashMap::new(),
        incomplete: BTreeSet::new(),
        pending: HashMap::new(),
        next_conn: FIRST_CONN,
        next_token: 1,
        limits: Limits {
            max_data: flags.max_request.unwrap_or(DEFAULT_MAX_REQUEST),
            max_pes: job.topo.num_pes(),
        },
        reply_timeout: flags
            .reply_timeout
            .map_or(DEFAULT_REPLY_TIMEOUT, Duration::from_secs),
        stall_timeout: flags.stall_timeout.unwrap_or(DEFAULT_STALL_TIMEOUT),
        max_connections: flags.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
        budget: buffer_budget(flags.max_request.unwrap_or(DEFAULT_MAX_REQUEST)),
        buffered: 0,
        evicted_log: Throttle::new(LOG_PERIOD),
        refused_log: Throttle::new(LOG_PERIOD),
        stalled_log: Throttle::new(LOG_PERIOD),
        guard,
        perf: Collector::new(job.topo.num_pes()),
        held: Vec::new(),
    };
    server
        .poll
        .registry()
        .register(&mut server.listener, LISTENER, Interest::READABLE)
        .map_err(setup("register"))?;
    // The announcement clients and tools look for (`ccs-protocol.md`),
    // after the keys drawn for `OTP` lines (as Charm++ prints them).
    {
        let mut out = std::io::stdout().lock();
        for line in &otp_lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "ccs: 2");
        let _ = writeln!(out, "{}", announcement(addr));
        let _ = out.flush();
    }
    let thread = std::thread::Builder::new()
        .name("ccs-server".into())
        .spawn(move || {
            server.run();
            if let Some(handle) = server.handle.upgrade() {
                handle.abandon();
            }
        })
        .map_err(setup("cannot start its thread"))?;
    *lock(&handle.thread) = Some(thread);
    *lock(&RUNNING) = Some(Arc::downgrade(&handle));
    tracing::info!(
        %addr,
        auth_file = flags.auth.is_some(),
        max_connections = flags.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
        "CCS server started"
    );
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| crate::proc::exit::at_exit(|_| notify_killers_at_exit()));
    Ok(handle)
}

/// Stops the server of `handle`, waits for its thread, and sends the
/// `ccs_killport` notices.
pub(crate) fn stop(handle: &ServerHandle) {
    lock(&RUNNING).take();
    handle.stop.store(true, Ordering::Release);
    let _ = handle.waker.wake();
    if let Some(t) = lock(&handle.thread).take() {
        let _ = t.join();
    }
    // The thread closed what it could no longer serve as it ended.
    handle.abandon();
    handle.notify_killers();
    tracing::info!(addr = %handle.addr, "CCS server stopped");
}

enum State {
    /// A request, or a handshake's first message; `need` is what the
    /// parser asked for.
    Reading {
        buf: Vec<u8>,
        need: usize,
    },
    /// Handshake step 3: the client's hash of `server_salt`.
    ReadingHash {
        level: u8,
        client_salt: u32,
        server_salt: u32,
        buf: Vec<u8>,
    },
    Waiting {
        deadline: Instant,
    },
    /// Writing `out`; then reading the hash when `then` says so, else
    /// closing.
    Writing {
        out: Vec<u8>,
        at: usize,
        then: Option<Box<State>>,
    },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    state: State,
    /// When the current step of reading began (accept, or the last step
    /// completed): the stall timeout runs from here. Bytes that do not
    /// complete a step leave it alone (see the top comment).
    last_read: Instant,
    /// Request bytes this connection counts against the server's budget.
    reserved: usize,
    /// An authenticated request's reply starts with this hash.
    reply_hash: Option<[u8; HASH_LEN]>,
    /// What the poll watches it for: nothing until it must wait for
    /// bytes (most requests come whole with their connection, and their
    /// connection is then never registered), writability too once a write
    /// would block.
    watching: Option<Interest>,
}

/// A request whose replies are still coming.
struct Pending {
    conn: Token,
    /// Per position of the destination list: its PE's answer, once come.
    answers: Vec<Option<Reply>>,
    /// Answers still to come.
    missing: usize,
    merge: Option<super::MergeFn>,
}

struct Server {
    job: Weak<Job>,
    handle: Weak<ServerHandle>,
    poll: Poll,
    listener: TcpListener,
    conns: HashMap<Token, Conn>,
    /// The connections whose client still owes bytes: from their accept
    /// until their request is whole, or for an identity handshake until the
    /// client's hash is read. In accept order (tokens only grow): the first
    /// is the one evicted at the cap.
    incomplete: BTreeSet<Token>,
    pending: HashMap<u64, Pending>,
    next_conn: usize,
    next_token: u64,
    limits: Limits,
    reply_timeout: Duration,
    stall_timeout: Duration,
    /// Open connections at most.
    max_connections: usize,
    /// Most request bytes reserved at once ([`buffer_budget`]).
    budget: usize,
    /// Request bytes reserved by connections being read.
    buffered: usize,
    /// The log of connections closed to admit a newcomer at the cap.
    evicted_log: Throttle,
    /// The log of newcomers refused at the cap.
    refused_log: Throttle,
    /// The log of connections closed for stalling mid-request.
    stalled_log: Throttle,
    guard: Guard,
    perf: Collector<Token>,
    /// Requests for names not registered yet, held while the PEs start
    /// (see "Start-up" above), in arrival order.
    held: Vec<Held>,
}

/// A request held until the PEs have registered their handlers.
struct Held {
    token: Token,
    peer: SocketAddr,
    req: Request,
    since: Instant,
}

impl Server {
    fn run(&mut self) {
        self.serve();
        // What the throttled lines still hold is said now: none is lost
        // with the server.
        if let Some(n) = self.refused_log.rest() {
            self.log_refused(n);
        }
        if let Some(n) = self.evicted_log.rest() {
            self.log_evicted(n);
        }
        if let Some(n) = self.stalled_log.rest() {
            log_stalled(n, self.stall_timeout.as_secs_f64());
        }
    }

    /// The server's loop, until it stops (see `run`).
    fn serve(&mut self) {
        let mut events = Events::with_capacity(256);
        let mut last_scan = Instant::now();
        loop {
            let Some(handle) = self.handle.upgrade() else {
                return;
            };
            if handle.stop.load(Ordering::Acquire) {
                return;
            }
            let wait = if self.held.is_empty() {
                TICK
            } else {
                HOLD_POLL
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait))
                && e.kind() != io::ErrorKind::Interrupted
            {
                log(&format!("epoll failed, the server stops: {e}"));
                return;
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    token => self.on_event(token),
                }
            }
            let events = std::mem::take(&mut *lock(&handle.events));
            drop(handle);
            for event in events {
                match event {
                    Event::Reply(ticket, reply) => self.on_reply(ticket, reply),
                    Event::Unfinished(conn, out, at) => self.take_back(conn, out, at),
                    Event::Sample(sample) => {
                        for (token, text) in self.perf.add(sample) {
                            self.reply_now(token, text);
                        }
                    }
                }
            }
            if !self.held.is_empty() {
                self.release_held();
            }
            // Once per tick, not per wake-up: the scan visits every
            // connection.
            if last_scan.elapsed() >= TICK {
                last_scan = Instant::now();
                self.check_deadlines();
            }
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if self.open_connections() >= self.max_connections && !self.evict_for(peer) {
                        match self.refused_log.hit(Instant::now()) {
                            Say::Line => log(&format!(
                                "{} connections open, each with a whole request: refusing {peer}, and more until some close (counted, one line per {} s)",
                                self.max_connections,
                                LOG_PERIOD.as_secs()
                            )),
                            Say::Count(n) => self.log_refused(n),
                            Say::Quiet => {}
                        }
                        continue;
                    }
                    let token = Token(self.next_conn);
                    self.next_conn += 1;
                    tracing::debug!(%peer, conn = token.0, "CCS connection accepted");
                    self.incomplete.insert(token);
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            peer,
                            state: State::Reading {
                                buf: Vec::new(),
                                need: 1,
                            },
                            last_read: Instant::now(),
                            reserved: 0,
                            reply_hash: None,
                            watching: None,
                        },
                    );
                    // The request often came with the connection: read
                    // first, and register only a connection that must wait
                    // for more (a registration reports bytes that came
                    // before it, so none is missed).
                    self.read(token);
                    self.watch_reads(token);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, say: the pending ones wait.
                    log(&format!("accept failed: {e}"));
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        match &mut conn.state {
            State::Reading { .. } => self.read(token),
            State::ReadingHash { .. } => self.read_hash(token),
            State::Writing { .. } => self.write(token),
            // A client that closes while waiting is noticed when the reply
            // is written.
            State::Waiting { .. } => {}
        }
    }

    /// Reads what the client sent; acts once a request is whole.
    fn read(&mut self, token: Token) {
        let limits = self.limits;
        loop {
            let conn = self.conns.get_mut(&token).expect("caller checked");
            let peer = conn.peer;
            let State::Reading { buf, need } = &mut conn.state else {
                return;
            };
            match fill(&mut conn.stream, buf, *need) {
                Fill::Later => return,
                Fill::Closed => {
                    if !buf.is_empty() {
                        log(&format!(
                            "{peer} closed its connection after {} bytes of an incomplete request",
                            buf.len()
                        ));
                    }
                    return self.close(token);
                }
                Fill::Failed(e) => {
                    log(&format!("reading from {peer} failed: {e}"));
                    return self.close(token);
                }
                Fill::Have => {}
            }
            conn.last_read = Instant::now();
            match ccs_wire::parse_incoming(buf, &limits) {
                Ok(Parsed::Need(n)) => {
                    *need = n;
                    // Never more than the parser asked for, and what it
                    // asks for is bounded by the limits; the sum over
                    // connections is bounded by the budget.
                    let more = n.saturating_sub(conn.reserved);
                    if self.buffered + more > self.budget {
                        log(&format!(
                            "a request of {n} bytes from {peer} refused: requests being read hold {} bytes, the most is {} (four requests of ++server-max-request); connection closed",
                            self.buffered, self.budget
                        ));
                        return self.close(token);
                    }
                    conn.reserved += more;
                    self.buffered += more;
                }
                Ok(Parsed::Done(incoming, _)) => {
                    self.release(token);
                    // A handshake's first message: the client owes its hash
                    // still.
                    if matches!(incoming, Incoming::Request(_)) {
                        self.incomplete.remove(&token);
                    }
                    return self.on_incoming(token, peer, incoming);
                }
                Err(e) => {
                    log(&format!("bad request from {peer}: {e}; connection closed"));
                    return self.close(token);
                }
            }
        }
    }

    /// Gives back the request bytes `token` reserved.
    fn release(&mut self, token: Token) {
        if let Some(conn) = self.conns.get_mut(&token) {
            self.buffered -= std::mem::take(&mut conn.reserved);
        }
    }

    /// Handshake step 3: reads the client's hash; if it proves the key,
    /// writes the client its identity (step 4).
    fn read_hash(&mut self, token: Token) {
        let conn = self.conns.get_mut(&token).expect("caller checked");
        let peer = conn.peer;
        let State::ReadingHash {
            level,
            client_salt,
            server_salt,
            buf,
        } = &mut conn.state
        else {
            return;
        };
        match fill(&mut conn.stream, buf, HASH_LEN) {
            Fill::Later => return,
            Fill::Closed => {
                log(&format!(
                    "{peer} closed its connection in the middle of an identity handshake"
                ));
                return self.close(token);
            }
            Fill::Failed(e) => {
                log(&format!("reading from {peer} failed: {e}"));
                return self.close(token);
            }
            Fill::Have => {}
        }
        let got: [u8; HASH_LEN] = buf[..].try_into().expect("filled to the hash's size");
        self.incomplete.remove(&token);
        let (level, client_salt, server_salt) = (*level, *client_salt, *server_salt);
        match self.guard.admit(level, server_salt, client_salt, &got) {
            Ok(identity) => self.write_then(token, identity.to_vec(), None),
            Err(why) => {
                log(&format!(
                    "identity handshake from {peer} at level {level} refused: {why}; connection closed"
                ));
                self.close(token);
            }
        }
    }

    fn on_incoming(&mut self, token: Token, peer: SocketAddr, incoming: Incoming) {
        match incoming {
            Incoming::Identity { level, client_salt } => match self.guard.key(level) {
                Ok(_) => {
                    // Step 2: our salt; then the client's hash of it.
                    let server_salt = auth::random_u32();
                    let next = State::ReadingHash {
                        level,
                        client_salt,
                        server_salt,
                        buf: Vec::with_capacity(HASH_LEN),
                    };
                    self.write_then(
                        token,
                        server_salt.to_be_bytes().to_vec(),
                        Some(Box::new(next)),
                    );
                }
                Err(why) => {
                    log(&format!(
                        "identity handshake from {peer} refused: {why}; connection closed"
                    ));
                    self.close(token);
                }
            },
            Incoming::Request(req) => match &req.auth {
                None if !self.guard.accepts_plain() => {
                    log(&format!(
                        "unauthenticated request from {peer} refused: level 0 has a key (++server-auth), every request must be authenticated; connection closed"
                    ));
                    self.close(token);
                }
                None => self.on_request(token, peer, req),
                Some(a) => match self.guard.check(a, &req.header) {
                    Ok(reply_hash) => {
                        if let Some(conn) = self.conns.get_mut(&token) {
                            conn.reply_hash = Some(reply_hash);
                        }
                        self.on_request(token, peer, req);
                    }
                    Err(why) => {
                        log(&format!(
                            "authenticated request from {peer} at level {} refused: {why}; connection closed",
                            a.level
                        ));
                        self.close(token);
                    }
                },
            },
        }
    }

    fn on_request(&mut self, token: Token, peer: SocketAddr, req: Request) {
        let Some(job) = self.job.upgrade() else {
            self.close(token);
            return;
        };
        let name = match req.header.handler() {
            Ok(n) => n.to_string(),
            Err(e) => {
                // The parser checked it; kept for safety.
                log(&format!("bad request from {peer}: {e}"));
                self.close(token);
                return;
            }
        };
        if self.on_built_in(&job, token, peer, &name, &req) {
            return;
        }
        let ccs = crate::ccs::state(&job);
        let Some(entry) = ccs.entry(&name) else {
            if ccs.pes_started.load(Ordering::Acquire) < job.local_pes() {
                // Its PE may not have registered it yet: held (see
                // "Start-up" above).
                self.wait_for_reply(token);
                self.held.push(Held {
                    token,
                    peer,
                    req,
                    since: Instant::now(),
                });
                return;
            }
            refuse(&name, peer, "no such handler");
            self.reply_now(token, Vec::new());
            return;
        };
        let (targets, merged) = match request_targets(&job, &req) {
            Ok(t) => t,
            Err(why) => {
                refuse(&name, peer, &why);
                self.reply_now(token, Vec::new());
                return;
            }
        };
        if merged && entry.merge.is_none() {
            refuse(
                &name,
                peer,
                "a broadcast or multicast to a handler without a merge function (set_merge_fn)",
            );
            self.reply_now(token, Vec::new());
            return;
        }
        let request = self.next_token;
        self.next_token += 1;
        let caller = match peer.ip() {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or([0; 4], |v4| v4.octets()),
        };
        // Straight to the first destination when it lives here (no hop
        // through PE 0).
        let first = job.local_pe(targets[0] as usize);
        let msg = super::server_message(
            first.is_some(),
            request,
            (caller, peer.port()),
            &targets,
            &name,
            &req.data,
        );
        if let (Some(pe), false) = (first, merged) {
            // One PE of this process answers: its reply writes itself.
            if self.hand_over_connection(token, request) {
                tracing::debug!(
                    handler = ?name,
                    %peer,
                    pe = targets[0],
                    "CCS request handed to its PE"
                );
                pe.inbox.push(msg);
                pe.idle.wake();
                return;
            }
        }
        self.pending.insert(
            request,
            Pending {
                conn: token,
                answers: vec![None; targets.len()],
                missing: targets.len(),
                merge: entry.merge.clone(),
            },
        );
        self.wait_for_reply(token);
        tracing::debug!(
            handler = ?name,
            %peer,
            pes = targets.len(),
            via_pe0 = first.is_none(),
            "CCS request handed to the PEs"
        );
        match first {
            Some(pe) => {
                pe.inbox.push(msg);
                pe.idle.wake();
            }
            None => self.hand_to_pe0(&job, token, msg),
        }
    }

    /// Looks the held requests up again once every PE of this process has
    /// run its start function; refuses those held for [`HOLD_LIMIT`]
    /// (their PEs never finished starting).
    fn release_held(&mut self) {
        let Some(job) = self.job.upgrade() else {
            return;
        };
        let started =
            crate::ccs::state(&job).pes_started.load(Ordering::Acquire) >= job.local_pes();
        let now = Instant::now();
        let (due, kept): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| started || now - h.since >= HOLD_LIMIT);
        self.held = kept;
        for h in due {
            // Closed meanwhile (its reply deadline passed, or the server
            // is stopping): nothing to answer.
            if !self.conns.contains_key(&h.token) {
                continue;
            }
            let name = h.req.header.handler().unwrap_or_default().to_string();
            match crate::ccs::state(&job).entry(&name) {
                Some(_) => self.on_request(h.token, h.peer, h.req),
                None => {
                    let why = if started {
                        "no such handler".to_string()
                    } else {
                        format!(
                            "no such handler (the PEs had not finished their start functions after {} s)",
                            HOLD_LIMIT.as_secs()
                        )
                    };
                    refuse(&name, h.peer, &why);
                    self.reply_now(h.token, Vec::new());
                }
            }
        }
    }

    /// Answers a request to one of the server's own handlers
    /// (`ccs_getinfo`, `ccs_killport`, `perf_monitor`); false for any
    /// other name.
    fn on_built_in(
        &mut self,
        job: &Arc<Job>,
        token: Token,
        peer: SocketAddr,
        name: &str,
        req: &Request,
    ) -> bool {
        match name {
            "ccs_getinfo" => {
                let sizes: Vec<u32> = (0..job.topo.num_nodes())
                    .map(|n| job.topo.node_size(n) as u32)
                    .collect();
                self.reply_now(token, ccs_wire::encode_getinfo(&sizes));
            }
            "ccs_killport" => {
                self.on_killport(peer, &req.data);
                self.reply_now(token, Vec::new());
            }
            "perf_monitor" => {
                self.wait_for_reply(token);
                if self.perf.wait(token) {
                    self.hand_to_pe0(job, token, super::perf::start_message());
                }
            }
            _ => return false,
        }
        true
    }

    /// `ccs_killport`: one big-endian port number; the notice goes to the
    /// caller's address. No reply data.
    fn on_killport(&mut self, peer: SocketAddr, data: &[u8]) {
        match <[u8; 4]>::try_from(data).map(u32::from_be_bytes) {
            Ok(port @ 1..=65535) => {
                let added = self.handle.upgrade().map(|handle| {
                    lock(&handle.kill_list).add(SocketAddr::new(peer.ip(), port as u16))
                });
                if let Some(Added::Full { first: true }) = added {
                    log(&format!(
                        "ccs_killport from {peer} (port {port}) ignored: {} addresses are registered, the most; later ones beyond it are ignored too, unlogged",
                        kill_list::MAX_KILL_PORTS
                    ));
                }
            }
            _ => log(&format!(
                "ccs_killport from {peer}: the request is {} bytes, not one port number (4 bytes, 1-65535); ignored",
                data.len()
            )),
        }
    }

    /// The connection on `token` now waits for its reply, at most the
    /// reply timeout.
    fn wait_for_reply(&mut self, token: Token) {
        if let Some(conn) = self.conns.get_mut(&token) {
            conn.state = State::Waiting {
                deadline: Instant::now() + self.reply_timeout,
            };
        }
    }

    /// Hands the connection on `token` to the PE that answers `request`
    /// (its reply writes itself); false if the server or the connection
    /// is gone.
    fn hand_over_connection(&mut self, token: Token, request: u64) -> bool {
        let Some(handle) = self.handle.upgrade() else {
            return false;
        };
        let Some(conn) = self.conns.remove(&token) else {
            return false;
        };
        lock(&handle.direct).insert(
            request,
            Direct {
                stream: conn.stream,
                peer: conn.peer,
                token,
                watching: conn.watching,
                reply_hash: conn.reply_hash,
                deadline: Instant::now() + self.reply_timeout,
            },
        );
        true
    }

    /// Gives PE 0 `msg` for the request on `token`.
    fn hand_to_pe0(&mut self, job: &Job, token: Token, msg: crate::msg::Message) {
        match job.local_pe(0) {
            Some(pe0) => {
                pe0.inbox.push(msg);
                pe0.idle.wake();
            }
            None => {
                log("this process has no PE 0 to hand requests to");
                self.close(token);
            }
        }
    }

    /// A PE answered its part of a request.
    fn on_reply(&mut self, ticket: Ticket, reply: Reply) {
        let Some(p) = self.pending.get_mut(&ticket.token) else {
            // Its connection timed out or closed.
            return;
        };
        match p.answers.get_mut(ticket.position as usize) {
            Some(slot @ None) => *slot = Some(reply),
            // Answers come once per position (the request context sees
            // to it); anything else is not from this request.
            _ => {
                log(&format!(
                    "a reply for list position {} of a request to {} PEs ignored",
                    ticket.position,
                    p.answers.len()
                ));
                return;
            }
        }
        p.missing -= 1;
        if p.missing > 0 {
            return;
        }
        let p = self.pending.remove(&ticket.token).expect("present");
        // In list order; PEs that asked for no reply have no part.
        let replies: Vec<Vec<u8>> = p
            .answers
            .into_iter()
            .filter_map(|a| match a {
                Some(Reply::Data(d)) => Some(d),
                _ => None,
            })
            .collect();
        if replies.is_empty() {
            // Every PE asked for no reply: close without one.
            self.close(p.conn);
            return;
        }
        let bytes = match &p.merge {
            Some(merge) if replies.len() > 1 => {
                let parts: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
                merge(&parts)
            }
            _ => replies.concat(),
        };
        self.reply_now(p.conn, bytes);
    }

    /// Starts writing `data` as the reply on `token` (after the reply
    /// hash of an authenticated request).
    fn reply_now(&mut self, token: Token, data: Vec<u8>) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        match reply_bytes(conn.reply_hash, data) {
            Ok(out) => self.write_then(token, out, None),
            Err(e) => {
                log(&format!(
                    "{e}: the reply to {} not sent; connection closed",
                    conn.peer
                ));
                self.close(token)
            }
        }
    }

    /// A direct reply the socket did not take whole: the connection is the
    /// thread's again, writing the rest.
    fn take_back(&mut self, conn: Direct, out: Vec<u8>, at: usize) {
        let token = conn.token;
        self.conns.insert(
            token,
            Conn {
                stream: conn.stream,
                peer: conn.peer,
                state: State::Writing {
                    out,
                    at,
                    then: None,
                },
                last_read: Instant::now(),
                reserved: 0,
                reply_hash: conn.reply_hash,
                watching: conn.watching,
            },
        );
        self.write(token);
    }

    /// Registers the connection on `token`, if it is still open, waits for
    /// bytes and is not registered yet.
    fn watch_reads(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let reading = matches!(
            conn.state,
            State::Reading { .. } | State::ReadingHash { .. }
        );
        if conn.watching.is_some() || !reading {
            return;
        }
        match self
            .poll
            .registry()
            .register(&mut conn.stream, token, Interest::READABLE)
        {
            Ok(()) => conn.watching = Some(Interest::READABLE),
            Err(e) => {
                log(&format!(
                    "cannot watch the connection from {}: {e}",
                    conn.peer
                ));
                self.close(token);
            }
        }
    }

    /// Connections open: the thread's and those handed to a PE.
    fn open_connections(&self) -> usize {
        let direct = self.handle.upgrade().map_or(0, |h| lock(&h.direct).len());
        self.conns.len() + direct
    }

    /// Starts writing `out` on `token`; then goes on to `then`, or closes.
    fn write_then(&mut self, token: Token, out: Vec<u8>, then: Option<Box<State>>) {
        if let Some(conn) = self.conns.get_mut(&token) {
            conn.state = State::Writing { out, at: 0, then };
            self.write(token);
        }
    }

    fn write(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let State::Writing { out, at, then } = &mut conn.state else {
            return;
        };
        while *at < out.len() {
            match conn.stream.write(&out[*at..]) {
                Ok(0) => break,
                Ok(n) => *at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let both = Interest::READABLE | Interest::WRITABLE;
                    if conn.watching != Some(both) {
                        // (Re-)arming reports the socket if it became
                        // writable in the meantime.
                        let registry = self.poll.registry();
                        let armed = match conn.watching {
                            None => registry.register(&mut conn.stream, token, both),
                            Some(_) => registry.reregister(&mut conn.stream, token, both),
                        };
                        if let Err(e) = armed {
                            log(&format!("cannot watch {}: {e}", conn.peer));
                            return self.close(token);
                        }
                        conn.watching = Some(both);
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log(&format!("writing to {} failed: {e}", conn.peer));
                    return self.close(token);
                }
            }
        }
        match then.take() {
            Some(next) if *at == out.len() => {
                conn.state = *next;
                conn.last_read = Instant::now();
                // Edge-triggered: what already arrived raises no event.
                self.on_event(token);
            }
            _ => self.close(token),
        }
    }

    /// At the cap: closes the connection that has owed bytes the longest,
    /// to admit a newcomer from `peer`. False if every open connection has
    /// sent its whole request (none is closed).
    fn evict_for(&mut self, peer: SocketAddr) -> bool {
        let Some(&oldest) = self.incomplete.first() else {
            return false;
        };
        if let Some(conn) = self.conns.get(&oldest) {
            debug_assert!(
                matches!(
                    conn.state,
                    State::Reading { .. }
                        | State::ReadingHash { .. }
                        | State::Writing { then: Some(_), .. }
                ),
                "only connections owing bytes are evicted"
            );
            match self.evicted_log.hit(Instant::now()) {
                Say::Line => log(&format!(
                    "{} connections open: closing {}, whose request has been incomplete the longest, to admit {peer} (and alike for newcomers until below the cap; counted, one line per {} s)",
                    self.max_connections,
                    conn.peer,
                    LOG_PERIOD.as_secs()
                )),
                Say::Count(n) => self.log_evicted(n),
                Say::Quiet => {}
            }
        }
        self.close(oldest);
        true
    }

    fn close(&mut self, token: Token) {
        self.release(token);
        self.incomplete.remove(&token);
        // Closing the socket (dropping it) takes it out of the epoll set:
        // no deregistering system call. Nothing else holds its descriptor.
        if let Some(conn) = self.conns.remove(&token) {
            tracing::debug!(peer = %conn.peer, conn = token.0, "CCS connection closed");
        }
    }

    /// The summary line of `n` newcomers refused at the cap.
    fn log_refused(&self, n: u64) {
        log(&format!(
            "{n} connections refused since the last such line: {} connections open, each with a whole request",
            self.max_connections
        ));
    }

    /// The summary line of `n` connections closed for newcomers at the
    /// cap.
    fn log_evicted(&self, n: u64) {
        log(&format!(
            "{n} incomplete connections closed since the last such line, to admit newcomers: {} connections open",
            self.max_connections
        ));
    }

    fn check_deadlines(&mut self) {
        let now = Instant::now();
        // The throttled lines' summaries, due even when the events stop.
        if let Some(n) = self.refused_log.due(now) {
            self.log_refused(n);
        }
        if let Some(n) = self.evicted_log.due(now) {
            self.log_evicted(n);
        }
        if let Some(n) = self.stalled_log.due(now) {
            log_stalled(n, self.stall_timeout.as_secs_f64());
        }
        let mut expired = Vec::new();
        for (&token, conn) in &self.conns {
            match &conn.state {
                State::Reading { buf, .. } | State::ReadingHash { buf, .. }
                    if now - conn.last_read >= self.stall_timeout =>
                {
                    if !buf.is_empty() {
                        let stall = self.stall_timeout.as_secs_f64();
                        match self.stalled_log.hit(now) {
                            Say::Line => log(&format!(
                                "{} completed no part of its request for {stall:.1} s; connection closed (more such are counted, one line per {} s)",
                                conn.peer,
                                LOG_PERIOD.as_secs()
                            )),
                            Say::Count(n) => log_stalled(n, stall),
                            Say::Quiet => {}
                        }
                    }
                    expired.push(token);
                }
                State::Waiting { deadline } if now >= *deadline => {
                    log(&format!(
                        "no reply for {} within {} s; connection closed",
                        conn.peer,
                        self.reply_timeout.as_secs()
                    ));
                    expired.push(token);
                }
                _ => {}
            }
        }
        if let Some(handle) = self.handle.upgrade() {
            // Taken out under the lock, logged and closed after it: the
            // PEs' replies take the same lock.
            let mut late = Vec::new();
            lock(&handle.direct).retain(|_, conn| {
                let keep = now < conn.deadline;
                if !keep {
                    late.push(conn.peer);
                }
                keep
            });
            for peer in late {
                log(&format!(
                    "no reply for {peer} within {} s; connection closed",
                    self.reply_timeout.as_secs()
                ));
            }
        }
        if !expired.is_empty() {
            self.pending.retain(|_, p| !expired.contains(&p.conn));
            self.perf.forget(|t| expired.contains(t));
            for token in expired {
                self.close(token);
            }
        }
    }
}

/// How a read towards a size went.
enum Fill {
    /// The buffer holds what was asked for.
    Have,
    /// The socket has nothing more now.
    Later,
    /// The client closed its side first.
    Closed,
    Failed(io::Error),
}

/// Reads into `buf` until it holds at least `need` bytes. Reads take up to
/// 4 KiB even when less is needed, so a small request arrives in one read
/// (one request per connection: bytes after it are never looked at).
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, need: usize) -> Fill {
    while buf.len() < need {
        let start = buf.len();
        // In steps, so a claimed size is not allocated before it arrives.
        buf.resize(start + (need - start).clamp(4 << 10, 64 << 10), 0);
        match stream.read(&mut buf[start..]) {
            Ok(0) => {
                buf.truncate(start);
                return Fill::Closed;
            }
            Ok(n) => buf.truncate(start + n),
            Err(e) => {
                buf.truncate(start);
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Fill::Later,
                    io::ErrorKind::Interrupted => {}
                    _ => return Fill::Failed(e),
                }
            }
        }
    }
    Fill::Have
}

/// A reply as the client reads it: the hash of an authenticated request,
/// the length, the data.
fn reply_bytes(
    hash: Option<[u8; HASH_LEN]>,
    data: Vec<u8>,
) -> Result<Vec<u8>, ccs_wire::WireError> {
    let head = ccs_wire::try_reply_header(data.len())?;
    let mut out = Vec::with_capacity(HASH_LEN + 4 + data.len());
    if let Some(h) = hash {
        out.extend_from_slice(&h);
    }
    out.extend_from_slice(&head);
    out.extend_from_slice(&data);
    Ok(out)
}
/// Logs a request the server answers empty, and why.
/// The summary line of `n` connections closed for stalling `stall`
/// seconds mid-request.
fn log_stalled(n: u64, stall: f64) {
    log(&format!(
        "{n} connections closed since the last such line: each completed no part of its request for {stall:.1} s"
    ));
}

/// The line clients look for (`ccs-protocol.md`): the address the server
/// listens on, as it is (`0.0.0.0` when it listens on every address: a
/// client on this host reaches it as `127.0.0.1`, others by the host's
/// name).
fn announcement(addr: SocketAddr) -> String {
    format!(
        "ccs: Server IP = {}, Server port = {} $",
        addr.ip(),
        addr.port()
    )
}

fn refuse(name: &str, peer: SocketAddr, why: &str) {
    log(&format!(
        "request for {name:?} from {peer}: {why}; answered empty"
    ));
}

/// The PEs a request goes to, and whether their answers are merged (a
/// broadcast or multicast), or why it cannot go (a PE the job lacks).
fn request_targets(job: &Job, req: &Request) -> Result<(Vec<u32>, bool), String> {
    let pes = job.topo.num_pes();
    let (targets, merged): (Vec<u32>, bool) = match req.header.dest {
        d if d >= 0 => (vec![d as u32], false),
        ccs_wire::BROADCAST => ((0..pes as u32).collect(), true),
        _ => (req.pes.clone(), true),
    };
    if let Some(bad) = targets.iter().find(|&&t| t as usize >= pes) {
        return Err(format!(
            "PE {bad} does not exist (the job has PEs 0..{pes})"
        ));
    }
    Ok((targets, merged))
}
