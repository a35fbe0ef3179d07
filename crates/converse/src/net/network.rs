//! The process layer of a multi-process job (Nemesis's CH3): what frames
//! mean, the job-wide exit protocol and fault handling, over one network
//! module (`net::netmod`).
//!
//! # What travels
//!
//! - A Converse message is one `Message` frame: `src` the sending PE, `tag`
//!   the destination PE (or node, with [`FLAG_NODE`]), the message's bytes
//!   as the body. The receiver checks everything (the body is a whole
//!   message, the sender lives on the process it came from, the destination
//!   lives here) and puts it in the destination's inbox, as an in-process
//!   send would.
//! - `Control` frames carry the protocol below; the body's first byte says
//!   which ([`Control`]).
//!
//! # Exit protocol
//!
//! - `exit(code)` on any PE: its process sends `Exit(code)` to every other
//!   process, which then ends its PEs as a local `exit` would.
//! - A process whose PEs have all finished sends `Bye` to every other one,
//!   then keeps receiving (messages for its finished PEs are dropped, as in
//!   an in-process job) until it has a `Bye` from every other process. All
//!   it was sent arrived before that `Bye` (frames of a VC are ordered), so
//!   nothing in flight is lost. Then it terminates its VCs and exits.
//! - A connection that breaks before the peer's `Bye`, or bytes that are not
//!   a frame stream, are a fault: the process prints which process (and so
//!   which PEs) was lost and why, tells the others (`Abort`), and exits with
//!   code 1. An `Abort` from a peer ends the receiver the same way.
//!
//! # Concurrency protocol
//!
//! PEs send from their own threads straight into the module. One progress
//! thread (`net`) polls the module; upcalls run there and only push to
//! inboxes (lock-free) and update `state` (a mutex, with a condvar the
//! shutdown waits on).
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::frame::{FrameHeader, FrameKind};
use super::netmod::{NetModule, PollDir, SendData, SendRequest, Upcalls};
use crate::machine::job::Job;
use crate::machine::topology::Topology;
use crate::msg::message::Message;

/// Frame flag of a `Message` frame: `tag` is a node, not a PE.
pub(crate) const FLAG_NODE: u8 = 1;

/// The process layer's own packets (first byte of a `Control` body).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Control {
    /// `exit(code)` was called; 4 bytes of code follow.
    Exit = 1,
    /// The sender's PEs have all finished.
    Bye = 2,
    /// The sender is ending the job abnormally; UTF-8 text follows.
    Abort = 3,
}

/// What the module's upcalls touch (kept apart from [`Network`] so that the
/// module, which holds it, holds no cycle).
struct Shared {
    me: usize,
    topo: Topology,
    job: OnceLock<Weak<Job>>,
    state: Mutex<State>,
    changed: Condvar,
    /// Set while the process is ending on purpose: no more fault reports.
    closing: AtomicBool,
    /// The module, to tell the others about an abort.
    module: OnceLock<Weak<dyn NetModule>>,
}

#[derive(Default)]
struct State {
    /// Peers whose `Bye` arrived.
    bye: Vec<bool>,
    /// Peers whose VC finished terminating.
    terminated: Vec<bool>,
}

/// The network of one process of a multi-process job.
pub(crate) struct Network {
    shared: Arc<Shared>,
    module: Arc<dyn NetModule>,
    progress: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn pes_of(&self, node: usize) -> String {
        let first = self.topo.node_first(node);
        let size = self.topo.node_size(node);
        if size == 1 {
            format!("PE {first}")
        } else {
            format!("PEs {first}..{}", first + size - 1)
        }
    }

    /// Ends this process because of a fault concerning `peer`: says so,
    /// tells the other processes, exits with code 1.
    fn fault(&self, peer: usize, why: &str) -> ! {
        let text = format!("lost process {peer} ({}): {why}", self.pes_of(peer));
        self.die(&text, Some(peer))
    }

    fn die(&self, text: &str, skip: Option<usize>) -> ! {
        let _ = std::io::stdout().flush();
        eprintln!(
            "converse: process {} ({}) ending the job: {text}",
            self.me,
            self.pes_of(self.me)
        );
        self.tell_abort(text, skip);
        std::process::exit(crate::machine::exit::ABORT_EXIT_CODE)
    }

    /// Sends `Abort(text)` to every peer but `skip`, best effort.
    fn tell_abort(&self, text: &str, skip: Option<usize>) {
        let Some(module) = self.module.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut body = vec![Control::Abort as u8];
        body.extend_from_slice(text.as_bytes());
        for peer in (0..self.topo.num_nodes()).filter(|&p| p != self.me && Some(p) != skip) {
            let _ = module.istart_contig(
                peer,
                control_header(self.me, &body),
                SendData::Bytes(body.clone()),
            );
            // Drains what is queued as far as the socket takes it, then
            // closes: the peer reads the `Abort` before the end of stream.
            module.vc_terminate(peer);
        }
    }

