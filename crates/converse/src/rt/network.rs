//! The process layer of a multi-process job (Nemesis's CH3): what frames
//! mean, the job-wide exit protocol and fault handling, over the network
//! modules (`net::netmod`) of the process.
//!
//! # Modules and routes
//!
//! A process runs one module, or two in a job that spans hosts (`++netmod
//! auto`): shm for the processes on its own host, tcp for the others. Each
//! peer's VC lives in exactly one module ([`Links`]' route), so the frames
//! between two processes all travel one way and keep their order.
//!
//! # What travels
//!
//! - A Converse message is one `Message` frame: `src` the sending PE, `tag`
//!   the destination PE (or node, with [`FLAG_NODE`]; or, with
//!   `FLAG_PERSISTENT`, a persistent channel of the receiving process,
//!   which names the PE: `rt::persistent`), the message's bytes as the
//!   body. The receiver checks everything (the body is a whole
//!   message, the sender is a PE of the job, the destination lives here)
//!   and hands it to the job through [`Receiver`] (the job's only face
//!   here), which puts it in the destination's inbox as an in-process send
//!   would.
//! - `Control` frames carry the protocol below; the body's first byte says
//!   which ([`Control`]).
//!
//! # VCs on first use
//!
//! No VC is made at start-up: a module connects one when this process
//! first sends to the peer, asking [`Upcalls::peer_card`] for the peer's
//! card, which this layer gets from the job's bootstrap (the launcher, or
//! PMI's key-value space) on demand. What this layer itself must tell
//! every process travels along the spanning tree of processes
//! (`rt::process_tree`), so a job whose PEs talk only to their tree
//! neighbours opens O(P) connections in all.
//!
//! # Handler tables
//!
//! Each process checks its PEs' handler tables against each other
//! (`Job::check_handlers`); whenever its table grows it merges it into its
//! reference table (`process_tree::HandlerRef`: per registered index, a
//! hash of the handler's type, its name and the process it came from) and
//! sends the reference to its tree neighbours (`Handlers`), which merge
//! it and pass on what grew theirs. The first difference found ends the
//! job naming the index, both processes and both handlers. Handlers are
//! identified by type, and every process runs the same binary, so equal
//! tables hash equal.
//!
//! # Exit protocol
//!
//! - `exit(code)` on any PE: its process floods `Exit(code)` over the tree;
//!   every process ends its PEs as a local `exit` would.
//! - A process whose PEs have all finished waits until nothing it sent is
//!   queued (every VC it used is then known to both ends), then takes part
//!   in the end barrier (`Done` up the tree, `AllDone` down). Released, it
//!   sends `Bye` on each VC it has ([`NetModule::connected_peers`]: the
//!   same set at both ends of each VC by then) and keeps receiving
//!   (messages for its finished PEs are dropped, as in an in-process job)
//!   until it has a `Bye` on each. All it was sent arrived before that
//!   `Bye` (frames of a VC are ordered), so nothing in flight is lost.
//!   Then it terminates those VCs and exits.
//! - A connection that breaks before the peer's `Bye`, or bytes that are not
//!   a frame stream, are a fault: the process prints which process (and so
//!   which PEs) was lost and why, tells the processes it has VCs with
//!   (`Abort`) and its launcher, which tells the others, and exits with
//!   code 1. An `Abort` from a peer ends the receiver the same way.
//!
//! # Concurrency protocol
//!
//! PEs send from their own threads straight into the module of the
//! destination's VC. One progress thread per module (`net-shm`, `net-tcp`)
//! polls it, each blocking in its own module's wait (a futex, epoll), with
//! its own [`Watch`]; upcalls run there (or on an idle PE that polls) and
//! only push to inboxes (lock-free) and update `state` (a mutex, with a
//! condvar the shutdown waits on).
//!
//! # Delivery to the polling PE
//!
//! A message arriving while the PE it is for polls the module itself (an
//! idle PE's spin, `Network::try_progress`) is the latency path of every
//! ping-pong. It skips the inbox: the upcall, on that PE's thread, puts a
//! plain message (not for a node, a persistent channel or collective
//! routing; at most 16 KiB, and at most 64 waiting) in the PE's released
//! arrivals (`Pe::take_polled_arrival`), which the PE takes before its
//! inbox, and its poll reports it. Skipped with the inbox: the job's
//! counted reference, the receive budget (these few bytes are outside it)
//! and the inbox's ticket and wake-up: five of the nine atomic
//! read-modify-writes a one-way 8-byte message over shm cost (the two
//! VC locks keep theirs), and one of its three full fences. Order holds because
//! it goes that way only while the PE's inbox is quiet (`Inbox::is_quiet`:
//! no value in it and no push under way): upcalls of one VC run one at a
//! time, in stream order (a module that keeps order must), so an earlier
//! message from the same sender was pushed (its ticket taken) before this
//! upcall, and is either taken already or in the released arrivals ahead
//! of it; a later one goes behind it (the inbox is taken after them).
//! "Empty" is not enough: the inbox's consumer sees only its next ticket,
//! and a producer stalled between taking that ticket and publishing it
//! hides every later one, an earlier message of this sender among them.
//!
//! # Progress
//!
//! While idle PEs spin they poll every module themselves
//! ([`Network::try_progress`]) and the progress threads stay out of their
//! way; a progress thread watches its module once no PE has polled for
//! the module's check period (`NetModule::watch_check`: 1 ms, tcp 100 µs),
//! or at once when a PE parks ([`Network::pe_parking`]). Checks that find
//! the PEs still polling space out, up to 1 ms (`watch_module`): each
//! takes a core from a polling PE when all are busy.
//!
//! A module that cannot hear a peer die (shm: nothing tells a process
//! that another was killed) names a period (`NetModule::peer_check_period`);
//! the progress thread then calls its `check_peers` that often, and waits
//! in the module no longer, so that a job whose launcher leaves it running
//! when one process dies ends, naming that process, instead of waiting for
//! it.
use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::msg::handler::HandlerIdent;
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{MSG_HEADER_SIZE, Message};
use crate::net::frame::{FrameHeader, FrameKind, MessageBuffers};
use crate::net::netmod::NetError;
use crate::net::netmod::{NetModule, PollDir, SendData, SendRequest, Upcalls};
use crate::proc::exit::{ABORT_EXIT_CODE, Culprit, Ending};
use crate::proc::topology::Topology;
use crate::rt::persistent::FLAG_PERSISTENT;
use crate::rt::process_tree::{EndBarrier, EndSend, Flood, HandlerEntry, HandlerRef, ProcessTree};

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
    /// The sender's reference handler table: a u32 count, then per index
    /// a u64 hash of the handler's type, the u32 process it came from, a
    /// u32 name length and the name (UTF-8).
    Handlers = 4,
    /// A piece of the sender's part of the timeline trace (`+trace`), for
    /// process 0: the bytes follow. The pieces of one process come in
    /// order, before its `Bye`.
    TracePart = 5,
    /// The sender and its subtree of processes are done (end barrier).
    Done = 6,
    /// Every process is done (end barrier, down the tree).
    AllDone = 7,
}

