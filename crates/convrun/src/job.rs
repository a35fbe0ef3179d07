//! The job's processes, and ending them: collecting exits, signalling,
//! telling them a line, giving them a grace period, and the launcher's own
//! exit once they are all gone; and the job's events ([`JobEvents`]): what
//! its waits learned and its loops have not handled yet.
//!
//! # Invariants
//!
//! - `procs[n]` is process `n`; its `status` is set once, when reaped, and
//!   `running` counts the processes not reaped.
//! - Signals and lines go only to processes not yet reaped (a reaped pid
//!   may be reused).
//! - A line to a process is never lost, cut or mixed with another: every
//!   line goes through its [`Link`]'s queue of unsent bytes, which the
//!   socket takes from the front as it can (the non-blocking link takes
//!   part of a line when its buffer is nearly full; the rest goes when it is
//!   writable again, before any later line). Only a link that failed drops
//!   what it holds (the process is gone).
//! - What the launcher holds per process does not grow with the job: one
//!   card, and at most [`BACKLOG`] bytes of unsent lines plus the answers
//!   to one read's requests. A process whose answers pile up (it asks
//!   without reading) is not read until it has taken them; answering a
//!   `whois` is one look-up by number.
//! - Work per wake-up is that of the events it brought, never a look at
//!   every process (see [`crate::wake`]): only processes whose pidfd fired
//!   are reaped, only links listed as readable are read and only those
//!   listed as writable with lines waiting are written. Each source is
//!   registered once, edge-triggered, and is in one of these states:
//!   - a link's `read_ready` is set from its read edge until a read finds
//!     nothing (`WouldBlock`) or its end; while set, the link is in
//!     `JobEvents::reads`, or *parked* (its process is running and
//!     [`BACKLOG`] bytes wait for it), and a parked link is listed again
//!     when a write takes it under the bound. A link stopped by
//!     [`READS_PER_SWEEP`] stays listed, so it is read on at the next
//!     wake-up without a new edge. A reaped process's link is listed at
//!     once and read to its end: what it said decides how it ended.
//!   - write interest is registered exactly while lines wait for the
//!     link (`Link::write_watched`); its edge lists the link in
//!     `JobEvents::writes`, which [`Job::flush_links`] empties.
//!   - a pidfd's edge lists its process in `JobEvents::exits`, which
//!     [`Job::reap`] empties; a reaped process's pidfd is closed.
//! - Fallbacks, each `O(its sources)` per wake-up and making the waits
//!   blind ([`crate::wake::BLIND_NAP`]): processes without a pidfd (Linux
//!   before 5.3), or whose pidfd fired before they could be reaped, are
//!   tried at every reap (`JobEvents::blind_exits`); links the kernel
//!   would not watch (`epoll_ctl` failed: out of watches) are read and
//!   written at every sweep as if ready (`JobEvents::unwatched_links`).
//! - [`Job::finish`] is the launcher's only way out once a process was
//!   started: it joins the output forwarders, removes what dead processes
//!   may have left (their shared-memory segments), and exits with the
//!   job's code ([`Job::final_code`]).
//!
//! # Concurrency
//!
//! The job's thread owns all of it; the output forwarders only hold their
//! pipes. Each loop (start-up, the running job, the grace period) handles
//! the events it cares about and leaves the others listed: a wait notes
//! every event, whichever loop called it.
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::{Child, ChildStdin, ExitStatus};
use std::time::{Duration, Instant};

use launch_wire::{Card, ToProcess};

use crate::flags::Options;
use crate::status::Said;
use crate::wake::{EDGE, Epoll, READ, ReadyList, Token, WRITE, timeout_until};

/// How long the other processes get to end by themselves after one died.
pub const GRACE: Duration = Duration::from_secs(5);

/// Unsent bytes of a link beyond which the launcher stops reading the
/// process's requests until it takes its answers.
pub const BACKLOG: usize = 64 * 1024;

/// Bytes read from a link at once: at most this many short requests'
/// answers (each at most `ToProcess::MAX_LEN`) are queued past
/// [`BACKLOG`].
const READ_CHUNK: usize = 1024;

/// Reads of a running process's link per wake-up at most, so that a
/// process that keeps asking delays the others' answers (and the
/// launcher's look at exits) by no more than this many chunks; the rest is
/// read at the next wake-up (the link stays listed as ready). (An exited
/// process's link is read to its end at once: what it said decides how it
/// ended.)
const READS_PER_SWEEP: usize = 16;

