//! The tcp module's connection handshake: a mutual challenge-response in
//! which each end proves it holds the job key (`launch_wire::auth`)
//! without sending it, then the acceptor's verdict on which connection
//! carries the VC.
//!
//! # The exchange
//!
//! Process `c` connects to process `a` (either may: a VC is connected by
//! whichever end sends first, `tcp`'s module comment says how):
//!
//! 1. `c` → `a`, [`HELLO_SIZE`] bytes: `CVRSTCP3`, `c`, `a` and the job's
//!    process count (u32 each, little-endian), a zero u32, and `c`'s fresh
//!    nonce `Nc`.
//! 2. `a` checks the numbers and answers, [`ANSWER_SIZE`] bytes: its fresh
//!    nonce `Na` and its proof `HMAC(key, TcpAcceptor | Nc | Na | c a nodes)`.
//! 3. `c` checks that proof and writes its own, [`CONFIRM_SIZE`] bytes:
//!    `HMAC(key, TcpConnector | Nc | Na | c a nodes)`.
//! 4. `a` checks it and writes its verdict, one byte ([`Verdict`]):
//!    *accept* (the connection is the VC from now on, at both ends; `a`
//!    made it its VC's before writing the byte), *lose* (both ends are
//!    connecting to each other at once, and `a`'s own connection stands:
//!    `c` drops this one and takes `a`'s), or *refuse* (`a` has a live VC
//!    to `c` already).
//!
//! # Invariants
//!
//! - Neither end treats a byte after the handshake as part of it: each
//!   reads exactly the bytes of its step (frames that follow the verdict
//!   stay in the socket for the VC).
//! - A proof covers both fresh nonces, the identities and the role, so a
//!   stranger without the key cannot make one, and a proof recorded from
//!   another connection (or the other direction) proves nothing here. The
//!   verdict is decided only once the connector proved the key: a
//!   stranger changes no VC's state.
//! - Neither side ever blocks: a connection that stalls costs only its
//!   own clock. A connect refused or reset while the peer's listener is
//!   busy (a burst of connects), or closed before the verdict because a
//!   flood took its handshake slot (`admission`), is tried again with a
//!   fresh nonce after a pause that doubles, until the attempt's time runs
//!   out; the retries are counted (`counts`), never printed.
//! - A wrong proof from a connecting stranger is refused with the reason
//!   and changes nothing else; a wrong proof from the process a business
//!   card named is that VC's failure, naming the process.
//!
//! # Concurrency
//!
//! None: each value is driven by one thread at a time (the module keeps
//! them behind a lock).
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use launch_wire::auth::{JobKey, NONCE_LEN, Nonce, PROOF_LEN, Proof, Role};

/// What a connection's first bytes say it is.
const MAGIC: &[u8; 8] = b"CVRSTCP3";
/// Bytes of the connector's hello.
pub const HELLO_SIZE: usize = 8 + 4 * 4 + NONCE_LEN;
/// Bytes of the acceptor's answer: its nonce and proof.
pub const ANSWER_SIZE: usize = NONCE_LEN + PROOF_LEN;
/// Bytes of the connector's confirmation: its proof.
pub const CONFIRM_SIZE: usize = PROOF_LEN;
/// Bytes of the acceptor's verdict.
pub const VERDICT_SIZE: usize = 1;

/// The longest pause between two tries of a refused connect.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long a connect the peer's host refuses outright (nothing listens
/// on the port) is tried again: a card is published only once its
/// listener listens, so a refusal that lasts means the process is gone.
/// Resets during a burst are tried for the attempt's whole time.
const REFUSED_WAIT: Duration = Duration::from_secs(1);

/// The acceptor's verdict on a connection whose connector proved the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Verdict {
    /// The connection is the VC.
    Accept = 1,
    /// Both ends connected to each other at once; the acceptor's own
    /// connection stands (the lower-numbered process's).
    Lose = 2,
    /// The acceptor has a live VC to the connector already.
    Refuse = 3,
}

