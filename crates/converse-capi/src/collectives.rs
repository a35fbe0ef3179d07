//! Sends beyond one PE and reductions, from C: node sends and node
//! broadcasts, vector sends, `CmiMultipleSend`, multicast groups and list
//! sends (and `CmiLookupGroup`), message reductions (by call order, by
//! ID, over a list or a group, over nodes), and the spanning trees.
//!
//! # Invariants
//!
//! - As in `msgs`: copying calls read `size` bytes from any memory;
//!   `AndFree` calls take a buffer from `CmiAlloc` or a handler.
//! - A C reduction's merge function (`CmiReduceMergeFn`) gets the local
//!   contribution and the children's as C buffers, exclusive and writable,
//!   and returns the merged buffer (usually `local`, written in place) with
//!   its size in `*size`. The runtime frees the children's buffers after
//!   the merge, as Converse does; `local`, if the merge returns another
//!   buffer, is the merge's to free. The merged message runs the handler
//!   set in it, on the root (PE 0 for `CmiReduce`, a PE of node 0 for
//!   `CmiNodeReduce`). A node reduction's merge may run on another PE of
//!   the node than the caller: it is a plain function pointer.
//! - A `CmiGroup` holds the core's group ID (`id`) and the PE that made it
//!   (`pe`); only `id` is read back.
//!
//! # Concurrency
//!
//! Every call runs on the calling PE, as the core's do. `CmiLookupGroup`'s
//! lists are kept in a `Cpv` table, touched only by its PE.
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::NonNull;

use converse::{Group, Message, NodeReductionId, ReductionId};
use converse_msg::raw::{self, MessageRaw};

use crate::msgs::{copy_of, take};
use crate::nonneg;

/// The PEs at `pes` (`npes` of them) as indices.
///
/// # Safety
/// `pes` points at `npes` ints (or `npes` is 0).
unsafe fn pe_list(npes: c_int, pes: *const c_int, call: &str) -> Vec<usize> {
    let n = nonneg(npes, call);
    if n == 0 {
        return Vec::new();
    }
    if pes.is_null() {
        converse::abort(&format!("{call}: {n} PEs but the list is null"));
    }
    // SAFETY: `n` ints at `pes` (the caller's promise).
    let list = unsafe { std::slice::from_raw_parts(pes, n) };
    list.iter().map(|&p| nonneg(p, call)).collect()
}

/// A send's handle for C (`CmiCommHandle`): null when done (always, today).
fn handle(h: converse::CommHandle) -> *mut c_void {
    crate::msgs::done(h)
}

// ---- node sends ------------------------------------------------------------

/// `CmiSyncNodeSend(node, size, msg)`: a copy to node `node` (any one of
/// its PEs takes it).
///
/// # Safety
/// `msg` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeSend(node: c_int, size: c_int, msg: *mut c_void) {
    let node = nonneg(node, "CmiSyncNodeSend");
    // SAFETY: the caller's promise.
    converse::sync_node_send_and_free(node, unsafe { copy_of(size, msg, "CmiSyncNodeSend") });
}

/// `CmiSyncNodeSendAndFree(node, size, msg)`.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeSendAndFree(node: c_int, size: c_int, msg: *mut c_void) {
    let node = nonneg(node, "CmiSyncNodeSendAndFree");
    // SAFETY: the caller's promise.
    converse::sync_node_send_and_free(node, unsafe { take(size, msg, "CmiSyncNodeSendAndFree") });
}

/// `CmiAsyncNodeSend(node, size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncNodeSend(
    node: c_int,
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    let node = nonneg(node, "CmiAsyncNodeSend");
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncNodeSend") };
    handle(converse::async_node_send(node, &copy))
}

/// `CmiSyncNodeBroadcast(size, msg)`: a copy to every node but the
/// caller's.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeBroadcast(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_node_broadcast_and_free(unsafe { copy_of(size, msg, "CmiSyncNodeBroadcast") });
}

/// `CmiSyncNodeBroadcastAndFree(size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSendAndFree`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeBroadcastAndFree(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_node_broadcast_and_free(unsafe {
        take(size, msg, "CmiSyncNodeBroadcastAndFree")
    });
}

/// `CmiSyncNodeBroadcastAll(size, msg)`: a copy to every node.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeBroadcastAll(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_node_broadcast_all_and_free(unsafe {
        copy_of(size, msg, "CmiSyncNodeBroadcastAll")
    });
}