    fn on_message(&self, peer: usize, h: FrameHeader, body: Vec<u8>) {
        let Some(job) = self.job.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut msg = match Message::from_bytes(&body) {
            Ok(m) => m,
            Err(e) => self.fault(peer, &format!("malformed message: {e}")),
        };
        let src = h.src as usize;
        if src >= self.topo.num_pes() || self.topo.node_of(src) != peer {
            self.fault(
                peer,
                &format!("malformed message: it claims to come from PE {src}, which is not on that process"),
            );
        }
        msg.set_src_pe(src);
        let dest = h.tag as usize;
        if h.flags & FLAG_NODE != 0 {
            match job.local_node(dest) {
                Some(node) => {
                    node.inbox.push(msg);
                    job.wake_node(dest);
                }
                None => self.fault(
                    peer,
                    &format!("malformed message: it is for node {dest}, which is not this process"),
                ),
            }
        } else {
            match job.local_pe(dest) {
                Some(target) => {
                    target.inbox.push(msg);
                    target.idle.wake();
                }
                None => self.fault(
                    peer,
                    &format!(
                        "malformed message: it is for PE {dest}, which is not on this process"
                    ),
                ),
            }
        }
    }

    fn on_control(&self, peer: usize, body: &[u8]) {
        match body.first().copied() {
            Some(op) if op == Control::Exit as u8 && body.len() == 5 => {
                let code = i32::from_le_bytes(body[1..5].try_into().expect("4 bytes"));
                if let Some(job) = self.job.get().and_then(Weak::upgrade) {
                    job.request_exit(code);
                }
            }
            Some(op) if op == Control::Bye as u8 && body.len() == 1 => {
                lock(&self.state).bye[peer] = true;
                self.changed.notify_all();
            }
            Some(op) if op == Control::Abort as u8 => {
                let text = String::from_utf8_lossy(&body[1..]).into_owned();
                let _ = std::io::stdout().flush();
                eprintln!(
                    "converse: process {} ({}) ending the job: process {peer} ({}) ended it: {text}",
                    self.me,
                    self.pes_of(self.me),
                    self.pes_of(peer)
                );
                std::process::exit(crate::machine::exit::ABORT_EXIT_CODE)
            }
            _ => self.fault(
                peer,
                &format!("malformed control packet of {} bytes", body.len()),
            ),
        }
    }
}

/// The frame header of a message from PE `src` to `tag` (a PE, or a node
/// with [`FLAG_NODE`]).
fn message_header(src: usize, tag: usize, flags: u8, msg: &Message) -> FrameHeader {
    debug_assert_eq!(
        msg.header().total_size as usize,
        msg.len(),
        "stamped before sending"
    );
    FrameHeader {
        kind: FrameKind::Message,
        flags,
        len: msg.len() as u32,
        src: src as u32,
        tag: tag as u32,
    }
}

fn control_header(me: usize, body: &[u8]) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Control,
        flags: 0,
        len: body.len() as u32,
        src: me as u32,
        tag: 0,
    }
}

impl Upcalls for Shared {
    fn frame(&self, peer: usize, header: FrameHeader, body: Vec<u8>) {
        match header.kind {
            FrameKind::Message => self.on_message(peer, header, body),
            FrameKind::Control => self.on_control(peer, &body),
            other => self.fault(peer, &format!("unexpected {other:?} frame")),
        }
    }

    fn vc_terminated(&self, peer: usize) {
        lock(&self.state).terminated[peer] = true;
        self.changed.notify_all();
    }

    fn vc_failed(&self, peer: usize, why: String) {
        if lock(&self.state).bye[peer] || self.closing.load(Ordering::Acquire) {
            // It said goodbye first: a close now is the end, not a fault.
            return;
        }
        self.fault(peer, &why)
    }
}