/// Largest piece of a trace part in one `TracePart` frame.
const TRACE_PIECE: usize = 1 << 20;

/// Whether process `me` takes a trace piece of `piece` bytes from a peer
/// that sent `have` bytes of its part so far, parts being at most `limit`
/// bytes (0: no part may come). The error says which rule it broke.
fn check_trace_piece(me: usize, have: usize, piece: usize, limit: usize) -> Result<(), String> {
    if me != 0 {
        return Err(format!(
            "sent to process {me}, which does not gather the trace"
        ));
    }
    if limit == 0 {
        return Err("the job records no trace and no stats".to_string());
    }
    if piece > TRACE_PIECE {
        return Err(format!(
            "a piece of {piece} bytes, above the {TRACE_PIECE} it sends at most"
        ));
    }
    if have + piece > limit {
        return Err(format!(
            "{} bytes in all, above the {limit} its PEs can record",
            have + piece
        ));
    }
    Ok(())
}

/// What the process layer needs of the job it delivers into: the only way
/// it reaches the job (`rt::job::Job` implements it), so the layer names no
/// job state and an MPI module or a test can stand in another receiver.
pub(crate) trait Receiver: Send + Sync {
    /// Puts `msg` in PE `pe`'s inbox and wakes the PE; gives the message
    /// back if `pe` does not live in this process.
    fn to_pe(&self, pe: usize, msg: Message) -> Result<(), Message>;
    /// Puts `msg` in node `node`'s inbox and wakes a PE of it; gives the
    /// message back if `node` does not live in this process.
    fn to_node(&self, node: usize, msg: Message) -> Result<(), Message>;
    /// Another process ended the job with `code` (`exit`).
    fn request_exit(&self, code: i32);
}

/// What the module's upcalls touch (kept apart from [`Network`] so that the
/// module, which holds it, holds no cycle).
struct Shared {
    me: usize,
    topo: Topology,
    job: OnceLock<Weak<dyn Receiver>>,
    state: Mutex<State>,
    changed: Condvar,
    /// Set while the process is ending on purpose: no more fault reports.
    closing: AtomicBool,
    /// Set once this process's PEs have all finished: arriving messages
    /// are dropped (nobody will take them) and never held back.
    draining: AtomicBool,
    /// Bytes of messages delivered to this process's inboxes and not yet
    /// taken by their PE (flow control: see "Flow control").
    in_flight: AtomicUsize,
    /// The modules and routes: what this layer's own packets go through.
    links: OnceLock<Links<Weak<dyn NetModule>>>,
    /// The spanning tree of processes this layer's protocol travels.
    tree: ProcessTree,
    /// The exit flood (see "Exit protocol").
    exit_flood: Mutex<Flood>,
    handlers: Mutex<HandlerRef>,
    /// Every process's business card, by number, on demand.
    cards: CardSource,
    /// Per peer, the bytes of its trace part received so far (process 0
    /// only; see `Control::TracePart`).
    trace_parts: Mutex<HashMap<usize, Vec<u8>>>,
    /// The most bytes a peer's trace part may hold (0: the job records
    /// no trace or stats, so none may come; see [`Network::expect_trace_parts`]).
    trace_limit: AtomicUsize,
}

struct State {
    /// Peers whose `Bye` arrived.
    bye: HashSet<usize>,
    /// Peers whose VC finished terminating.
    terminated: HashSet<usize>,
    /// The end barrier (see "Exit protocol").
    end: EndBarrier,
}

/// Where the process layer gets a peer's business card from (the job's
/// bootstrap): process number to card, or why not.
pub(crate) type CardSource =
    Box<dyn Fn(usize) -> Result<String, crate::rt::launch::BootstrapError> + Send + Sync>;

/// Why this process's network could not be set up, or a peer's business
/// card could not be had or read: the module set-up of start-up
/// (`++netmod`, `++lmt`, a module's own start), and the business-card
/// exchange of a VC's first use. Names the process where one is
/// concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetworkError {
    /// `++netmod` names no module of this build.
    UnknownModule {
        /// The name given.
        name: String,
        /// The names this build takes.
        available: Vec<&'static str>,
    },
    /// `++lmt` names no large-message mode.
    UnknownLmt {
        /// The name given.
        name: String,
    },
    /// A network module could not start (`net_module_init`).
    ModuleInit {
        /// The module's name, as `++netmod` spells it.
        module: &'static str,
        /// The module's error (naming the peer, if one is concerned).
        source: NetError,
    },
    /// Process `peer`'s business card could not be had from the bootstrap.
    Card {
        /// The process whose card was asked for.
        peer: usize,
        /// The bootstrap's error.
        source: crate::rt::launch::BootstrapError,
    },
    /// Process `peer`'s business card has no part for the module that
    /// reaches it.
    CardPart {
        /// The process whose card it is.
        peer: usize,
        /// The card.
        card: String,
        /// The module's card prefix (`tcp:`, `shm:`).
        prefix: String,
    },
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkError::UnknownModule { name, available } => {
                // The one module a build may lack: say which feature brings
                // it.
                let missing = if name == "mpi" && !available.contains(&"mpi") {
                    "; the mpi module needs a build with the mpi feature"
                } else {
                    ""
                };
                write!(
                    f,
                    "unknown network module `{name}` (this build has: {}{missing})",
                    available.join(", ")
                )
            }
            NetworkError::UnknownLmt { name } => {
                write!(f, "++lmt {name}: no such large-message mode")
            }
            NetworkError::ModuleInit { source, .. } => source.fmt(f),
            NetworkError::Card { source, .. } => source.fmt(f),
            NetworkError::CardPart { card, prefix, .. } => {
                write!(f, "its business card `{card}` has no `{prefix}` part")
            }
        }
    }
}