/// `CmiSyncNodeBroadcastAllAndFree(size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSendAndFree`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncNodeBroadcastAllAndFree(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_node_broadcast_all_and_free(unsafe {
        take(size, msg, "CmiSyncNodeBroadcastAllAndFree")
    });
}

/// `CmiAsyncNodeBroadcast(size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncNodeBroadcast(
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncNodeBroadcast") };
    handle(converse::async_node_broadcast(&copy))
}

/// `CmiAsyncNodeBroadcastAll(size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncNodeBroadcastAll(
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncNodeBroadcastAll") };
    handle(converse::async_node_broadcast_all(&copy))
}

// ---- vector sends and CmiMultipleSend -------------------------------------

/// The `len` pieces `(sizes[i], comps[i])` as byte slices.
///
/// # Safety
/// `sizes` and `comps` point at `len` entries each; `comps[i]` at
/// `sizes[i]` readable bytes, which stay alive while the slices are used.
unsafe fn pieces<'a>(
    len: c_int,
    sizes: *const c_int,
    comps: *const *const c_char,
    call: &str,
) -> Vec<&'a [u8]> {
    let n = nonneg(len, call);
    if n == 0 {
        return Vec::new();
    }
    if sizes.is_null() || comps.is_null() {
        converse::abort(&format!(
            "{call}: {n} pieces but the sizes or the pieces are null"
        ));
    }
    (0..n)
        .map(|i| {
            // SAFETY: `n` entries in each array (the caller's promise).
            let (size, ptr) = unsafe { (*sizes.add(i), *comps.add(i)) };
            let size = nonneg(size, call);
            if size == 0 {
                return &[][..];
            }
            if ptr.is_null() {
                converse::abort(&format!("{call}: piece {i} of {size} bytes is null"));
            }
            // SAFETY: `size` readable bytes at `ptr`, alive for `'a` (the
            // caller's promise).
            unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), size) }
        })
        .collect()
}

/// `CmiSyncVectorSend(pe, len, sizes, msgComps)`: sends one message made
/// of the pieces in order (the first starts with the header).
///
/// # Safety
/// `sizes` and `msgComps` hold `len` entries; each piece is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncVectorSend(
    pe: c_int,
    len: c_int,
    sizes: *const c_int,
    comps: *const *const c_char,
) {
    let pe = nonneg(pe, "CmiSyncVectorSend");
    // SAFETY: the caller's promise.
    let parts = unsafe { pieces(len, sizes, comps, "CmiSyncVectorSend") };
    converse::sync_vector_send(pe, &parts);
}

/// `CmiSyncVectorSendAndFree(pe, len, sizes, msgComps)`: as
/// `CmiSyncVectorSend`, then frees each piece with `CmiFree` (each comes
/// from `CmiAlloc`). The two arrays themselves are not freed (the manual;
/// they may live on the caller's stack).
///
/// # Safety
/// As [`CmiSyncVectorSend`]; each piece comes from `CmiAlloc` and the
/// caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncVectorSendAndFree(
    pe: c_int,
    len: c_int,
    sizes: *const c_int,
    comps: *const *mut c_char,
) {
    // SAFETY: the caller's promise.
    unsafe { CmiSyncVectorSend(pe, len, sizes, comps.cast()) };
    let n = nonneg(len, "CmiSyncVectorSendAndFree");
    for i in 0..n {
        // SAFETY: `n` entries, each a `CmiAlloc` buffer the caller gives up.
        unsafe { crate::msgs::CmiFree((*comps.add(i)).cast()) };
    }
}

/// `CmiAsyncVectorSend(pe, len, sizes, msgComps)`.
///
/// # Safety
/// As [`CmiSyncVectorSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncVectorSend(
    pe: c_int,
    len: c_int,
    sizes: *const c_int,
    comps: *const *const c_char,
) -> *mut c_void {
    let pe = nonneg(pe, "CmiAsyncVectorSend");
    // SAFETY: the caller's promise.
    let parts = unsafe { pieces(len, sizes, comps, "CmiAsyncVectorSend") };
    handle(converse::async_vector_send(pe, &parts))
}

