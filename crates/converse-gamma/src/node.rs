//! One node of a GAMMA group: its ports, semaphores and the arrival path.
//!
//! A node is a Converse PE (`gamma_my_node` is the PE number, the group is
//! the job). Messages between nodes are Converse messages to one handler
//! ([`wire`](crate::wire) gives their bytes). A node's handlers
//! (`receiver_handler`, `error_handler`) run when a message is delivered,
//! that is while the node is inside a GAMMA call that polls (a wait, a
//! flow-controlled send, `gamma_sync`) or its own scheduler call: never in
//! the middle of the program's other code. This is where GAMMA's kernel
//! driver, which ran handlers at interrupt time, cannot be followed.
//!
//! # Invariants
//!
//! - A port's messages are stored in arrival order, one at a time: while
//!   its receiver handler runs (`busy`), or inside `gamma_atomic`, or
//!   while an earlier one waits, a new one waits in `pending` (copied).
//! - A flow-controlled message is not stored where it would overwrite an
//!   earlier flow-controlled one that the program has not released by
//!   re-posting the buffer (`owed_credits` non-empty and the message would
//!   go to the buffer's start): it waits in `pending`.
//! - A flow-controlled output port has one message in flight, awaiting a
//!   credit from each node it reached (`awaiting`, by [`Peer`]); later
//!   ones wait in `queued`, in order, each with the destination the port
//!   had when it was sent, and go when the last credit is in. A node that
//!   leaves owes no credit: it is struck from `awaiting`, and sends queued
//!   for it alone fail (`ERR_SENDFAILURE`).
//! - An error handler for a send failure does not run inside its port's
//!   receiver handler or an atomic section: it waits (`deferred_errors`).
//! - Every message is stored, or reported on stderr when the node leaves
//!   (a port never set up for input), or refused with an abort naming the
//!   sending PE (malformed bytes): none is dropped silently.
//! - A blocking send of [`OFFER_MIN`] bytes or more to one node of this
//!   group in another process is *offered*, not copied: the sender exposes
//!   its bytes for one-sided gets (`converse::cmi::rdma::expose`), sends an
//!   OFFER naming them, and waits (polling) until the receiver answers
//!   TAKEN; the receiver reads them with a get when the offer arrives and
//!   stores them as any message, then answers. The sender's bytes stay
//!   borrowed, unchanged, until TAKEN, so the get reads exactly them; an
//!   offer is in `offers` from its sending to its TAKEN, or until its
//!   receiver leaves the group (the send then fails). Messages from one
//!   sender stay in order: it sends nothing more until TAKEN, which comes
//!   after the store.
//!
//! # Concurrency
//!
//! A node belongs to one PE's thread; its state is a `Cpv` with interior
//! mutability, also reachable from a thread-local (one look-up instead of
//! the `Cpv`'s: GAMMA calls are fine-grained) that is set when the node
//! is made and emptied when the `Cpv` value drops at the PE's teardown, on
//! its own thread, so it never outlives the PE. No `RefCell` borrow is held while a user handler runs or
//! while the node polls, since both may re-enter this module.
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use converse::{Cpv, Message};

use crate::error::{ERR_MSGTOOLONG, ERR_SENDFAILURE, Error, Result};
use crate::intergroup::{self, Endpoint, Links};
use crate::port::{Buffer, Destination, NotNow};
use crate::wire::{self, MAX_PORT, Wire};

/// A receiver or error handler (`void (*)(void)`).
pub type PortHandler = Rc<dyn Fn()>;

/// Ports and semaphores: 0..=1024.
pub(crate) const PORTS: usize = MAX_PORT as usize + 1;
/// The first port and semaphore reserved to the collectives (1023: the
/// broadcast, 1024: the barrier).
pub const RESERVED: u16 = 1023;

/// Blocking sends of this many bytes or more to a node in another process
/// are offered for the receiver to read (see the module's invariants):
/// one copy of the data, made by the receiver's process straight from
/// the sender's bytes, where a message takes four (into the message, into
/// and out of the shared-memory ring, into the port's buffer). 1 MiB: the
/// size from which the core's gets are read by the initiating process
/// (`converse::cmi::rdma::INITIATOR_READS_MIN`).
pub const OFFER_MIN: usize = 1 << 20;

/// The largest vector a node keeps for reading offers into.
const SPARE_MAX: usize = 64 << 20;

/// An offered message, from its sending to its receiver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Offer {
    /// Sent to node `to`, not taken yet.
    Waiting { to: u16 },
    /// Taken (stored by the receiver).
    Taken,
    /// The receiver left first.
    Failed(String),
}

/// Where an output port's messages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestNode {
    /// One node of the destination group.
    Node(u16),
    /// Every node of the destination group but the sender (`BROADCAST`).
    #[doc(alias = "BROADCAST")]
    Broadcast,
}

/// `BROADCAST`, the C constant.
pub const BROADCAST: DestNode = DestNode::Broadcast;

/// A remote input port: the triple `dest_node`, `dest_par_pid`,
/// `dest_port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// The receiving node, or every node ([`BROADCAST`]).
    pub node: DestNode,
    /// The receiving group's parallel pid.
    pub par_pid: u8,
    /// Its input port.
    pub port: u16,
}

/// A port's input side.
pub(crate) struct Input {
    pub receiver: Option<PortHandler>,
    pub error: Option<PortHandler>,
    pub sem: u16,
    pub dest: Destination,
}