/// Where the acceptor's VC to the connector is, as the verdict sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptorSide {
    /// No connection: none yet, terminated, or this side lost a
    /// head-to-head and awaits the peer's.
    Free,
    /// This side's own connection to the connector is in its handshake.
    Connecting,
    /// A live connection.
    Up,
}

impl Verdict {
    /// The verdict of acceptor `me` on a connection from `connector`, its
    /// VC to the connector being `side`: the rule that leaves one
    /// connection per pair whatever the timing (the lower-numbered
    /// process's connection stands in a head-to-head).
    pub fn decide(me: usize, connector: usize, side: AcceptorSide) -> Verdict {
        match side {
            AcceptorSide::Free => Verdict::Accept,
            AcceptorSide::Connecting if me < connector => Verdict::Lose,
            AcceptorSide::Connecting => Verdict::Accept,
            AcceptorSide::Up => Verdict::Refuse,
        }
    }

    fn from_byte(b: u8) -> Option<Verdict> {
        [Verdict::Accept, Verdict::Lose, Verdict::Refuse]
            .into_iter()
            .find(|v| *v as u8 == b)
    }
}

/// Where a step of the handshake got.
#[derive(Debug)]
pub enum Step {
    /// Nothing new; its clock still runs.
    Waiting,
    /// Some bytes moved, the step is not over.
    Progress,
    /// The handshake is over (the connector proved the key, for an
    /// acceptor; the acceptor accepted, for a connector).
    Done,
    /// The acceptor's own connection stands instead of this one (a
    /// connector's head-to-head: see [`Verdict::Lose`]).
    Lost,
    /// The connection is refused (or failed), and why.
    Failed(String),
    /// The connector closed the connection before its handshake was over
    /// (an acceptor's: nothing happened, nothing to report; a process
    /// drops its own attempt when the peer's connection is taken instead).
    Gone,
}

/// The connector's number, the acceptor's and the process count, as the
/// proofs hash them.
fn ids(connector: usize, acceptor: usize, nodes: usize) -> [u8; 12] {
    let mut ids = [0u8; 12];
    for (at, n) in [connector, acceptor, nodes].into_iter().enumerate() {
        ids[4 * at..4 * at + 4].copy_from_slice(&(n as u32).to_le_bytes());
    }
    ids
}

/// `role`'s proof for the connection: over the connector's nonce, the
/// acceptor's and the identities, in that order whichever end proves.
fn proof(key: &JobKey, role: Role, connector: &Nonce, acceptor: &Nonce, ids: &[u8; 12]) -> Proof {
    key.proof(role, &[connector.as_bytes(), acceptor.as_bytes(), ids])
}

fn verify(
    key: &JobKey,
    role: Role,
    connector: &Nonce,
    acceptor: &Nonce,
    ids: &[u8; 12],
    proof: &Proof,
) -> bool {
    key.verify(
        role,
        &[connector.as_bytes(), acceptor.as_bytes(), ids],
        proof,
    )
}