impl std::error::Error for NetworkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetworkError::ModuleInit { source, .. } => Some(source),
            NetworkError::Card { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl NetworkError {
    /// The process the error concerns, if one.
    pub fn process(&self) -> Option<usize> {
        match self {
            NetworkError::ModuleInit { source, .. } => source.peer,
            NetworkError::Card { peer, .. } | NetworkError::CardPart { peer, .. } => Some(*peer),
            _ => None,
        }
    }
}

/// The modules of a process, and which one carries the VC to each peer.
pub(crate) struct Links<M> {
    /// One or two modules.
    parts: Vec<M>,
    /// Per peer process, the index in `parts` of its VC's module (this
    /// process's own entry is unused).
    route: Box<[u8]>,
}

impl<M> Links<M> {
    /// `parts`, with the VC to peer `p` in `parts[route[p]]`.
    pub fn new(parts: Vec<M>, route: Vec<usize>) -> Links<M> {
        assert!(!parts.is_empty() && parts.len() <= u8::MAX as usize);
        assert!(route.iter().all(|&r| r < parts.len()));
        Links {
            parts,
            route: route.into_iter().map(|r| r as u8).collect(),
        }
    }

    /// The module of the VC to `peer`.
    #[inline]
    fn to(&self, peer: usize) -> &M {
        &self.parts[self.route[peer] as usize]
    }
}

/// One module of a process, and who watches it.
struct Part {
    module: Arc<dyn NetModule>,
    watch: Watch,
}

/// The network of one process of a multi-process job.
pub(crate) struct Network {
    shared: Arc<Shared>,
    links: Arc<Links<Part>>,
    /// What the startup line says about the job's modules.
    label: String,
    progress: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// Who watches one module for arrivals (see "Progress" in the module
/// comment).
#[derive(Default)]
struct Watch {
    /// Bumped by every poll of an idle PE.
    polls: AtomicU64,
    /// Set by a PE about to park; the progress thread then watches at once.
    handover: Mutex<bool>,
    /// The progress thread waits in the module with no deadline: a PE that
    /// posts bytes wakes it (it flushes before each wait).
    blocked: AtomicBool,
    wake: Condvar,
}

/// Bytes of received messages a process holds for its PEs before it stops
/// reading from the network (the senders then wait: flow control).
const RECV_BUDGET: usize = 8 << 20;

/// What one received message costs the budget beyond its bytes: its heap
/// block and its place in an inbox.
const MSG_OVERHEAD: usize = 64;

/// Bytes queued for one peer process below which a sending PE that waited
/// ([`Network::over_high_water`]: more than the module's
/// `NetModule::send_window`) goes on: half the window and a little more,
/// not less. A stream of large messages (4 MiB of payload each, lent to the
/// peer until it has read them, in the default window of 8 MiB) then
/// resumes while the peer still has one to read, so the peer never waits
/// for the sender's next copy. The margin covers a message's header: with
/// exactly half, one 4 MiB message left (4 MiB + its header) was over the
/// mark, and the sender waited until the peer had read both (measured: its
/// copies and the peer's reads then took turns, 3-4 GB/s).
fn send_low_water(window: usize) -> usize {
    window / 2 + (64 << 10)
}

/// Messages at least this long that a PE sends by copy (`sync_send`) to a
/// module that gathers are written from the sender's buffer
/// ([`Network::send_borrowed`]), which saves the copy `sync_send` makes
/// (and the memory it holds while queued); smaller ones are copied and
/// posted, so that a burst of them costs one system call, not one each.
pub(crate) const BORROWED_SEND_MIN: usize = 64 << 10;

/// How long the progress thread waits in its module while sends are queued
/// that no PE flushed, before it flushes them again.
const WATCH_CHECK: Duration = Duration::from_millis(1);

/// The longest a progress thread leaves its module to polling PEs between
/// two checks, after a run of checks that found them polling (see
/// `watch_module`); a module's own check period if that is longer.
const CHECK_BACKOFF_MAX: Duration = Duration::from_millis(1);

/// Bytes a microsecond (1 GB/s) that arrived between two checks make the
/// traffic a stream, whose checks keep the module's period (see
/// `watch_module`).
const STREAM_BYTES_PER_US: u64 = 1000;

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
        self.die(&text, Culprit::Peer(peer))
    }

    /// Ends the process (`proc::exit::die`), saying which process
    /// ends the job and why; the at-exit hook ([`Shared::on_dying`]) tells
    /// the others as `culprit` says.
    fn die(&self, text: &str, culprit: Culprit) -> ! {
        let line = format!(
            "converse: process {} ({}) ending the job: {text}",
            self.me,
            self.pes_of(self.me)
        );
        crate::proc::exit::die(
            ABORT_EXIT_CODE,
            &line,
            Ending {
                reason: text,
                culprit,
            },
        )
    }

    /// The process is ending abnormally (an at-exit hook): no more fault
    /// reports, and the other processes are told why unless they know.
    fn on_dying(&self, ending: &Ending) {
        self.closing.store(true, Ordering::Release);
        // When the job ended elsewhere, the others are told too: they may
        // see this process's connections close before the news reaches
        // them (frames of a VC keep their order, so this comes first).
        let skip = match ending.culprit {
            Culprit::ThisProcess { skip } => skip,
            Culprit::Peer(peer) => Some(peer),
            Culprit::Elsewhere => None,
        };
        self.tell_abort(ending.reason, skip);
    }

    /// Sends `Abort(text)` to every peer it has a VC with but `skip`,
    /// best effort (the launcher tells the others).
    fn tell_abort(&self, text: &str, skip: Option<usize>) {
        let Some(links) = self.links.get() else {
            return;
        };
        let mut body = vec![Control::Abort as u8];
        body.extend_from_slice(text.as_bytes());
        for module in links.parts.iter().filter_map(Weak::upgrade) {
            for peer in module.connected_peers() {
                if Some(peer) == skip
                    || links
                        .to(peer)
                        .upgrade()
                        .is_none_or(|m| !Arc::ptr_eq(&m, &module))
                {
                    continue;
                }
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
    }

    /// Sends one of this layer's packets to `peer` (connecting the VC if
    /// it has none). A failure is a fault unless the process is ending.
    fn send_control(&self, peer: usize, body: Vec<u8>) {
        let Some(module) = self.links.get().and_then(|l| l.to(peer).upgrade()) else {
            return;
        };
        let header = control_header(self.me, &body);
        if let Err(e) = module.istart_contig(peer, header, SendData::Bytes(body)) {
            self.send_failed(peer, &e.what);
        }
    }

    /// A send to `peer` failed: a fault, unless this process is ending
    /// anyway (its connections are being closed) or the peer said goodbye.
    fn send_failed(&self, peer: usize, why: &str) {
        if crate::proc::exit::is_dying()
            || self.closing.load(Ordering::Acquire)
            || lock(&self.state).bye.contains(&peer)
        {
            return;
        }
        self.fault(peer, why)
    }

    /// Sends what the end barrier says.
    fn send_end(&self, sends: Vec<EndSend>) {
        for send in sends {
            let (to, op) = match send {
                EndSend::Done(to) => (to, Control::Done),
                EndSend::AllDone(to) => (to, Control::AllDone),
            };
            self.send_control(to, vec![op as u8]);
        }
    }

    /// The exit flood reached this process from `from` (`None`: it starts
    /// here): passes it on, the first time.
    fn flood_exit(&self, code: i32, from: Option<usize>) {
        let to = lock(&self.exit_flood).reach(&self.tree, from);
        let mut body = vec![Control::Exit as u8];
        body.extend_from_slice(&code.to_le_bytes());
        for peer in to {
            self.send_control(peer, body.clone());
        }
    }

    /// Merges `table` (from `from`; `None`: this process's own) into the
    /// reference table and passes the reference on if it grew; a
    /// difference ends the job.
    fn merge_handlers(&self, table: &[HandlerEntry], from: Option<usize>) {
        let mut reference = lock(&self.handlers);
        match reference.merge(table) {
            Ok(false) => {}
            Ok(true) => {
                let body = encode_handlers(reference.entries());
                drop(reference);
                for peer in self.tree.neighbours().filter(|&n| Some(n) != from) {
                    self.send_control(peer, body.clone());
                }
            }
            Err(m) => {
                drop(reference);
                self.handler_mismatch(
                    m.at,
                    (m.ours.origin, &m.ours.name),
                    (m.theirs.origin, &m.theirs.name),
                    from,
                )
            }
        }
    }

    fn on_message(&self, peer: usize, h: FrameHeader, body: Vec<u8>) {
        if self.draining.load(Ordering::Acquire) {
            return;
        }
        match Message::from_bytes(&body) {
            Ok(msg) => self.deliver(peer, h, msg),
            Err(e) => self.fault(peer, &format!("malformed message: {e}")),
        }
    }

    /// Checks a message from `peer` and puts it in its destination's inbox.
    fn deliver(&self, peer: usize, h: FrameHeader, mut msg: Message) {
        // The original sender (a forwarded broadcast copy keeps its root's
        // number), so any PE of the job.
        let src = h.src as usize;
        if src >= self.topo.num_pes() {
            self.fault(
                peer,
                &format!(
                    "malformed message: it claims to come from PE {src}, which does not exist"
                ),
            );
        }
        msg.set_src_pe(src);
        let mut msg = match self.to_polling_pe(&h, msg) {
            Ok(()) => return,
            Err(msg) => msg,
        };
        let Some(job) = self.job.get().and_then(Weak::upgrade) else {
            return;
        };
        if self.draining.load(Ordering::Acquire) {
            return;
        }
        msg.mark_from_net();
        self.in_flight
            .fetch_add(msg.len() + MSG_OVERHEAD, Ordering::AcqRel);
        let dest = match destination(&h) {
            Ok(dest) => dest,
            Err(why) => self.fault(peer, &format!("malformed message: {why}")),
        };
        if h.flags & FLAG_NODE != 0 {
            if job.to_node(dest, msg).is_err() {
                self.fault(
                    peer,
                    &format!("malformed message: it is for node {dest}, which is not this process"),
                );
            }
        } else if job.to_pe(dest, msg).is_err() {
            self.fault(
                peer,
                &format!("malformed message: it is for PE {dest}, which is not on this process"),
            );
        }
    }

    /// The fast path of [`Shared::deliver`] (see "Delivery to the polling
    /// PE"): a plain message for the PE whose thread is polling the module
    /// goes straight to that PE's released arrivals. Gives the message
    /// back when it cannot go that way.
    #[inline]
    fn to_polling_pe(&self, h: &FrameHeader, msg: Message) -> Result<(), Message> {
        if h.flags & (FLAG_NODE | FLAG_PERSISTENT) != 0
            || msg.header().flags & crate::msg::message::ARRIVAL_FLAGS != 0
        {
            return Err(msg);
        }
        let Some(job) = self.job.get() else {
            return Err(msg);
        };
        let job = Weak::as_ptr(job) as *const ();
        crate::rt::pe::hand_to_polling_pe(job, h.tag as usize, msg)
    }

    fn on_control(&self, peer: usize, body: &[u8]) {
        match body.first().copied() {
            Some(op) if op == Control::Exit as u8 && body.len() == 5 => {
                let code = i32::from_le_bytes(body[1..5].try_into().expect("4 bytes"));
                self.flood_exit(code, Some(peer));
                if let Some(job) = self.job.get().and_then(Weak::upgrade) {
                    job.request_exit(code);
                }
            }
            Some(op) if op == Control::Bye as u8 && body.len() == 1 => {
                lock(&self.state).bye.insert(peer);
                self.changed.notify_all();
            }
            Some(op) if op == Control::Done as u8 && body.len() == 1 => {
                if !self.tree.children().any(|c| c == peer) {
                    self.fault(
                        peer,
                        "a `Done` from a process that is not a child in the tree",
                    );
                }
                let sends = lock(&self.state).end.child_done();
                match sends {
                    Ok(sends) => {
                        self.send_end(sends);
                        self.changed.notify_all();
                    }
                    Err(why) => self.fault(peer, &why),
                }
            }
            Some(op) if op == Control::AllDone as u8 && body.len() == 1 => {
                if self.tree.parent() != Some(peer) {
                    self.fault(
                        peer,
                        "an `AllDone` from a process that is not the parent in the tree",
                    );
                }
                let sends = lock(&self.state).end.all_done();
                match sends {
                    Ok(sends) => {
                        self.send_end(sends);
                        self.changed.notify_all();
                    }
                    Err(why) => self.fault(peer, &why),
                }
            }
            Some(op) if op == Control::Handlers as u8 => {
                match decode_handlers(&body[1..], self.topo.num_nodes()) {
                    Some(table) => self.merge_handlers(&table, Some(peer)),
                    None => self.fault(
                        peer,
                        &format!("malformed handler table of {} bytes", body.len()),
                    ),
                }
            }
            Some(op) if op == Control::TracePart as u8 => {
                let mut parts = lock(&self.trace_parts);
                let limit = self.trace_limit.load(Ordering::Relaxed);
                let have = parts.get(&peer).map_or(0, Vec::len);
                match check_trace_piece(self.me, have, body.len() - 1, limit) {
                    Ok(()) => parts.entry(peer).or_default().extend_from_slice(&body[1..]),
                    Err(why) => {
                        drop(parts);
                        self.fault(peer, &format!("malformed trace part: {why}"));
                    }
                }
            }
            Some(op) if op == Control::Abort as u8 => {
                let text = String::from_utf8_lossy(&body[1..]).into_owned();
                self.die(
                    &format!("process {peer} ({}) ended it: {text}", self.pes_of(peer)),
                    Culprit::Elsewhere,
                )
            }
            _ => self.fault(
                peer,
                &format!("malformed control packet of {} bytes", body.len()),
            ),
        }
    }
}

impl Shared {
    /// Ends the job: processes `a` and `b` registered different handlers
    /// at registered position `k`. `skip`: a process not to tell (the one
    /// whose frame is being received: its VC's receive side is locked, and
    /// it finds the difference itself, holding both tables).
    fn handler_mismatch(
        &self,
        k: usize,
        (a, name_a): (usize, &str),
        (b, name_b): (usize, &str),
        skip: Option<usize>,
    ) -> ! {
        self.die(
            &format!(
                "handler tables differ between processes at index {}: process {a} ({}) registered `{name_a}` there \
                 but process {b} ({}) registered `{name_b}` (every PE must register the same handlers in the same order)",
                crate::msg::handler::registered_index(k),
                self.pes_of(a),
                self.pes_of(b)
            ),
            Culprit::ThisProcess { skip },
        )
    }
}

/// A handler type's hash: the same in every process of the job (one
/// binary), whatever the process.
fn handler_hash(ident: &HandlerIdent) -> u64 {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new` has fixed keys: deterministic across processes.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ident.type_id.hash(&mut h);
    ident.key.hash(&mut h);
    h.finish()
}

/// The body of a `Handlers` packet carrying `table` (`rt::scale_model`
/// counts its bytes with it).
pub(super) fn encode_handlers(table: &[HandlerEntry]) -> Vec<u8> {
    let mut body = vec![Control::Handlers as u8];
    body.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for e in table {
        body.extend_from_slice(&e.hash.to_le_bytes());
        body.extend_from_slice(&(e.origin as u32).to_le_bytes());
        body.extend_from_slice(&(e.name.len() as u32).to_le_bytes());
        body.extend_from_slice(e.name.as_bytes());
    }
    body
}

/// Decodes a `Handlers` body (after its first byte) of a job of `nodes`
/// processes; `None` if malformed.
fn decode_handlers(mut b: &[u8], nodes: usize) -> Option<Vec<HandlerEntry>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.len() >= n).then(|| b.split_at(n))?;
        *b = rest;
        Some(head)
    }
    let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
    // Each entry takes at least 16 bytes: no allocation beyond the body.
    if count > b.len() / 16 {
        return None;
    }
    let mut table = Vec::with_capacity(count);
    for _ in 0..count {
        let hash = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
        let origin = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        let len = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        let name = String::from_utf8_lossy(take(&mut b, len)?).into_owned();
        if origin >= nodes {
            return None;
        }
        table.push(HandlerEntry { hash, name, origin });
    }
    b.is_empty().then_some(table)
}

/// The frame header of a message from PE `src` to `tag` (a PE, or a node
/// with [`FLAG_NODE`]).
fn message_header(src: usize, tag: usize, flags: u8, msg: &Message) -> FrameHeader {
    debug_assert_eq!(
        msg.header().total_size as usize,
        msg.len(),
        "stamped before sending"
    );
    message_header_for(src, tag, flags, msg.len())
}

/// The frame header of a message of `len` bytes.
fn message_header_for(src: usize, tag: usize, flags: u8, len: usize) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Message,
        flags,
        len: len as u32,
        src: src as u32,
        tag: tag as u32,
    }
}

/// The PE (or node, with [`FLAG_NODE`]) a `Message` frame is for, or why
/// its header names none: with `FLAG_PERSISTENT` the tag is a channel of
/// this process, which names the PE (and a node flag beside it is
/// malformed).
fn destination(h: &FrameHeader) -> Result<usize, String> {
    if h.flags & FLAG_PERSISTENT == 0 {
        return Ok(h.tag as usize);
    }
    if h.flags & FLAG_NODE != 0 {
        return Err("it is flagged both for a node and for a persistent channel".to_string());
    }
    crate::rt::persistent::receivers()
        .destination(h.tag)
        .ok_or_else(|| {
            format!(
                "it came on persistent channel {}, which is not open in this process (closed by its sender's destroy before this message, or never opened)",
                h.tag
            )
        })
}

/// Aborts the job if `msg` is too large to cross processes.
fn check_crosses(msg: &Message) {
    if msg.len() > crate::net::frame::DEFAULT_MAX_PAYLOAD {
        crate::proc::exit::abort(&format!(
            "a message of {} bytes to another process: the largest that crosses processes is {} bytes",
            msg.len(),
            crate::net::frame::DEFAULT_MAX_PAYLOAD
        ));
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
        lock(&self.state).terminated.insert(peer);
        self.changed.notify_all();
    }

    fn message(&self, peer: usize, header: FrameHeader, msg: Message) {
        if msg.header().total_size as usize != msg.len() {
            self.fault(
                peer,
                &format!(
                    "malformed message: {}",
                    crate::msg::message::MsgError::SizeMismatch {
                        header: msg.header().total_size,
                        actual: msg.len()
                    }
                ),
            );
        }
        self.deliver(peer, header, msg)
    }

    fn message_buffers(&self) -> Option<Arc<dyn MessageBuffers>> {
        Some(crate::rt::persistent::receivers().clone())
    }

    fn peer_card(&self, peer: usize, prefix: &str) -> Result<String, NetError> {
        // The module interface carries its faults as `NetError`s: the
        // typed error is said in its words.
        let card = (self.cards)(peer).map_err(|source| {
            NetError::peer(peer, NetworkError::Card { peer, source }.to_string())
        })?;
        match card.split(',').find(|part| part.starts_with(prefix)) {
            Some(part) => Ok(part.to_string()),
            None => {
                let e = NetworkError::CardPart {
                    peer,
                    prefix: prefix.to_string(),
                    card,
                };
                Err(NetError::peer(peer, e.to_string()))
            }
        }
    }

    fn room(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) <= RECV_BUDGET
            || self.draining.load(Ordering::Acquire)
    }

    fn vc_failed(&self, peer: usize, why: String) {
        if lock(&self.state).bye.contains(&peer) || self.closing.load(Ordering::Acquire) {
            // It said goodbye first: a close now is the end, not a fault.
            return;
        }
        self.fault(peer, &why)
    }
}

impl Network {
    /// The network of process `me` of a job laid out as `topo` (one node per
    /// process), over `links`; `set_upcalls` gets the upcalls to give every
    /// module before its VCs are connected. `label` names the job's modules
    /// for the startup line.
    /// The protocol's spanning tree of processes has branching factor
    /// `branch`; `cards` gives a peer's business card when a module first
    /// connects to it.
    pub fn new(
        me: usize,
        topo: Topology,
        links: Links<Arc<dyn NetModule>>,
        label: String,
        branch: usize,
        cards: CardSource,
        set_upcalls: impl FnOnce(Arc<dyn Upcalls>),
    ) -> Network {
        // Messages between two PEs must arrive in the order sent; this layer
        // adds no sequence numbers, so the modules must keep VC order.
        for module in &links.parts {
            assert!(
                module.ordering(),
                "network module {} does not keep order on a VC",
                module.name()
            );
        }
        assert_eq!(links.route.len(), topo.num_nodes(), "a route per process");
        let nodes = topo.num_nodes();
        let tree = ProcessTree::new(nodes, branch, me);
        let shared = Arc::new(Shared {
            me,
            topo,
            job: OnceLock::new(),
            state: Mutex::new(State {
                bye: HashSet::new(),
                terminated: HashSet::new(),
                end: EndBarrier::new(tree),
            }),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            links: OnceLock::new(),
            tree,
            exit_flood: Mutex::new(Flood::default()),
            handlers: Mutex::new(HandlerRef::default()),
            cards,
            trace_parts: Mutex::new(HashMap::new()),
            trace_limit: AtomicUsize::new(0),
        });
        let _ = shared.links.set(Links {
            parts: links.parts.iter().map(Arc::downgrade).collect(),
            route: links.route.clone(),
        });
        set_upcalls(shared.clone());
        let dying = Arc::downgrade(&shared);
        crate::proc::exit::at_exit(move |ending| {
            if let Some(shared) = dying.upgrade() {
                shared.on_dying(ending);
            }
        });
        let parts = links
            .parts
            .into_iter()
            .map(|module| Part {
                module,
                watch: Watch::default(),
            })
            .collect();
        Network {
            shared,
            links: Arc::new(Links {
                parts,
                route: links.route,
            }),
            label,
            progress: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The module of the VC to `peer`.
    #[inline]
    fn module(&self, peer: usize) -> &dyn NetModule {
        &*self.links.to(peer).module
    }

    /// Receives what has arrived, on the calling thread (an idle PE).
    #[inline]
    pub fn try_progress(&self) -> bool {
        let mut moved = false;
        for part in &self.links.parts {
            // Any change tells the progress thread that PEs poll: a plain
            // load and store, not a read-modify-write, on this hot path (a
            // count lost to a race between two PEs still changes the value).
            let polls = part.watch.polls.load(Ordering::Relaxed);
            part.watch
                .polls
                .store(polls.wrapping_add(1), Ordering::Relaxed);
            moved |= part.module.try_progress();
        }
        moved
    }

    /// Every module of this process.
    fn modules(&self) -> impl Iterator<Item = &dyn NetModule> {
        self.links.parts.iter().map(|p| &*p.module)
    }

    /// A PE took a message this layer delivered (one marked
    /// `from_net`): its bytes leave the receive budget.
    pub fn consumed(&self, len: usize) {
        let bytes = len + MSG_OVERHEAD;
        let before = self.shared.in_flight.fetch_sub(bytes, Ordering::AcqRel);
        if before > RECV_BUDGET && before - bytes <= RECV_BUDGET {
            self.modules().for_each(|m| m.resume_receiving());
        }
    }

    /// True if so much is queued for node `node` that a sending PE should
    /// wait (and meanwhile take its own messages) before sending more.
    #[inline]
    pub fn over_high_water(&self, node: usize) -> bool {
        let module = self.module(node);
        module.backlog(node) > module.send_window()
    }

    /// True once the queue for node `node` is low enough to send again.
    pub fn below_low_water(&self, node: usize) -> bool {
        let module = self.module(node);
        module.backlog(node) <= send_low_water(module.send_window())
    }

    /// A PE that was polling parks: the progress thread watches the network
    /// now, at once.
    pub fn pe_parking(&self) {
        for part in &self.links.parts {
            *lock(&part.watch.handover) = true;
            part.watch.wake.notify_one();
        }
    }

    /// The job's modules as the startup line names them (`++netmod`).
    pub fn module_name(&self) -> &str {
        &self.label
    }

    /// Starts delivering into `job`, and a progress thread per module.
    pub fn start(&self, job: &Arc<impl Receiver + 'static>) {
        let weak: Weak<dyn Receiver> = Arc::downgrade(job) as Weak<dyn Receiver>;
        let _ = self.shared.job.set(weak);
        let mut threads = lock(&self.progress);
        for index in 0..self.links.parts.len() {
            let (links, stop, shared) =
                (self.links.clone(), self.stop.clone(), self.shared.clone());
            let name = format!("net-{}", links.parts[index].module.name());
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let part = &links.parts[index];
                    watch_module(&*part.module, &part.watch, &stop, &shared)
                })
                .unwrap_or_else(|e| {
                    crate::proc::exit::abort(&format!("cannot start the network thread: {e}"))
                });
            threads.push(handle);
        }
    }

    /// A send to `peer` failed: see [`Shared::send_failed`].
    fn send_failed(&self, peer: usize, why: &str) {
        self.shared.send_failed(peer, why)
    }

    /// Sends `msg` to PE `dest` of another process. Its sender, as
    /// `src_pe` will say on arrival, is the one recorded in `msg` (the PE
    /// that sent it first, for a copy forwarded along a tree). Returns true
    /// if bytes wait for [`Network::flush`].
    pub fn send_to_pe(&self, dest: usize, msg: Message) -> bool {
        self.send_message(dest, 0, self.shared.topo.node_of(dest), msg)
    }

    /// Sends `msg` to PE `dest` of another process on persistent channel
    /// `channel` of that process (see `rt::persistent`); as
    /// [`Network::send_to_pe`].
    pub fn send_on_channel(&self, dest: usize, channel: u32, msg: Message) -> bool {
        let node = self.shared.topo.node_of(dest);
        self.send_message(channel as usize, FLAG_PERSISTENT, node, msg)
    }

    /// Sends `msg` to node `node` (another process); as
    /// [`Network::send_to_pe`].
    pub fn send_to_node(&self, node: usize, msg: Message) -> bool {
        self.send_message(node, FLAG_NODE, node, msg)
    }

    /// True if a copying send of a large message to node `node` goes
    /// straight from the caller's buffer ([`Network::send_borrowed`]): the
    /// node's VC's module gathers.
    #[inline]
    pub fn gathers_to(&self, node: usize) -> bool {
        self.module(node).gathers()
    }

    /// True if the module to process `node` copies straight between the
    /// two processes' memory (`NetModule::copies_peer_memory`).
    pub fn copies_memory_of(&self, node: usize) -> bool {
        self.module(node).copies_peer_memory(node)
    }

    /// Copies `len` bytes at `src` to `addr` in process `node` (see
    /// [`Network::copies_memory_of`]).
    ///
    /// # Safety
    /// `src` valid for reads of `len` bytes while the copy runs.
    pub unsafe fn write_memory_of(
        &self,
        node: usize,
        addr: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), String> {
        // SAFETY: the caller's promise.
        unsafe { self.module(node).write_peer_memory(node, addr, src, len) }
            .map_err(|e| e.to_string())
    }

    /// Copies `len` bytes at `addr` of process `node` to `dst`.
    ///
    /// # Safety
    /// As `NetModule::read_peer_memory`: `dst` valid for `len` bytes of
    /// writes, read by no one meanwhile.
    pub unsafe fn read_memory_of(
        &self,
        node: usize,
        addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), String> {
        // SAFETY: the caller's promise.
        unsafe { self.module(node).read_peer_memory(node, addr, dst, len) }
            .map_err(|e| e.to_string())
    }

    /// Sends a copy of `msg`, stamped as a user message from PE `src`, to
    /// `tag` (a PE, or a node with [`FLAG_NODE`]) on process `peer`: written
    /// from `msg`'s own bytes as far as the network takes them at once, the
    /// rest copied (`sync_send` without a copy of its own); `flow` goes in
    /// the header's `coll` (the trace's number, 0 for none). Returns true
    /// if bytes wait for [`Network::flush`].
    pub fn send_borrowed(
        &self,
        tag: usize,
        flags: u8,
        peer: usize,
        src: usize,
        msg: &Message,
        flow: u32,
    ) -> bool {
        check_crosses(msg);
        // The stamp a sent copy would get (`Pe::stamp_user_message`): the
        // true size, no runtime flags, and the trace's flow number (0:
        // none, `trace`). The sender travels in the frame.
        let mut head = *msg.header();
        head.total_size = msg.len() as u32;
        head.flags = 0;
        head.coll = flow;
        let header = message_header_for(src, tag, flags, msg.len());
        let part = self.links.to(peer);
        let iov: [&[u8]; 2] = [
            bytemuck::bytes_of(&head),
            &msg.as_bytes()[MSG_HEADER_SIZE..],
        ];
        if let Err(e) = part
            .module
            .send_noncontig(peer, SendRequest::new(), header, &iov)
        {
            self.send_failed(peer, &e.what);
            return false;
        }
        self.wake_watcher(part);
        part.module.backlog(peer) > 0
    }

    /// Messages are posted, not written at once: the sending PE flushes
    /// them ([`Network::flush`]) when it next looks for work, so a handler
    /// that sends many costs one system call per batch.
    fn send_message(&self, tag: usize, flags: u8, peer: usize, msg: Message) -> bool {
        check_crosses(&msg);
        let header = message_header(msg.src_pe(), tag, flags, &msg);
        let part = self.links.to(peer);
        match part
            .module
            .post_contig(peer, header, SendData::Message(msg))
        {
            Ok(true) => {}
            // Written already (or never to be): nothing for anyone to flush.
            Ok(false) => return false,
            Err(e) => {
                self.send_failed(peer, &e.what);
                return false;
            }
        }
        self.wake_watcher(part);
        true
    }

    /// A progress thread waiting without a deadline would not see bytes
    /// just queued if their PE went on computing: have it look. (The fences
    /// pair with the progress thread's: it publishes `blocked` then looks
    /// for queued bytes; this publishes bytes then looks at `blocked`. One
    /// of the two sees the other.)
    #[inline]
    fn wake_watcher(&self, part: &Part) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if part.watch.blocked.load(Ordering::SeqCst) {
            part.module.wake();
        }
    }

    /// Writes the messages posted by this process's sends.
    #[inline]
    pub fn flush(&self) {
        self.modules().for_each(|m| {
            m.flush_all();
        });
    }

    fn send_control(&self, peer: usize, body: Vec<u8>) {
        self.shared.send_control(peer, body)
    }

    /// The peers this process has a VC with, in every module.
    fn connected_peers(&self) -> Vec<usize> {
        let mut peers: Vec<usize> = self.modules().flat_map(|m| m.connected_peers()).collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }

    /// This process's handler table grew to `table` (registered
    /// positions): merges it into the reference table, which goes to the
    /// tree neighbours if it grew (see "Handler tables").
    pub fn handlers_registered(&self, table: &[HandlerIdent]) {
        let me = self.shared.me;
        let own: Vec<HandlerEntry> = table
            .iter()
            .map(|ident| HandlerEntry {
                hash: handler_hash(ident),
                name: ident.described(),
                origin: me,
            })
            .collect();
        self.shared.merge_handlers(&own, None);
    }

    /// The job records a trace or stats (process 0 gathers them): a
    /// peer's part may hold up to `limit` bytes; more ends the job.
    pub fn expect_trace_parts(&self, limit: usize) {
        self.shared.trace_limit.store(limit, Ordering::Relaxed);
    }

    /// Sends this process's part of the timeline trace to process 0, in
    /// pieces, ahead of its `Bye` (see [`Network::shutdown`]).
    pub fn send_trace_part(&self, bytes: &[u8]) {
        for piece in bytes.chunks(TRACE_PIECE) {
            let mut body = Vec::with_capacity(piece.len() + 1);
            body.push(Control::TracePart as u8);
            body.extend_from_slice(piece);
            self.send_control(0, body);
        }
    }

    /// The trace parts the other processes sent (process 0, after
    /// [`Network::shutdown`]: every peer's `Bye` came after its part), by
    /// process; empty for a process that sent none.
    pub fn take_trace_parts(&self) -> Vec<(usize, Vec<u8>)> {
        let mut parts = lock(&self.shared.trace_parts);
        let me = self.shared.me;
        (0..self.shared.topo.num_nodes())
            .filter(|&p| p != me)
            .map(|p| (p, parts.remove(&p).unwrap_or_default()))
            .collect()
    }

    /// `exit(code)` was called here: every other process ends its PEs too
    /// (the exit flood).
    pub fn broadcast_exit(&self, code: i32) {
        self.shared.flood_exit(code, None);
    }

    /// Ends this process's part of the network once its PEs have all
    /// finished: the end barrier and the `Bye` exchange of the module
    /// comment, then the VCs are terminated and the progress threads
    /// stopped.
    pub fn shutdown(&self) {
        let shared = &self.shared;
        shared.draining.store(true, Ordering::Release);
        self.modules().for_each(|m| m.resume_receiving());
        // Nothing this process sent may still wait for its connection, nor
        // be queued: every VC it used is then known to the peer before the
        // barrier lets it end.
        let mut pause = Duration::from_micros(20);
        loop {
            self.flush();
            if self.modules().all(|m| !m.has_queued() && m.settled()) {
                break;
            }
            self.pe_parking();
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        let sends = lock(&shared.state).end.own_done();
        shared.send_end(sends);
        // No PE polls from here on: the progress threads watch at once
        // (else the peers' packets wait up to a check period, 1 ms, for one
        // to look; measured on every job's end).
        self.pe_parking();
        let mut state = lock(&shared.state);
        while !state.end.released() {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(state);
        let peers = self.connected_peers();
        for &peer in &peers {
            self.send_control(peer, vec![Control::Bye as u8]);
        }
        let mut state = lock(&shared.state);
        while !peers.iter().all(|p| state.bye.contains(p)) {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(state);
        shared.closing.store(true, Ordering::Release);
        for &peer in &peers {
            self.module(peer).vc_terminate(peer);
        }
        // Both sides close after their Byes. A VC terminates once what was
        // sent on it has left and every large message lent to the peer has
        // been read (the peer reads it before it sees our Bye, which comes
        // after it); a peer that dies instead is reported by the launcher,
        // which ends this process. So the wait needs no deadline.
        let mut state = lock(&shared.state);
        while !peers.iter().all(|p| state.terminated.contains(p)) {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(state);
        for &peer in &peers {
            self.module(peer).vc_destroy(peer);
        }
        self.stop.store(true, Ordering::Release);
        for part in &self.links.parts {
            part.module.wake();
            part.watch.wake.notify_one();
        }
        for handle in lock(&self.progress).drain(..) {
            let _ = handle.join();
        }
        self.modules().for_each(|m| m.finalize());
    }
}

/// A module's progress thread: until `stop`, watches `module` whenever no
/// idle PE polls it (see "Progress" in the module comment).
fn watch_module(module: &dyn NetModule, watch: &Watch, stop: &AtomicBool, shared: &Shared) {
    // Watching: no PE polled during the last wait in the module (they are
    // parked, or busy in handlers), so this thread goes on watching at
    // once. Without it, the first arrival after the one that ended the
    // wait waited up to a check period (1 ms; measured 0.45-1.07 ms of a
    // 2 ms one-way of 4 MiB over shm, the receiving PE parked).
    let mut watching = false;
    // How long the next check leaves the module to polling PEs: the
    // module's period, doubled after every check that found them still
    // polling while less than `STREAM_BYTES_PER_US` arrived, up to
    // `CHECK_BACKOFF_MAX`, and back to the module's period after any
    // other check. Each check wakes this thread, which on a machine whose
    // cores all run polling PEs takes a core from one of them (two context
    // switches): a ping-pong of 8 KiB over tcp, whose PEs poll throughout,
    // took 11,877 of them for 20,000 messages with a fixed 100 µs, 1,782
    // with 1 ms. A stream keeps the short period: its receiving PE may stop
    // polling to run a handler while the socket fills, and the sender then
    // waits for the check (spacing the checks out regardless cost a stream
    // of 4 MiB messages over tcp 10-30% of its bandwidth).
    let check = module.watch_check();
    let longest = check.max(CHECK_BACKOFF_MAX);
    let mut period = check;
    let mut received = module.bytes_received();
    let peer_check = module.peer_check_period();
    let mut peers_checked = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        // Peers the module cannot hear die: looked at on this thread's
        // rounds, whether or not the PEs poll (they may spin for ever
        // waiting for a dead one).
        if let Some(every) = peer_check
            && peers_checked.elapsed() >= every
        {
            module.check_peers();
            peers_checked = std::time::Instant::now();
        }
        // While idle PEs poll, stay out of their way; watch once none has
        // polled for a while, or one parks.
        let seen = watch.polls.load(Ordering::Relaxed);
        let handed = {
            let flag = lock(&watch.handover);
            let mut flag = if *flag || watching {
                flag
            } else {
                watch
                    .wake
                    .wait_timeout(flag, period)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            };
            std::mem::take(&mut *flag) || watching
        };
        let now_received = module.bytes_received();
        let streamed = now_received.wrapping_sub(received) as u128
            >= STREAM_BYTES_PER_US as u128 * period.as_micros();
        received = now_received;
        if !handed && watch.polls.load(Ordering::Relaxed) != seen {
            period = if streamed {
                check
            } else {
                (period * 2).min(longest)
            };
            continue;
        }
        period = check;
        // Posted bytes that no PE flushed (it went on computing) leave
        // within a check period.
        module.flush_all();
        watch.blocked.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let timeout = match (module.has_queued().then_some(WATCH_CHECK), peer_check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let polled = module.poll(PollDir::InFirst, timeout);
        watch.blocked.store(false, Ordering::SeqCst);
        watching = watch.polls.load(Ordering::Relaxed) == seen;
        if let Err(e) = polled {
            shared.die(
                &format!("network failure: {e}"),
                Culprit::ThisProcess { skip: None },
            );
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn trace_pieces_are_checked_before_they_are_kept() {
        assert_eq!(check_trace_piece(0, 0, 100, 1 << 20), Ok(()));
        let err = |me, have, piece, limit| check_trace_piece(me, have, piece, limit).unwrap_err();
        assert!(err(1, 0, 100, 1 << 20).contains("process 1, which does not gather"));
        assert!(err(0, 0, 100, 0).contains("records no trace and no stats"));
        assert!(err(0, 0, TRACE_PIECE + 1, usize::MAX).contains("above the 1048576 it sends"));
        assert!(err(0, 900, 200, 1000).contains("1100 bytes in all, above the 1000"));
        assert_eq!(check_trace_piece(0, 800, 200, 1000), Ok(()));
    }
    use super::*;

    #[test]
    fn network_errors_read_as_start_up_said_and_chain_to_their_cause() {
        use crate::rt::launch::BootstrapError;
        use std::error::Error as _;
        let e = NetworkError::UnknownModule {
            name: "carrier-pigeon".into(),
            available: vec!["shm", "tcp", "auto"],
        };
        assert_eq!(
            e.to_string(),
            "unknown network module `carrier-pigeon` (this build has: shm, tcp, auto)"
        );
        assert!(e.source().is_none() && e.process().is_none());
        let e = NetworkError::UnknownModule {
            name: "mpi".into(),
            available: vec!["shm", "tcp", "auto"],
        };
        assert!(
            e.to_string()
                .ends_with("; the mpi module needs a build with the mpi feature)"),
            "{e}"
        );
        let fault = NetError::peer(2, "tcp: cannot listen");
        let e = NetworkError::ModuleInit {
            module: "tcp",
            source: fault.clone(),
        };
        assert_eq!(e.to_string(), "process 2: tcp: cannot listen");
        assert_eq!(e.source().unwrap().downcast_ref::<NetError>(), Some(&fault));
        assert_eq!(e.process(), Some(2));
        let why = BootstrapError::CardTimeout { peer: 4, secs: 9 };
        let e = NetworkError::Card {
            peer: 4,
            source: why.clone(),
        };
        assert_eq!(e.to_string(), why.to_string());
        assert_eq!(
            e.source().unwrap().downcast_ref::<BootstrapError>(),
            Some(&why)
        );
        assert_eq!(e.process(), Some(4));
        let e = NetworkError::CardPart {
            peer: 1,
            card: "shm:x:1:0".into(),
            prefix: "tcp:".into(),
        };
        assert_eq!(
            e.to_string(),
            "its business card `shm:x:1:0` has no `tcp:` part"
        );
        assert_eq!(e.process(), Some(1));
    }

    #[test]
    fn handler_tables_round_trip_and_malformed_ones_are_refused() {
        let entry = |hash, name: &str, origin| HandlerEntry {
            hash,
            name: name.into(),
            origin,
        };
        let table = vec![
            entry(1, "a", 0),
            entry(u64::MAX, "b::c", 3),
            entry(7, "", 2),
        ];
        let body = encode_handlers(&table);
        assert_eq!(body[0], Control::Handlers as u8);
        assert_eq!(decode_handlers(&body[1..], 4), Some(table.clone()));
        for cut in 0..body.len() - 1 {
            assert_eq!(decode_handlers(&body[1..=cut], 4), None, "cut at {cut}");
        }
        let mut long = body.clone();
        long.push(0);
        assert_eq!(decode_handlers(&long[1..], 4), None, "trailing bytes");
        // An origin that is no process of the job.
        assert_eq!(decode_handlers(&body[1..], 3), None);
        // A huge count is refused before anything is allocated.
        assert_eq!(decode_handlers(&u32::MAX.to_le_bytes(), 4), None);
    }

    #[test]
    fn a_message_frame_names_its_destination_or_why_not() {
        let header = |flags, tag| FrameHeader {
            kind: FrameKind::Message,
            flags,
            len: MSG_HEADER_SIZE as u32,
            src: 0,
            tag,
        };
        assert_eq!(destination(&header(0, 5)), Ok(5));
        assert_eq!(destination(&header(FLAG_NODE, 2)), Ok(2));
        let channel = crate::rt::persistent::receivers().open(3, 64, 0);
        assert_eq!(destination(&header(FLAG_PERSISTENT, channel)), Ok(3));
        let both = destination(&header(FLAG_PERSISTENT | FLAG_NODE, channel)).unwrap_err();
        assert!(
            both.contains("both for a node and for a persistent channel"),
            "{both}"
        );
        crate::rt::persistent::receivers().close(channel, 3);
        let closed = destination(&header(FLAG_PERSISTENT, channel)).unwrap_err();
        assert!(
            closed.contains(&format!("persistent channel {channel}, which is not open")),
            "{closed}"
        );
    }
}
