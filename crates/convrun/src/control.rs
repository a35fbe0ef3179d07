//! The control socket: the processes' hellos and `go` during start-up,
//! then the running job: answering the processes' `whois` requests with
//! one card each, and watching for exits and signals.
//!
//! # Invariants
//!
//! - A connection is a process's link only after a valid hello
//!   (`launch_wire::ToLauncher::Hello`) naming a process of this job that
//!   has none yet, whose proof holds: the launcher writes a fresh
//!   `challenge` nonce first thing on every connection, and the hello must
//!   prove the job key over it (`JobKey::verify_hello`), so a stranger's
//!   hello, or one recorded from another connection, is refused. Anything
//!   else is refused with a message naming where it came from, and
//!   start-up goes on. The launcher answers a hello that holds with
//!   `welcome`, its own proof. Hellos are read without blocking, each
//!   connection with its own bound (`ToLauncher::MAX_LEN` bytes,
//!   [`HELLO_TIMEOUT`]) while the others are accepted and read, so
//!   connections that stay silent delay no process's hello. At most
//!   [`MAX_PENDING`] (or one per process and some) wait at once, half of
//!   them from one address; past that the oldest gives way to the newcomer
//!   (`converse_net::admission`), and at most [`ACCEPTS_PER_TURN`] are
//!   taken between two reads of the others, so a flood of connections
//!   cannot push a process out before its hello is read (and a process
//!   whose connection was closed before its welcome connects again).
//! - Every connection refused is logged, through a throttle
//!   (`converse_net::throttle`): the first few lines in full, then one
//!   line per 10 s counting the rest, so that a stranger chooses no log's length;
//!   the connections still saying hello when start-up ends are refused
//!   too.
//! - `go` goes out once, when every process has said hello (so every card
//!   is known before any process can ask for one); no line carries more
//!   than one card.
//! - A process's `whois N` is answered on its own link with `card N CARD`
//!   (one look-up by number); a number naming no process of the job ends
//!   the job, the asker reported as its culprit ([`Job::listen`]). Every
//!   line to a process goes through its link's queue, written as the
//!   socket takes it ([`crate::job::Link`]).
//! - Start-up ends the job if a process exits, a signal arrives, or
//!   `++timeout` passes first, naming the processes that never joined. A
//!   process that exits during start-up ends it at once: the cause goes
//!   to every process that joined (`abort`), and, for
//!   [`ABORT_WINDOW`], to every process whose hello comes (in place of its
//!   welcome); the processes that did not connect by then cannot be told,
//!   and are ended by `SIGTERM`.
//! - Every link is watched (`converse_net::liveness`, looked at every
//!   sixth of `++peer-timeout`: [`Job::look_for_silence`]): a running
//!   process silent that long (its host down or cut off) ends the job
//!   naming it ([`Job::silent`]), as an exit does.
//! - Start-up's work per wake-up is that of its events: the control
//!   socket is accepted from only when it fired, a connection saying hello
//!   is read (to `WouldBlock`) only when its bytes came or its time is up
//!   (connections are held in slots, their deadlines in accept order, so
//!   neither is searched).
//!
//! # Concurrency
//!
//! All of it runs on the job's thread: the listener and the links are
//! non-blocking, and between sweeps the loops sleep in `epoll_wait(2)`
//! until a connection, a line, room on a link with lines waiting, an exit
//! or a signal comes ([`crate::wake`], [`Job::wait`]).
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use converse_net::admission::Admission;
use converse_net::throttle::{LOG_BURST, LOG_PERIOD, Say, Throttle};
use launch_wire::{Card, JobKey, Nonce, ToLauncher, ToProcess};

use crate::fail;
use crate::hosts::{Plan, hostname};
use crate::job::{GRACE, Job};
use crate::signals::stop_requested;
use crate::status::{Ending, code_of, describe};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections saying hello at once beyond which the oldest gives way to
/// a newcomer (or one per process and some, if more).
const MAX_PENDING: usize = 1024;

/// Connections taken from the control socket between two reads of those
/// held.
const ACCEPTS_PER_TURN: usize = 128;

/// How long a start-up that failed still answers hellos, with the cause.
const ABORT_WINDOW: Duration = Duration::from_millis(200);