impl Network {
    /// The network of process `me` of a job laid out as `topo` (one node per
    /// process), over `module`, whose VCs get connected by `connect` once the
    /// upcalls are in place.
    pub fn new(
        me: usize,
        topo: Topology,
        module: Arc<dyn NetModule>,
        set_upcalls: impl FnOnce(Arc<dyn Upcalls>),
    ) -> Network {
        // Messages between two PEs must arrive in the order sent; this layer
        // adds no sequence numbers, so the module must keep VC order.
        assert!(
            module.ordering(),
            "network module {} does not keep order on a VC",
            module.name()
        );
        let nodes = topo.num_nodes();
        let shared = Arc::new(Shared {
            me,
            topo,
            job: OnceLock::new(),
            state: Mutex::new(State {
                bye: vec![false; nodes],
                terminated: vec![false; nodes],
            }),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
            module: OnceLock::new(),
        });
        let _ = shared.module.set(Arc::downgrade(&module));
        set_upcalls(shared.clone());
        Network {
            shared,
            module,
            progress: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The module's name (`++netmod`).
    pub fn module_name(&self) -> &'static str {
        self.module.name()
    }

    /// Starts delivering into `job` and the progress thread.
    pub fn start(&self, job: &Arc<Job>) {
        let _ = self.shared.job.set(Arc::downgrade(job));
        let (module, stop, shared) = (self.module.clone(), self.stop.clone(), self.shared.clone());
        let handle = std::thread::Builder::new()
            .name("net".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if let Err(e) = module.poll(PollDir::InFirst, None) {
                        shared.die(&format!("network failure: {e}"), None);
                    }
                }
            })
            .unwrap_or_else(|e| {
                crate::machine::exit::abort(&format!("cannot start the network thread: {e}"))
            });
        *lock(&self.progress) = Some(handle);
    }

    fn send_frame(&self, peer: usize, header: FrameHeader, data: SendData) {
        if let Err(e) = self.module.istart_contig(peer, header, data) {
            self.shared.fault(peer, &e.what);
        }
    }

    /// Sends `msg` from PE `src` to PE `dest` of another process.
    pub fn send_to_pe(&self, src: usize, dest: usize, msg: Message) {
        self.send_message(src, dest, 0, self.shared.topo.node_of(dest), msg)
    }

    /// Sends `msg` from PE `src` to node `node` (another process).
    pub fn send_to_node(&self, src: usize, node: usize, msg: Message) {
        self.send_message(src, node, FLAG_NODE, node, msg)
    }

    fn send_message(&self, src: usize, tag: usize, flags: u8, peer: usize, msg: Message) {
        let header = message_header(src, tag, flags, &msg);
        self.send_frame(peer, header, SendData::Message(msg));
    }

    /// Sends `msg` from PE `src` to PE `dest` of another process with a
    /// request (`CmiAsyncSend`): returns the flag that turns true once the
    /// bytes have left, or `None` if they left at once.
    pub fn send_to_pe_async(
        &self,
        src: usize,
        dest: usize,
        msg: Message,
    ) -> Option<Arc<AtomicBool>> {
        let peer = self.shared.topo.node_of(dest);
        let header = message_header(src, dest, 0, &msg);
        let req = SendRequest::new();
        if let Err(e) = self
            .module
            .isend_contig(peer, req.clone(), header, SendData::Message(msg))
        {
            self.shared.fault(peer, &e.what);
        }
        (!req.is_complete()).then(|| req.completion_flag())
    }

    fn send_control(&self, peer: usize, body: Vec<u8>) {
        let header = control_header(self.shared.me, &body);
        self.send_frame(peer, header, SendData::Bytes(body));
    }

    fn peers(&self) -> impl Iterator<Item = usize> + use<> {
        let me = self.shared.me;
        (0..self.shared.topo.num_nodes()).filter(move |&p| p != me)
    }

    /// `exit(code)` was called here: every other process ends its PEs too.
    pub fn broadcast_exit(&self, code: i32) {
        let mut body = vec![Control::Exit as u8];
        body.extend_from_slice(&code.to_le_bytes());
        for peer in self.peers() {
            self.send_control(peer, body.clone());
        }
    }

    /// Ends this process's part of the network once its PEs have all
    /// finished: the `Bye` exchange of the module comment, then the VCs are
    /// terminated and the progress thread stopped.
    pub fn shutdown(&self) {
        for peer in self.peers() {
            self.send_control(peer, vec![Control::Bye as u8]);
        }
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        while !self.peers().all(|p| state.bye[p]) {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(state);
        shared.closing.store(true, Ordering::Release);
        for peer in self.peers() {
            self.module.vc_terminate(peer);
        }
        // Both sides close after their Byes; a peer that is gone already
        // counts as closed. Bounded: the job's work is done.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut state = lock(&shared.state);
        while !self.peers().all(|p| state.terminated[p]) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            state = shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(state);
        for peer in self.peers() {
            self.module.vc_destroy(peer);
        }
        self.stop.store(true, Ordering::Release);
        self.module.wake();
        if let Some(handle) = lock(&self.progress).take() {
            let _ = handle.join();
        }
        self.module.finalize();
    }

    /// Tells the other processes this one is aborting with `text` (best
    /// effort; `abort` then ends the process).
    pub fn tell_abort(&self, text: &str) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.tell_abort(text, None);
    }
}