/// `CmiMultipleSend(pe, len, sizes, msgComps)`: each piece is a whole
/// message (header first, its handler set); they go together and are
/// delivered in order, each in a buffer of its own.
///
/// # Safety
/// As [`CmiSyncVectorSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiMultipleSend(
    pe: c_int,
    len: c_int,
    sizes: *const c_int,
    comps: *const *const c_char,
) {
    let pe = nonneg(pe, "CmiMultipleSend");
    // SAFETY: the caller's promise.
    let parts = unsafe { pieces(len, sizes, comps, "CmiMultipleSend") };
    let msgs: Vec<Message> = parts
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let size = c_int::try_from(bytes.len()).unwrap_or(c_int::MAX);
            // SAFETY: `bytes` is readable for its length.
            unsafe {
                copy_of(
                    size,
                    bytes.as_ptr().cast_mut().cast(),
                    &format!("CmiMultipleSend (message {i})"),
                )
            }
        })
        .collect();
    let refs: Vec<&Message> = msgs.iter().collect();
    converse::multiple_send(pe, &refs);
}

/// `CmiInitMultipleSendRoutine()`: nothing to prepare.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiInitMultipleSendRoutine() {
    converse::init_multiple_send_routine();
}

// ---- groups and list sends -------------------------------------------------

/// A multicast group as C holds it (`CmiGroup`), by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmiGroup {
    /// The PE that made the group.
    pub pe: c_uint,
    /// The core's group ID.
    pub id: c_uint,
}

/// `CmiEstablishGroup(npes, pes)`: a group of the listed PEs, usable on
/// every PE (send it in messages).
///
/// # Safety
/// `pes` points at `npes` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiEstablishGroup(npes: c_int, pes: *const c_int) -> CmiGroup {
    // SAFETY: the caller's promise.
    let list = unsafe { pe_list(npes, pes, "CmiEstablishGroup") };
    let group = converse::establish_group(&list);
    CmiGroup {
        pe: c_uint::try_from(converse::my_pe()).unwrap_or(c_uint::MAX),
        id: group.id(),
    }
}

/// The member lists `CmiLookupGroup` has handed out on this PE: kept for
/// the job, as Charm++'s are, so the pointers stay valid.
static LOOKED_UP: converse::Cpv<std::cell::RefCell<std::collections::HashMap<u32, Box<[c_int]>>>> =
    converse::Cpv::new();

/// `CmiLookupGroup(grp, &npes, &pes)`: the group's members, in the order
/// they were listed, if this PE has the group's definition (always on the
/// PE that made it; elsewhere once its definition, broadcast by
/// `CmiEstablishGroup`, has arrived); otherwise `npes` 0 and `pes` NULL.
/// The list belongs to the runtime and stays valid for the job.
///
/// # Safety
/// `npes` and `pes` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiLookupGroup(
    grp: CmiGroup,
    npes: *mut c_int,
    pes: *mut *mut c_int,
) {
    if npes.is_null() || pes.is_null() {
        converse::abort("CmiLookupGroup: npes or pes is null");
    }
    let (n, list) = match converse::group_members(Group::from_id(grp.id)) {
        None => (0, std::ptr::null_mut()),
        Some(members) => {
            if !LOOKED_UP.is_initialized() {
                LOOKED_UP.initialize(Default::default());
            }
            let table = LOOKED_UP.get();
            let mut table = table.borrow_mut();
            let kept = table
                .entry(grp.id)
                .or_insert_with(|| members.iter().map(|&p| p as c_int).collect());
            (kept.len(), kept.as_mut_ptr())
        }
    };
    // SAFETY: both are writable (the caller's promise; checked not null).
    unsafe {
        *npes = c_int::try_from(n).unwrap_or(c_int::MAX);
        *pes = list;
    }
}

/// `CmiSyncMulticast(grp, size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncMulticast(grp: CmiGroup, size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiSyncMulticast") };
    converse::sync_multicast_and_free(Group::from_id(grp.id), copy);
}

/// `CmiSyncMulticastAndFree(grp, size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSendAndFree`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncMulticastAndFree(
    grp: CmiGroup,
    size: c_int,
    msg: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiSyncMulticastAndFree") };
    converse::sync_multicast_and_free(Group::from_id(grp.id), msg);
}

/// `CmiAsyncMulticast(grp, size, msg)`.
///
/// # Safety
/// As [`CmiSyncNodeSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncMulticast(
    grp: CmiGroup,
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncMulticast") };
    handle(converse::async_multicast(Group::from_id(grp.id), &copy))
}