/// A node that sends to or receives from this one: of this group
/// (`group: None`, whatever its parallel pid) or of another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Peer {
    pub group: Option<u8>,
    pub node: u16,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group {
            None => write!(f, "node {}", self.node),
            Some(g) => write!(f, "node {} of group {g}", self.node),
        }
    }
}

/// Who sent a message, and how.
#[derive(Clone, Copy)]
struct Head {
    src: Peer,
    src_port: u16,
    flowctl: bool,
}

impl Head {
    /// A message from PE `src` of this job (a node of this group).
    fn of_pe(src: usize, src_port: u16, flowctl: bool) -> Head {
        Head {
            src: Peer {
                group: None,
                node: src as u16,
            },
            src_port,
            flowctl,
        }
    }
}

/// A message not stored yet (its body copied out of its Converse
/// message).
struct Arrival {
    head: Head,
    body: Vec<u8>,
}

/// A message to send: a Converse message to a node of this group, or a
/// frame's payload for another group's nodes.
pub(crate) enum Out {
    Local(Message),
    Remote(Vec<u8>),
}

/// A flow-controlled send waiting for its credits, with the destination
/// its port had when it was sent.
struct Queued {
    handle: u64,
    dest: Dest,
    out: Out,
}

#[derive(Default)]
pub(crate) struct Port {
    pub output: Option<Dest>,
    pub input: Option<Input>,
    pending: VecDeque<Arrival>,
    busy: bool,
    /// Senders of flow-controlled messages stored since the last re-post,
    /// each owed a credit: (sender, its port).
    owed_credits: Vec<(Peer, u16)>,
    /// The nodes whose credit the flow-controlled message in flight
    /// awaits (one message in flight per port).
    awaiting: Vec<Peer>,
    queued: VecDeque<Queued>,
}

/// Error events for handlers: (port, `gamma_errno`).
type ErrorEvents = VecDeque<(u16, u8)>;

/// The state of a non-blocking send.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SendState {
    Queued { port: u16 },
    Failed(String),
}

pub(crate) struct Node {
    pub me: u16,
    pub nodes: u16,
    /// 0 until node 0 has told it (`join`).
    pub par_pid: Cell<u8>,
    /// The handler of every GAMMA message.
    pub handler: usize,
    pub ports: RefCell<Vec<Port>>,
    pub sems: Vec<Cell<u64>>,
    pub errs: Vec<Cell<u64>>,
    pub active_port: Cell<Option<u16>>,
    pub errno: Cell<u8>,
    pub atomic_depth: Cell<u32>,
    /// Handles of sends not complete (queued) or failed and not yet
    /// waited for; any other handle below `next_handle` is complete.
    sends: RefCell<HashMap<u64, SendState>>,
    /// Offered messages not yet answered, by their send's handle.
    offers: RefCell<HashMap<u64, Offer>>,
    /// The vector the last offer taken was read into, kept for the next
    /// one (at most [`SPARE_MAX`] bytes): reading into it again needs no
    /// allocation nor zeroing (`rdma::get_cb_reusing`).
    spare: RefCell<Vec<u8>>,
    pub next_handle: Cell<u64>,
    /// Nodes that left the group.
    left: RefCell<Vec<bool>>,
    pub left_count: Cell<u16>,
    /// This node has left (`gamma_exit`).
    pub gone: Cell<bool>,
    /// Started by `gamma::init` (the program's own thread is the node):
    /// leaving ends the job here too.
    pub by_init: Cell<bool>,
    /// gamma_sync: this node's last barrier, and (node 0) arrivals per
    /// barrier; the last barrier released.
    pub sync_epoch: Cell<u32>,
    pub arrivals: RefCell<BTreeMap<u32, u16>>,
    pub released: Cell<u32>,
    /// Where other groups reach this node (from its join).
    pub endpoint: RefCell<Option<Endpoint>>,
    /// Its connections to other groups' nodes.
    links: RefCell<Links>,
    /// Other groups' nodes it is bound to or has heard from, and that have
    /// not said they left: while there are any, a wait may be ended from
    /// outside the group.
    pub foreign: RefCell<std::collections::HashSet<(u8, u16)>>,
    /// Send failures whose error handler waits for its port's handler to
    /// return or for an atomic section to end: (port, errno).
    deferred_errors: RefCell<ErrorEvents>,
    /// Barriers node 0 abandoned (a node left before arriving).
    pub abandoned: Cell<u32>,
    /// Node 0: the lock that holds the parallel pid.
    pub par_pid_lock: RefCell<Option<std::fs::File>>,
}

/// Marks that the PE has a node; dropping it (at the PE's teardown)
/// empties [`THIS_NODE`], which holds the node.
struct NodeSlot;

impl Drop for NodeSlot {
    fn drop(&mut self) {
        let _ = THIS_NODE.try_with(|n| n.borrow_mut().take());
    }
}

static NODE: Cpv<NodeSlot> = Cpv::new();

thread_local! {
    /// The calling thread's PE's node, while the PE lives.
    static THIS_NODE: RefCell<Option<Rc<Node>>> = const { RefCell::new(None) };
}

