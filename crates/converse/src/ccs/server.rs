//! The CCS server thread: accepts clients, reads their requests, hands them
//! to PE 0, and writes the replies back (`ccs-protocol.md`).
//!
//! # Connections
//!
//! One request per connection. A connection is *reading* (bytes kept until
//! `ccs_wire::parse_incoming` has a whole request), then *waiting* for its
//! reply (or replies, for a broadcast or multicast), then *writing* it;
//! then it is closed. Nothing a client sends can stop the server: a request
//! that does not parse is logged and its connection closed; one whose
//! handler or destination is wrong is answered empty, as the protocol says;
//! a client that stalls mid-request is closed after [`READ_STALL`]; a
//! request whose reply does not come within the reply timeout is closed.
//! At most [`MAX_CONNECTIONS`] are open at once; more are closed as they
//! come (logged once per burst).
//!
//! # Concurrency protocol
//!
//! The thread owns every connection. Other threads (PEs) only push replies
//! into [`ServerHandle`]'s queue and wake the thread through its mio waker.
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccs_wire::{Incoming, Limits, Parsed, Request};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::{Reply, lock};
use crate::machine::args::ServerFlags;
use crate::machine::job::Job;

/// The largest request data taken by default (`++server-max-request`).
pub(crate) const DEFAULT_MAX_REQUEST: usize = 64 << 20;
/// How long a request may wait for its reply by default
/// (`++server-reply-timeout`).
pub(crate) const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(600);
/// A client that sends nothing for this long in the middle of a request is
/// closed.
const READ_STALL: Duration = Duration::from_secs(10);
/// Open connections at most.
const MAX_CONNECTIONS: usize = 4096;
/// How often the thread looks at deadlines when nothing happens.
const TICK: Duration = Duration::from_millis(200);

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection tokens start here.
const FIRST_CONN: usize = 2;