/// Reads into `buf[*len..]` what `stream` has, without blocking: `Ok(true)`
/// once `buf` is full, `Ok(false)` if it is not yet (and nothing more has
/// come), an error if the stream ended or failed.
fn fill(mut stream: impl Read, buf: &mut [u8], len: &mut usize) -> io::Result<bool> {
    while *len < buf.len() {
        match stream.read(&mut buf[*len..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "it closed")),
            Ok(n) => *len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes all of `bytes`, which a socket that has sent only a handshake
/// step before always takes at once (its buffer holds kilobytes); a
/// partial write is a failure rather than a wait.
fn write_whole(mut stream: impl Write, bytes: &[u8]) -> io::Result<()> {
    match stream.write(bytes)? {
        n if n == bytes.len() => Ok(()),
        n => Err(io::Error::other(format!(
            "only {n} of {} handshake bytes fit the socket",
            bytes.len()
        ))),
    }
}

/// Where an accepted connection is in the handshake.
enum AcceptPhase {
    /// Reading the connector's hello.
    Hello,
    /// Answered; reading the connector's proof.
    Confirm {
        connector: usize,
        theirs: Nonce,
        ours: Nonce,
    },
}

/// The acceptor's side of one connection.
pub struct Accepting {
    stream: TcpStream,
    from: SocketAddr,
    phase: AcceptPhase,
    buf: [u8; HELLO_SIZE],
    /// Bytes of the current step's message received so far.
    len: usize,
    /// How long it may take, and when it is refused if the handshake is
    /// not over.
    wait: Duration,
    until: Instant,
}

impl Accepting {
    /// An accepted connection (non-blocking from now on), which must end
    /// its handshake within `wait`, and by `deadline`.
    pub fn new(
        stream: TcpStream,
        from: SocketAddr,
        wait: Duration,
        deadline: Instant,
    ) -> io::Result<Accepting> {
        stream.set_nonblocking(true)?;
        let until = (Instant::now() + wait).min(deadline);
        Ok(Accepting {
            stream,
            from,
            phase: AcceptPhase::Hello,
            buf: [0; HELLO_SIZE],
            len: 0,
            wait,
            until,
        })
    }

    /// Where it came from.
    pub fn from(&self) -> SocketAddr {
        self.from
    }

    /// The process at the other end, once its hello has come.
    pub fn connector(&self) -> Option<usize> {
        match self.phase {
            AcceptPhase::Confirm { connector, .. } => Some(connector),
            AcceptPhase::Hello => None,
        }
    }

    /// The connection, once [`Step::Done`].
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Writes the verdict on a connection whose handshake is done.
    pub fn send_verdict(&self, verdict: Verdict) -> io::Result<()> {
        write_whole(&self.stream, &[verdict as u8])
    }

    /// Reads and answers what has come, without blocking, as process `me`
    /// of a job of `nodes` holding `key`; `expects(c)` says whether a
    /// connection from process `c` is wanted now (or why not).
    pub fn advance(
        &mut self,
        key: &JobKey,
        me: usize,
        nodes: usize,
        expects: impl Fn(usize) -> Result<(), String>,
    ) -> Step {
        let wanted = match self.phase {
            AcceptPhase::Hello => HELLO_SIZE,
            AcceptPhase::Confirm { .. } => CONFIRM_SIZE,
        };
        let before = self.len;
        let full = match fill(&self.stream, &mut self.buf[..wanted], &mut self.len) {
            Ok(full) => full,
            // Closed, or reset (a socket closed with bytes unread): the
            // connector gave up; nothing happened.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
                ) =>
            {
                return Step::Gone;
            }
            Err(e) => return Step::Failed(format!("reading its handshake: {e}")),
        };
        if !full {
            return if Instant::now() >= self.until {
                Step::Failed(format!("no handshake within {} s", self.wait.as_secs_f64()))
            } else if self.len > before {
                Step::Progress
            } else {
                Step::Waiting
            };
        }
        self.len = 0;
        match self.phase {
            AcceptPhase::Hello => match self.answer(key, me, nodes, expects) {
                Ok(()) => Step::Progress,
                Err(why) => Step::Failed(why),
            },
            AcceptPhase::Confirm {
                connector,
                theirs,
                ours,
            } => {
                let proof =
                    Proof::from_bytes(self.buf[..CONFIRM_SIZE].try_into().expect("a proof"));
                let ids = ids(connector, me, nodes);
                if verify(key, Role::TcpConnector, &theirs, &ours, &ids, &proof) {
                    Step::Done
                } else {
                    Step::Failed(format!(
                        "it claims to be process {connector}, but its proof of the job key is wrong (a stranger, or a replay)"
                    ))
                }
            }
        }
    }

    /// Checks the hello in `buf` and writes the answer.
    fn answer(
        &mut self,
        key: &JobKey,
        me: usize,
        nodes: usize,
        expects: impl Fn(usize) -> Result<(), String>,
    ) -> Result<(), String> {
        let h = &self.buf;
        if &h[..8] != MAGIC {
            return Err("not a Converse tcp hello".into());
        }
        let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let (connector, acceptor, count) = (word(8) as usize, word(12) as usize, word(16) as usize);
        if count != nodes || connector >= nodes || acceptor != me || word(20) != 0 {
            return Err(format!(
                "its hello says process {connector} to {acceptor} of {count}, but this is process {me} of {nodes}"
            ));
        }
        expects(connector)?;
        let theirs = Nonce::from_bytes(h[24..24 + NONCE_LEN].try_into().expect("a nonce"));
        let ours = Nonce::generate().map_err(|e| format!("cannot draw a nonce: {e}"))?;
        let ids = ids(connector, me, nodes);
        let proof = proof(key, Role::TcpAcceptor, &theirs, &ours, &ids);
        let mut answer = [0u8; ANSWER_SIZE];
        answer[..NONCE_LEN].copy_from_slice(ours.as_bytes());
        answer[NONCE_LEN..].copy_from_slice(proof.as_bytes());
        write_whole(&self.stream, &answer[..]).map_err(|e| format!("answering its hello: {e}"))?;
        self.phase = AcceptPhase::Confirm {
            connector,
            theirs,
            ours,
        };
        Ok(())
    }
}

/// Where the connecting side is.
enum ConnectPhase {
    /// The non-blocking connect to `addrs[at]` is under way (attempt
    /// number `tries`, counting from 1).
    Connect,
    /// Hello written; reading the acceptor's answer.
    Answer,
    /// Proof written; reading the acceptor's verdict.
    Verdict,
}

/// The connecting side of one connection: a non-blocking connect, the
/// hello, the acceptor's answer, this side's proof and the verdict, each
/// moved by [`Connecting::advance`] without blocking.
pub struct Connecting {
    me: usize,
    peer: usize,
    addrs: Vec<SocketAddr>,
    /// The address being tried.
    at: usize,
    stream: Option<mio::net::TcpStream>,
    phase: ConnectPhase,
    ours: Nonce,
    ids: [u8; 12],
    buf: [u8; ANSWER_SIZE],
    len: usize,
    /// Refused connects so far, and when the next try may start.
    retries: u32,
    retry_at: Option<Instant>,
    /// When a refused connect is no longer tried again.
    refused_until: Instant,
    /// When the attempt fails if it is not over.
    until: Instant,
    /// Where its socket is registered (under [`Connecting::TOKEN`]) while
    /// it connects, if anywhere: its events then wake the poller.
    registry: Option<mio::Registry>,
}

impl Connecting {
    /// The token of every handshake socket in its module's poll set.
    pub const TOKEN: mio::Token = mio::Token(usize::MAX - 2);

    /// Starts connecting process `me` of `nodes` to process `peer` at the
    /// first of `addrs` that takes the connection, by `until`. Never
    /// blocks: [`Connecting::advance`] moves it on.
    /// With `registry`, each socket it connects is registered there under
    /// [`Connecting::TOKEN`] until [`Connecting::into_stream`].
    pub fn start(
        me: usize,
        nodes: usize,
        peer: usize,
        addrs: Vec<SocketAddr>,
        until: Instant,
        registry: Option<&mio::Registry>,
    ) -> Result<Connecting, String> {
        if addrs.is_empty() {
            return Err("no address".into());
        }
        let mut conn = Connecting {
            me,
            peer,
            addrs,
            at: 0,
            stream: None,
            phase: ConnectPhase::Connect,
            ours: Nonce::generate().map_err(|e| format!("cannot draw a nonce: {e}"))?,
            ids: ids(me, peer, nodes),
            buf: [0; ANSWER_SIZE],
            len: 0,
            retries: 0,
            retry_at: None,
            refused_until: (Instant::now() + REFUSED_WAIT).min(until),
            until,
            registry: registry
                .map(mio::Registry::try_clone)
                .transpose()
                .map_err(|e| format!("epoll: {e}"))?,
        };
        conn.connect()?;
        Ok(conn)
    }

    /// Starts the non-blocking connect to the current address, with a
    /// fresh nonce (a connection tried again proves nothing another one
    /// saw).
    fn connect(&mut self) -> Result<(), String> {
        let addr = self.addrs[self.at];
        self.ours = Nonce::generate().map_err(|e| format!("cannot draw a nonce: {e}"))?;
        self.len = 0;
        let mut stream = mio::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
        crate::counts::tcp_connection_started();
        if let Some(registry) = &self.registry {
            registry
                .register(
                    &mut stream,
                    Self::TOKEN,
                    mio::Interest::READABLE | mio::Interest::WRITABLE,
                )
                .map_err(|e| format!("{addr}: epoll: {e}"))?;
        }
        self.stream = Some(stream);
        self.phase = ConnectPhase::Connect;
        Ok(())
    }

    /// The process it connects to.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// The address it connects to.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[self.at]
    }

    /// The connection, once [`Step::Done`].
    /// Out of the poll set it was registered in.
    pub fn into_stream(mut self) -> TcpStream {
        let mut stream = self
            .stream
            .take()
            .expect("a connection once the handshake is done");
        if let Some(registry) = &self.registry {
            let _ = registry.deregister(&mut stream);
        }
        TcpStream::from(stream)
    }

    fn std_stream(&self) -> &mio::net::TcpStream {
        self.stream.as_ref().expect("a connection while connecting")
    }

    /// A connect that the peer's host refused or reset: tried again after
    /// a pause that doubles (1 ms up to [`MAX_RETRY_PAUSE`]) until the
    /// attempt's time is up: in a burst of connects a listener's queue may
    /// be full for a moment. Counted, never printed.
    fn retry(&mut self, why: String, until: Instant) -> Step {
        self.stream = None;
        let pause = Duration::from_millis(1 << self.retries.min(7)).min(MAX_RETRY_PAUSE);
        let next = Instant::now() + pause;
        if next >= until {
            return Step::Failed(format!("cannot connect to {} ({why})", self.addr()));
        }
        self.retries += 1;
        crate::counts::tcp_connect_retried();
        self.retry_at = Some(next);
        Step::Progress
    }

    /// Moves the handshake on as far as it can without blocking: connects
    /// (again, after a refusal), writes the hello, checks the acceptor's
    /// proof and writes this side's, reads the verdict. `key` is the job's.
    pub fn advance(&mut self, key: &JobKey) -> Step {
        if let Some(at) = self.retry_at {
            if Instant::now() < at {
                return Step::Waiting;
            }
            self.retry_at = None;
            if let Err(why) = self.connect() {
                return Step::Failed(format!("cannot connect to {why}"));
            }
        }
        let step = match self.phase {
            ConnectPhase::Connect => self.connected(),
            ConnectPhase::Answer => self.answer(key),
            ConnectPhase::Verdict => self.verdict(),
        };
        match step {
            Step::Waiting if Instant::now() >= self.until => Step::Failed(format!(
                "no answer from {} within the connection's time",
                self.addr()
            )),
            step => step,
        }
    }

    /// Checks whether the connect went through; if so, writes the hello.
    fn connected(&mut self) -> Step {
        let stream = self.std_stream();
        match stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return self.refused(e),
        }
        match stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Step::Waiting,
            Err(e) => return self.refused(e),
        }
        let mut hello = [0u8; HELLO_SIZE];
        hello[..8].copy_from_slice(MAGIC);
        hello[8..20].copy_from_slice(&self.ids);
        hello[24..].copy_from_slice(self.ours.as_bytes());
        match write_whole(stream, &hello[..]) {
            Ok(()) => {
                self.phase = ConnectPhase::Answer;
                Step::Progress
            }
            Err(e) => self.refused(e),
        }
    }

    /// A connect or first write that failed: tried again if the peer's
    /// host may only be busy, the next address or a failure otherwise.
    fn refused(&mut self, e: io::Error) -> Step {
        let busy = matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::WouldBlock
                | io::ErrorKind::BrokenPipe
        ) || e.raw_os_error() == Some(libc_eagain());
        let until = if e.kind() == io::ErrorKind::ConnectionRefused {
            self.refused_until
        } else {
            self.until
        };
        let why = format!("{}: {e}", self.addr());
        if self.at + 1 < self.addrs.len() {
            self.at += 1;
            return match self.connect() {
                Ok(()) => Step::Progress,
                Err(why) => Step::Failed(format!("cannot connect to {why}")),
            };
        }
        if busy {
            self.at = 0;
            self.retry(why, until)
        } else {
            Step::Failed(format!("cannot connect to {why}"))
        }
    }

    /// Reads the acceptor's answer; checks its proof and writes this
    /// side's.
    fn answer(&mut self, key: &JobKey) -> Step {
        let before = self.len;
        let stream = self.stream.as_ref().expect("connected");
        match fill(stream, &mut self.buf, &mut self.len) {
            Ok(true) => {}
            Ok(false) if self.len > before => return Step::Progress,
            Ok(false) => return Step::Waiting,
            // A listener whose queue overflowed resets the connection
            // before it answers, and one whose handshake slots are full
            // closes the oldest (`admission`): the same as a refused
            // connect.
            Err(e)
                if self.len == 0
                    && matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
                    ) =>
            {
                return self.refused(io::Error::new(io::ErrorKind::ConnectionReset, e));
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Step::Failed(format!(
                    "{} closed the connection during the handshake",
                    self.addr()
                ));
            }
            Err(e) => return Step::Failed(format!("handshake with {}: {e}", self.addr())),
        }
        let theirs = Nonce::from_bytes(self.buf[..NONCE_LEN].try_into().expect("a nonce"));
        let answer = Proof::from_bytes(self.buf[NONCE_LEN..].try_into().expect("a proof"));
        if !verify(
            key,
            Role::TcpAcceptor,
            &self.ours,
            &theirs,
            &self.ids,
            &answer,
        ) {
            return Step::Failed(format!(
                "{} does not prove the job key: it is not process {}",
                self.addr(),
                self.peer
            ));
        }
        let confirm = proof(key, Role::TcpConnector, &self.ours, &theirs, &self.ids);
        match write_whole(stream, confirm.as_bytes()) {
            Ok(()) => {
                self.phase = ConnectPhase::Verdict;
                self.len = 0;
                Step::Progress
            }
            Err(e) => Step::Failed(format!("confirming to {}: {e}", self.addr())),
        }
    }

    /// Reads the acceptor's verdict (one byte; the VC's frames follow it).
    fn verdict(&mut self) -> Step {
        let stream = self.stream.as_ref().expect("connected");
        let mut byte = [0u8; VERDICT_SIZE];
        let mut len = 0;
        match fill(stream, &mut byte, &mut len) {
            Ok(true) => {}
            Ok(false) => return Step::Waiting,
            // The acceptor decides at once once this side's proof is in:
            // a connection closed before then gave its slot to a newer
            // one (`admission`), and is tried again.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
                ) =>
            {
                let why = format!("{} closed the connection before its verdict", self.addr());
                self.at = 0;
                return self.retry(why, self.until);
            }
            Err(e) => return Step::Failed(format!("handshake with {}: {e}", self.addr())),
        }
        match Verdict::from_byte(byte[0]) {
            Some(Verdict::Accept) => Step::Done,
            Some(Verdict::Lose) => Step::Lost,
            Some(Verdict::Refuse) => Step::Failed(format!(
                "process {} refused the connection: it has a live one from process {} already",
                self.peer, self.me
            )),
            None => Step::Failed(format!(
                "{} answered with verdict {}, which means nothing",
                self.addr(),
                byte[0]
            )),
        }
    }
}

/// `EAGAIN`, which a connect to a loopback listener whose queue is full
/// returns on Linux.
fn libc_eagain() -> i32 {
    rustix::io::Errno::AGAIN.raw_os_error()
}