/// Registers the GAMMA handler and makes this PE's node (a module-init
/// hook: every PE, before its start function).
pub(crate) fn module_init() {
    if NODE.is_initialized() {
        return;
    }
    let handler = converse::register_handler(on_message);
    let nodes = converse::num_pes();
    let node = Rc::new(Node {
        me: converse::my_pe() as u16,
        nodes: nodes as u16,
        par_pid: Cell::new(0),
        handler,
        ports: RefCell::new((0..PORTS).map(|_| Port::default()).collect()),
        sems: (0..PORTS).map(|_| Cell::new(0)).collect(),
        errs: (0..PORTS).map(|_| Cell::new(0)).collect(),
        active_port: Cell::new(None),
        errno: Cell::new(0),
        atomic_depth: Cell::new(0),
        sends: RefCell::new(HashMap::new()),
        offers: RefCell::new(HashMap::new()),
        spare: RefCell::new(Vec::new()),
        next_handle: Cell::new(1),
        left: RefCell::new(vec![false; nodes]),
        left_count: Cell::new(0),
        gone: Cell::new(false),
        by_init: Cell::new(false),
        sync_epoch: Cell::new(0),
        arrivals: RefCell::new(BTreeMap::new()),
        released: Cell::new(0),
        endpoint: RefCell::new(None),
        links: RefCell::new(Links::default()),
        foreign: RefCell::new(std::collections::HashSet::new()),
        deferred_errors: RefCell::new(VecDeque::new()),
        abandoned: Cell::new(0),
        par_pid_lock: RefCell::new(None),
    });
    THIS_NODE.with_borrow_mut(|n| *n = Some(node));
    NODE.initialize(NodeSlot);
}

/// The calling PE's node, if it is a member of a group.
pub(crate) fn current() -> Result<Rc<Node>> {
    match raw() {
        Some(n) if n.par_pid.get() != 0 && !n.gone.get() => Ok(n),
        _ => Err(Error::NotInitialized),
    }
}

/// The calling PE's node, joined or not.
pub(crate) fn raw() -> Option<Rc<Node>> {
    THIS_NODE.with_borrow(Clone::clone)
}

/// A port number usable by programs: 0..=1022.
pub(crate) fn user_port(p: u16) -> Result<usize> {
    if p > MAX_PORT {
        Err(Error::BadPort(p.into()))
    } else if p >= RESERVED {
        Err(Error::Reserved(p.into()))
    } else {
        Ok(p as usize)
    }
}

impl Node {
    fn abort(&self, msg: &Message, why: &str) -> ! {
        converse::abort(&format!(
            "gamma node {}: a malformed message from PE {} ({} bytes): {why}",
            self.me,
            msg.src_pe(),
            msg.payload_len()
        ))
    }