/// A control connection whose hello has not all come yet.
struct Pending {
    stream: TcpStream,
    /// Where it came from, for the log.
    from: SocketAddr,
    /// The challenge written to it: its hello must prove over it.
    nonce: Nonce,
    /// What it sent so far (at most `ToLauncher::MAX_LEN` bytes).
    line: Vec<u8>,
    /// When it is refused if its hello is still incomplete.
    until: Instant,
    /// Tells it from a later connection in its slot ([`Pendings`]).
    serial: u64,
}

/// The launcher's control socket.
pub struct Control {
    listener: TcpListener,
    /// The address each process reaches it at (`CONVERSE_LAUNCHER`).
    addresses: Vec<String>,
}

impl Control {
    /// Opens the socket where the processes `plan` places can reach it:
    /// on their common control address if they share one, else on every
    /// address.
    pub fn open(plan: &Plan) -> Control {
        let control_ip = &plan.control_ip;
        let bind: SocketAddr = match control_ip.first() {
            Some(&Some(ip)) if control_ip.iter().all(|c| *c == Some(ip)) => (ip, 0).into(),
            _ if control_ip.iter().flatten().any(|ip| ip.is_ipv6()) => {
                (Ipv6Addr::UNSPECIFIED, 0).into()
            }
            _ => (Ipv4Addr::UNSPECIFIED, 0).into(),
        };
        let listener = TcpListener::bind(bind)
            .unwrap_or_else(|e| fail(&format!("cannot open the control socket: {e}")));
        // Every process connects at start-up, nearly at once: a queue of
        // the usual 128 overflows above that, and a dropped connect is
        // tried again by its kernel only after a second (measured: 256
        // processes took 1.5 s to say hello where 128 took 0.26 s). Linux
        // takes a second `listen` as the new queue length (up to its
        // `somaxconn`).
        let backlog = plan.control_ip.len().clamp(128, 65_535) as libc::c_int;
        // SAFETY: listen(2) on the listener's own open socket.
        unsafe {
            libc::listen(listener.as_raw_fd(), backlog);
        }
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let my_name = hostname();
        let addresses = control_ip
            .iter()
            .map(|ip: &Option<IpAddr>| match ip {
                Some(ip) => SocketAddr::from((*ip, port)).to_string(),
                None => format!("{my_name}:{port}"),
            })
            .collect();
        Control {
            listener,
            addresses,
        }
    }