/// What other threads hold of the server.
pub(crate) struct ServerHandle {
    replies: Mutex<Vec<(u64, Reply)>>,
    waker: Waker,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl ServerHandle {
    /// Queues the reply of request `token` (from any thread).
    pub fn push_reply(&self, token: u64, reply: Reply) {
        lock(&self.replies).push((token, reply));
        let _ = self.waker.wake();
    }
}

/// Says `text` on stderr as the server's diagnostic.
fn log(text: &str) {
    crate::machine::io::error(format_args!("converse: ccs: {text}\n"));
}

/// Starts the server of `job` as `flags` ask, prints the announcement and
/// returns the handle (kept in the job's CCS state).
pub(crate) fn start(job: &Arc<Job>, flags: &ServerFlags) -> Result<Arc<ServerHandle>, String> {
    if flags.auth.is_some() {
        return Err(
            "++server-auth: authenticated CCS is not available yet in this build".to_string(),
        );
    }
    let ip: IpAddr = match &flags.bind {
        Some(addr) => addr
            .parse()
            .map_err(|_| format!("++server-bind {addr}: not an IP address"))?,
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let listener = TcpListener::bind(SocketAddr::new(ip, flags.port))
        .map_err(|e| format!("CCS server: cannot listen on {ip} port {}: {e}", flags.port))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("CCS server: {e}"))?;
    if !ip.is_loopback() {
        log(&format!(
            "WARNING: the server listens on {ip} without authentication: anyone who can reach port {} can run this job's CCS handlers",
            addr.port()
        ));
    }
    let poll = Poll::new().map_err(|e| format!("CCS server: epoll: {e}"))?;
    let waker =
        Waker::new(poll.registry(), WAKER).map_err(|e| format!("CCS server: waker: {e}"))?;
    let handle = Arc::new(ServerHandle {
        replies: Mutex::new(Vec::new()),
        waker,
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
        refused_burst: false,
    };
    server
        .poll
        .registry()
        .register(&mut server.listener, LISTENER, Interest::READABLE)
        .map_err(|e| format!("CCS server: {e}"))?;
    let shown_ip = match addr.ip() {
        IpAddr::V4(v4) if !v4.is_unspecified() => v4,
        _ => Ipv4Addr::LOCALHOST,
    };
    // The announcement clients and tools look for (`ccs-protocol.md`).
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ccs: 2");
        let _ = writeln!(
            out,
            "ccs: Server IP = {shown_ip}, Server port = {} $",
            addr.port()
        );
        let _ = out.flush();
    }
    let thread = std::thread::Builder::new()
        .name("ccs-server".into())
        .spawn(move || server.run())
        .map_err(|e| format!("CCS server: cannot start its thread: {e}"))?;
    *lock(&handle.thread) = Some(thread);
    Ok(handle)
}

/// Stops the server of `handle` and waits for its thread.
pub(crate) fn stop(handle: &ServerHandle) {
    handle.stop.store(true, Ordering::Release);
    let _ = handle.waker.wake();
    if let Some(t) = lock(&handle.thread).take() {
        let _ = t.join();
    }
}

enum State {
    Reading { buf: Vec<u8>, need: usize },
    Waiting { deadline: Instant },
    Writing { out: Vec<u8>, at: usize },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    state: State,
    /// The last time bytes arrived (read stall).
    last_read: Instant,
}

/// A request whose replies are still coming.
struct Pending {
    conn: Token,
    expected: usize,
    replies: Vec<Vec<u8>>,
    /// PEs that asked for no reply.
    nothing: usize,
    merge: Option<super::MergeFn>,
}

struct Server {
    job: Weak<Job>,
    handle: Weak<ServerHandle>,
    poll: Poll,
    listener: TcpListener,
    conns: HashMap<Token, Conn>,
    pending: HashMap<u64, Pending>,
    next_conn: usize,
    next_token: u64,
    limits: Limits,
    reply_timeout: Duration,
    /// Connections were refused since the last one accepted (logged once).
    refused_burst: bool,
}

impl Server {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let Some(handle) = self.handle.upgrade() else {
                return;
            };
            if handle.stop.load(Ordering::Acquire) {
                return;
            }
            if let Err(e) = self.poll.poll(&mut events, Some(TICK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log(&format!("epoll failed, the server stops: {e}"));
                    return;
                }
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    token => self.on_event(token),
                }
            }
            let replies = std::mem::take(&mut *lock(&handle.replies));
            drop(handle);
            for (token, reply) in replies {
                self.on_reply(token, reply);
            }
            self.check_deadlines();
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.conns.len() >= MAX_CONNECTIONS {
                        if !self.refused_burst {
                            log(&format!(
                                "{MAX_CONNECTIONS} connections open: refusing more (from {peer} on) until some close"
                            ));
                            self.refused_burst = true;
                        }
                        continue;
                    }
                    self.refused_burst = false;
                    let token = Token(self.next_conn);
                    self.next_conn += 1;
                    if let Err(e) = self.poll.registry().register(
                        &mut stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log(&format!("cannot watch the connection from {peer}: {e}"));
                        continue;
                    }
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
                        },
                    );
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
            State::Writing { .. } => self.write(token),
            // A client that closes while waiting is noticed when the reply
            // is written.
            State::Waiting { .. } => {}
        }
    }

    /// Reads what the client sent; acts once a request is whole.
    fn read(&mut self, token: Token) {
        let limits = self.limits;
        let conn = self.conns.get_mut(&token).expect("caller checked");
        let State::Reading { buf, need } = &mut conn.state else {
            return;
        };
        loop {
            let start = buf.len();
            // Never more than the parser asked for: what it asks for is
            // bounded by the limits, so is the buffer.
            let want = (*need).max(start + 1) - start;
            buf.resize(start + want.min(64 << 10), 0);
            match conn.stream.read(&mut buf[start..]) {
                Ok(0) => {
                    buf.truncate(start);
                    if !buf.is_empty() {
                        log(&format!(
                            "{} closed its connection after {} bytes of an incomplete request",
                            conn.peer,
                            buf.len()
                        ));
                    }
                    self.close(token);
                    return;
                }
                Ok(n) => {
                    buf.truncate(start + n);
                    conn.last_read = Instant::now();
                    if buf.len() < *need {
                        continue;
                    }
                    match ccs_wire::parse_incoming(buf, &limits) {
                        Ok(Parsed::Need(n)) => *need = n,
                        Ok(Parsed::Done(incoming, _)) => {
                            let peer = conn.peer;
                            self.on_incoming(token, peer, incoming);
                            return;
                        }
                        Err(e) => {
                            log(&format!(
                                "bad request from {}: {e}; connection closed",
                                conn.peer
                            ));
                            self.close(token);
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    buf.truncate(start);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(start),
                Err(e) => {
                    log(&format!("reading from {} failed: {e}", conn.peer));
                    self.close(token);
                    return;
                }
            }
        }
    }

    fn on_incoming(&mut self, token: Token, peer: SocketAddr, incoming: Incoming) {
        match incoming {
            Incoming::Request(req) if req.auth.is_none() => self.on_request(token, peer, req),
            _ => {
                log(&format!(
                    "authenticated request from {peer} refused: this server has no keys (++server-auth)"
                ));
                self.close(token);
            }
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
        if name == "ccs_getinfo" {
            let sizes: Vec<u32> = (0..job.topo.num_nodes())
                .map(|n| job.topo.node_size(n) as u32)
                .collect();
            self.reply_now(token, ccs_wire::encode_getinfo(&sizes));
            return;
        }
        let refuse = |why: String| {
            log(&format!(
                "request for {name:?} from {peer}: {why}; answered empty"
            ));
        };
        let Some(entry) = job.ccs.entry(&name) else {
            refuse("no such handler".into());
            self.reply_now(token, Vec::new());
            return;
        };
        let pes = job.topo.num_pes();
        let (targets, merged): (Vec<u32>, bool) = match req.header.dest {
            d if d >= 0 => (vec![d as u32], false),
            ccs_wire::BROADCAST => ((0..pes as u32).collect(), true),
            _ => (req.pes.clone(), true),
        };
        if let Some(bad) = targets.iter().find(|&&t| t as usize >= pes) {
            refuse(format!(
                "PE {bad} does not exist (the job has PEs 0..{pes})"
            ));
            self.reply_now(token, Vec::new());
            return;
        }
        if merged && entry.merge.is_none() {
            refuse(
                "a broadcast or multicast to a handler without a merge function (set_merge_fn)"
                    .into(),
            );
            self.reply_now(token, Vec::new());
            return;
        }
        let request = self.next_token;
        self.next_token += 1;
        self.pending.insert(
            request,
            Pending {
                conn: token,
                expected: targets.len(),
                replies: Vec::with_capacity(targets.len()),
                nothing: 0,
                merge: entry.merge.clone(),
            },
        );
        if let Some(conn) = self.conns.get_mut(&token) {
            conn.state = State::Waiting {
                deadline: Instant::now() + self.reply_timeout,
            };
        }
        let caller = match peer.ip() {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or([0; 4], |v4| v4.octets()),
        };
        let msg =
            super::dispatch_message(request, (caller, peer.port()), &targets, &name, &req.data);
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

    /// A PE answered request `request`.
    fn on_reply(&mut self, request: u64, reply: Reply) {
        let Some(p) = self.pending.get_mut(&request) else {
            // Its connection timed out or closed; or a second answer.
            return;
        };
        match reply {
            Reply::Data(d) => p.replies.push(d),
            Reply::Nothing => p.nothing += 1,
        }
        if p.replies.len() + p.nothing < p.expected {
            return;
        }
        let p = self.pending.remove(&request).expect("present");
        if p.replies.is_empty() {
            // Every PE asked for no reply: close without one.
            self.close(p.conn);
            return;
        }
        let bytes = match (&p.merge, p.expected) {
            (_, 1) => p.replies.into_iter().next().unwrap_or_default(),
            (Some(merge), _) => {
                let parts: Vec<&[u8]> = p.replies.iter().map(Vec::as_slice).collect();
                merge(&parts)
            }
            (None, _) => p.replies.concat(),
        };
        self.reply_now(p.conn, bytes);
    }

    /// Starts writing `data` as the reply on `token`.
    fn reply_now(&mut self, token: Token, data: Vec<u8>) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let mut out = Vec::with_capacity(4 + data.len());
        out.extend_from_slice(&ccs_wire::reply_header(data.len()));
        out.extend_from_slice(&data);
        conn.state = State::Writing { out, at: 0 };
        self.write(token);
    }

    fn write(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let State::Writing { out, at } = &mut conn.state else {
            return;
        };
        while *at < out.len() {
            match conn.stream.write(&out[*at..]) {
                Ok(0) => break,
                Ok(n) => *at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log(&format!("writing the reply to {} failed: {e}", conn.peer));
                    break;
                }
            }
        }
        self.close(token);
    }

    fn close(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    fn check_deadlines(&mut self) {
        let now = Instant::now();
        let mut expired = Vec::new();
        for (&token, conn) in &self.conns {
            match &conn.state {
                State::Reading { buf, .. } if now - conn.last_read >= READ_STALL => {
                    if !buf.is_empty() {
                        log(&format!(
                            "{} stalled {} s in the middle of a request; connection closed",
                            conn.peer,
                            READ_STALL.as_secs()
                        ));
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
        if !expired.is_empty() {
            self.pending.retain(|_, p| !expired.contains(&p.conn));
            for token in expired {
                self.close(token);
            }
        }
    }
}
