//! Struct-form reductions from C: `CmiReduceStruct`, `CmiReduceStructID`
//! and `CmiListReduceStruct`, with the C program's pup, merge and delete
//! functions, over the core's struct-form reductions (whose value type is
//! here the packed bytes, `Vec<u8>`).
//!
//! # Semantics (Charm++'s `CmiSendReduce`, step by step)
//!
//! On each PE, once its own data and every child's contribution are in:
//!
//! - A PE with children calls the merge function as
//!   `mergeFn(&size, local, remote, count)`: `local` is the pointer the PE
//!   passed in (the same pointer, unpacked), `remote[i]` the bytes of child
//!   `i`'s contribution exactly as its pup function packed them (no header;
//!   16-aligned; the child's unpacking is the merge function's business,
//!   e.g. with `pup_new_fromMem`), `size` points at 0. The merge function
//!   owns `local` and returns the merged data (usually `local`, changed in
//!   place). The runtime frees the `remote` buffers after it returns. A
//!   PE without children does not call it: its data is the merged data.
//! - A PE that is not the root then packs the merged data with the pup
//!   function (a sizer, then a packer into exactly that many bytes: a pup
//!   function that packs other than it sized ends the job), sends the
//!   bytes to its parent, and calls `deleteFn` on the merged data (if
//!   `deleteFn` is not null). On a leaf this all happens inside the call.
//!   Charm++'s code deletes the pointer the PE passed in; the manual says
//!   "the return of the merge function": the two agree for in-place merges,
//!   and this follows the manual for the others.
//! - The root neither packs nor deletes: it calls `dest(merged)` with the
//!   merged data itself, which `dest` then owns. `dest` is a function, as
//!   in Charm++, not a handler index. It runs as a handler on the root
//!   (the core delivers a reduction's result as a message, never inside
//!   the call that completed it), where Charm++ calls it at once.
//!
//! The root is PE 0 for `CmiReduceStruct` and `CmiReduceStructID`, and
//! `pes[0]` for `CmiListReduceStruct`; the trees are the core's (the k-ary
//! tree over PEs, or over the list's positions, with the job's branching
//! factor), so a PE knows at the call whether it is a leaf and whether it
//! is the root.
//!
//! # Invariants
//!
//! - The value each PE gives the core is, on a leaf, its finished data
//!   (packed; on the root, the token below), and on a PE with children
//!   empty and unused: its merge closure (over a `Pending`) holds the C
//!   pointer and functions, and the core calls it exactly when the PE has
//!   children.
//! - On the root, the merged pointer waits in the table of results
//!   (`RESULTS`) of the PE that finished it, under a token, and the value
//!   sent to the result handler is the token; the core delivers it on that
//!   same PE, whose handler takes the pointer out and calls `dest`. A token
//!   the table does not hold ends the job.
//!
//! # Groups and nodes
//!
//! `CmiGroupReduceStruct` is the list form over the group's members, run
//! when this PE has the group's definition (`converse::when_group_known`).
//! The node forms (`CmiNodeReduceStruct`, `CmiNodeReduceStructID`) place
//! the calling PE's node in the tree over nodes; the core may run a node's
//! merge step on another PE of the node than the caller (the data is handed
//! over under the node's reduction table lock, see `Pending`'s `Send`), and
//! delivers the result on the node-0 PE that completed it. So the result
//! handler is registered by a module init on every PE, at one index.
//!
//! # Concurrency
//!
//! Per PE: the table is a `Cpv`, touched only by its PE's thread, and no
//! borrow of it is held while C code runs.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use std::sync::atomic::{AtomicUsize, Ordering};

use converse::{Cpv, Group, Message, ReductionId, SpanningTree};

use crate::collectives::{
    CmiGroup, CmiReduceMergeFn, CmiReductionID, node_reduction_id, reduction_id,
};
use crate::handlers::CmiHandler;
use crate::pup::{pack_with, pup_er};

/// A struct reduction's pup function: `void f(pup_er p, void *data)`
/// (`CmiReducePupFn`); called to size and to pack, never to unpack.
pub type CmiReducePupFn = extern "C-unwind" fn(pup_er, *mut c_void);

/// A struct reduction's delete function: `void f(void *data)`
/// (`CmiReduceDeleteFn`).
pub type CmiReduceDeleteFn = extern "C-unwind" fn(*mut c_void);

/// The C functions of one contribution.
#[derive(Clone, Copy)]
struct Ops {
    pup: CmiReducePupFn,
    merge: CmiReduceMergeFn,
    dest: CmiHandler,
    delete: Option<CmiReduceDeleteFn>,
    call: &'static str,
}

