//! The control socket: the processes' hellos and the cards during
//! start-up, then watching the running job for exits and signals.
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
//!   `welcome`, its own proof. Hellos are read without blocking, each connection with its
//!   own bound (`ToLauncher::MAX_LEN` bytes, [`HELLO_TIMEOUT`]) while the
//!   others are accepted and read, so connections that stay silent delay
//!   no process's hello; at most [`MAX_PENDING`] wait at once.
//! - The cards go out once, when every process has said hello, in process
//!   order.
//! - Start-up ends the job if a process exits, a signal arrives, or
//!   `++timeout` passes first, naming the processes that never joined.
//!
//! # Concurrency
//!
//! All of it runs on the job's thread: the listener and then the links
//! are non-blocking, and between sweeps the loops sleep in `poll(2)` until
//! a connection, a line, an exit or a signal comes ([`crate::wake`]).
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use launch_wire::{Card, JobKey, Nonce, ToLauncher, ToProcess};

use crate::fail;
use crate::hosts::{Plan, hostname};
use crate::job::{GRACE, Job};
use crate::signals::stop_requested;
use crate::status::{Ending, code_of, describe};
use crate::wake::Watch;

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections saying hello at once beyond which newcomers are refused.
const MAX_PENDING: usize = 1024;

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

    /// Start-up: waits for every process's hello, then sends them all the
    /// cards. Ends the job (and `convrun`) if start-up fails.
    pub fn start_up(&self, job: &mut Job) {
        let nodes = job.procs.len();
        self.listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| fail(&format!("control socket: {e}")));
        let deadline = Instant::now() + Duration::from_secs(job.opts.timeout);
        let mut joined = 0;
        let mut pending: Vec<Pending> = Vec::new();
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
                eprintln!(
                    "convrun: {} {} before the job started{}",
                    job.who(node),
                    describe(status),
                    job.hint(node)
                );
                job.code = Some(match code_of(status) {
                    0 => 1,
                    c => c,
                });
                job.tell_all(&ToProcess::Abort(format!(
                    "process {node} failed during start-up"
                )));
                job.end_all(GRACE);
                job.finish();
            }
            let mut progressed = self.accept_new(&mut pending);
            let mut i = 0;
            while i < pending.len() {
                match read_some(&mut pending[i], nodes, &job.key) {
                    Step::Waiting => i += 1,
                    Step::Read => {
                        progressed = true;
                        i += 1;
                    }
                    Step::Done(result) => {
                        progressed = true;
                        let conn = pending.swap_remove(i);
                        match result {
                            Ok(hello) if job.procs[hello.node].link.is_none() => {
                                let Hello { node, card, nonce } = hello;
                                // Blocking from now on: the welcome and
                                // cards lines are written whole.
                                let welcome = ToProcess::Welcome(job.key.welcome_proof(
                                    &conn.nonce,
                                    &nonce,
                                    node,
                                ));
                                if let Err(e) = conn.stream.set_nonblocking(false).and_then(|()| {
                                    (&conn.stream).write_all(welcome.encode().as_bytes())
                                }) {
                                    eprintln!(
                                        "convrun: refused a control connection from {}: {e}",
                                        conn.from
                                    );
                                    continue;
                                }
                                job.procs[node].link = Some(conn.stream);
                                job.procs[node].card = Some(card);
                                joined += 1;
                            }
                            Ok(hello) => eprintln!(
                                "convrun: a second hello from process {} (from {}), ignored",
                                hello.node, conn.from
                            ),
                            Err(why) => eprintln!(
                                "convrun: refused a control connection from {}: {why}",
                                conn.from
                            ),
                        }
                    }
                }
            }
            if joined == nodes {
                break;
            }
            if Instant::now() >= deadline {
                timed_out(job);
            }
            if !progressed {
                // Sleep until a connection, a hello's bytes, an exit or a
                // signal (or the first deadline: the job's, or a hello's).
                let mut w = Watch::new();
                w.add(self.listener.as_raw_fd());
                for conn in &pending {
                    w.add(conn.stream.as_raw_fd());
                }
                job.watch_exits(&mut w);
                let until = pending.iter().map(|c| c.until).fold(deadline, Instant::min);
                w.wait(until);
            }
        }
        let cards: Vec<Card> = job
            .procs
            .iter()
            .map(|p| p.card.clone().expect("joined"))
            .collect();
        job.tell_all(&ToProcess::Cards(cards));
        for p in &job.procs {
            if let Some(link) = &p.link {
                let _ = link.set_nonblocking(true);
            }
        }
    }
}

impl Control {
    /// Accepts every connection waiting on the control socket into
    /// `pending`; true if there was any.
    fn accept_new(&self, pending: &mut Vec<Pending>) -> bool {
        let mut any = false;
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    any = true;
                    if pending.len() >= MAX_PENDING {
                        eprintln!(
                            "convrun: refused a control connection from {from}: too many connections are saying hello at once"
                        );
                    } else {
                        match challenge(&stream) {
                            Ok(nonce) => pending.push(Pending {
                                stream,
                                from,
                                nonce,
                                line: Vec::new(),
                                until: Instant::now() + HELLO_TIMEOUT,
                            }),
                            Err(e) => {
                                eprintln!("convrun: refused a control connection from {from}: {e}")
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return any,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => fail(&format!("control socket: {e}")),
            }
        }
    }
}

/// Makes `stream` non-blocking and writes it a fresh challenge; returns
/// the nonce. A new connection's socket buffer is empty, so the line goes
/// whole or not at all.
fn challenge(stream: &TcpStream) -> std::io::Result<Nonce> {
    stream.set_nonblocking(true)?;
    // The launcher writes `welcome`, then `cards` once every process said
    // hello, with nothing read in between: with Nagle's algorithm the
    // second line waits for the process's delayed ACK of the first (40 ms
    // on Linux).
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
    match (&conn.stream).read(&mut buf[..room.max(1)]) {
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
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Step::Waiting,
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

/// The running job: watches for exits and signals until every process has
/// ended, reporting as `status` says.
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
        // by now.
        job.listen();
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
        // Sleep until a process exits or says something, or a signal.
        let mut w = Watch::new();
        job.watch_exits(&mut w);
        job.watch_links(&mut w);
        w.wait(Instant::now() + Duration::from_secs(1));
    }
}