/// A process's control connection, once its hello was taken: non-blocking,
/// read for what the process says and written through a queue (see the
/// module comment).
pub struct Link {
    stream: TcpStream,
    /// Bytes of whole lines the socket has not taken yet, oldest first.
    unsent: Vec<u8>,
    /// The process closed its end, or reading failed: nothing more to read.
    pub closed: bool,
    /// Reading failed because the process's host became unreachable
    /// (`converse_net::liveness::is_silence`).
    pub silent: bool,
    /// Whether the process looked silent at the last look
    /// ([`Job::look_for_silence`]).
    suspect: converse_net::liveness::Suspicion,
    /// A write failed: the process can be told nothing more.
    broken: bool,
    /// Its last read edge has not been consumed (no read found it empty
    /// since).
    read_ready: bool,
    /// Registered for write edges (exactly while lines wait).
    write_watched: bool,
    /// Registered at all; if not, every sweep reads and writes it blind.
    watched: bool,
}

impl Link {
    /// The link of a process over `stream`, which is non-blocking; not
    /// watched yet.
    fn new(stream: TcpStream) -> Link {
        Link {
            stream,
            unsent: Vec::new(),
            closed: false,
            silent: false,
            suspect: converse_net::liveness::Suspicion::default(),
            broken: false,
            read_ready: false,
            write_watched: false,
            watched: false,
        }
    }

    /// Queues `line` (a whole line) after what waits, without writing.
    fn queue(&mut self, line: &str) {
        if !self.broken {
            self.unsent.extend_from_slice(line.as_bytes());
        }
    }

    /// Queues `line` and writes what the socket takes now.
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.queue(line);
        self.flush()
    }

    /// Writes what waits, as much as the socket takes without blocking
    /// (to `WouldBlock`, as an edge-triggered watch needs). An error (the
    /// process is gone) breaks the link: what waited is dropped and
    /// nothing more is queued.
    fn flush(&mut self) -> std::io::Result<()> {
        while !self.unsent.is_empty() && !self.broken {
            match (&self.stream).write(&self.unsent) {
                Ok(0) => self.break_off(),
                Ok(n) => {
                    self.unsent.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    self.break_off();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn break_off(&mut self) {
        self.broken = true;
        self.unsent = Vec::new();
    }

    /// Whether lines wait for the socket to take them.
    pub fn has_unsent(&self) -> bool {
        !self.unsent.is_empty()
    }

    /// Whether so much waits unsent that the process's requests are left
    /// unread for now.
    fn backlogged(&self) -> bool {
        self.unsent.len() >= BACKLOG
    }

    /// Reads what came, without blocking: `Some(n)` bytes, or `None` if
    /// nothing more comes now (or ever: `closed` is then set); either way
    /// the read edge is consumed.
    fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            match (&self.stream).read(buf) {
                Ok(0) => break,
                Ok(n) => return Some(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    return None;
                }
                Err(e) => {
                    self.silent = converse_net::liveness::is_silence(&e);
                    break;
                }
            }
        }
        self.closed = true;
        self.read_ready = false;
        None
    }

    fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// What the link's registration asks for: reads always (an edge-
    /// triggered source that is not read costs nothing), writes while
    /// lines wait.
    fn interest(&self) -> u32 {
        READ | EDGE | if self.has_unsent() { WRITE } else { 0 }
    }
}

/// One process of the job.
pub struct Proc {
    pub node: usize,
    pub child: Child,
    pub status: Option<ExitStatus>,
    /// The control connection, once it said hello.
    pub link: Option<Link>,
    /// Readable once the process has exited (`None`: the kernel has no
    /// pidfds, see [`crate::wake`]); closed once it is reaped.
    pub pidfd: Option<OwnedFd>,
    pub card: Option<Card>,
    /// What the process said on its control connection since `go`.
    pub said: Said,
    /// The host, for a process started through the remote shell.
    pub remote: Option<String>,
    /// The remote shell's standard input, held open while the job runs.
    pub _stdin: Option<ChildStdin>,
}

/// What the job's waits learned that its loops have not handled yet, and
/// the watch itself (see the module comment).
pub struct JobEvents {
    epoll: Epoll,
    /// Processes whose pidfd fired, not reaped yet.
    exits: ReadyList,
    /// Links with something to read, whose process may be read now.
    reads: ReadyList,
    /// Links that can take more bytes, with lines waiting.
    writes: ReadyList,
    /// Start-up: connections saying hello with bytes come, by slot.
    pending: ReadyList,
    /// Start-up: connections may wait on the control socket.
    listener: bool,
    /// Running processes whose exits are tried at every reap: no pidfd, or
    /// one that fired before the process could be reaped.
    blind_exits: Vec<usize>,
    /// Processes whose links could not be registered.
    unwatched_links: Vec<usize>,
    /// Some source is looked at blind (see the module comment): the waits
    /// are capped. Counts the start-up's blind sources (an unwatched
    /// listener or hello), besides the lists above.
    blind_sources: usize,
    /// No signal pipe is watched.
    deaf: bool,
}

impl JobEvents {
    /// A watch of the signal pipe; `Err` if the kernel gives no epoll.
    fn new() -> std::io::Result<JobEvents> {
        let epoll = Epoll::new()?;
        let deaf = match crate::signals::wake_fd() {
            Some(fd) => epoll.add(fd, Token::Signal, READ | EDGE).is_err(),
            None => true,
        };
        Ok(JobEvents {
            epoll,
            exits: ReadyList::default(),
            reads: ReadyList::default(),
            writes: ReadyList::default(),
            pending: ReadyList::default(),
            listener: false,
            blind_exits: Vec::new(),
            unwatched_links: Vec::new(),
            blind_sources: 0,
            deaf,
        })
    }

    fn blind(&self) -> bool {
        self.deaf
            || self.blind_sources > 0
            || !self.blind_exits.is_empty()
            || !self.unwatched_links.is_empty()
    }
}

pub struct Job {
    pub opts: Options,
    pub procs: Vec<Proc>,
    /// Processes not reaped yet.
    running: usize,
    events: JobEvents,
    pub forwarders: Vec<std::thread::JoinHandle<()>>,
    /// The exit code of the first process that failed on its own (died,
    /// aborted), if one did.
    pub failure: Option<i32>,
    /// The first non-zero exit code of a process that ended on purpose.
    pub chosen: Option<i32>,
    /// The first non-zero exit code of a process that ended because another
    /// failed.
    pub secondary: Option<i32>,
    /// A code that overrides all (a signal to convrun, a failed start-up).
    pub code: Option<i32>,
    /// The job key, which every connection of the job proves it holds.
    pub key: launch_wire::JobKey,
    /// The id naming the job's shared-memory segments (apart from the
    /// key: segment names are listable by anyone).
    pub shm_id: u64,
    /// Running processes silent past the peer timeout (their host down or
    /// cut off), not yet reported ([`Job::silent`]).
    pub silent: Vec<usize>,
    /// When the links are next looked at for silence
    /// ([`Job::look_for_silence`]).
    pub next_look: Instant,
}

/// How a link's turn at being read ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Turn {
    /// Nothing more to read now (or ever): off the list until its next
    /// edge.
    Drained,
    /// [`READS_PER_SWEEP`] reads done and maybe more to read: listed
    /// again, at the back.
    Limited,
    /// Its process must take its answers first: parked (see the module
    /// comment).
    Parked,
    /// It asked for the card of this number, no process of the job.
    Refused(usize),
    /// Its link ended because its host became unreachable
    /// (`converse_net::liveness::is_silence`).
    Silent,
}