impl Ops {
    /// The functions, or the job ends naming the null one.
    fn new(
        pup: Option<CmiReducePupFn>,
        merge: Option<CmiReduceMergeFn>,
        dest: Option<CmiHandler>,
        delete: Option<CmiReduceDeleteFn>,
        call: &'static str,
    ) -> Ops {
        let null = |what: &str| -> ! { converse::abort(&format!("{call}: {what} is null")) };
        Ops {
            pup: pup.unwrap_or_else(|| null("pupFn")),
            merge: merge.unwrap_or_else(|| null("mergeFn")),
            dest: dest.unwrap_or_else(|| null("dest")),
            delete,
            call,
        }
    }
}

/// Where the calling PE is in a reduction's tree.
#[derive(Clone, Copy)]
struct Place {
    root: bool,
    leaf: bool,
}

/// A PE's results waiting for `dest`, and its result handler.
#[derive(Default)]
struct Results {
    issued: u64,
    pending: HashMap<u64, (CmiHandler, *mut c_void)>,
    handler: Option<usize>,
}

static RESULTS: Cpv<RefCell<Results>> = Cpv::new();

fn results() -> Rc<RefCell<Results>> {
    RESULTS.try_get().unwrap_or_else(|| {
        RESULTS.initialize(RefCell::default());
        RESULTS.get()
    })
}

/// The result handler's index, the same on every PE: registered by the
/// module init (see [`register_module`]); 0 before.
static RESULT_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the struct reductions' module init, which registers the
/// result handler on every PE before the program's start function, so it
/// takes one index everywhere: a node reduction's result is delivered on
/// whichever PE of node 0 completed it. Called before a job starts
/// (`ConverseInit`, `CmsInit`).
pub(crate) fn register_module() {
    converse::register_module_init("converse-capi struct reductions", || {
        let h = converse::register_handler(on_result);
        RESULT_HANDLER.store(h, Ordering::Relaxed);
    });
}

/// The handler for the results of the reductions this PE is the root of:
/// the module's; in a job started otherwise than by `ConverseInit` (from
/// Rust), a handler of this PE's own, registered on first use.
fn result_handler() -> usize {
    let h = RESULT_HANDLER.load(Ordering::Relaxed);
    if h != 0 {
        return h;
    }
    let table = results();
    if let Some(h) = table.borrow().handler {
        return h;
    }
    let h = converse::register_handler_local(on_result);
    table.borrow_mut().handler = Some(h);
    h
}

/// The module's result handler, which every PE of node 0 knows, or the job
/// ends naming `call`.
fn node_result_handler(call: &str) -> usize {
    match RESULT_HANDLER.load(Ordering::Relaxed) {
        0 => converse::abort(&format!(
            "{call}: struct node reductions need the job started by ConverseInit"
        )),
        h => h,
    }
}

/// Keeps `data` for `dest`; the token to deliver to the result handler.
fn keep_for_dest(dest: CmiHandler, data: *mut c_void) -> Vec<u8> {
    let table = results();
    let mut t = table.borrow_mut();
    t.issued += 1;
    let token = t.issued;
    t.pending.insert(token, (dest, data));
    token.to_le_bytes().to_vec()
}

/// A result reached the root: `dest(merged)`.
fn on_result(msg: Message) {
    let token = converse::decode_struct_result::<Vec<u8>>(&msg)
        .ok()
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_le_bytes);
    drop(msg);
    let entry = token.and_then(|t| results().borrow_mut().pending.remove(&t));
    match entry {
        Some((dest, data)) => dest(data),
        None => converse::abort(&format!(
            "PE {}: a struct reduction's result arrived that no reduction of this PE is waiting for (token {token:?})",
            converse::my_pe()
        )),
    }
}

/// The last step on a PE, once `data` is merged: the root keeps it for
/// `dest`; any other PE packs it and deletes it. Returns the value for the
/// core.
fn finish(data: *mut c_void, ops: Ops, root: bool) -> Vec<u8> {
    if root {
        return keep_for_dest(ops.dest, data);
    }
    let packed = pack_with(ops.pup, data, ops.call);
    if let Some(delete) = ops.delete {
        delete(data);
    }
    packed
}

/// 16 bytes, 16-aligned: the children's packed data is copied into these,
/// as aligned as Converse's message payloads.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk([u8; 16]);