/// `CmiSyncListSend(npes, pes, size, msg)`.
///
/// # Safety
/// `pes` points at `npes` ints; `msg` at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncListSend(
    npes: c_int,
    pes: *const c_int,
    size: c_int,
    msg: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let (list, copy) = unsafe {
        (
            pe_list(npes, pes, "CmiSyncListSend"),
            copy_of(size, msg, "CmiSyncListSend"),
        )
    };
    converse::sync_list_send_and_free(&list, copy);
}

/// `CmiSyncListSendAndFree(npes, pes, size, msg)`.
///
/// # Safety
/// `pes` points at `npes` ints; `msg` comes from `CmiAlloc` or a handler
/// and the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncListSendAndFree(
    npes: c_int,
    pes: *const c_int,
    size: c_int,
    msg: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let (list, msg) = unsafe {
        (
            pe_list(npes, pes, "CmiSyncListSendAndFree"),
            take(size, msg, "CmiSyncListSendAndFree"),
        )
    };
    converse::sync_list_send_and_free(&list, msg);
}

/// `CmiAsyncListSend(npes, pes, size, msg)`.
///
/// # Safety
/// As [`CmiSyncListSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncListSend(
    npes: c_int,
    pes: *const c_int,
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let (list, copy) = unsafe {
        (
            pe_list(npes, pes, "CmiAsyncListSend"),
            copy_of(size, msg, "CmiAsyncListSend"),
        )
    };
    handle(converse::async_list_send(&list, &copy))
}

// ---- reductions --------------------------------------------------------------

/// A C reduction's merge function (`CmiReduceMergeFn`).
pub type CmiReduceMergeFn =
    extern "C-unwind" fn(*mut c_int, *mut c_void, *mut *mut c_void, c_int) -> *mut c_void;

/// `merge`, or the job ends naming `call` (a null function pointer).
fn merge_fn(merge: Option<CmiReduceMergeFn>, call: &str) -> CmiReduceMergeFn {
    merge.unwrap_or_else(|| converse::abort(&format!("{call}: the merge function is null")))
}

/// The core's merge closure for the C function `merge` (see the module
/// comment for who frees what).
fn c_merge(merge: CmiReduceMergeFn) -> impl FnOnce(Message, Vec<Message>) -> Message + 'static {
    move |local: Message, remote: Vec<Message>| {
        if remote.is_empty() {
            // Converse calls the merge only when children contributed.
            return local;
        }
        let mut size = c_int::try_from(local.len()).unwrap_or(c_int::MAX);
        let local = local.into_c_ptr();
        let mut children: Vec<*mut c_void> = remote
            .into_iter()
            .map(|m| m.into_c_ptr().as_ptr().cast())
            .collect();
        let count = c_int::try_from(children.len()).unwrap_or(c_int::MAX);
        let merged = merge(
            &mut size,
            local.as_ptr().cast(),
            children.as_mut_ptr(),
            count,
        );
        for child in children {
            if child != merged {
                // SAFETY: each was given to C above and the merge is done
                // with it (Converse frees them after the merge).
                unsafe { raw::c_free(NonNull::new(child.cast()).expect("given to C, not null")) };
            }
        }
        // SAFETY: the merge returns a buffer given to C (`local`, a child's,
        // or one from `CmiAlloc`) and gives it up.
        unsafe { take(size, merged, "the reduction's merge function") }
    }
}

/// `CmiReductionID`.
pub type CmiReductionID = c_uint;

/// `id` as the core's, or the job ends naming `call`.
pub(crate) fn reduction_id(id: CmiReductionID, call: &str) -> ReductionId {
    ReductionId::from_raw(id).unwrap_or_else(|| {
        converse::abort(&format!(
            "{call}: {id} is no reduction ID (take one from CmiGetGlobalReduction or CmiGetDynamicReduction)"
        ))
    })
}

/// `CmiReduce(msg, size, mergeFn)`: contributes the buffer to the next
/// reduction over all PEs (matched by call order); the merged message runs
/// its handler on PE 0.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReduce(
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiReduce") };
    converse::reduce(msg, c_merge(merge_fn(merge, "CmiReduce")));
}

/// `CmiReduceID(msg, size, mergeFn, id)`.
///
/// # Safety
/// As [`CmiReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReduceID(
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
    id: CmiReductionID,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiReduceID") };
    converse::reduce_id(
        msg,
        c_merge(merge_fn(merge, "CmiReduceID")),
        reduction_id(id, "CmiReduceID"),
    );
}