impl Job {
    /// A job of no process yet; `Err` if its events cannot be watched (no
    /// epoll), before anything was started.
    pub fn new(opts: Options, key: launch_wire::JobKey, shm_id: u64) -> std::io::Result<Job> {
        Ok(Job {
            procs: Vec::with_capacity(opts.pes / opts.ppn),
            running: 0,
            events: JobEvents::new()?,
            forwarders: Vec::new(),
            failure: None,
            chosen: None,
            secondary: None,
            code: None,
            key,
            shm_id,
            silent: Vec::new(),
            next_look: Instant::now(),
            opts,
        })
    }

    /// Adds the process just started as the next one (`proc.node` is its
    /// number), watching its exit.
    pub fn add_proc(&mut self, proc: Proc) {
        let node = self.procs.len();
        debug_assert_eq!(proc.node, node);
        // A process that has exited already has its edge queued at once.
        let watched = proc.pidfd.as_ref().is_some_and(|fd| {
            self.events
                .epoll
                .add(fd.as_raw_fd(), Token::Exit(node), READ | EDGE)
                .is_ok()
        });
        if !watched {
            self.events.blind_exits.push(node);
        }
        self.procs.push(proc);
        self.running += 1;
    }

    pub fn running(&self) -> usize {
        self.running
    }