/// `bytes` in a 16-aligned buffer of its own (at least one chunk).
fn aligned(bytes: &[u8]) -> Vec<Chunk> {
    let mut buf = vec![Chunk([0; 16]); bytes.len().div_ceil(16).max(1)];
    // SAFETY: the buffer holds at least `bytes.len()` bytes, and is not
    // `bytes`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    buf
}

/// Merges the children's packed data into `local` with the C merge
/// function; the merged data.
fn merge_children(ops: Ops, local: *mut c_void, children: Vec<Vec<u8>>) -> *mut c_void {
    let mut copies: Vec<Vec<Chunk>> = children.iter().map(|c| aligned(c)).collect();
    drop(children);
    let mut remote: Vec<*mut c_void> = copies.iter_mut().map(|c| c.as_mut_ptr().cast()).collect();
    let count = c_int::try_from(remote.len()).expect("a PE has few children");
    let mut size: c_int = 0;
    (ops.merge)(&mut size, local, remote.as_mut_ptr(), count)
    // `copies` go here: the runtime frees the children's data after the
    // merge.
}

/// What a PE with children keeps for its merge (see the module comment).
struct Pending {
    /// The PE's own data, unless it is a leaf.
    local: Option<*mut c_void>,
    ops: Ops,
    root: bool,
}

// SAFETY: a node reduction's merge step may run on another PE (thread) of
// the node than the one that called. `local` is the C program's data,
// given up to the runtime by the call: from then on only the merge step
// touches it, and the node's reduction table (a mutex) hands the step from
// the calling thread to the one that runs it, so the data is used by one
// thread at a time, after the hand-over, as Charm++'s node reductions use
// it. `Ops` holds plain function pointers.
unsafe impl Send for Pending {}

impl Pending {
    /// The core's merge step: the children's packed data merged into the
    /// PE's own, then finished.
    fn merge(self, _own: Vec<u8>, children: Vec<Vec<u8>>) -> Vec<u8> {
        let Some(local) = self.local else {
            converse::abort(&format!(
                "{}: PE {} was given children's contributions, but it is a leaf of the reduction's tree",
                self.ops.call,
                converse::my_pe()
            ))
        };
        let merged = merge_children(self.ops, local, children);
        finish(merged, self.ops, self.root)
    }
}

/// This PE's contribution: the value to give the core (the packed data on
/// a leaf that is not the root, which is finished here) and what its merge
/// step needs.
fn contribution(data: *mut c_void, ops: Ops, place: Place) -> (Vec<u8>, Pending) {
    let (value, local) = if place.leaf {
        (finish(data, ops, place.root), None)
    } else {
        (Vec::new(), Some(data))
    };
    let pending = Pending {
        local,
        ops,
        root: place.root,
    };
    (value, pending)
}

/// The calling PE's place in the reduction over all PEs.
fn global_place() -> Place {
    let me = converse::my_pe();
    Place {
        root: me == converse::span_tree_root(),
        leaf: converse::num_span_tree_children(me) == 0,
    }
}

/// `CmiReduceStruct(data, pupFn, mergeFn, dest, deleteFn)`: contributes
/// `data` to the next reduction over all PEs (matched by call order,
/// shared with `CmiReduce`); `dest(merged)` runs on PE 0.
///
/// # Safety
/// `data` is what the C functions expect; the runtime holds it until this
/// PE's part is done (see the module comment for who deletes what).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReduceStruct(
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
) {
    let ops = Ops::new(pup, merge, dest, delete, "CmiReduceStruct");
    let handler = result_handler();
    let (value, pending) = contribution(data, ops, global_place());
    converse::reduce_struct(
        value,
        move |own, children| pending.merge(own, children),
        handler,
    );
}

/// `CmiReduceStructID(data, pupFn, mergeFn, dest, deleteFn, id)`: as
/// `CmiReduceStruct`, matched by `id`.
///
/// # Safety
/// As [`CmiReduceStruct`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReduceStructID(
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
    id: CmiReductionID,
) {
    let ops = Ops::new(pup, merge, dest, delete, "CmiReduceStructID");
    let id = reduction_id(id, "CmiReduceStructID");
    let handler = result_handler();
    let (value, pending) = contribution(data, ops, global_place());
    let merge = move |own, children| pending.merge(own, children);
    converse::reduce_struct_id(value, merge, handler, id);
}

