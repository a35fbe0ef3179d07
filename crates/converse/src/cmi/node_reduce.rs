//! Node reductions: one contribution per *node* (any one of its PEs makes
//! it), merged up the spanning tree over nodes; the result runs its handler
//! on node 0 (`CmiNodeReduce`, `CmiNodeReduceStruct` and their `ID` forms).
//!
//! # Matching and trees
//!
//! As for PE reductions (`super::reduce`), a node reduction is named by a
//! 32-bit key: the node's count of [`node_reduce`]/[`node_reduce_struct`]
//! calls, or a [`NodeReductionId`]; node keys have `NODE_KEY` set, so they
//! never meet a PE reduction's. The tree is the spanning tree over nodes
//! (`node_span_tree_*`) rooted at node 0. A node's contribution goes to its
//! parent node's first PE; the result is delivered on the node-0 PE that
//! completed the last step (the one whose call or whose taking of the last
//! child's contribution completed it), never inside the call.
//!
//! # State and concurrency protocol
//!
//! A node's reductions in progress live in one table per node
//! (`NodeTable`, kept as a job subsystem and cached per PE), behind a
//! mutex: any PE of the node may deposit, and contributions are taken by
//! whichever PE of the node they reached. The lock is held only to find,
//! record and take out entries; a step's merge runs with it released, on
//! the PE that completed the step, and that PE sends the result on. So
//! merge functions and the values they capture must be `Send`.
//!
//! # Invariants
//!
//! - Each entry of a node's table has at most one deposit (a second one from
//!   the same node aborts, naming both PEs) and at most one contribution per
//!   child node; it leaves the table exactly when it is complete.
//! - `NodeTable::in_progress` is the number of entries, readable without
//!   the lock (the idle path's stall check reads it).
//!
//! # Errors
//!
//! Nodes that disagree about a reduction (forms, keys) abort the job naming
//! the nodes and the reduction; a node reduction that can never complete is
//! reported by the PE reductions' stall check, which includes the node's
//! table.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::reduce::{
    AtRoot, CLASS_DYNAMIC, CLASS_GLOBAL, CLASS_ORDER, Form, NODE_KEY, check_id_request, describe,
    id_reply, make_key, message_finish, parse_id_reply, send_result, stamped, struct_finish,
};
use super::spantree::SpanningTree;
pub(crate) use crate::cmi::state::NodeTable;
use crate::cmi::state::{NodeDeposit as Deposit, NodeInProgress as InProgress};
use crate::msg::message::Message;
use crate::msg::system::{self, Kind, Reader};
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};
use crate::sync::lock;

/// Names a node reduction that cannot be matched by call order (a
/// `CmiReductionID` from `CmiGetGlobalNodeReduction` and friends). Get one
/// from [`global_node_reduction_id`], [`dynamic_node_reduction_id`] or
/// [`dynamic_node_reduction_id_remote`]. No two node reductions may be in
/// flight with the same ID at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeReductionId(u32);

impl NodeReductionId {
    /// The ID as a 32-bit number (as [`dynamic_node_reduction_id_remote`]
    /// delivers it).
    pub fn raw(self) -> u32 {
        self.0
    }

    /// The ID whose number is `raw`, if `raw` is one that
    /// [`NodeReductionId::raw`] can return.
    pub fn from_raw(raw: u32) -> Option<NodeReductionId> {
        let class = raw & ((1 << super::reduce::CLASS_BITS) - 1);
        (raw & NODE_KEY != 0 && (class == CLASS_GLOBAL || class == CLASS_DYNAMIC))
            .then_some(NodeReductionId(raw))
    }
}

impl InProgress {
    fn is_complete(&self) -> bool {
        self.deposit
            .as_ref()
            .is_some_and(|d| d.children.len() == self.arrived.len())
    }
}

/// Every node's table in this process, by node number: a job subsystem.
#[derive(Default)]
struct NodeTables(Mutex<HashMap<usize, Arc<NodeTable>>>);

/// `pe`'s node's table (cached in the PE's collective state).
fn table(pe: &Pe) -> &NodeTable {
    pe.coll.node_reductions.get_or_init(|| {
        let tables = pe.job.subsystem::<NodeTables>();
        let mut tables = lock(&tables.0);
        tables.entry(pe.node).or_default().clone()
    })
}

/// True if `pe`'s node has node reductions in progress.
pub(crate) fn in_progress(pe: &Pe) -> bool {
    pe.coll
        .node_reductions
        .get()
        .is_some_and(|t| t.in_progress.load(Ordering::Relaxed) != 0)
}