    /// Sleeps until an event comes or `until` passes (capped while some
    /// source is watched blind), and notes what came (see the module
    /// comment); the signal pipe is drained here. A loop with work listed
    /// already passes `until` = now.
    pub fn wait(&mut self, until: Instant) {
        let timeout = timeout_until(until, self.events.blind());
        let events = match self.events.epoll.wait(Some(timeout)) {
            Ok(events) => events,
            Err(_) => {
                // Not expected with a valid epoll: no busy loop, the nap
                // the loops took before.
                std::thread::sleep(timeout.min(crate::wake::BLIND_NAP));
                return;
            }
        };
        for event in events {
            match event.token {
                Token::Signal => crate::signals::drain_wake(),
                Token::Listener => self.events.listener = true,
                Token::Pending(slot) => self.events.pending.push(slot),
                Token::Exit(node) => self.events.exits.push(node),
                Token::Link(node) => self.note_link_event(node, event.readable, event.writable),
                Token::Stream(_) => {}
            }
        }
    }

    /// Lists link `node` as its event says (a stale event lists nothing
    /// that cannot be handled: see [`crate::wake`]).
    fn note_link_event(&mut self, node: usize, readable: bool, writable: bool) {
        let Some(p) = self.procs.get_mut(node) else {
            return;
        };
        let running = p.status.is_none();
        let Some(link) = &mut p.link else { return };
        if readable && !link.closed {
            link.read_ready = true;
            if !running || !link.backlogged() {
                self.events.reads.push(node);
            }
        }
        if writable && running && link.has_unsent() {
            self.events.writes.push(node);
        }
    }

    /// Whether links are listed as ready to read ([`Job::listen`] has work
    /// without waiting).
    pub fn has_reads(&self) -> bool {
        !self.events.reads.is_empty()
    }

    /// Makes `stream` (a connection that proved its hello, non-blocking,
    /// watched or not as a pending hello) process `node`'s link, watched
    /// under the link's token, and sends it `line` first.
    pub fn adopt_link(
        &mut self,
        node: usize,
        stream: TcpStream,
        line: &str,
    ) -> std::io::Result<()> {
        // A process whose host goes down or is cut off ends the job once
        // silent this long (`converse_net::liveness`; [`Job::silent`]).
        converse_net::liveness::watch(&stream, self.opts.peer_timeout)?;
        let mut link = Link::new(stream);
        link.send(line)?;
        let (fd, interest) = (link.fd(), link.interest());
        let epoll = &self.events.epoll;
        // Re-registered, so that its events name the process; any bytes
        // already come are reported at once.
        link.watched = epoll.modify(fd, Token::Link(node), interest).is_ok()
            || epoll.add(fd, Token::Link(node), interest).is_ok();
        link.write_watched = link.watched && link.has_unsent();
        if !link.watched {
            self.events.unwatched_links.push(node);
        }
        self.procs[node].link = Some(link);
        Ok(())
    }

    /// Watches the control socket (start-up); false if it cannot be.
    pub fn watch_listener(&mut self, fd: RawFd) -> bool {
        // Connections may be waiting already; the first sweep accepts.
        self.events.listener = true;
        let ok = self
            .events
            .epoll
            .add(fd, Token::Listener, READ | EDGE)
            .is_ok();
        if !ok {
            self.events.blind_sources += 1;
        }
        ok
    }

    /// Stops watching the control socket (start-up is over; `watched`:
    /// what [`Job::watch_listener`] said).
    pub fn unwatch_listener(&mut self, fd: RawFd, watched: bool) {
        if watched {
            let _ = self.events.epoll.remove(fd);
        } else {
            self.events.blind_sources -= 1;
        }
        self.events.listener = false;
    }

    /// Whether connections may wait on the control socket; takes the news.
    pub fn take_listener_ready(&mut self) -> bool {
        std::mem::take(&mut self.events.listener)
    }

    /// Watches a connection saying hello, in start-up's slot `slot`; false
    /// if it cannot be (the start-up then reads it at every sweep: it is
    /// blind until [`Job::forget_blind_hello`]).
    pub fn watch_hello(&mut self, fd: RawFd, slot: usize) -> bool {
        let ok = self
            .events
            .epoll
            .add(fd, Token::Pending(slot), READ | EDGE)
            .is_ok();
        if !ok {
            self.events.blind_sources += 1;
        }
        ok
    }

    /// A connection [`Job::watch_hello`] could not watch is gone.
    pub fn forget_blind_hello(&mut self) {
        self.events.blind_sources -= 1;
    }

    /// The next slot of a connection saying hello that has bytes to read.
    pub fn next_hello_ready(&mut self) -> Option<usize> {
        self.events.pending.pop()
    }