    /// The socket's own address, for `++verbose`.
    pub fn local_addr(&self) -> String {
        self.listener
            .local_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string())
    }

    /// The address process `node` reaches the launcher at.
    pub fn address_for(&self, node: usize) -> String {
        self.addresses[node].clone()
    }

    /// Start-up: waits for every process's hello, then tells them all
    /// `go`. Ends the job (and `convrun`) if start-up fails.
    pub fn start_up(&self, job: &mut Job) {
        let nodes = job.procs.len();
        self.listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| fail(&format!("control socket: {e}")));
        let listener_fd = self.listener.as_raw_fd();
        let listener_watched = job.watch_listener(listener_fd);
        let deadline = Instant::now() + Duration::from_secs(job.opts.timeout);
        let mut joined = 0;
        let mut pending = Pendings::new(nodes);
        // A batch of accepts was cut short: more may wait, with no new edge.
        let mut more = true;
        while joined < nodes {
            if let Some(sig) = stop_requested() {
                job.signal_all(libc::SIGTERM);
                job.end_all(Duration::from_secs(2));
                eprintln!("convrun: job ended by signal {sig} during start-up");
                job.code = Some(128 + sig);
                job.finish();
            }
            if let Some(&node) = job.reap().first() {
                let status = job.procs[node].status.expect("reaped");
                let cause = format!(
                    "{} {} before the job started{}",
                    job.who(node),
                    describe(status),
                    job.hint(node)
                );
                eprintln!("convrun: {cause}");
                job.code = Some(match code_of(status) {
                    0 => 1,
                    c => c,
                });
                self.abort_start_up(job, pending, &cause, listener_watched);
            }
            if job.take_listener_ready() || !listener_watched || more {
                more = self.accept_new(job, &mut pending);
            }
            joined += self.sweep(job, &mut pending, None).len();
            if joined == nodes {
                break;
            }
            // A welcome the socket did not take whole.
            job.flush_links();
            if Instant::now() >= deadline {
                timed_out(job);
            }
            // Sleep until a connection, a hello's bytes, room for a
            // welcome, an exit or a signal (or the first deadline: the
            // job's, or a hello's).
            let next = if more {
                Some(Instant::now())
            } else {
                pending.next_deadline()
            };
            job.wait(next.map_or(deadline, |t| t.min(deadline)));
        }
        job.unwatch_listener(listener_fd, listener_watched);
        // The connections still saying hello are refused (and closed,
        // which ends their watch too).
        pending.refuse_all("start-up ended before its hello");
        // Every card is known: the processes may start, and ask.
        job.tell_all(&ToProcess::Go);
    }

    /// Reads the connections whose bytes came, those watched blind, and
    /// those whose time is up (read once more: their hello may have come
    /// whole just now); returns the processes whose hello held (each
    /// joined, or, with `ending`, was told it).
    fn sweep(&self, job: &mut Job, pending: &mut Pendings, ending: Option<&str>) -> Vec<usize> {
        let nodes = job.procs.len();
        pending.say_held();
        let mut turn: Vec<usize> = std::iter::from_fn(|| job.next_hello_ready()).collect();
        turn.extend_from_slice(&pending.blind);
        pending.expired(Instant::now(), &mut turn);
        turn.into_iter()
            .filter_map(|slot| pending.read(slot, job, nodes, ending))
            .collect()
    }

    /// Start-up failed for `cause` (said already): tells every process
    /// that joined, answers the hellos that come within [`ABORT_WINDOW`]
    /// with it, ends by `SIGTERM` the processes that did not connect, and
    /// ends the job.
    fn abort_start_up(
        &self,
        job: &mut Job,
        mut pending: Pendings,
        cause: &str,
        listener_watched: bool,
    ) -> ! {
        job.tell_all(&ToProcess::Abort(cause.to_string()));
        let mut told: Vec<bool> = job.procs.iter().map(|p| p.link.is_some()).collect();
        let until = Instant::now() + ABORT_WINDOW;
        loop {
            job.reap();
            if job.take_listener_ready() || !listener_watched {
                self.accept_new(job, &mut pending);
            }
            for node in self.sweep(job, &mut pending, Some(cause)) {
                told[node] = true;
            }
            job.flush_links();
            let all_told = job
                .procs
                .iter()
                .zip(&told)
                .all(|(p, told)| *told || p.status.is_some());
            if all_told || Instant::now() >= until {
                break;
            }
            job.wait(pending.next_deadline().map_or(until, |t| t.min(until)));
        }
        pending.refuse_all("the job ended during start-up");
        for (p, told) in job.procs.iter().zip(&told) {
            if !told && p.status.is_none() {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe {
                    libc::kill(p.child.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        job.end_all(GRACE);
        job.finish()
    }
}

/// The connections saying hello, in slots (a slot's number is its token:
/// [`crate::wake::Token::Pending`]), and when each one's time is up.
struct Pendings {
    slots: Vec<Option<Pending>>,
    /// Empty slots, reused first.
    free: Vec<usize>,
    /// Slots the kernel would not watch: read at every sweep.
    blind: Vec<usize>,
    /// `(until, slot, serial)` of every connection taken, in the order of
    /// `until` (every connection gets [`HELLO_TIMEOUT`] from its accept);
    /// an entry whose slot holds another connection by now is stale.
    deadlines: VecDeque<(Instant, usize, u64)>,
    /// The serial of the next connection taken.
    serial: u64,
    /// Which connections keep their slots in a flood, by `(slot, serial)`.
    admission: Admission<(usize, u64)>,
    /// The lines about refused connections.
    log: Throttle,
}

impl Pendings {
    /// No connection yet, with room for a job of `nodes` processes.
    fn new(nodes: usize) -> Pendings {
        Pendings {
            slots: Vec::new(),
            free: Vec::new(),
            blind: Vec::new(),
            deadlines: VecDeque::new(),
            serial: 0,
            admission: Admission::for_job(nodes, MAX_PENDING),
            log: Throttle::with_burst(LOG_PERIOD, LOG_BURST),
        }
    }

    /// Logs a refused connection (closed by its owner), throttled.
    fn refused(&mut self, from: SocketAddr, why: &str) {
        match self.log.hit(Instant::now()) {
            Say::Line => eprintln!("convrun: refused a control connection from {from}: {why}"),
            Say::Count(n) => say_refused(n),
            Say::Quiet => {}
        }
    }

    /// Says the refusals held back, once their period has passed.
    fn say_held(&mut self) {
        if let Some(n) = self.log.due(Instant::now()) {
            say_refused(n);
        }
    }

    /// Refuses (and closes) every connection held, for `why`, and says
    /// every refusal held back.
    fn refuse_all(mut self, why: &str) {
        for slot in 0..self.slots.len() {
            if let Some(conn) = self.slots[slot].take() {
                self.refused(conn.from, why);
            }
        }
        if let Some(n) = self.log.rest() {
            say_refused(n);
        }
    }

    /// Holds `conn` (watched by `job` if it can be) in a free slot.
    fn insert(&mut self, mut conn: Pending, job: &mut Job) {
        let slot = self.free.pop().unwrap_or(self.slots.len());
        if slot == self.slots.len() {
            self.slots.push(None);
        }
        conn.serial = self.serial;
        self.serial += 1;
        if let Some((old, serial)) = self.admission.admit((slot, conn.serial), conn.from.ip())
            && self.slots[old].as_ref().is_some_and(|c| c.serial == serial)
        {
            let evicted = self.remove(old, job);
            self.refused(
                evicted.from,
                "it gave way to a newer connection (too many are saying hello at once)",
            );
        }
        self.deadlines.push_back((conn.until, slot, conn.serial));
        // Bytes already come are reported at once.
        if !job.watch_hello(conn.stream.as_raw_fd(), slot) {
            self.blind.push(slot);
        }
        self.slots[slot] = Some(conn);
    }

    /// Takes the connection out of `slot` (closing it ends its watch).
    fn remove(&mut self, slot: usize, job: &mut Job) -> Pending {
        let conn = self.slots[slot].take().expect("a live slot");
        self.admission.leave((slot, conn.serial));
        if let Some(k) = self.blind.iter().position(|&s| s == slot) {
            self.blind.swap_remove(k);
            job.forget_blind_hello();
        }
        self.free.push(slot);
        conn
    }

    /// Adds to `into` the slots of the connections whose time is up at
    /// `now`.
    fn expired(&mut self, now: Instant, into: &mut Vec<usize>) {
        while let Some(&(until, slot, serial)) = self.deadlines.front() {
            if until > now {
                break;
            }
            self.deadlines.pop_front();
            if self.slots[slot]
                .as_ref()
                .is_some_and(|c| c.serial == serial)
            {
                into.push(slot);
            }
        }
    }

    /// When the next connection's time is up, if one is held. Drops the
    /// stale entries it passes (each entry is dropped once: `O(1)` a
    /// connection).
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(until, slot, serial)) = self.deadlines.front() {
            if self.slots[slot]
                .as_ref()
                .is_some_and(|c| c.serial == serial)
            {
                return Some(until);
            }
            self.deadlines.pop_front();
        }
        None
    }

    /// Reads what the connection in `slot` sent, to `WouldBlock` (a stale
    /// slot reads nothing); on a whole hello, makes it its process's link
    /// (or, with `ending`, the job's cause of ending, answers it with that)
    /// and returns the process's number, or refuses it.
    fn read(
        &mut self,
        slot: usize,
        job: &mut Job,
        nodes: usize,
        ending: Option<&str>,
    ) -> Option<usize> {
        let result = loop {
            let conn = self.slots[slot].as_mut()?;
            match read_some(conn, nodes, &job.key) {
                Step::Waiting => return None,
                Step::Read => {}
                Step::Done(result) => break result,
            }
        };
        let conn = self.remove(slot, job);
        match result {
            Ok(hello) if job.procs[hello.node].link.is_none() => {
                let Hello { node, card, nonce } = hello;
                if let Some(cause) = ending {
                    // Small, and the socket's buffer is empty: it goes whole
                    // or the process is gone anyway. Closed with nothing
                    // unread, the connection ends in order, after it.
                    let _ =
                        (&conn.stream).write(ToProcess::Abort(cause.into()).encode().as_bytes());
                    return Some(node);
                }
                let welcome = ToProcess::Welcome(job.key.welcome_proof(&conn.nonce, &nonce, node));
                if let Err(e) = job.adopt_link(node, conn.stream, &welcome.encode()) {
                    self.refused(conn.from, &e.to_string());
                    return None;
                }
                job.procs[node].card = Some(card);
                Some(node)
            }
            Ok(hello) => {
                // Only the process itself can prove its hello.
                eprintln!(
                    "convrun: a second hello from process {} (from {}), ignored",
                    hello.node, conn.from
                );
                None
            }
            Err(why) => {
                self.refused(conn.from, &why);
                None
            }
        }
    }
}

/// The summary line of `n` refused control connections.
fn say_refused(n: u64) {
    eprintln!(
        "convrun: refused {n} more control connection(s) in the last {} s (each is closed)",
        LOG_PERIOD.as_secs()
    );
}

impl Control {
    /// Accepts up to [`ACCEPTS_PER_TURN`] connections waiting on the
    /// control socket into `pending`; true if it took that many (more may
    /// wait).
    fn accept_new(&self, job: &mut Job, pending: &mut Pendings) -> bool {
        for _ in 0..ACCEPTS_PER_TURN {
            match self.listener.accept() {
                Ok((stream, from)) => match challenge(&stream) {
                    Ok(nonce) => pending.insert(
                        Pending {
                            stream,
                            from,
                            nonce,
                            line: Vec::new(),
                            until: Instant::now() + HELLO_TIMEOUT,
                            serial: 0,
                        },
                        job,
                    ),
                    Err(e) => pending.refused(from, &e.to_string()),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A connection reset before it was taken, or a passing
                // shortage of descriptors: the next sweep tries again.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(
                            libc::ECONNABORTED
                                | libc::EMFILE
                                | libc::ENFILE
                                | libc::ENOBUFS
                                | libc::ENOMEM
                        )
                    ) =>
                {
                    return false;
                }
                Err(e) => fail(&format!("control socket: {e}")),
            }
        }
        true
    }
}

