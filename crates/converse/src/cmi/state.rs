//! The per-PE state of the send path, groups, reductions and persistent
//! channels: the types only, on the floor below `rt`, so that `rt::Pe`
//! holds them without naming `cmi` (DESIGN.md §3, first rule; the floors
//! are in `tests/layering.rs`).
//!
//! # Invariants
//!
//! The fields are visible to `cmi` alone; what they mean, and the code
//! that keeps them, is in `cmi`'s other modules (`impl` blocks there).
//! Everything here is touched only by its PE's thread, except the node's
//! table of node reductions (`NodeTable`), which its PEs share behind its
//! lock (`cmi::node_reduce`).
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::{Rc, Weak};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use crate::msg::Message;
use crate::proc::spantree::SpanningTree;

/// The calling PE's collective state: groups it knows, multicasts waiting for
/// a group's definition, and reductions in progress. Touched only by the PE's
/// own thread.
#[derive(Default)]
pub(crate) struct CollState {
    pub(in crate::cmi) groups: RefCell<Groups>,
    pub(in crate::cmi) reductions: RefCell<Reductions>,
    /// The node's table of node reductions, once this PE has used it.
    pub(in crate::cmi) node_reductions: OnceCell<Arc<NodeTable>>,
}

/// A PE's send-path state (`Pe::send`); touched only by `cmi::send`.
#[derive(Default)]
pub(crate) struct SendState {
    /// A send is waiting for room on the network (`throttle`).
    pub(in crate::cmi) waiting: Cell<bool>,
    /// Messages to other processes were posted and not yet flushed: the
    /// next look for work writes them (`next_pe_arrival`).
    pub(in crate::cmi) net_posted: Cell<bool>,
    /// A poll of the network moved bytes since the idle wait last asked
    /// (`take_net_moved`; see `csd::idle`, "Patience while bytes move").
    pub(in crate::cmi) net_moved: Cell<bool>,
    /// The persistent handles the PE made and the ones its sends use
    /// (`cmi::persistent`).
    pub(crate) persistent: Using,
}

/// A group's members, as its creator listed them.
pub(crate) struct GroupInfo {
    pub pes: Vec<usize>,
    /// (PE, position in `pes`), sorted by PE: `position`'s index (a
    /// binary search; half the memory of a hash map).
    pub(in crate::cmi) by_pe: Box<[(u32, u32)]>,
}

/// Work waiting for a group's definition.
pub(in crate::cmi) type Deferred = Box<dyn FnOnce(&[usize])>;

/// One PE's groups.
#[derive(Default)]
pub(crate) struct Groups {
    /// Groups whose definition this PE has.
    pub(in crate::cmi) known: HashMap<u32, Arc<GroupInfo>>,
    /// Groups this PE established.
    pub(in crate::cmi) established: u32,
    /// Multicast copies that arrived before their group's definition.
    pub(in crate::cmi) pending: HashMap<u32, Vec<Message>>,
    /// Group reductions called before the group's definition arrived.
    pub(in crate::cmi) deferred: HashMap<u32, Vec<Deferred>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    Message,
    Struct,
}

/// Merges the children's contributions (in tree order) into the PE's own
/// (its message, in the message form).
pub(in crate::cmi) type Finish = Box<dyn FnOnce(Option<Message>, Vec<Message>) -> Message>;

/// A PE's own part in a reduction, once it has called.
pub(in crate::cmi) struct Deposit {
    pub(in crate::cmi) form: Form,
    pub(in crate::cmi) digest: u32,
    pub(in crate::cmi) parent: Option<usize>,
    pub(in crate::cmi) children: Children,
    /// The PE's own message (the message form; `None` in the struct form,
    /// whose value `finish` holds). Kept apart from `finish`, so that a
    /// merge that captures nothing, the usual one, boxes without an
    /// allocation.
    pub(in crate::cmi) local: Option<Message>,
    pub(in crate::cmi) finish: Finish,
}

/// The PEs whose contributions a deposit waits for, in tree order.
pub(in crate::cmi) enum Children {
    /// `me`'s children in the whole job's `tree` (PE numbers are tree
    /// members): computed when asked, so a reduction over all PEs, the
    /// common case, allocates no list.
    Tree { tree: SpanningTree, me: usize },
    /// Listed (a reduction over a PE list or a group).
    List(Vec<usize>),
}

pub(in crate::cmi) struct InProgress {
    pub(in crate::cmi) deposit: Option<Deposit>,
    /// Children's contributions, in arrival order.
    pub(in crate::cmi) arrived: Vec<Message>,
}