    pub fn has_left(&self, node: u16) -> bool {
        self.left
            .borrow()
            .get(node as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Every other node has left and no other group takes part: nothing
    /// more can arrive.
    pub fn alone(&self) -> bool {
        self.left_count.get() + 1 >= self.nodes && self.foreign.borrow().is_empty()
    }

    /// `dest`'s group as a peer's: `None` for this group.
    fn group_of(&self, par_pid: u8) -> Option<u8> {
        (par_pid != self.par_pid.get()).then_some(par_pid)
    }

    /// The nodes a message to `dest` reaches (those of this group that
    /// have not left).
    fn peers_of(&self, dest: Dest) -> Vec<Peer> {
        let group = self.group_of(dest.par_pid);
        match (dest.node, group) {
            (DestNode::Node(node), _) => vec![Peer { group, node }],
            (DestNode::Broadcast, None) => (0..self.nodes)
                .filter(|&n| n != self.me && !self.has_left(n))
                .map(|node| Peer { group, node })
                .collect(),
            (DestNode::Broadcast, Some(g)) => (0..intergroup::group_size(g).unwrap_or(0))
                .map(|node| Peer { group, node })
                .collect(),
        }
    }

    /// Another group's nodes reached through `dest` take part from now on.
    pub fn bind_foreign(&self, dest: Dest) {
        if self.group_of(dest.par_pid).is_some() {
            let mut f = self.foreign.borrow_mut();
            for p in self.peers_of(dest) {
                f.insert((dest.par_pid, p.node));
            }
        }
    }

    /// Sends `payload` to node `to` (a PE of this job).
    pub fn send_payload(&self, to: u16, payload: &[u8]) {
        let mut m = Message::new(self.handler, payload.len());
        m.payload_mut().copy_from_slice(payload);
        converse::sync_send_and_free(to as usize, m);
    }

    /// Sends `payload` to every other node.
    pub fn broadcast_payload(&self, payload: &[u8]) {
        let mut m = Message::new(self.handler, payload.len());
        m.payload_mut().copy_from_slice(payload);
        converse::sync_broadcast_and_free(m);
    }

    /// A node `dest` reaches that has left the group, if any.
    fn gone_target(&self, dest: Dest) -> Option<u16> {
        if self.left_count.get() == 0 || dest.par_pid != self.par_pid.get() {
            return None;
        }
        match dest.node {
            DestNode::Node(n) => self.has_left(n).then_some(n),
            DestNode::Broadcast => (0..self.nodes).find(|&n| n != self.me && self.has_left(n)),
        }
    }

    /// Polls until `done` holds: delivers messages (and so runs handlers),
    /// waiting for them when there are none. `what` names the wait in the
    /// error given if it can never end.
    pub fn wait_until(
        &self,
        what: &dyn Fn() -> String,
        done: &mut dyn FnMut(&Node) -> bool,
    ) -> Result<()> {
        loop {
            if done(self) {
                return Ok(());
            }
            if converse::job_exiting() {
                return Err(Error::JobEnding);
            }
            // Alone, nothing can arrive; and what waits at a port stays
            // there until the program (which is waiting) acts.
            if self.alone() {
                return Err(Error::Deadlock(format!(
                    "node {}: {}, and every other node has left the group",
                    self.me,
                    what()
                )));
            }
            converse::scheduler(1);
        }
    }

    // ---- sends ----

    /// Allocates a handle for a send.
    pub fn handle(&self) -> u64 {
        let h = self.next_handle.get();
        self.next_handle.set(h + 1);
        h
    }

    /// Sends (or queues, flow control permitting) `out` through output
    /// `port` bound to `dest`; returns its handle.
    pub fn send(&self, port: u16, dest: Dest, out: Out, flowctl: bool) -> Result<u64> {
        if let Some(gone) = self.gone_target(dest) {
            return Err(Error::SendFailure(format!(
                "node {}: port {port}'s destination node {gone} has left the group",
                self.me
            )));
        }
        let handle = self.handle();
        if !flowctl {
            self.transmit(dest, out)?;
            return Ok(handle);
        }
        let mut ports = self.ports.borrow_mut();
        let p = &mut ports[port as usize];
        if p.awaiting.is_empty() && p.queued.is_empty() {
            p.awaiting = self.peers_of(dest);
            drop(ports);
            if let Err(e) = self.transmit(dest, out) {
                self.ports.borrow_mut()[port as usize].awaiting.clear();
                return Err(e);
            }
        } else {
            p.queued.push_back(Queued { handle, dest, out });
            drop(ports);
            self.sends
                .borrow_mut()
                .insert(handle, SendState::Queued { port });
        }
        Ok(handle)
    }

    fn transmit(&self, dest: Dest, out: Out) -> Result<()> {
        match (out, dest.node) {
            (Out::Local(msg), DestNode::Node(n)) => converse::sync_send_and_free(n as usize, msg),
            (Out::Local(msg), DestNode::Broadcast) => converse::sync_broadcast_and_free(msg),
            (Out::Remote(frame), DestNode::Node(n)) => {
                self.links.borrow_mut().send(dest.par_pid, n, &frame)?;
            }
            (Out::Remote(frame), DestNode::Broadcast) => {
                let size = intergroup::group_size(dest.par_pid)
                    .ok_or_else(|| Error::SendFailure(format!("group {} is gone", dest.par_pid)))?;
                for n in 0..size {
                    self.links.borrow_mut().send(dest.par_pid, n, &frame)?;
                }
            }
        }
        Ok(())
    }

    /// Offers `data` to node `to` (of this group, in another process) for
    /// its input port `dest_port`, and waits until it has taken them (see
    /// the module's invariants). `Ok(false)` if `data` could not be
    /// exposed (it overlaps memory the program registered): send it as a
    /// message instead.
    pub fn send_offer(&self, port: u16, to: u16, dest_port: u16, data: &[u8]) -> Result<bool> {
        let dest = Dest {
            node: DestNode::Node(to),
            par_pid: self.par_pid.get(),
            port: dest_port,
        };
        if let Some(gone) = self.gone_target(dest) {
            return Err(Error::SendFailure(format!(
                "node {}: port {port}'s destination node {gone} has left the group",
                self.me
            )));
        }
        let Ok(exposed) = converse::cmi::rdma::expose(data) else {
            return Ok(false);
        };
        let id = self.handle();
        self.offers.borrow_mut().insert(id, Offer::Waiting { to });
        self.send_payload(
            to,
            &wire::encode(&Wire::Offer {
                src_port: port,
                dest_port,
                id,
                addr: exposed.addr(),
                len: data.len() as u64,
            }),
        );
        let waited = self.wait_until(
            &|| {
                format!(
                    "sending {} bytes to node {to} (waiting for it to take them)",
                    data.len()
                )
            },
            &mut |n| !matches!(n.offers.borrow().get(&id), Some(Offer::Waiting { .. })),
        );
        let outcome = self.offers.borrow_mut().remove(&id);
        // Unregistered only now: the receiver has read the bytes (or left).
        drop(exposed);
        waited?;
        match outcome {
            Some(Offer::Failed(why)) => Err(Error::SendFailure(why)),
            _ => Ok(true),
        }
    }

    /// Node `src` offers `len` bytes at `addr` of its process for port
    /// `dest_port`: read them, store them, answer TAKEN.
    fn on_offer(&self, msg: &Message, src_port: u16, dest_port: u16, id: u64, addr: u64, len: u64) {
        let src = msg.src_pe();
        let len = offered_len(dest_port, len).unwrap_or_else(|why| self.abort(msg, &why));
        if self.gone.get() {
            // Its sender learns from this node's LEFT that it is not taken.
            converse::cmi_error!(
                "gamma node {}: an offer of {len} bytes from node {src} for port {dest_port} \
                 arrived after this node left the group; not taken\n",
                self.me
            );
            return;
        }
        let head = Head::of_pe(src, src_port, false);
        let me = self.me;
        let spare = std::mem::take(&mut *self.spare.borrow_mut());
        converse::cmi::rdma::get_cb_reusing(src, addr, len, spare, move |bytes| {
            let bytes = bytes.unwrap_or_else(|e| {
                converse::abort(&format!(
                    "gamma node {me}: the {len} bytes node {src} offered for port {dest_port} \
                     could not be read: {e}"
                ))
            });
            let Some(node) = raw() else {
                return;
            };
            if node.gone.get() {
                return;
            }
            node.arrive(dest_port, head, &bytes);
            node.send_payload(src as u16, &wire::encode(&Wire::Taken { id }));
            let mut spare = node.spare.borrow_mut();
            if bytes.capacity() <= SPARE_MAX && bytes.capacity() > spare.capacity() {
                *spare = bytes;
            }
        });
    }

    /// Node `src` has taken offer `id`.
    fn on_taken(&self, msg: &Message, id: u64) {
        let taken = mark_taken(&mut self.offers.borrow_mut(), id, msg.src_pe() as u16);
        if let Err(why) = taken {
            self.abort(msg, &why);
        }
    }

    /// `Ok(true)` if the send of `handle` completed, `Ok(false)` if not
    /// yet; a failed one is an error (once).
    pub fn send_done(&self, handle: u64) -> Result<bool> {
        if handle == 0 || handle >= self.next_handle.get() {
            return Err(Error::UnknownHandle(handle));
        }
        let mut sends = self.sends.borrow_mut();
        match sends.get(&handle) {
            None => Ok(true),
            Some(SendState::Queued { .. }) => Ok(false),
            Some(SendState::Failed(_)) => match sends.remove(&handle) {
                Some(SendState::Failed(why)) => Err(Error::SendFailure(why)),
                _ => unreachable!("just seen"),
            },
        }
    }

    /// `from`'s credit for output `port`: once every awaited credit is
    /// in, the next queued send goes. `Err` if none was awaited from it.
    fn credit(&self, from: Peer, port: u16) -> std::result::Result<(), String> {
        if self.gone.get() {
            return Ok(()); // for a send of a node that left since
        }
        {
            let mut ports = self.ports.borrow_mut();
            let p = &mut ports[port as usize];
            let Some(at) = p.awaiting.iter().position(|&a| a == from) else {
                return Err(format!(
                    "a credit for port {port} from {from}, which awaits none from it"
                ));
            };
            p.awaiting.swap_remove(at);
        }
        self.advance(port);
        Ok(())
    }

    /// Sends the next queued flow-controlled message of `port` if no
    /// credit is awaited any more.
    fn advance(&self, port: u16) {
        let next = {
            let mut ports = self.ports.borrow_mut();
            let p = &mut ports[port as usize];
            if !p.awaiting.is_empty() {
                return;
            }
            let Some(next) = p.queued.pop_front() else {
                return;
            };
            p.awaiting = self.peers_of(next.dest);
            next
        };
        self.sends.borrow_mut().remove(&next.handle);
        if let Err(e) = self.transmit(next.dest, next.out) {
            let rest: Vec<Queued> = {
                let mut ports = self.ports.borrow_mut();
                let p = &mut ports[port as usize];
                p.awaiting.clear();
                p.queued.drain(..).collect()
            };
            self.sends.borrow_mut().insert(
                next.handle,
                SendState::Failed(format!("node {}: a send through port {port}: {e}", self.me)),
            );
            self.fail_sends(port, rest, &e.to_string());
        }
    }

    fn fail_sends(&self, port: u16, failed: Vec<Queued>, why: &str) {
        let mut sends = self.sends.borrow_mut();
        for q in failed {
            sends.insert(
                q.handle,
                SendState::Failed(format!(
                    "node {}: a send through port {port}: {why}",
                    self.me
                )),
            );
        }
        drop(sends);
        self.run_error(port, ERR_SENDFAILURE);
    }

    /// `peer` left: it owes no credit any more; sends queued for it alone
    /// fail, the others go on.
    fn peer_left(&self, peer: Peer) {
        let mut affected = Vec::new();
        {
            let mut ports = self.ports.borrow_mut();
            for (i, p) in ports.iter_mut().enumerate() {
                let before = p.awaiting.len();
                p.awaiting.retain(|&a| a != peer);
                let only_to_it = |d: &Dest| {
                    self.group_of(d.par_pid) == peer.group && d.node == DestNode::Node(peer.node)
                };
                let doomed: Vec<Queued> = if p.queued.iter().any(|q| only_to_it(&q.dest)) {
                    let (doomed, kept): (VecDeque<Queued>, VecDeque<Queued>) =
                        p.queued.drain(..).partition(|q| only_to_it(&q.dest));
                    p.queued = kept;
                    doomed.into()
                } else {
                    Vec::new()
                };
                if before != p.awaiting.len() || !doomed.is_empty() {
                    affected.push((i as u16, doomed));
                }
            }
        }
        for (port, doomed) in affected {
            if !doomed.is_empty() {
                self.fail_sends(port, doomed, &format!("{peer} left before crediting it"));
            }
            self.advance(port);
        }
    }

    /// Node `node` of this group left.
    fn node_left(&self, node: u16) {
        {
            let mut left = self.left.borrow_mut();
            if left[node as usize] {
                return;
            }
            left[node as usize] = true;
        }
        self.left_count.set(self.left_count.get() + 1);
        for offer in self.offers.borrow_mut().values_mut() {
            if *offer == (Offer::Waiting { to: node }) {
                *offer = Offer::Failed(format!(
                    "node {}: node {node} left the group before taking the message offered to it",
                    self.me
                ));
            }
        }
        self.peer_left(Peer { group: None, node });
    }

    /// Node `node` of group `group` said it left.
    fn foreign_left(&self, group: u8, node: u16) {
        self.foreign.borrow_mut().remove(&(group, node));
        self.links.borrow_mut().forget(group, node);
        self.peer_left(Peer {
            group: Some(group),
            node,
        });
    }

    // ---- arrivals ----

    fn can_store(&self, p: &Port, a: Head) -> bool {
        let Some(input) = &p.input else { return false };
        if p.busy || self.atomic_depth.get() > 0 {
            return false;
        }
        !(a.flowctl && !p.owed_credits.is_empty() && input.dest.next_at() == 0)
    }

    fn arrive(&self, dest_port: u16, head: Head, body: &[u8]) {
        let mut ports = self.ports.borrow_mut();
        let p = &mut ports[dest_port as usize];
        if !p.pending.is_empty() || !self.can_store(p, head) {
            p.pending.push_back(Arrival {
                head,
                body: body.to_vec(),
            });
            return;
        }
        drop(ports);
        self.deliver(dest_port, head, body);
        self.drain(dest_port);
    }

    /// Stores a message into its port, counts it, runs its handler.
    fn deliver(&self, port: u16, a: Head, body: &[u8]) {
        let mut ports = self.ports.borrow_mut();
        let p = &mut ports[port as usize];
        let input = p.input.as_mut().expect("can_store checked the input");
        let stored = match input.dest.store(body) {
            Ok(s) => s,
            Err(NotNow::Borrowed) => {
                drop(ports);
                converse::abort(&format!(
                    "gamma node {}: a message from {} arrived for port {port} while the \
                     program holds that port's buffer borrowed across a GAMMA call (release \
                     it before waiting or sending)",
                    self.me, a.src
                ))
            }
        };
        let sem = input.sem as usize;
        if a.flowctl {
            p.owed_credits.push((a.src, a.src_port));
        }
        let handler = if stored.truncated {
            input.error.clone()
        } else {
            input.receiver.clone()
        };
        p.busy = true;
        drop(ports);
        self.sems[sem].set(self.sems[sem].get() + 1);
        if stored.truncated {
            match handler {
                Some(h) => self.run_handler(port, ERR_MSGTOOLONG, &h),
                // No error handler to call gamma_sigerr: count it as one
                // would, so that gamma_wait reports it.
                None => self.errs[sem].set(self.errs[sem].get() + 1),
            }
        } else if let Some(h) = handler {
            self.run_handler(port, 0, &h);
        }
        self.ports.borrow_mut()[port as usize].busy = false;
        self.flush_errors();
    }

    /// Runs `h` as port `port`'s handler, `gamma_errno` = `errno`.
    fn run_handler(&self, port: u16, errno: u8, h: &PortHandler) {
        let saved = (
            self.active_port.replace(Some(port)),
            self.errno.replace(errno),
        );
        h();
        self.active_port.set(saved.0);
        self.errno.set(saved.1);
    }

    /// Port `port`'s error handler, for a send failure, or its error count.
    fn run_error(&self, port: u16, errno: u8) {
        let (handler, sem, busy) = {
            let ports = self.ports.borrow();
            let p = &ports[port as usize];
            match &p.input {
                Some(i) => (i.error.clone(), Some(i.sem as usize), p.busy),
                None => (None, None, p.busy),
            }
        };
        if handler.is_some() && (busy || self.atomic_depth.get() > 0) {
            // Not inside its port's handler nor an atomic section.
            self.deferred_errors.borrow_mut().push_back((port, errno));
            return;
        }
        match (handler, sem) {
            (Some(h), _) => self.run_handler(port, errno, &h),
            (None, Some(sem)) => self.errs[sem].set(self.errs[sem].get() + 1),
            (None, None) => {}
        }
    }

    /// Stores what waited at `port`, while it can be stored.
    pub fn drain(&self, port: u16) {
        loop {
            let mut ports = self.ports.borrow_mut();
            let p = &mut ports[port as usize];
            let Some(a) = p.pending.pop_front() else {
                return;
            };
            if !self.can_store(p, a.head) {
                p.pending.push_front(a);
                return;
            }
            drop(ports);
            self.deliver(port, a.head, &a.body);
        }
    }

    /// Runs the error handlers that waited, if they may run now.
    fn flush_errors(&self) {
        let ready: Vec<(u16, u8)> = {
            let mut d = self.deferred_errors.borrow_mut();
            if d.is_empty() || self.atomic_depth.get() > 0 {
                return;
            }
            let ports = self.ports.borrow();
            let (ready, wait): (ErrorEvents, ErrorEvents) =
                d.drain(..).partition(|&(p, _)| !ports[p as usize].busy);
            *d = wait;
            ready.into()
        };
        for (port, errno) in ready {
            self.run_error(port, errno);
        }
    }

    /// Stores what waited at every port (after `gamma_atomic`).
    pub fn drain_all(&self) {
        self.flush_errors();
        for port in 0..PORTS as u16 {
            if !self.ports.borrow()[port as usize].pending.is_empty() {
                self.drain(port);
            }
        }
    }

    /// The program released `port`'s buffer (re-posted it): the senders of
    /// flow-controlled messages may send again.
    pub fn released(&self, port: u16) {
        let owed = std::mem::take(&mut self.ports.borrow_mut()[port as usize].owed_credits);
        for (peer, their_port) in owed {
            let credit = wire::encode(&Wire::Credit {
                port: their_port,
                src_par_pid: self.par_pid.get(),
                src_node: self.me,
            });
            match peer.group {
                // A group that has gone needs no credit.
                Some(g) => drop(self.links.borrow_mut().send(g, peer.node, &credit)),
                None if !self.has_left(peer.node) => self.send_payload(peer.node, &credit),
                None => {}
            }
        }
        self.drain(port);
    }

    /// Binds `port`'s input side (`gamma_set_active_port`/`passive`).
    pub fn set_input(&self, port: u16, input: Option<Input>, output: Option<Dest>) {
        {
            let mut ports = self.ports.borrow_mut();
            let p = &mut ports[port as usize];
            p.input = input;
            p.output = output;
        }
        self.released(port);
    }

    /// Re-binds `port`'s buffer (`gamma_post_recv`, `gamma_attach_buffer`).
    pub fn repost(&self, port: u16, buffer: Buffer, len: Option<usize>) -> Result<()> {
        {
            let mut ports = self.ports.borrow_mut();
            let Some(input) = ports[port as usize].input.as_mut() else {
                return Err(Error::BadBuffer(format!(
                    "port {port} of node {} is not set up for input",
                    self.me
                )));
            };
            let len = len.unwrap_or(input.dest.len);
            if len > buffer.len() {
                return Err(Error::BadBuffer(format!(
                    "a buffer of {} bytes posted with length {len} on port {port}",
                    buffer.len()
                )));
            }
            input.dest.repost(buffer, len);
        }
        self.released(port);
        Ok(())
    }

    /// Messages never stored, by port (reported when the node leaves).
    pub fn unstored(&self) -> Vec<(u16, usize)> {
        self.ports
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.pending.is_empty())
            .map(|(i, p)| (i as u16, p.pending.len()))
            .collect()
    }

    /// Leaves the group (`gamma_exit`): tells the others, and reports
    /// messages that were never stored.
    pub fn leave(&self) {
        self.gone.set(true);
        if let Some(ep) = self.endpoint.borrow_mut().take() {
            ep.close();
        }
        // Other groups' nodes that take part hear that this one left.
        let bye = wire::encode(&Wire::Bye {
            src_par_pid: self.par_pid.get(),
            src_node: self.me,
        });
        let mut peers: Vec<(u8, u16)> = self.foreign.borrow().iter().copied().collect();
        peers.extend(self.links.borrow().peers());
        peers.sort_unstable();
        peers.dedup();
        for (g, n) in peers {
            let _ = self.links.borrow_mut().send(g, n, &bye);
        }
        *self.links.borrow_mut() = Links::default();
        if self.nodes > 1 {
            self.broadcast_payload(&wire::encode(&Wire::Left));
        }
        for (port, n) in self.unstored() {
            converse::cmi_error!(
                "gamma node {}: {n} message(s) for port {port} were never stored (the port was \
                 not set up for input, or its buffer never re-posted)\n",
                self.me
            );
        }
    }
}

/// The length of an offer of `len` bytes for port `dest_port`, or why the
/// offer is malformed (its bytes come from another PE: not trusted).
fn offered_len(dest_port: u16, len: u64) -> std::result::Result<usize, String> {
    if dest_port >= RESERVED {
        return Err(format!("an offer for reserved port {dest_port}"));
    }
    let max = converse::MAX_MESSAGE_SIZE - converse::MSG_HEADER_SIZE;
    usize::try_from(len)
        .ok()
        .filter(|&l| l <= max)
        .ok_or_else(|| format!("an offer of {len} bytes, more than a message holds ({max})"))
}

/// Records node `src`'s TAKEN for offer `id`, or says why it is malformed
/// (no such offer waits for `src`).
fn mark_taken(
    offers: &mut HashMap<u64, Offer>,
    id: u64,
    src: u16,
) -> std::result::Result<(), String> {
    match offers.get_mut(&id) {
        Some(offer) if *offer == (Offer::Waiting { to: src }) => {
            *offer = Offer::Taken;
            Ok(())
        }
        _ => Err(format!(
            "a TAKEN for offer {id}, which awaits no answer from node {src}"
        )),
    }
}

/// Every GAMMA message arrives here.
fn on_message(msg: Message) {
    let Some(node) = raw() else {
        converse::abort("gamma: a message for a PE without a node")
    };
    let src = msg.src_pe();
    match wire::parse_info(msg.info()) {
        Ok(Some((flowctl, src_port, dest_port))) => {
            if dest_port >= RESERVED {
                node.abort(&msg, &format!("data for reserved port {dest_port}"));
            }
            if node.gone.get() {
                converse::cmi_error!(
                    "gamma node {}: a message from node {src} for port {dest_port} arrived \
                     after this node left the group; dropped\n",
                    node.me
                );
                return;
            }
            let head = Head::of_pe(src, src_port, flowctl);
            node.arrive(dest_port, head, msg.payload());
            return;
        }
        Ok(None) => {}
        Err(why) => node.abort(&msg, &why),
    }
    let decoded = match wire::decode(msg.payload()) {
        Ok(w) => w,
        Err(why) => node.abort(&msg, &why),
    };
    match decoded {
        Wire::Data { .. } => node.abort(
            &msg,
            "data in the form of another group's, from a PE of this job",
        ),
        Wire::Inter(frame) => on_frame(&node, frame),
        Wire::Credit { port, .. } => {
            let from = Peer {
                group: None,
                node: src as u16,
            };
            if let Err(why) = node.credit(from, port) {
                node.abort(&msg, &why);
            }
        }
        Wire::Abandon { epoch } => {
            if src != 0 {
                node.abort(&msg, "a barrier abandoned by a node other than 0");
            }
            node.abandoned.set(node.abandoned.get().max(epoch));
        }
        Wire::Bye { .. } => node.abort(&msg, "a departure of another group's node, from a PE"),
        Wire::Offer {
            src_port,
            dest_port,
            id,
            addr,
            len,
        } => node.on_offer(&msg, src_port, dest_port, id, addr, len),
        Wire::Taken { id } => node.on_taken(&msg, id),
        Wire::Arrive { epoch } => {
            if node.me != 0 {
                node.abort(&msg, "a barrier arrival at a node other than 0");
            }
            *node.arrivals.borrow_mut().entry(epoch).or_insert(0) += 1;
        }
        Wire::Release { epoch } => {
            if src != 0 || epoch <= node.released.get() {
                node.abort(&msg, &format!("a barrier release {epoch} out of turn"));
            }
            node.released.set(epoch);
        }
        Wire::Left => node.node_left(src as u16),
        Wire::ParPid(p) => {
            if src != 0 || p == 0 || (node.par_pid.get() != 0 && node.par_pid.get() != p) {
                node.abort(&msg, &format!("parallel pid {p} from PE {src}"));
            }
            node.par_pid.set(p);
        }
    }
}

/// A frame from another group (posted by this node's reader threads).
fn on_frame(node: &Node, frame: &[u8]) {
    let decoded = match wire::decode(frame) {
        Ok(w) => w,
        Err(why) => frame_abort(node, &why),
    };
    match decoded {
        Wire::Data {
            flags,
            src_par_pid,
            src_node,
            src_port,
            dest_port,
            body,
        } => {
            check_foreign(node, src_par_pid, src_node);
            if dest_port >= RESERVED {
                frame_abort(node, &format!("data for reserved port {dest_port}"));
            }
            if node.gone.get() {
                converse::cmi_error!(
                    "gamma node {}: a message from node {src_node} of group {src_par_pid} for \
                     port {dest_port} arrived after this node left; dropped\n",
                    node.me
                );
                return;
            }
            node.foreign.borrow_mut().insert((src_par_pid, src_node));
            let head = Head {
                src: Peer {
                    group: Some(src_par_pid),
                    node: src_node,
                },
                src_port,
                flowctl: flags & wire::FLOWCTL != 0,
            };
            node.arrive(dest_port, head, body);
        }
        Wire::Credit {
            port,
            src_par_pid,
            src_node,
        } => {
            check_foreign(node, src_par_pid, src_node);
            let from = Peer {
                group: Some(src_par_pid),
                node: src_node,
            };
            if let Err(why) = node.credit(from, port) {
                frame_abort(node, &why);
            }
        }
        Wire::Bye {
            src_par_pid,
            src_node,
        } => {
            check_foreign(node, src_par_pid, src_node);
            node.foreign_left(src_par_pid, src_node);
        }
        _ => frame_abort(node, "a kind groups do not exchange"),
    }
}

/// A frame's claimed sender must be a node of another group of this host.
fn check_foreign(node: &Node, par_pid: u8, src_node: u16) {
    if par_pid == node.par_pid.get() || par_pid == 0 {
        frame_abort(node, &format!("it claims parallel pid {par_pid}"));
    }
    // A group that has gone since may still have frames on their way.
    if intergroup::group_size(par_pid).is_some_and(|n| src_node >= n) {
        frame_abort(
            node,
            &format!("it claims node {src_node} of group {par_pid}, which has fewer"),
        );
    }
}

fn frame_abort(node: &Node, why: &str) -> ! {
    converse::abort(&format!(
        "gamma node {} of group {}: a malformed frame from another group: {why}",
        node.me,
        node.par_pid.get()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_for_reserved_ports_or_past_the_largest_message_are_refused() {
        assert_eq!(offered_len(5, 4 << 20), Ok(4 << 20));
        assert!(
            offered_len(RESERVED, 8)
                .unwrap_err()
                .contains("reserved port 1023")
        );
        let max = (converse::MAX_MESSAGE_SIZE - converse::MSG_HEADER_SIZE) as u64;
        assert_eq!(offered_len(0, max), Ok(max as usize));
        assert!(
            offered_len(0, max + 1)
                .unwrap_err()
                .contains("more than a message holds")
        );
        assert!(offered_len(0, u64::MAX).is_err());
    }

    #[test]
    fn a_taken_counts_only_from_the_node_the_offer_waits_for() {
        let mut offers = HashMap::new();
        offers.insert(7, Offer::Waiting { to: 2 });
        offers.insert(8, Offer::Failed("left".into()));
        let wrong_node = mark_taken(&mut offers, 7, 3).unwrap_err();
        assert!(
            wrong_node.contains("offer 7") && wrong_node.contains("node 3"),
            "{wrong_node}"
        );
        assert!(mark_taken(&mut offers, 9, 2).is_err(), "no such offer");
        assert!(mark_taken(&mut offers, 8, 2).is_err(), "one that failed");
        mark_taken(&mut offers, 7, 2).unwrap();
        assert_eq!(offers[&7], Offer::Taken);
        assert!(mark_taken(&mut offers, 7, 2).is_err(), "taken twice");
    }
}