    /// Tries to reap process `node` (not reaped yet); true if it just
    /// ended. Its pidfd is closed, and its link listed to be read to its
    /// end whether or not its own edge came yet.
    fn try_reap(&mut self, node: usize) -> bool {
        let p = &mut self.procs[node];
        if p.status.is_some() {
            return false;
        }
        let Ok(Some(status)) = p.child.try_wait() else {
            return false;
        };
        p.status = Some(status);
        p.pidfd = None;
        self.running -= 1;
        if let Some(link) = &mut p.link
            && !link.closed
        {
            link.read_ready = true;
            self.events.reads.push(node);
        }
        true
    }

    /// Collects the processes whose exits were told of (and, blind, those
    /// without a pidfd); returns those that just ended, in order of their
    /// numbers.
    pub fn reap(&mut self) -> Vec<usize> {
        let mut ended = Vec::new();
        while let Some(node) = self.events.exits.pop() {
            if self.procs[node].status.is_some() {
                continue;
            }
            if self.try_reap(node) {
                ended.push(node);
            } else {
                // Its pidfd fired but it cannot be reaped yet: tried again
                // at every reap, blind (not expected: a pidfd is readable
                // once its process is a zombie).
                self.events.blind_exits.push(node);
            }
        }
        let mut k = 0;
        while k < self.events.blind_exits.len() {
            let node = self.events.blind_exits[k];
            if self.procs[node].status.is_some() {
                self.events.blind_exits.swap_remove(k);
            } else if self.try_reap(node) {
                ended.push(node);
                self.events.blind_exits.swap_remove(k);
            } else {
                k += 1;
            }
        }
        ended.sort_unstable();
        ended
    }

    pub fn signal_all(&mut self, sig: i32) {
        for p in &self.procs {
            if p.status.is_none() {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe {
                    libc::kill(p.child.id() as libc::pid_t, sig);
                }
            }
        }
    }

    /// Registers link `node` for write edges exactly while lines wait for
    /// it (see the module comment); a link the kernel will not watch any
    /// more is written blind from then on.
    fn watch_writes(&mut self, node: usize) {
        let Some(link) = &mut self.procs[node].link else {
            return;
        };
        if !link.watched || link.has_unsent() == link.write_watched {
            return;
        }
        match self
            .events
            .epoll
            .modify(link.fd(), Token::Link(node), link.interest())
        {
            // Adding interest while the socket has room queues an edge at
            // once: none is missed.
            Ok(()) => link.write_watched = !link.write_watched,
            Err(_) => {
                link.watched = false;
                self.events.unwatched_links.push(node);
            }
        }
    }

    /// Tells `line` to every running process that said hello (what the
    /// socket does not take now goes when it can: [`Job::flush_links`]).
    pub fn tell_all(&mut self, line: &ToProcess) {
        let line = line.encode();
        for node in 0..self.procs.len() {
            let p = &mut self.procs[node];
            if p.status.is_none()
                && let Some(link) = &mut p.link
            {
                // A link that fails is a process that is gone: its
                // exit tells the rest.
                let _ = link.send(&line);
                self.watch_writes(node);
            }
        }
    }

    /// Writes what waits on the running processes' links that can take
    /// more (as much as their sockets take now), and lists again for
    /// reading the parked links this brought under [`BACKLOG`].
    pub fn flush_links(&mut self) {
        for k in 0..self.events.unwatched_links.len() {
            let node = self.events.unwatched_links[k];
            if self.procs[node].link.as_ref().is_some_and(Link::has_unsent) {
                self.events.writes.push(node);
            }
        }
        while let Some(node) = self.events.writes.pop() {
            let p = &mut self.procs[node];
            let running = p.status.is_none();
            let Some(link) = &mut p.link else { continue };
            if !running {
                continue;
            }
            if link.has_unsent() {
                let _ = link.flush();
            }
            if link.read_ready && !link.closed && !link.backlogged() {
                self.events.reads.push(node);
            }
            self.watch_writes(node);
        }
    }

    /// Every sixth of the peer timeout, asks the kernel whether each running
    /// process's link still hears from it (`converse_net::liveness`); one
    /// silent at two looks in a row goes on [`Job::silent`]. Returns when
    /// to look next.
    pub fn look_for_silence(&mut self) -> Instant {
        let now = Instant::now();
        if now < self.next_look {
            return self.next_look;
        }
        let timeout = self.opts.peer_timeout;
        for p in &self.procs {
            let Some(link) = p.link.as_ref().filter(|l| !l.closed) else {
                continue;
            };
            if p.status.is_some() {
                continue;
            }
            let silent =
                converse_net::liveness::looks_silent(&link.stream, timeout).unwrap_or(false);
            if link.suspect.confirms(silent) {
                self.silent.push(p.node);
            }
        }
        self.next_look = now + converse_net::liveness::check_period(timeout);
        self.next_look
    }

