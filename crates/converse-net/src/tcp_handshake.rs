//! The tcp module's connection handshake: a mutual challenge-response in
//! which each end proves it holds the job key (`launch_wire::auth`)
//! without sending it, before a connection becomes a VC.
//!
//! # The exchange
//!
//! Process `c` connects to process `a` (`c > a`; `tcp`'s module comment
//! says why):
//!
//! 1. `c` → `a`, [`HELLO_SIZE`] bytes: `CVRSTCP2`, `c`, `a` and the job's
//!    process count (u32 each, little-endian), a zero u32, and `c`'s fresh
//!    nonce `Nc`.
//! 2. `a` checks the numbers (it expects `c` and has no VC to it yet) and
//!    answers, [`ANSWER_SIZE`] bytes: its fresh nonce `Na` and its proof
//!    `HMAC(key, TcpAcceptor | Nc | Na | c a nodes)`.
//! 3. `c` checks that proof and writes its own, [`CONFIRM_SIZE`] bytes:
//!    `HMAC(key, TcpConnector | Nc | Na | c a nodes)`. The connection is
//!    `c`'s VC to `a` from then on.
//! 4. `a` checks it: the connection is `a`'s VC to `c`.
//!
//! # Invariants
//!
//! - Neither end treats a byte after the handshake as part of it: each
//!   reads exactly the bytes of its step (frames that follow stay in the
//!   socket for the VC).
//! - A proof covers both fresh nonces, the identities and the role, so a
//!   stranger without the key cannot make one, and a proof recorded from
//!   another connection (or the other direction) proves nothing here.
//! - The acceptor's side never blocks ([`Accepting::advance`] reads and
//!   writes what the socket takes and returns): a connection that stalls
//!   costs only its own clock. The connecting side's steps do not block
//!   either after the connect itself, so that a process that connects to
//!   several others waits for them all at once (`TcpModule::accept_peers`).
//! - A wrong proof from a connecting stranger is refused with the reason
//!   and changes nothing else; a wrong proof from the process a business
//!   card named is that VC's failure, naming the process.
//!
//! # Concurrency
//!
//! None: each value is driven by the one thread that runs start-up.
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use launch_wire::auth::{JobKey, NONCE_LEN, Nonce, PROOF_LEN, Proof, Role};

/// What a connection's first bytes say it is.
const MAGIC: &[u8; 8] = b"CVRSTCP2";
/// Bytes of the connector's hello.
pub const HELLO_SIZE: usize = 8 + 4 * 4 + NONCE_LEN;
/// Bytes of the acceptor's answer: its nonce and proof.
pub const ANSWER_SIZE: usize = NONCE_LEN + PROOF_LEN;
/// Bytes of the connector's confirmation: its proof.
pub const CONFIRM_SIZE: usize = PROOF_LEN;

/// How long connecting to a peer's address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a step of the handshake got.
pub enum Step {
    /// Nothing new; its clock still runs.
    Waiting,
    /// Some bytes moved, the step is not over.
    Progress,
    /// The handshake is over: the connection is a VC.
    Done,
    /// The connection is refused (or failed), and why.
    Failed(String),
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
fn fill(stream: &TcpStream, buf: &mut [u8], len: &mut usize) -> io::Result<bool> {
    while *len < buf.len() {
        match (&*stream).read(&mut buf[*len..]) {
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
fn write_whole(stream: &TcpStream, bytes: &[u8]) -> io::Result<()> {
    match (&*stream).write(bytes)? {
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
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Step::Failed("it closed during the handshake".into());
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
        write_whole(&self.stream, &answer).map_err(|e| format!("answering its hello: {e}"))?;
        self.phase = AcceptPhase::Confirm {
            connector,
            theirs,
            ours,
        };
        Ok(())
    }
}

/// The connecting side of one connection: hello sent, waiting for the
/// acceptor's answer.
pub struct Connecting {
    peer: usize,
    addr: SocketAddr,
    stream: TcpStream,
    ours: Nonce,
    ids: [u8; 12],
    buf: [u8; ANSWER_SIZE],
    len: usize,
}

impl Connecting {
    /// Connects process `me` of `nodes` to process `peer` at the first of
    /// `addrs` that answers, and sends the hello. Blocks only to connect
    /// (at most [`CONNECT_TIMEOUT`] per address).
    pub fn start(
        me: usize,
        nodes: usize,
        peer: usize,
        addrs: &[SocketAddr],
    ) -> Result<Connecting, String> {
        let mut last = None;
        for &addr in addrs {
            let stream = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    crate::counts::tcp_connection_started();
                    s
                }
                Err(e) => {
                    last = Some(format!("{addr}: {e}"));
                    continue;
                }
            };
            let ours = Nonce::generate().map_err(|e| format!("cannot draw a nonce: {e}"))?;
            let mut hello = [0u8; HELLO_SIZE];
            hello[..8].copy_from_slice(MAGIC);
            let ids = ids(me, peer, nodes);
            hello[8..20].copy_from_slice(&ids);
            hello[24..].copy_from_slice(ours.as_bytes());
            stream
                .set_nonblocking(true)
                .and_then(|()| write_whole(&stream, &hello))
                .map_err(|e| format!("hello to {addr}: {e}"))?;
            return Ok(Connecting {
                peer,
                addr,
                stream,
                ours,
                ids,
                buf: [0; ANSWER_SIZE],
                len: 0,
            });
        }
        Err(last.unwrap_or_else(|| "no address".into()))
    }

    /// The process it connects to.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// The connection, once [`Step::Done`].
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Reads the acceptor's answer if it has come, without blocking; checks
    /// its proof and confirms with this side's.
    pub fn advance(&mut self, key: &JobKey) -> Step {
        let before = self.len;
        match fill(&self.stream, &mut self.buf, &mut self.len) {
            Ok(true) => {}
            Ok(false) if self.len > before => return Step::Progress,
            Ok(false) => return Step::Waiting,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Step::Failed(format!(
                    "{} closed the connection during the handshake",
                    self.addr
                ));
            }
            Err(e) => return Step::Failed(format!("handshake with {}: {e}", self.addr)),
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
                self.addr, self.peer
            ));
        }
        let confirm = proof(key, Role::TcpConnector, &self.ours, &theirs, &self.ids);
        match write_whole(&self.stream, confirm.as_bytes()) {
            Ok(()) => Step::Done,
            Err(e) => Step::Failed(format!("confirming to {}: {e}", self.addr)),
        }
    }
}