/// What keeps `pe`'s node's reductions from completing, if any are in
/// progress (a fragment of the stall report).
pub(crate) fn stall_report(pe: &Pe) -> Option<String> {
    if !in_progress(pe) {
        return None;
    }
    let topo = &pe.job.topo;
    let state = lock(&table(pe).state);
    let mut keys: Vec<&u32> = state.active.keys().collect();
    keys.sort();
    let mut parts = Vec::new();
    for key in keys {
        let entry = &state.active[key];
        let from: Vec<usize> = entry
            .arrived
            .iter()
            .map(|m| topo.node_of(m.src_pe()))
            .collect();
        match &entry.deposit {
            Some(d) => {
                let missing: Vec<usize> = d
                    .children
                    .iter()
                    .copied()
                    .filter(|c| !from.contains(c))
                    .collect();
                parts.push(format!(
                    "node {} joined {} and waits for nodes {missing:?}",
                    pe.node,
                    describe(*key)
                ));
            }
            None => parts.push(format!(
                "node {} holds contributions to {} from nodes {from:?} but never joined it",
                pe.node,
                describe(*key)
            )),
        }
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Records the deposit of `pe`'s node for reduction `key` and completes the
/// step if every child node's contribution is in.
fn deposit<F>(pe: &Pe, key: u32, form: Form, local: Option<Message>, finish: F)
where
    F: FnOnce(Option<Message>, Vec<Message>) -> Message + Send + 'static,
{
    let topo = &pe.job.topo;
    let tree = SpanningTree::new(topo.num_nodes(), pe.branch(), 0);
    let parent = tree.parent(pe.node).map(|n| topo.node_first(n));
    let children: Vec<usize> = tree.children(pe.node).collect();
    let table = table(pe);
    let done = {
        let mut state = lock(&table.state);
        match state.active.entry(key) {
            Entry::Vacant(slot) => {
                if children.is_empty() {
                    // A leaf node: nothing to wait for.
                    drop(state);
                    let result = finish(local, Vec::new());
                    return send_result(pe, key, form, 0, parent, result, AtRoot::Queue);
                }
                let arrived = Vec::with_capacity(children.len());
                slot.insert(InProgress {
                    deposit: Some(Deposit {
                        form,
                        by: pe.pe,
                        parent,
                        children,
                        local,
                        finish: Box::new(finish),
                    }),
                    arrived,
                });
                table.in_progress.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Entry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                if let Some(first) = &entry.deposit {
                    let first = first.by;
                    drop(state);
                    abort(&format!(
                        "node {} joined {} twice: PEs {first} and {} both called it (one PE per node contributes to a node reduction, and no two may be in flight with the same ID)",
                        pe.node,
                        describe(key),
                        pe.pe
                    ));
                }
                let deposit = Deposit {
                    form,
                    by: pe.pe,
                    parent,
                    children,
                    local,
                    finish: Box::new(finish),
                };
                for msg in &entry.arrived {
                    check_contribution(pe, key, &deposit, msg);
                }
                entry.deposit = Some(deposit);
                entry.is_complete().then(|| {
                    table.in_progress.fetch_sub(1, Ordering::Relaxed);
                    slot.remove()
                })
            }
        }
    };
    if let Some(done) = done {
        complete(pe, key, done);
    }
}

/// Aborts unless `msg` fits the node's own view of reduction `key`.
fn check_contribution(pe: &Pe, key: u32, deposit: &Deposit, msg: &Message) {
    let src = pe.job.topo.node_of(msg.src_pe());
    let form = Form::of_flags(msg.header().flags);
    if form != deposit.form {
        abort(&format!(
            "nodes disagree on {}: node {src} used {} but node {} used {}",
            describe(key),
            form.name(),
            pe.node,
            deposit.form.name()
        ));
    }
    if !deposit.children.contains(&src) {
        abort(&format!(
            "node {src} sent its contribution to {} to node {}, which does not count it among its children",
            describe(key),
            pe.node
        ));
    }
}

/// A child node's contribution (a message whose key has `NODE_KEY`) reached
/// the front of `pe`'s scheduler.
pub(crate) fn on_contribution(pe: &Pe, msg: Message) {
    let key = msg.header().coll;
    let topo = &pe.job.topo;
    let src = topo.node_of(msg.src_pe());
    let table = table(pe);
    let done = {
        let mut state = lock(&table.state);
        let mut slot = match state.active.entry(key) {
            Entry::Occupied(slot) => slot,
            Entry::Vacant(slot) => {
                // Before the node's own call: held until it deposits.
                slot.insert(InProgress {
                    deposit: None,
                    arrived: vec![msg],
                });
                table.in_progress.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let entry = slot.get_mut();
        if entry
            .arrived
            .iter()
            .any(|m| topo.node_of(m.src_pe()) == src)
        {
            drop(state);
            abort(&format!(
                "node {src} contributed twice to {} (no two node reductions may be in flight with the same ID)",
                describe(key)
            ));
        }
        if let Some(deposit) = &entry.deposit {
            check_contribution(pe, key, deposit, &msg);
        } else if let Some(first) = entry.arrived.first() {
            let (a, b) = (
                Form::of_flags(first.header().flags),
                Form::of_flags(msg.header().flags),
            );
            if a != b {
                abort(&format!(
                    "nodes disagree on {}: node {} used {} but node {src} used {}",
                    describe(key),
                    topo.node_of(first.src_pe()),
                    a.name(),
                    b.name()
                ));
            }
        }
        entry.arrived.push(msg);
        entry.is_complete().then(|| {
            table.in_progress.fetch_sub(1, Ordering::Relaxed);
            slot.remove()
        })
    };
    if let Some(done) = done {
        complete(pe, key, done);
    }
}

/// Merges the children's contributions of `done` into the node's deposit
/// (with no lock held) and sends the result up, or delivers it here on
/// node 0.
fn complete(pe: &Pe, key: u32, done: InProgress) {
    let InProgress {
        deposit,
        mut arrived,
    } = done;
    let deposit = deposit.expect("complete only with a deposit");
    let topo = &pe.job.topo;
    // Tree order, so order-sensitive merges give one result.
    arrived.sort_by_key(|m| {
        let node = topo.node_of(m.src_pe());
        deposit.children.iter().position(|&c| c == node)
    });
    let result = (deposit.finish)(deposit.local, arrived);
    send_result(
        pe,
        key,
        deposit.form,
        0,
        deposit.parent,
        result,
        AtRoot::Queue,
    );
}

fn next_key(pe: &Pe, class: u32) -> u32 {
    let mut state = lock(&table(pe).state);
    let counter = match class {
        CLASS_ORDER => &mut state.next_order,
        CLASS_GLOBAL => &mut state.next_global,
        _ => &mut state.next_dynamic,
    };
    let key = make_key(class, *counter) | NODE_KEY;
    *counter += 1;
    key
}

/// Contributes `msg` to the next reduction over all nodes, matched by call
/// order (`CmiNodeReduce`). One PE of every node calls it (or
/// [`node_reduce_struct`]) once per reduction, in the same order on every
/// node. `merge(local, children)` combines the node's message with its
/// child nodes'; the result runs the handler set in the merged message on
/// node 0. `merge` may run on another PE of the node than the caller.
#[doc(alias = "CmiNodeReduce")]
pub fn node_reduce<M>(msg: Message, merge: M)
where
    M: FnOnce(Message, Vec<Message>) -> Message + Send + 'static,
{
    pe::with(|pe| {
        let key = next_key(pe, CLASS_ORDER);
        let msg = stamped(pe, msg);
        deposit(pe, key, Form::Message, Some(msg), message_finish(merge));
    })
}

/// As [`node_reduce`] for a typed value (`CmiNodeReduceStruct`); the result
/// goes to handler `dest` on node 0 (read it with
/// [`decode_struct_result`](crate::decode_struct_result)).
#[doc(alias = "CmiNodeReduceStruct")]
pub fn node_reduce_struct<T, M>(data: T, merge: M, dest: usize)
where
    T: Serialize + DeserializeOwned + Send + 'static,
    M: FnOnce(T, Vec<T>) -> T + Send + 'static,
{
    pe::with(|pe| {
        let key = next_key(pe, CLASS_ORDER);
        let finish = struct_finish(key, data, merge, dest);
        deposit(pe, key, Form::Struct, None, finish);
    })
}

/// As [`node_reduce`], matched by `id` instead of call order
/// (`CmiNodeReduceID`).
#[doc(alias = "CmiNodeReduceID")]
pub fn node_reduce_id<M>(msg: Message, merge: M, id: NodeReductionId)
where
    M: FnOnce(Message, Vec<Message>) -> Message + Send + 'static,
{
    pe::with(|pe| {
        let msg = stamped(pe, msg);
        deposit(pe, id.0, Form::Message, Some(msg), message_finish(merge));
    })
}

/// As [`node_reduce_struct`], matched by `id` instead of call order
/// (`CmiNodeReduceStructID`).
#[doc(alias = "CmiNodeReduceStructID")]
pub fn node_reduce_struct_id<T, M>(data: T, merge: M, dest: usize, id: NodeReductionId)
where
    T: Serialize + DeserializeOwned + Send + 'static,
    M: FnOnce(T, Vec<T>) -> T + Send + 'static,
{
    pe::with(|pe| {
        let finish = struct_finish(id.0, data, merge, dest);
        deposit(pe, id.0, Form::Struct, None, finish);
    })
}

/// A new node reduction ID, the same on every node provided one PE of every
/// node calls this, in the same order on every node
/// (`CmiGetGlobalNodeReduction`).
#[doc(alias = "CmiGetGlobalNodeReduction")]
pub fn global_node_reduction_id() -> NodeReductionId {
    pe::with(|pe| NodeReductionId(next_key(pe, CLASS_GLOBAL)))
}

/// A new node reduction ID unique in the job
/// (`CmiGetDynamicNodeReduction`). Only PEs of node 0 may call it
/// (elsewhere it aborts); pass the ID on to the nodes that need it.
#[doc(alias = "CmiGetDynamicNodeReduction")]
pub fn dynamic_node_reduction_id() -> NodeReductionId {
    pe::with(|pe| {
        if pe.node != 0 {
            abort(&format!(
                "dynamic_node_reduction_id may only be called on node 0 (called on PE {} of node {}); use dynamic_node_reduction_id_remote",
                pe.pe, pe.node
            ));
        }
        NodeReductionId(next_key(pe, CLASS_DYNAMIC))
    })
}

/// Asks node 0 for a new dynamic node reduction ID, delivered to handler
/// `handler` on node `dest` (every node if `dest` is `None`), through the
/// node's queue (`CmiGetDynamicNodeReductionRemote`). The message's payload
/// is as [`dynamic_reduction_id_remote`](crate::dynamic_reduction_id_remote)
/// gives it; [`dynamic_node_reduction_reply`] reads it. May be called on
/// any PE.
#[doc(alias = "CmiGetDynamicNodeReductionRemote")]
pub fn dynamic_node_reduction_id_remote(handler: usize, dest: Option<usize>, data: &[u8]) {
    pe::with(|pe| {
        if let Some(d) = dest {
            pe.check_node(d, "dynamic_node_reduction_id_remote for");
        }
        check_id_request(handler, data, "dynamic_node_reduction_id_remote");
        if pe.node == 0 {
            return send_dynamic_id(pe, handler, dest, data);
        }
        let dest_word = dest.map_or(u64::MAX, |d| d as u64);
        let msg = system::message(
            Kind::DynamicNodeIdRequest,
            &[handler as u64, dest_word],
            data,
        );
        pe.send_runtime(0, msg);
    })
}

fn send_dynamic_id(pe: &Pe, handler: usize, dest: Option<usize>, data: &[u8]) {
    let msg = id_reply(handler, next_key(pe, CLASS_DYNAMIC), data);
    match dest {
        Some(d) => pe.send_to_node(d, msg),
        None => super::bcast::sync_node_broadcast_all_and_free(msg),
    }
}

/// PE 0 answers a [`dynamic_node_reduction_id_remote`] request.
pub(crate) fn on_dynamic_id_request(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "dynamic node reduction ID request");
    if pe.node != 0 {
        r.malformed(&format!(
            "it reached PE {} of node {} instead of node 0",
            pe.pe, pe.node
        ));
    }
    let handler = r.index(crate::msg::MAX_HANDLER_INDEX + 1);
    let dest = match r.word() {
        u64::MAX => None,
        d if d < pe.job.topo.num_nodes() as u64 => Some(d as usize),
        d => r.malformed(&format!("destination node {d} is out of range")),
    };
    let data = r.rest();
    send_dynamic_id(pe, handler, dest, data);
}

/// Reads a message delivered by [`dynamic_node_reduction_id_remote`]: the
/// ID and the caller's data. `None` if the payload is not in that format.
pub fn dynamic_node_reduction_reply(msg: &Message) -> Option<(NodeReductionId, &[u8])> {
    let (id, data) = parse_id_reply(msg)?;
    Some((NodeReductionId::from_raw(id)?, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReductionId;

    #[test]
    fn node_ids_and_pe_ids_never_pass_for_each_other() {
        let node = make_key(CLASS_GLOBAL, 3) | NODE_KEY;
        let pe = make_key(CLASS_GLOBAL, 3);
        assert_eq!(NodeReductionId::from_raw(node), Some(NodeReductionId(node)));
        assert!(NodeReductionId::from_raw(pe).is_none());
        assert!(ReductionId::from_raw(node).is_none());
        assert!(NodeReductionId::from_raw(make_key(CLASS_ORDER, 3) | NODE_KEY).is_none());
        assert!(describe(node).starts_with("node reduction with global ID"));
        assert!(describe(make_key(CLASS_ORDER, 7) | NODE_KEY).contains("node_reduce"));
    }
}