/// Makes `stream` non-blocking and writes it a fresh challenge; returns
/// the nonce. A new connection's socket buffer is empty, so the line goes
/// whole or not at all.
fn challenge(stream: &TcpStream) -> std::io::Result<Nonce> {
    stream.set_nonblocking(true)?;
    // The launcher writes `welcome`, then `go` once every process said
    // hello, with nothing read in between, and answers requests one line
    // each: with Nagle's algorithm a line waits for the process's delayed
    // ACK of the one before (40 ms on Linux).
    stream.set_nodelay(true)?;
    let nonce = Nonce::generate()?;
    let line = ToProcess::Challenge(nonce).encode();
    match (&*stream).write(line.as_bytes())? {
        n if n == line.len() => Ok(nonce),
        n => Err(std::io::Error::other(format!(
            "the challenge did not fit its socket ({n} of {} bytes written)",
            line.len()
        ))),
    }
}

/// A hello whose proof held.
struct Hello {
    /// The process's number.
    node: usize,
    card: Card,
    /// The process's nonce, which the welcome proves over.
    nonce: Nonce,
}

/// Where reading a pending hello got.
enum Step {
    /// Nothing new; its clock still runs.
    Waiting,
    /// Some bytes, not the whole line yet.
    Read,
    /// The whole hello, its proof checked, or why the connection is
    /// refused.
    Done(Result<Hello, String>),
}

