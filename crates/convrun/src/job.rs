//! The job's processes, and ending them: collecting exits, signalling,
//! telling them a line, giving them a grace period, and the launcher's own
//! exit once they are all gone.
//!
//! # Invariants
//!
//! - `procs[n]` is process `n`; its `status` is set once, when reaped.
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
//! - [`Job::finish`] is the launcher's only way out once a process was
//!   started: it joins the output forwarders, removes what dead processes
//!   may have left (their shared-memory segments), and exits with the
//!   job's code ([`Job::final_code`]).
//!
//! # Concurrency
//!
//! The job's thread owns all of it; the output forwarders only hold their
//! pipes.
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, ChildStdin, ExitStatus};
use std::time::{Duration, Instant};

use launch_wire::{Card, ToProcess};

use crate::flags::Options;
use crate::status::Said;
use crate::wake::Watch;

/// How long the other processes get to end by themselves after one died.
pub const GRACE: Duration = Duration::from_secs(5);

/// Unsent bytes of a link beyond which the launcher stops reading the
/// process's requests until it takes its answers.
pub const BACKLOG: usize = 64 * 1024;

/// Bytes read from a link at once: at most this many short requests'
/// answers (each at most `ToProcess::MAX_LEN`) are queued past
/// [`BACKLOG`].
const READ_CHUNK: usize = 1024;

/// Reads of a running process's link per sweep at most, so that a process
/// that keeps asking delays the others' answers (and the launcher's look
/// at exits) by no more than this many chunks; the rest is read in the
/// next sweep. (An exited process's link is read to its end at once: what
/// it said decides how it ended.)
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
    /// A write failed: the process can be told nothing more.
    broken: bool,
}

impl Link {
    /// The link of a process over `stream`, which is non-blocking.
    pub fn new(stream: TcpStream) -> Link {
        Link {
            stream,
            unsent: Vec::new(),
            closed: false,
            broken: false,
        }
    }

    /// Queues `line` (a whole line) after what waits, without writing.
    fn queue(&mut self, line: &str) {
        if !self.broken {
            self.unsent.extend_from_slice(line.as_bytes());
        }
    }

    /// Queues `line` and writes what the socket takes now.
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.queue(line);
        self.flush()
    }

    /// Writes what waits, as much as the socket takes without blocking.
    /// An error (the process is gone) breaks the link: what waited is
    /// dropped and nothing more is queued.
    pub fn flush(&mut self) -> std::io::Result<()> {
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
    /// nothing more comes now (or ever: `closed` is then set).
    fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            match (&self.stream).read(buf) {
                Ok(0) => break,
                Ok(n) => return Some(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(_) => break,
            }
        }
        self.closed = true;
        None
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
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
    /// pidfds, see [`crate::wake`]).
    pub pidfd: Option<OwnedFd>,
    pub card: Option<Card>,
    /// What the process said on its control connection since `go`.
    pub said: Said,
    /// The host, for a process started through the remote shell.
    pub remote: Option<String>,
    /// The remote shell's standard input, held open while the job runs.
    pub _stdin: Option<ChildStdin>,
}

pub struct Job {
    pub opts: Options,
    pub procs: Vec<Proc>,
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
}

impl Job {
    /// A job of no process yet.
    pub fn new(opts: Options, key: launch_wire::JobKey, shm_id: u64) -> Job {
        Job {
            procs: Vec::with_capacity(opts.pes / opts.ppn),
            forwarders: Vec::new(),
            failure: None,
            chosen: None,
            secondary: None,
            code: None,
            key,
            shm_id,
            opts,
        }
    }

    pub fn running(&self) -> usize {
        self.procs.iter().filter(|p| p.status.is_none()).count()
    }

