//! The job's processes, and ending them: collecting exits, signalling,
//! telling them a line, giving them a grace period, and the launcher's own
//! exit once they are all gone.
//!
//! # Invariants
//!
//! - `procs[n]` is process `n`; its `status` is set once, when reaped.
//! - Signals and lines go only to processes not yet reaped (a reaped pid
//!   may be reused).
//! - [`Job::finish`] is the launcher's only way out once a process was
//!   started: it joins the output forwarders, removes what dead processes
//!   may have left (their shared-memory segments), and exits with the
//!   job's code ([`Job::final_code`]).
//!
//! # Concurrency
//!
//! The job's thread owns all of it; the output forwarders only hold their
//! pipes.
use std::io::{Read, Write};
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

/// One process of the job.
pub struct Proc {
    pub node: usize,
    pub child: Child,
    pub status: Option<ExitStatus>,
    /// The control connection, once it said hello.
    pub link: Option<TcpStream>,
    /// The process closed its end of `link` (nothing more to read).
    pub link_closed: bool,
    /// Readable once the process has exited (`None`: the kernel has no
    /// pidfds, see [`crate::wake`]).
    pub pidfd: Option<OwnedFd>,
    pub card: Option<Card>,
    /// What the process said on its control connection since the cards.
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

    /// Writes `line` to every running process that said hello.
    pub fn tell_all(&mut self, line: &ToProcess) {
        let line = line.encode();
        for p in &mut self.procs {
            if p.status.is_none() {
                if let Some(link) = &mut p.link {
                    let _ = link.write_all(line.as_bytes());
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

    /// Sleeps until a running process exits, a signal comes or `until`
    /// passes (a signal while the job is already ending changes nothing:
    /// the caller just looks again).
    fn wait_exits(&self, until: Instant) {
        let mut w = Watch::new();
        self.watch_exits(&mut w);
        w.wait(until);
    }

    /// Adds the exits of the running processes to `w`.
    pub fn watch_exits(&self, w: &mut Watch) {
        for p in self.procs.iter().filter(|p| p.status.is_none()) {
            w.add_exit(p.pidfd.as_ref());
        }
    }

    /// Adds the control links that may still say something to `w`.
    pub fn watch_links(&self, w: &mut Watch) {
        for p in &self.procs {
            if let (Some(link), false) = (&p.link, p.link_closed) {
                w.add(link.as_raw_fd());
            }
        }
    }

    /// Reads what the processes said on their control connections (which
    /// are non-blocking by then).
    pub fn listen(&mut self) {
        for p in &mut self.procs {
            let Some(link) = &mut p.link else { continue };
            if p.link_closed {
                continue;
            }
            let mut buf = [0u8; 512];
            loop {
                match link.read(&mut buf) {
                    Ok(0) => {
                        p.link_closed = true;
                        break;
                    }
                    Ok(n) => p.said.feed(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        p.link_closed = true;
                        break;
                    }
                }
            }
        }
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
