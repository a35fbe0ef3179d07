//! Messages between groups: a port bound to another group's parallel pid
//! (the document's "inter-group communication"), between groups of one
//! host.
//!
//! Each node of a group listens on a Unix socket of the host's registry
//! (`<registry>/g<par-pid>-n<node>.sock`, in the user's own directory).
//! A sender connects once per destination node and writes frames
//! `[u32 length LE][payload]`, the payload a [`wire`](crate::wire) DATA
//! or CREDIT message; a thread per connection reads them and posts each to
//! its node's PE ([`converse::PeHandle`]) wrapped as an INTER message, so
//! that it is handled on the node's own thread like any other.
//!
//! # Invariants
//!
//! - Frames are not trusted: a length beyond the largest message closes
//!   the connection with a report; the PE decodes the payload and aborts
//!   on anything but well-formed DATA from another group or CREDIT.
//! - The socket file exists while its node is a member; leaving removes
//!   it and stops the acceptor.
//!
//! # Concurrency
//!
//! The acceptor and readers are plain threads that only read sockets and
//! post messages; all GAMMA state stays on the node's PE.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use converse::{MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message, PeHandle};

use crate::error::{Error, Result};
use crate::wire;

/// The largest frame payload: what fits in one Converse message behind
/// the INTER kind byte.
pub(crate) const MAX_FRAME: usize = MAX_MESSAGE_SIZE - MSG_HEADER_SIZE - 1;

/// How long a send waits for another group's node to listen.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// The host's registry of groups (parallel pids and sockets).
pub(crate) fn registry() -> PathBuf {
    std::env::temp_dir().join(format!(
        "converse-gamma-{}",
        rustix::process::getuid().as_raw()
    ))
}

fn socket_path(par_pid: u8, node: u16) -> PathBuf {
    registry().join(format!("g{par_pid}-n{node}.sock"))
}

/// The number of nodes of group `par_pid`, from its registry entry.
pub(crate) fn group_size(par_pid: u8) -> Option<u16> {
    let text = std::fs::read_to_string(registry().join(format!("par-pid-{par_pid}"))).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A node's listening socket.
pub(crate) struct Endpoint {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

/// Starts listening for node `node` of group `par_pid`; arriving frames
/// go to the calling PE with `handler`.
pub(crate) fn listen(par_pid: u8, node: u16, handler: usize) -> Result<Endpoint> {
    let path = socket_path(par_pid, node);
    // The parallel pid is ours: a file of that name is a dead group's.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| Error::Start(format!("the socket {}: {e}", path.display())))?;
    let stop = Arc::new(AtomicBool::new(false));
    let pe = PeHandle::current();
    let s = Arc::clone(&stop);
    std::thread::Builder::new()
        .name(format!("gamma g{par_pid} n{node}"))
        .spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Acquire) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let pe = pe.clone();
                let _ = std::thread::Builder::new()
                    .name(format!("gamma g{par_pid} n{node} reader"))
                    .spawn(move || read_frames(conn, pe, handler, par_pid, node));
            }
        })
        .map_err(|e| Error::Start(format!("a thread for {}: {e}", path.display())))?;
    Ok(Endpoint { path, stop })
}

fn read_frames(mut conn: UnixStream, pe: PeHandle, handler: usize, par_pid: u8, node: u16) {
    loop {
        let mut len = [0u8; 4];
        if conn.read_exact(&mut len).is_err() {
            return; // the other side closed
        }
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > MAX_FRAME {
            converse::cmi_error!(
                "gamma node {node} of group {par_pid}: a frame of {len} bytes from another \
                 group; connection closed\n"
            );
            return;
        }
        let mut msg = Message::new(handler, 1 + len);
        msg.payload_mut()[0] = wire::INTER;
        if conn.read_exact(&mut msg.payload_mut()[1..]).is_err() {
            converse::cmi_error!(
                "gamma node {node} of group {par_pid}: a frame from another group cut short; \
                 connection closed\n"
            );
            return;
        }
        if !pe.post(msg) {
            return; // the job is ending
        }
    }
}

impl Endpoint {
    /// Stops listening and removes the socket file.
    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the acceptor, which then sees `stop`.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A node's connections to other groups' nodes, and those found gone.
#[derive(Default)]
pub(crate) struct Links {
    open: HashMap<(u8, u16), UnixStream>,
    gone: std::collections::HashSet<(u8, u16)>,
}

impl Links {
    /// The nodes it has connections to.
    pub(crate) fn peers(&self) -> Vec<(u8, u16)> {
        self.open.keys().copied().collect()
    }

    /// Node `node` of group `par_pid` left: no more frames to it.
    pub(crate) fn forget(&mut self, par_pid: u8, node: u16) {
        self.open.remove(&(par_pid, node));
        self.gone.insert((par_pid, node));
    }

    /// Writes one frame to node `node` of group `par_pid`, connecting
    /// first if needed.
    pub(crate) fn send(&mut self, par_pid: u8, node: u16, payload: &[u8]) -> Result<()> {
        let fail =
            |why: String| Error::SendFailure(format!("to node {node} of group {par_pid}: {why}"));
        if payload.len() > MAX_FRAME {
            return Err(fail(format!("a message of {} bytes", payload.len())));
        }
        if self.gone.contains(&(par_pid, node)) {
            return Err(fail("it has left".into()));
        }
        let conn = match self.open.entry((par_pid, node)) {
            Entry::Occupied(c) => c.into_mut(),
            Entry::Vacant(v) => {
                let path = socket_path(par_pid, node);
                let started = Instant::now();
                let conn = loop {
                    match UnixStream::connect(&path) {
                        Ok(c) => break c,
                        // Gone, or not there after a while: not coming.
                        Err(e)
                            if group_size(par_pid).is_none()
                                || started.elapsed() >= CONNECT_PATIENCE =>
                        {
                            self.gone.insert((par_pid, node));
                            return Err(fail(format!("{}: {e}", path.display())));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                };
                v.insert(conn)
            }
        };
        let len = (payload.len() as u32).to_le_bytes();
        let written = conn.write_all(&len).and_then(|()| conn.write_all(payload));
        if let Err(e) = written {
            self.open.remove(&(par_pid, node));
            self.gone.insert((par_pid, node));
            return Err(fail(e.to_string()));
        }
        Ok(())
    }
}