    /// Whether nothing has come from process `node` for the peer timeout
    /// while its link waits for an answer (`converse_net::liveness`).
    pub fn link_silent(&self, node: usize) -> bool {
        self.procs[node].link.as_ref().is_some_and(|l| {
            converse_net::liveness::looks_silent(&l.stream, self.opts.peer_timeout).unwrap_or(false)
        })
    }

    /// Ends every process still running: at once with SIGKILL, or after
    /// `grace` for them to end by themselves.
    pub fn end_all(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        loop {
            self.reap();
            // The line that tells them to end may still be on its way.
            self.flush_links();
            if self.running == 0 || Instant::now() >= deadline {
                break;
            }
            // Until a process exits, a signal comes (a signal while the
            // job is already ending changes nothing: this just looks
            // again), a link with lines waiting can take more, or the
            // deadline; what the processes say is left listed.
            self.wait(deadline);
        }
        if self.running > 0 {
            self.signal_all(libc::SIGKILL);
            loop {
                self.reap();
                if self.running == 0 {
                    break;
                }
                self.wait(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Reads what the processes said on the links listed as ready and
    /// answers their `whois` requests (each a look-up of the card by its
    /// number, queued on the asker's link, which is written once it has
    /// been read). Each link listed when it starts gets one turn, of at
    /// most [`READS_PER_SWEEP`] reads for a running process. A request
    /// naming no process of the job ends it ([`Job::refuse`]).
    pub fn listen(&mut self) {
        for k in 0..self.events.unwatched_links.len() {
            let node = self.events.unwatched_links[k];
            let p = &mut self.procs[node];
            if let Some(link) = p.link.as_mut().filter(|l| !l.closed) {
                link.read_ready = true;
                if p.status.is_some() || !link.backlogged() {
                    self.events.reads.push(node);
                }
            }
        }
        let mut buf = [0u8; READ_CHUNK];
        let mut asked = Vec::new();
        for _ in 0..self.events.reads.len() {
            let Some(node) = self.events.reads.pop() else {
                break;
            };
            match self.read_link(node, &mut buf, &mut asked) {
                Turn::Drained | Turn::Parked => {}
                Turn::Silent => self.silent.push(node),
                Turn::Limited => self.events.reads.push(node),
                Turn::Refused(peer) => {
                    self.refuse(node, peer);
                    return;
                }
            }
        }
    }

    /// Process `node`'s turn at being read (see [`Job::listen`]); the
    /// answers it asked for are queued, and written as the socket takes
    /// them.
    fn read_link(&mut self, node: usize, buf: &mut [u8], asked: &mut Vec<usize>) -> Turn {
        let mut reads = 0;
        let turn = 'turn: loop {
            let p = &mut self.procs[node];
            let running = p.status.is_none();
            let Some(link) = p.link.as_mut().filter(|l| !l.closed) else {
                break Turn::Drained;
            };
            if running && reads == READS_PER_SWEEP {
                break Turn::Limited;
            }
            reads += 1;
            if running && link.backlogged() {
                let _ = link.flush();
                if link.backlogged() {
                    // Read on once the process has taken its answers.
                    break Turn::Parked;
                }
            }
            let Some(n) = link.read(buf) else {
                if link.silent && running {
                    break Turn::Silent;
                }
                break Turn::Drained;
            };
            p.said.feed(&buf[..n]);
            p.said.take_asked(asked);
            if !running {
                // Gone: what it said counts, its questions need no answer.
                continue;
            }
            for &peer in asked.iter() {
                // Every process said hello (and gave its card) before
                // `go`, the first thing a process waits for.
                let Some(card) = self.procs.get(peer).and_then(|q| q.card.clone()) else {
                    break 'turn Turn::Refused(peer);
                };
                if let Some(link) = &mut self.procs[node].link {
                    link.queue(&ToProcess::Card { node: peer, card }.encode());
                }
            }
        };
        if let Some(link) = &mut self.procs[node].link
            && link.has_unsent()
        {
            let _ = link.flush();
        }
        self.watch_writes(node);
        turn
    }

    /// Process `asker` asked for the card of `peer`, no process of the job:
    /// its fault. Reports it, tells every process (the asker first of all)
    /// why the job ends, and ends it.
    fn refuse(&mut self, asker: usize, peer: usize) {
        let first = self.failure.is_none();
        if first {
            self.failure = Some(1);
        }
        let who = self.who(asker);
        let why = format!(
            "{who} asked for the business card of process {peer}, but the job's processes are 0 to {}",
            self.procs.len() - 1
        );
        if first {
            eprintln!("convrun: {why}; ending the job");
        }
        self.tell_all(&ToProcess::Abort(why));
        self.end_all(GRACE);
    }

    pub fn final_code(&self) -> i32 {
        self.code
            .or(self.failure)
            .or(self.chosen)
            .or(self.secondary)
            .unwrap_or(0)
    }

    /// Ends the launcher (see the module comment).
    pub fn finish(&mut self) -> ! {
        for f in self.forwarders.drain(..) {
            let _ = f.join();
        }
        // Segments of processes that died before their peers mapped them
        // (the others remove their own names at start-up).
        converse::machine::launch::remove_segments(self.shm_id, self.procs.len());
        let _ = std::io::stdout().flush();
        std::process::exit(self.final_code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;
    use std::process::Command;

    /// A job of `n` processes (`sleep`s, killed when it is dropped) whose
    /// links are connected, every card known; and the processes' ends of
    /// the links.
    struct Fixture {
        job: Job,
        ends: Vec<TcpStream>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            for p in &mut self.job.procs {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }

    fn fixture(n: usize, card_len: usize, small_buffers: bool) -> Fixture {
        fixture_with(n, card_len, small_buffers, true)
    }

    /// [`fixture`], with pidfds or as on a kernel without them.
    fn fixture_with(n: usize, card_len: usize, small_buffers: bool, pidfds: bool) -> Fixture {
        let opts = Options {
            pes: n,
            ppn: 1,
            local: true,
            nodelist: None,
            netmod: None,
            remote_shell: None,
            timeout: 60,
            peer_timeout: converse_net::liveness::DEFAULT_PEER_TIMEOUT,
            verbose: false,
            virtual_hosts: None,
            mpiexec: false,
            no_aslr: false,
            command: vec!["sleep".into()],
        };
        let key = launch_wire::JobKey::from_bytes([7; 32]);
        let mut job = Job::new(opts, key, 0).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut ends = Vec::new();
        for node in 0..n {
            let child = Command::new("sleep").arg("60").spawn().unwrap();
            job.add_proc(Proc {
                node,
                pidfd: crate::wake::pidfd_of(&child).filter(|_| pidfds),
                child,
                status: None,
                link: None,
                card: Some(Card::new(format!("{node}:{}", "c".repeat(card_len))).unwrap()),
                said: Said::default(),
                remote: None,
                _stdin: None,
            });
            let end = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (ours, _) = listener.accept().unwrap();
            if small_buffers {
                for (fd, opt) in [
                    (ours.as_raw_fd(), libc::SO_SNDBUF),
                    (end.as_raw_fd(), libc::SO_RCVBUF),
                ] {
                    let size: libc::c_int = 4096;
                    // SAFETY: setsockopt on our own socket, given a live
                    // int and its size.
                    let r = unsafe {
                        libc::setsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            opt,
                            (&size as *const libc::c_int).cast(),
                            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                        )
                    };
                    assert_eq!(r, 0);
                }
            }
            ours.set_nonblocking(true).unwrap();
            job.adopt_link(node, ours, "welcome\n").unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&end).read_line(&mut line).unwrap();
            assert_eq!(line, "welcome\n");
            ends.push(end);
        }
        Fixture { job, ends }
    }

    /// Waits (a few seconds at most) until `listed` links are listed as
    /// ready to read.
    fn wait_for_reads(job: &mut Job, listed: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        while job.events.reads.len() < listed && Instant::now() < until {
            job.wait(until);
        }
        assert_eq!(job.events.reads.len(), listed);
    }

    /// The answers waiting on `end` now, without blocking.
    fn answers(end: &TcpStream) -> Vec<u8> {
        end.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match (&*end).read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        end.set_nonblocking(false).unwrap();
        got
    }

    fn lines(bytes: &[u8]) -> usize {
        bytes.iter().filter(|&&b| b == b'\n').count()
    }

    /// Blocking read of exactly `n` answer lines from `end`.
    fn read_answers(end: &TcpStream, n: usize) -> Vec<String> {
        end.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = std::io::BufReader::new(end);
        (0..n)
            .map(|_| {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                line
            })
            .collect()
    }

    #[test]
    fn a_link_stopped_by_the_read_limit_is_read_on_without_a_new_edge() {
        let mut f = fixture(3, 4, false);
        // Process 0 floods (3,000 requests: more than READS_PER_SWEEP
        // chunks), process 2 asks once, process 1 says nothing.
        let flood = "whois 1\n".repeat(3000);
        f.ends[0].write_all(flood.as_bytes()).unwrap();
        f.ends[2].write_all(b"whois 0\n").unwrap();
        wait_for_reads(&mut f.job, 2);

        f.job.listen();
        // Process 2 got its answer in the same wake-up, despite the flood.
        assert_eq!(read_answers(&f.ends[2], 1), ["card 0 0:cccc\n"]);
        // Process 0 got READS_PER_SWEEP chunks' worth (8-byte requests),
        // and is still listed, with no new edge.
        let first = READS_PER_SWEEP * READ_CHUNK / 8;
        let got = read_answers(&f.ends[0], first);
        assert!(got.iter().all(|l| l == "card 1 1:cccc\n"));
        assert!(f.job.has_reads(), "the flooding link is still listed");
        assert_eq!(f.job.events.reads.len(), 1);
        // Nothing was left to write: no write interest registered.
        assert!(!f.job.procs[0].link.as_ref().unwrap().write_watched);

        // The next wake-up's turn reads the rest (no wait: it was listed).
        f.job.listen();
        assert_eq!(read_answers(&f.ends[0], 3000 - first).len(), 3000 - first);
        assert!(!f.job.has_reads(), "drained to WouldBlock: off the list");
        assert!(
            answers(&f.ends[1]).is_empty(),
            "the silent process got nothing"
        );
    }

    #[test]
    fn a_backlogged_link_is_parked_and_listed_again_when_its_process_reads() {
        // Long cards, small socket buffers: 256 requests (two chunks) make
        // over BACKLOG bytes of answers that the sockets cannot hold.
        let mut f = fixture(2, 900, true);
        let asked = 256;
        f.ends[0]
            .write_all("whois 1\n".repeat(asked).as_bytes())
            .unwrap();
        wait_for_reads(&mut f.job, 1);
        f.job.listen();
        let link = f.job.procs[0].link.as_ref().unwrap();
        assert!(link.backlogged(), "{} bytes unsent", link.unsent.len());
        assert!(link.read_ready && link.write_watched);
        // Parked: not listed, so the running job's wait would sleep.
        assert!(!f.job.has_reads());
        assert!(f.job.events.writes.is_empty());

        // The process reads its answers as they come; each write edge
        // flushes the link, and once it is under BACKLOG it is read on.
        let mut got = 0;
        let until = Instant::now() + Duration::from_secs(20);
        while got < asked && Instant::now() < until {
            got += lines(&answers(&f.ends[0]));
            f.job.wait(Instant::now() + Duration::from_millis(50));
            f.job.flush_links();
            f.job.listen();
        }
        assert_eq!(got, asked, "every request answered");
        let link = f.job.procs[0].link.as_ref().unwrap();
        assert!(!link.has_unsent() && !link.write_watched);
        assert!(!f.job.has_reads());
    }

    #[test]
    fn only_processes_whose_pidfd_fired_are_reaped_and_their_links_read() {
        let mut f = fixture(3, 4, false);
        if !f.job.events.blind_exits.is_empty() {
            eprintln!("skipped: no pidfds here");
            return;
        }
        assert_eq!(f.job.running(), 3);
        // Process 1 says it ends, and exits.
        f.ends[1].write_all(b"end\n").unwrap();
        f.job.procs[1].child.kill().unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let mut ended = Vec::new();
        while ended.is_empty() && Instant::now() < until {
            f.job.wait(until);
            ended = f.job.reap();
        }
        assert_eq!(ended, [1]);
        assert_eq!(f.job.running(), 2);
        assert!(f.job.procs[1].pidfd.is_none(), "closed once reaped");
        // Its link is listed to be read to its end, and what it said is
        // known after one turn.
        assert!(f.job.has_reads());
        f.job.listen();
        assert_eq!(f.job.ending(1), crate::status::Ending::OnPurpose);
        assert!(f.job.reap().is_empty());
    }

    #[test]
    fn without_pidfds_exits_are_found_by_a_blind_scan() {
        let mut f = fixture_with(3, 4, false, false);
        assert_eq!(f.job.events.blind_exits.len(), 3);
        assert!(f.job.events.blind());
        f.job.procs[2].child.kill().unwrap();
        let t = Instant::now();
        let until = t + Duration::from_secs(10);
        let mut ended = Vec::new();
        while ended.is_empty() && Instant::now() < until {
            // Capped at the nap: no event tells of the exit.
            f.job.wait(until);
            assert!(t.elapsed() < Duration::from_secs(5));
            ended = f.job.reap();
        }
        assert_eq!(ended, [2]);
        assert_eq!(f.job.running(), 2);
        assert_eq!(
            f.job.events.blind_exits.len(),
            2,
            "reaped: no longer scanned"
        );
    }
}