/// `CmiListReduce(npes, pes, msg, size, mergeFn, id)`: over the listed
/// PEs; the result runs on the first of them.
///
/// # Safety
/// `pes` points at `npes` ints; `msg` as in [`CmiReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiListReduce(
    npes: c_int,
    pes: *const c_int,
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
    id: CmiReductionID,
) {
    // SAFETY: the caller's promise.
    let (list, msg) = unsafe {
        (
            pe_list(npes, pes, "CmiListReduce"),
            take(size, msg, "CmiListReduce"),
        )
    };
    converse::list_reduce(
        &list,
        msg,
        c_merge(merge_fn(merge, "CmiListReduce")),
        reduction_id(id, "CmiListReduce"),
    );
}

/// `CmiGroupReduce(grp, msg, size, mergeFn, id)`.
///
/// # Safety
/// As [`CmiReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGroupReduce(
    grp: CmiGroup,
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
    id: CmiReductionID,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiGroupReduce") };
    converse::group_reduce(
        Group::from_id(grp.id),
        msg,
        c_merge(merge_fn(merge, "CmiGroupReduce")),
        reduction_id(id, "CmiGroupReduce"),
    );
}

/// `CmiGetGlobalReduction()`: an ID that is the same on every PE that
/// calls this in the same order.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiGetGlobalReduction() -> CmiReductionID {
    converse::global_reduction_id().raw()
}

/// `CmiGetDynamicReduction()`: on PE 0 only, an ID unique in the job.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiGetDynamicReduction() -> CmiReductionID {
    converse::dynamic_reduction_id().raw()
}

/// `data`/`dataSize` of a `CmiGetDynamic*ReductionRemote` call, or the job
/// ends naming `call`.
///
/// # Safety
/// `data` is readable for `size` bytes when `size` is positive.
unsafe fn remote_data<'a>(size: c_int, data: *const c_void, call: &str) -> &'a [u8] {
    let n = nonneg(size, call);
    if n == 0 {
        return &[];
    }
    if data.is_null() {
        converse::abort(&format!("{call}: dataSize is {n} but data is null"));
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(data.cast(), n) }
}

/// `CmiGetDynamicReductionRemote(handlerIdx, pe, dataSize, data)`: asks PE
/// 0 for a dynamic ID, delivered to handler `handlerIdx` on `pe` (every PE
/// if `pe` is -1) as the header, the ID (4 bytes), `dataSize` (4 bytes)
/// and the data.
///
/// # Safety
/// `data` is readable for `dataSize` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetDynamicReductionRemote(
    handler: c_int,
    pe: c_int,
    size: c_int,
    data: *mut c_void,
) {
    const CALL: &str = "CmiGetDynamicReductionRemote";
    // SAFETY: the caller's promise.
    let data = unsafe { remote_data(size, data, CALL) };
    let dest = (pe != -1).then(|| nonneg(pe, CALL));
    converse::dynamic_reduction_id_remote(nonneg(handler, CALL), dest, data);
}

// ---- node reductions -------------------------------------------------------

/// `id` as the core's node reduction ID, or the job ends naming `call`.
pub(crate) fn node_reduction_id(id: CmiReductionID, call: &str) -> NodeReductionId {
    NodeReductionId::from_raw(id).unwrap_or_else(|| {
        converse::abort(&format!(
            "{call}: {id} is no node reduction ID (take one from CmiGetGlobalNodeReduction or CmiGetDynamicNodeReduction)"
        ))
    })
}

/// `CmiNodeReduce(msg, size, mergeFn)`: one PE of each node contributes
/// the buffer to the next reduction over all nodes (matched by call order
/// on each node); the merged message runs its handler on node 0. The merge
/// function may run on another PE of the node than the caller.
///
/// # Safety
/// As [`CmiReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiNodeReduce(
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiNodeReduce") };
    converse::node_reduce(msg, c_merge(merge_fn(merge, "CmiNodeReduce")));
}

/// `CmiNodeReduceID(msg, size, mergeFn, id)`: as `CmiNodeReduce`, matched
/// by a node reduction ID.
///
/// # Safety
/// As [`CmiReduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiNodeReduceID(
    msg: *mut c_void,
    size: c_int,
    merge: Option<CmiReduceMergeFn>,
    id: CmiReductionID,
) {
    // SAFETY: the caller's promise.
    let msg = unsafe { take(size, msg, "CmiNodeReduceID") };
    converse::node_reduce_id(
        msg,
        c_merge(merge_fn(merge, "CmiNodeReduceID")),
        node_reduction_id(id, "CmiNodeReduceID"),
    );
}