    /// Collects exited processes; returns those that just ended.
    pub fn reap(&mut self) -> Vec<usize> {
        let mut ended = Vec::new();
        for p in &mut self.procs {
            if p.status.is_none() {
                if let Ok(Some(status)) = p.child.try_wait() {
                    p.status = Some(status);
                    ended.push(p.node);
                }
            }
        }
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

    /// Tells `line` to every running process that said hello (what the
    /// socket does not take now goes when it can: [`Job::flush_links`]).
    pub fn tell_all(&mut self, line: &ToProcess) {
        let line = line.encode();
        for p in &mut self.procs {
            if p.status.is_none() {
                if let Some(link) = &mut p.link {
                    // A link that fails is a process that is gone: its
                    // exit tells the rest.
                    let _ = link.send(&line);
                }
            }
        }
    }

    /// Writes what waits on the running processes' links, as much as their
    /// sockets take now.
    pub fn flush_links(&mut self) {
        for p in &mut self.procs {
            if let (Some(link), None) = (&mut p.link, p.status) {
                if link.has_unsent() {
                    let _ = link.flush();
                }
            }
        }
    }

    /// Ends every process still running: at once with SIGKILL, or after
    /// `grace` for them to end by themselves.
    pub fn end_all(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        loop {
            self.reap();
            // The line that tells them to end may still be on its way.
            self.flush_links();
            if self.running() == 0 || Instant::now() >= deadline {
                break;
            }
            self.wait_exits(deadline);
        }
        if self.running() > 0 {
            self.signal_all(libc::SIGKILL);
            loop {
                self.reap();
                if self.running() == 0 {
                    break;
                }
                self.wait_exits(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Sleeps until a running process exits, a signal comes, a link with
    /// unsent lines can take more, or `until` passes (a signal while the
    /// job is already ending changes nothing: the caller just looks again).
    fn wait_exits(&self, until: Instant) {
        let mut w = Watch::new();
        self.watch_exits(&mut w);
        self.watch_unsent(&mut w);
        w.wait(until);
    }

    /// Adds the exits of the running processes to `w`.
    pub fn watch_exits(&self, w: &mut Watch) {
        for p in self.procs.iter().filter(|p| p.status.is_none()) {
            w.add_exit(p.pidfd.as_ref());
        }
    }

    /// Adds to `w` the control links that may still say something the
    /// launcher reads now (not a running process's backlogged one: see
    /// [`Job::listen`]).
    pub fn watch_links(&self, w: &mut Watch) {
        for p in &self.procs {
            if let Some(link) = &p.link {
                if !link.closed && (p.status.is_some() || !link.backlogged()) {
                    w.add(link.fd());
                }
            }
        }
    }

    /// Adds to `w` the running processes' links with lines waiting for
    /// their socket (each is written by [`Job::flush_links`] or
    /// [`Job::listen`] in the loop's next sweep).
    pub fn watch_unsent(&self, w: &mut Watch) {
        for p in self.procs.iter().filter(|p| p.status.is_none()) {
            if let Some(link) = p.link.as_ref().filter(|l| l.has_unsent()) {
                w.add_writable(link.fd());
            }
        }
    }

    /// Reads what the processes said on their control connections and
    /// answers their `whois` requests (each a look-up of the card by its
    /// number, queued on the asker's link, which is written once it has
    /// been read). A request naming no process of the job ends it
    /// ([`Job::refuse`]).
    pub fn listen(&mut self) {
        let nodes = self.procs.len();
        let mut buf = [0u8; READ_CHUNK];
        let mut asked = Vec::new();
        let mut refused = None;
        'procs: for i in 0..nodes {
            let mut reads = 0;
            loop {
                let p = &mut self.procs[i];
                let running = p.status.is_none();
                if running && reads == READS_PER_SWEEP {
                    break;
                }
                reads += 1;
                let Some(link) = p.link.as_mut().filter(|l| !l.closed) else {
                    break;
                };
                if running && link.backlogged() {
                    let _ = link.flush();
                    if link.backlogged() {
                        // Read on once the process has taken its answers.
                        break;
                    }
                }
                let Some(n) = link.read(&mut buf) else { break };
                p.said.feed(&buf[..n]);
                p.said.take_asked(&mut asked);
                if !running {
                    // Gone: what it said counts, its questions need no
                    // answer.
                    continue;
                }
                for &peer in &asked {
                    // Every process said hello (and gave its card) before
                    // `go`, the first thing a process waits for.
                    let Some(card) = self.procs.get(peer).and_then(|q| q.card.clone()) else {
                        refused = Some((i, peer));
                        break 'procs;
                    };
                    if let Some(link) = &mut self.procs[i].link {
                        link.queue(&ToProcess::Card { node: peer, card }.encode());
                    }
                }
            }
            if let Some(link) = &mut self.procs[i].link {
                if link.has_unsent() {
                    let _ = link.flush();
                }
            }
        }
        if let Some((asker, peer)) = refused {
            self.refuse(asker, peer);
        }
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