/// `CmiListReduceStruct(npes, pes, data, pupFn, mergeFn, dest, deleteFn,
/// id)`: over the listed PEs (every one calls it with the same list);
/// `dest(merged)` runs on `pes[0]`.
///
/// # Safety
/// `pes` points at `npes` ints; `data` as in [`CmiReduceStruct`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the manual's signature
pub unsafe extern "C-unwind" fn CmiListReduceStruct(
    npes: c_int,
    pes: *const c_int,
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
    id: CmiReductionID,
) {
    const CALL: &str = "CmiListReduceStruct";
    let ops = Ops::new(pup, merge, dest, delete, CALL);
    let id = reduction_id(id, CALL);
    let n = crate::nonneg(npes, CALL);
    let list: Vec<usize> = if n == 0 {
        Vec::new()
    } else {
        if pes.is_null() {
            converse::abort(&format!("{CALL}: {n} PEs but the list is null"));
        }
        // SAFETY: `n` ints at `pes` (the caller's promise).
        let ints = unsafe { std::slice::from_raw_parts(pes, n) };
        ints.iter().map(|&p| crate::nonneg(p, CALL)).collect()
    };
    list_reduce(&list, data, ops, id);
}

/// The list form with the list in hand (`CmiListReduceStruct`,
/// `CmiGroupReduceStruct`).
fn list_reduce(list: &[usize], data: *mut c_void, ops: Ops, id: ReductionId) {
    let handler = result_handler();
    let me = converse::my_pe();
    let Some(pos) = list.iter().position(|&p| p == me) else {
        // The core ends the job, naming the list that lacks this PE.
        converse::list_reduce_struct(list, Vec::new(), |v: Vec<u8>, _| v, handler, id);
        converse::abort(&format!(
            "{}: the PE list does not contain PE {me}",
            ops.call
        ));
    };
    let tree = SpanningTree::new(list.len(), converse::spanning_tree_branch(), 0);
    let place = Place {
        root: pos == 0,
        leaf: tree.num_children(pos) == 0,
    };
    let (value, pending) = contribution(data, ops, place);
    let merge = move |own, children| pending.merge(own, children);
    converse::list_reduce_struct(list, value, merge, handler, id);
}

/// `CmiGroupReduceStruct(grp, data, pupFn, mergeFn, dest, deleteFn, id)`:
/// over the group's members (every member calls it); `dest(merged)` runs
/// on the group's first member. On a member that does not have the group's
/// definition yet, the contribution waits for it.
///
/// # Safety
/// As [`CmiReduceStruct`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGroupReduceStruct(
    grp: CmiGroup,
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
    id: CmiReductionID,
) {
    const CALL: &str = "CmiGroupReduceStruct";
    let ops = Ops::new(pup, merge, dest, delete, CALL);
    let id = reduction_id(id, CALL);
    converse::when_group_known(Group::from_id(grp.id), move |pes| {
        list_reduce(pes, data, ops, id)
    });
}

/// The calling PE's node's place in the reduction over all nodes.
fn node_place() -> Place {
    let node = converse::my_node();
    Place {
        root: node == 0,
        leaf: converse::num_node_span_tree_children(node) == 0,
    }
}

/// `CmiNodeReduceStruct(data, pupFn, mergeFn, dest, deleteFn)`: one PE of
/// each node contributes `data` to the next reduction over all nodes
/// (matched by call order on each node); `dest(merged)` runs on node 0.
/// The merge, pup and delete functions may run on another PE of the node
/// than the caller.
///
/// # Safety
/// As [`CmiReduceStruct`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiNodeReduceStruct(
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
) {
    const CALL: &str = "CmiNodeReduceStruct";
    let ops = Ops::new(pup, merge, dest, delete, CALL);
    let handler = node_result_handler(CALL);
    let (value, pending) = contribution(data, ops, node_place());
    let merge = move |own, children| pending.merge(own, children);
    converse::node_reduce_struct(value, merge, handler);
}

/// `CmiNodeReduceStructID(data, pupFn, mergeFn, dest, deleteFn, id)`: as
/// `CmiNodeReduceStruct`, matched by a node reduction ID.
///
/// # Safety
/// As [`CmiReduceStruct`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiNodeReduceStructID(
    data: *mut c_void,
    pup: Option<CmiReducePupFn>,
    merge: Option<CmiReduceMergeFn>,
    dest: Option<CmiHandler>,
    delete: Option<CmiReduceDeleteFn>,
    id: CmiReductionID,
) {
    const CALL: &str = "CmiNodeReduceStructID";
    let ops = Ops::new(pup, merge, dest, delete, CALL);
    let id = node_reduction_id(id, CALL);
    let handler = node_result_handler(CALL);
    let (value, pending) = contribution(data, ops, node_place());
    let merge = move |own, children| pending.merge(own, children);
    converse::node_reduce_struct_id(value, merge, handler, id);
}