/// `CmiGetGlobalNodeReduction()`: a node reduction ID, the same on every
/// node where one PE calls this, in the same order.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiGetGlobalNodeReduction() -> CmiReductionID {
    converse::global_node_reduction_id().raw()
}

/// `CmiGetDynamicNodeReduction()`: on node 0 only, a node reduction ID
/// unique in the job.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiGetDynamicNodeReduction() -> CmiReductionID {
    converse::dynamic_node_reduction_id().raw()
}

/// `CmiGetDynamicNodeReductionRemote(handlerIdx, node, dataSize, data)`:
/// as `CmiGetDynamicReductionRemote`, for a node reduction ID delivered to
/// node `node`'s queue (every node's if `node` is -1).
///
/// # Safety
/// `data` is readable for `dataSize` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetDynamicNodeReductionRemote(
    handler: c_int,
    node: c_int,
    size: c_int,
    data: *mut c_void,
) {
    const CALL: &str = "CmiGetDynamicNodeReductionRemote";
    // SAFETY: the caller's promise.
    let data = unsafe { remote_data(size, data, CALL) };
    let dest = (node != -1).then(|| nonneg(node, CALL));
    converse::dynamic_node_reduction_id_remote(nonneg(handler, CALL), dest, data);
}

// ---- spanning trees --------------------------------------------------------

fn int(v: usize) -> c_int {
    c_int::try_from(v).expect("PE numbers fit a C int")
}

/// `CmiSpanTreeRoot()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiSpanTreeRoot() -> c_int {
    int(converse::span_tree_root())
}

/// `CmiSpanTreeParent(pe)`: -1 for the root.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiSpanTreeParent(pe: c_int) -> c_int {
    converse::span_tree_parent(nonneg(pe, "CmiSpanTreeParent")).map_or(-1, int)
}

/// `CmiNumSpanTreeChildren(pe)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumSpanTreeChildren(pe: c_int) -> c_int {
    int(converse::num_span_tree_children(nonneg(
        pe,
        "CmiNumSpanTreeChildren",
    )))
}

/// Writes `list` to the C array `out`.
///
/// # Safety
/// `out` has room for `list.len()` ints.
unsafe fn write_list(list: &[usize], out: *mut c_int, call: &str) {
    if list.is_empty() {
        return;
    }
    if out.is_null() {
        converse::abort(&format!("{call}: the children array is null"));
    }
    for (i, &v) in list.iter().enumerate() {
        // SAFETY: room for `list.len()` ints (the caller's promise).
        unsafe { out.add(i).write(int(v)) };
    }
}

/// `CmiSpanTreeChildren(pe, children)`: fills `children` with
/// `CmiNumSpanTreeChildren(pe)` PEs.
///
/// # Safety
/// `children` has room for that many ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSpanTreeChildren(pe: c_int, children: *mut c_int) {
    let list = converse::span_tree_children(nonneg(pe, "CmiSpanTreeChildren"));
    // SAFETY: the caller's promise.
    unsafe { write_list(&list, children, "CmiSpanTreeChildren") };
}

/// `CmiNodeSpanTreeParent(node)`: -1 for the root.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNodeSpanTreeParent(node: c_int) -> c_int {
    converse::node_span_tree_parent(nonneg(node, "CmiNodeSpanTreeParent")).map_or(-1, int)
}

/// `CmiNumNodeSpanTreeChildren(node)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumNodeSpanTreeChildren(node: c_int) -> c_int {
    int(converse::num_node_span_tree_children(nonneg(
        node,
        "CmiNumNodeSpanTreeChildren",
    )))
}

/// `CmiNodeSpanTreeChildren(node, children)`.
///
/// # Safety
/// `children` has room for `CmiNumNodeSpanTreeChildren(node)` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiNodeSpanTreeChildren(node: c_int, children: *mut c_int) {
    let list = converse::node_span_tree_children(nonneg(node, "CmiNodeSpanTreeChildren"));
    // SAFETY: the caller's promise.
    unsafe { write_list(&list, children, "CmiNodeSpanTreeChildren") };
}