/// Reads what `conn` sent since the last look, without blocking; a hello
/// of a job of `nodes` processes ends at its `\n`, and must prove `key`.
fn read_some(conn: &mut Pending, nodes: usize, key: &JobKey) -> Step {
    let mut buf = [0u8; 512];
    let room = (ToLauncher::MAX_LEN - conn.line.len()).min(buf.len());
    let read = loop {
        match (&conn.stream).read(&mut buf[..room.max(1)]) {
            // Retried: with an edge-triggered watch, giving up here would
            // lose the edge.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            read => break read,
        }
    };
    match read {
        Ok(0) => Step::Done(Err("it closed before its hello".into())),
        Ok(n) => {
            conn.line.extend_from_slice(&buf[..n]);
            if let Some(end) = conn.line.iter().position(|&b| b == b'\n') {
                conn.line.truncate(end + 1);
                Step::Done(parse_hello(&conn.line, nodes, key, &conn.nonce))
            } else if conn.line.len() >= ToLauncher::MAX_LEN {
                Step::Done(Err(format!(
                    "no hello: a line longer than {} bytes",
                    ToLauncher::MAX_LEN
                )))
            } else {
                Step::Read
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < conn.until => {
            Step::Waiting
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Step::Done(Err(format!(
            "no hello within {} s",
            HELLO_TIMEOUT.as_secs()
        ))),
        Err(e) => Step::Done(Err(format!("no hello: {e}"))),
    }
}

/// Start-up took longer than `++timeout`: says which processes never
/// joined and ends the job.
fn timed_out(job: &mut Job) -> ! {
    let missing: Vec<String> = job
        .procs
        .iter()
        .filter(|p| p.link.is_none())
        .map(|p| match &p.remote {
            Some(host) => {
                format!("{} (on {host}, remote shell pid {})", p.node, p.child.id())
            }
            None => format!("{} (pid {})", p.node, p.child.id()),
        })
        .collect();
    eprintln!(
        "convrun: start-up timed out after {} s (++timeout): process(es) {} never joined the job",
        job.opts.timeout,
        missing.join(", ")
    );
    job.code = Some(1);
    job.tell_all(&ToProcess::Abort("start-up timed out".into()));
    job.signal_all(libc::SIGKILL);
    job.end_all(Duration::ZERO);
    job.finish()
}

/// A connection's hello line, answering the challenge `challenge`: a
/// process's number (below `nodes`), card and nonce, if its proof of `key`
/// holds.
fn parse_hello(
    line: &[u8],
    nodes: usize,
    key: &JobKey,
    challenge: &Nonce,
) -> Result<Hello, String> {
    let text = String::from_utf8_lossy(line);
    let shown = launch_wire::shown(text.trim());
    match std::str::from_utf8(line).map(ToLauncher::parse) {
        Ok(Ok(ToLauncher::Hello {
            node,
            pid,
            card,
            nonce,
            proof,
        })) => {
            if !key.verify_hello(challenge, &nonce, node, pid, card.as_str(), &proof) {
                return Err(format!(
                    "its hello for process {node} does not prove the job key (a stranger's, or one replayed from another connection)"
                ));
            }
            if node >= nodes {
                return Err(format!(
                    "hello from process {node} of a {nodes}-process job"
                ));
            }
            Ok(Hello { node, card, nonce })
        }
        Ok(Err(e)) => Err(format!("bad hello `{shown}`: {e}")),
        _ => Err(format!("bad hello `{shown}`")),
    }
}

/// The running job: answers the processes' requests and watches for exits
/// and signals until every process has ended, reporting as `status` says.
pub fn watch(job: &mut Job) {
    loop {
        if let Some(sig) = stop_requested() {
            eprintln!("convrun: ending the job (signal {sig})");
            job.signal_all(libc::SIGTERM);
            job.end_all(Duration::from_secs(3));
            job.code = Some(128 + sig);
            job.finish();
        }
        let mut ended = job.reap();
        // What a process said before it exited is in our socket buffer
        // by now. Its requests are answered here too.
        job.listen();
        job.flush_links();
        // A process whose host went down or was cut off.
        let next_look = job.look_for_silence();
        for node in std::mem::take(&mut job.silent) {
            job.silent(node);
        }
        // Failures first: a process that died decides the report, not the
        // ones that noticed and ended in the same moment.
        ended.sort_by_key(|&n| job.ending(n) != Ending::Primary);
        for node in ended {
            if job.procs[node].status.is_some() {
                job.note_exit(node);
            }
        }
        if job.running() == 0 {
            break;
        }
        // Sleep until a process exits or says something, a link with lines
        // waiting can take more, or a signal; not at all if links were
        // left with more to read (their turn is over, not their bytes).
        let now = Instant::now();
        job.wait(if job.has_reads() {
            now
        } else {
            (now + Duration::from_secs(1)).min(next_look)
        });
    }
}