/// One PE's reductions.
#[derive(Default)]
pub(crate) struct Reductions {
    pub(in crate::cmi) next_order: u32,
    pub(in crate::cmi) next_global: u32,
    /// Dynamic IDs handed out (PE 0 only).
    pub(in crate::cmi) next_dynamic: u32,
    pub(in crate::cmi) active: HashMap<u32, InProgress, BuildHasherDefault<KeyHasher>>,
    /// A stall check is under way (see the module comment).
    pub(in crate::cmi) stall_check_pending: bool,
    /// The functions typed reductions end in (`reduce_struct_then`), by
    /// key: the root runs its own on the result; the others drop theirs
    /// when their contribution leaves.
    pub(in crate::cmi) then: HashMap<u32, Then, BuildHasherDefault<KeyHasher>>,
}

/// What a typed reduction's root runs on the result's bytes.
pub(in crate::cmi) type Then = Box<dyn FnOnce(&[u8])>;

/// Hashes reduction keys: they are distinct small integers made by this
/// runtime, not attacker-chosen, so a multiply (Fibonacci hashing) spreads
/// them well enough and costs far less than the default SipHash on the
/// per-message path.
#[derive(Default)]
pub(crate) struct KeyHasher(pub(in crate::cmi) u64);

/// A sender's end of a persistent channel (`PersistentHandle`): made by
/// [`create_persistent`](crate::cmi::persistent::create_persistent) or
/// [`register_receive_persistent`](crate::cmi::persistent::register_receive_persistent),
/// used through [`use_persistent`](crate::cmi::persistent::use_persistent),
/// ended by [`PersistentHandle::destroy`]. Cheap to
/// clone (clones are the same handle); belongs to the PE that made it.
#[derive(Clone)]
pub struct PersistentHandle(pub(in crate::cmi) Rc<Handle>);

pub(in crate::cmi) struct Handle {
    /// Names the handle in its PE's `PersistentOpen` exchange.
    pub(in crate::cmi) id: u64,
    pub(in crate::cmi) dest_pe: usize,
    pub(in crate::cmi) max_bytes: usize,
    /// The destination is a PE of another process (only then does a
    /// channel save anything: see the module comment).
    pub(in crate::cmi) remote: bool,
    /// The channel's number in the destination's process; 0 until known.
    pub(in crate::cmi) channel: Cell<u32>,
    /// The channel was made for this handle alone (`create_persistent`):
    /// `destroy` closes it. A receiver's channel (registered from a
    /// `PersistentReq`, maybe by several senders) stays open.
    pub(in crate::cmi) closes: bool,
    pub(in crate::cmi) destroyed: Cell<bool>,
}

/// A PE's persistent handles (a field of its send state).
#[derive(Default)]
pub(crate) struct Using {
    /// [`use_persistent`] named some handles: the one check on every send.
    pub(in crate::cmi) on: Cell<bool>,
    /// The handles it named.
    pub(in crate::cmi) handles: RefCell<Vec<PersistentHandle>>,
    /// Every handle the PE made and did not destroy (for
    /// [`destroy_all_persistent`] and the `PersistentOpened` answers).
    pub(in crate::cmi) made: RefCell<Vec<Weak<Handle>>>,
    pub(in crate::cmi) next_id: Cell<u64>,
}
/// Merges the children's contributions into the node's own (see
/// `super::reduce`); `Send`, since another PE of the node may run it.
pub(in crate::cmi) type NodeFinish =
    Box<dyn FnOnce(Option<Message>, Vec<Message>) -> Message + Send>;

/// The node's own part in a reduction, once one of its PEs has called.
pub(in crate::cmi) struct NodeDeposit {
    pub(in crate::cmi) form: Form,
    /// The PE that called (for error messages).
    pub(in crate::cmi) by: usize,
    /// The first PE of the parent node; `None` on node 0.
    pub(in crate::cmi) parent: Option<usize>,
    /// The child nodes, in tree order.
    pub(in crate::cmi) children: Vec<usize>,
    pub(in crate::cmi) local: Option<Message>,
    pub(in crate::cmi) finish: NodeFinish,
}

pub(in crate::cmi) struct NodeInProgress {
    pub(in crate::cmi) deposit: Option<NodeDeposit>,
    /// Child nodes' contributions, in arrival order.
    pub(in crate::cmi) arrived: Vec<Message>,
}

#[derive(Default)]
pub(in crate::cmi) struct NodeState {
    pub(in crate::cmi) next_order: u32,
    pub(in crate::cmi) next_global: u32,
    /// Dynamic IDs handed out (node 0 only).
    pub(in crate::cmi) next_dynamic: u32,
    pub(in crate::cmi) active: HashMap<u32, NodeInProgress>,
}

/// One node's reductions in progress (see the module comment).
#[derive(Default)]
pub(crate) struct NodeTable {
    pub(in crate::cmi) state: Mutex<NodeState>,
    pub(in crate::cmi) in_progress: AtomicUsize,
}
