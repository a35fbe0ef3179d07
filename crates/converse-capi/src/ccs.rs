//! The server side of CCS for C (`conv-ccs.h`): registering C handlers
//! for CCS clients, answering their requests (at once, or later from any PE of the
//! node), and merging the replies of broadcast and multicast requests with a
//! C merge function, over [`converse::ccs`].
//!
//! # Invariants
//!
//! - A C CCS handler is registered as a Converse handler named by its
//!   function's identity ([`handlers::identity`](crate::handlers::identity))
//!   and its CCS name, so the handler-table check tells C handlers apart
//!   across processes. It receives the request as a message given to C
//!   (exclusive, writable, the data after the 32-byte header) and frees it.
//!   A `CcsHandlerFn` instead gets the data read-only for the duration of
//!   the call; the runtime frees the message after it returns.
//! - A `CcsDelayedReply` C holds is a number: the key of its
//!   [`DelayedReply`] in this process's `DELAYED`, with the node that
//!   made it. Sending or refusing it removes the entry (and consumes the
//!   reply), so a copy answered twice, or a number that never came from
//!   `CcsDelayReply`, is found missing and ends the job naming the call
//!   instead of touching freed memory. It is answered by a PE of the node
//!   (process) that delayed it, as Charm++'s, a pointer to that process's
//!   memory, is: the core's `DelayedReply` cannot travel between
//!   processes, and one from another node ends the job naming both.
//! - A C merge function sees every reply as a buffer given to C laid out as
//!   Charm++'s: the 32-byte message header, a 58-byte `CcsImplHeader`
//!   (handler name and big-endian `len`; the rest zero), then the data.
//!   The runtime frees the replies the merge did not return and, after
//!   copying its data out, the one it returned.
//!
//! # Concurrency
//!
//! Handlers run on their PE's thread, with the core's per-PE request
//! context. `DELAYED` is shared by every PE of the process behind a
//! mutex (a delayed reply may be answered from any PE). Merges run on the
//! CCS server's thread in the process of PE 0, not on a PE: they use only
//! the buffer calls (`CmiAlloc`, `CmiFree`), which work on any thread.
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use converse::ccs::{self, DelayedReply, MergeFn};
use converse::{MSG_HEADER_SIZE, Message};
use converse_msg::raw::{self, MessageRaw};

use crate::collectives::CmiReduceMergeFn;
use crate::handlers::{CmiHandler, identity};
use crate::{c_str, nonneg};

/// Bytes of Charm++'s `CcsImplHeader` (`conv-ccs.h` checks the same).
pub const IMPL_HEADER_SIZE: usize = 58;
/// Where its `handler` field starts (after the 14-byte `CcsSecAttr`).
const HANDLER_AT: usize = 14;
/// Where its `len` field starts (after `handler`, `pe` and `replyFd`).
const LEN_AT: usize = HANDLER_AT + 32 + 4 + 4;
/// Where a reply's data starts in the buffer a merge function sees.
const DATA_AT: usize = MSG_HEADER_SIZE + IMPL_HEADER_SIZE;

// ---- registering handlers ------------------------------------------------------

/// The handler name at `id`, or the job ends naming `call`.
///
/// # Safety
/// `id` is null or NUL-terminated.
unsafe fn handler_name(id: *const c_char, call: &str) -> String {
    if id.is_null() {
        converse::abort(&format!("{call}: the handler name is null"));
    }
    // SAFETY: the caller's promise.
    unsafe { c_str(id) }.into_owned()
}

fn index_int(index: usize) -> c_int {
    c_int::try_from(index).expect("handler indices are below MAX_HANDLER_INDEX")
}

/// `f`, or the job ends naming `call` (a null function pointer from C).
fn non_null_fn<F>(f: Option<F>, call: &str) -> F {
    f.unwrap_or_else(|| converse::abort(&format!("{call}: the function is null")))
}

/// `CcsRegisterHandler(id, fn)`: registers C handler `fn` on the calling
/// PE and makes it callable by CCS clients as `id`; returns its handler
/// index. Call it on every PE, in the same order.
///
/// # Safety
/// `id` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsRegisterHandler(
    id: *const c_char,
    f: Option<CmiHandler>,
) -> c_int {
    let f = non_null_fn(f, "CcsRegisterHandler");
    // SAFETY: the caller's promise.
    let name = unsafe { handler_name(id, "CcsRegisterHandler") };
    let call = move |msg: Message| f(msg.into_c_ptr().as_ptr().cast());
    let ident = format!("{} (CCS handler {name:?})", identity(f));
    let index = converse::register_handler_named(call, &ident);
    ccs::use_handler(&name, index);
    index_int(index)
}

/// A new-style CCS handler: `void f(void *userPtr, int reqLen, const void
/// *reqData)` (`CcsHandlerFn`).
pub type CcsHandlerFn = extern "C-unwind" fn(*mut c_void, c_int, *const c_void);

/// `CcsRegisterHandlerFn(id, fn, userPtr)`: as [`CcsRegisterHandler`],
/// for a function called with `userPtr` and the request data, read-only
/// and valid during the call.
///
/// # Safety
/// `id` is a NUL-terminated string; `userPtr` is whatever `fn` expects.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsRegisterHandlerFn(
    id: *const c_char,
    f: Option<CcsHandlerFn>,
    user: *mut c_void,
) -> c_int {
    let f = non_null_fn(f, "CcsRegisterHandlerFn");
    // SAFETY: the caller's promise.
    let name = unsafe { handler_name(id, "CcsRegisterHandlerFn") };
    let user = user as usize;
    let call = move |msg: Message| {
        let data = msg.payload();
        let len = c_int::try_from(data.len()).expect("request data is below 2^29 bytes");
        f(user as *mut c_void, len, data.as_ptr().cast());
    };
    // SAFETY: `identity` only takes the function's address (it never
    // calls it); both are plain C function pointers of one size.
    let as_handler = unsafe { std::mem::transmute::<CcsHandlerFn, CmiHandler>(f) };
    let ident = format!("{} (CCS handler function {name:?})", identity(as_handler));
    let index = converse::register_handler_named(call, &ident);
    ccs::use_handler(&name, index);
    index_int(index)
}

/// `CcsUseHandler(id, hdlr)`: makes Converse handler `hdlr` callable by
/// CCS clients as `id`.
///
/// # Safety
/// `id` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsUseHandler(id: *const c_char, hdlr: c_int) {
    // SAFETY: the caller's promise.
    let name = unsafe { handler_name(id, "CcsUseHandler") };
    ccs::use_handler(&name, nonneg(hdlr, "CcsUseHandler"));
}

// ---- merging -----------------------------------------------------------------

/// `CcsSetMergeFn(name, merge)`: combines the replies of broadcast and
/// multicast requests to `name` with C merge function `merge` (see the
/// module's invariants for what it is given).
///
/// # Safety
/// `name` is a NUL-terminated string; `merge` follows `CmiReduceMergeFn`'s
/// contract for the buffers it is given.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSetMergeFn(
    name: *const c_char,
    merge: Option<CmiReduceMergeFn>,
) {
    let merge = non_null_fn(merge, "CcsSetMergeFn");
    // SAFETY: the caller's promise.
    let name = unsafe { handler_name(name, "CcsSetMergeFn") };
    ccs::set_merge_fn(&name, c_merge(name.clone(), merge));
}

/// The core's merge for C function `merge`, set for handler `name`.
fn c_merge(name: String, merge: CmiReduceMergeFn) -> MergeFn {
    Arc::new(move |replies: &[&[u8]]| {
        let run = std::panic::AssertUnwindSafe(|| {
            // SAFETY: `merge` honours CmiReduceMergeFn's contract (the
            // promise made to `CcsSetMergeFn`).
            unsafe { run_merge(&name, merge, replies) }
        });
        match std::panic::catch_unwind(run) {
            Ok(merged) => merged,
            // Off a PE the panic has no PE to end: end the job here.
            Err(_) => converse::abort(&format!(
                "the merge function of CCS handler {name:?} failed (it runs on the CCS server's thread, not on a PE)"
            )),
        }
    })
}

/// A new buffer given to C holding `data` as a reply to `name`, laid out
/// for a merge function.
fn reply_buffer(name: &str, data: &[u8]) -> NonNull<u8> {
    let total = DATA_AT + data.len();
    let len = u32::try_from(data.len()).expect("replies are below 4 GiB");
    let Some(buf) = raw::c_alloc(total) else {
        converse::abort(&format!(
            "a reply of {} bytes to CCS handler {name:?} is too large to merge",
            data.len()
        ));
    };
    // SAFETY: a new, zeroed buffer of `total` bytes, ours alone; the name
    // is shorter than 32 bytes (the core refuses longer ones), so it and
    // its NUL fit the 32-byte field.
    unsafe {
        let p = buf.as_ptr();
        let name = &name.as_bytes()[..name.len().min(31)];
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            p.add(MSG_HEADER_SIZE + HANDLER_AT),
            name.len(),
        );
        let len = len.to_be_bytes();
        std::ptr::copy_nonoverlapping(len.as_ptr(), p.add(MSG_HEADER_SIZE + LEN_AT), 4);
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(DATA_AT), data.len());
    }
    buf
}

/// The data length a merge buffer's `CcsImplHeader` claims.
///
/// # Safety
/// `buf` holds at least [`DATA_AT`] readable bytes.
unsafe fn claimed_len(buf: *const u8) -> usize {
    let mut len = [0u8; 4];
    // SAFETY: the `len` field is inside the first `DATA_AT` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.add(MSG_HEADER_SIZE + LEN_AT), len.as_mut_ptr(), 4)
    };
    u32::from_be_bytes(len) as usize
}

/// Calls `merge` on `replies` (two or more) and returns the merged data.
///
/// # Safety
/// As [`CcsSetMergeFn`]'s `merge`.
unsafe fn run_merge(name: &str, merge: CmiReduceMergeFn, replies: &[&[u8]]) -> Vec<u8> {
    let mut bufs: Vec<*mut c_void> = replies
        .iter()
        .map(|r| reply_buffer(name, r).as_ptr().cast())
        .collect();
    let local = bufs[0];
    let mut size = c_int::try_from(DATA_AT + replies[0].len()).unwrap_or(c_int::MAX);
    let count = c_int::try_from(bufs.len() - 1).expect("fewer PEs than 2^31");
    let merged = merge(&mut size, local, bufs[1..].as_mut_ptr(), count);
    for &remote in &bufs[1..] {
        if remote != merged {
            // SAFETY: given to C above; the merge is done with it (the
            // runtime frees the remote buffers after the merge).
            unsafe { raw::c_free(NonNull::new(remote.cast()).expect("allocated above")) };
        }
    }
    let Some(merged) = NonNull::new(merged.cast::<u8>()) else {
        converse::abort(&format!(
            "the merge function of CCS handler {name:?} returned a null buffer"
        ));
    };
    // SAFETY: the merge returns a live buffer given to C (`local`, a
    // remote one, or one from `CmiAlloc`), which the runtime now owns.
    let capacity = unsafe { raw::c_capacity(merged) };
    if capacity < DATA_AT {
        converse::abort(&format!(
            "the merge function of CCS handler {name:?} returned a buffer of {capacity} bytes, shorter than the {DATA_AT} bytes of its headers"
        ));
    }
    // SAFETY: at least `DATA_AT` bytes (checked).
    let len = unsafe { claimed_len(merged.as_ptr()) };
    if len > capacity - DATA_AT {
        converse::abort(&format!(
            "the merge function of CCS handler {name:?} returned a buffer whose header claims {len} bytes of data, more than the {} it holds",
            capacity - DATA_AT
        ));
    }
    // SAFETY: `DATA_AT + len` bytes are inside the buffer (checked).
    let data = unsafe { std::slice::from_raw_parts(merged.as_ptr().add(DATA_AT), len) }.to_vec();
    // SAFETY: the runtime's reference to the result, given up here.
    unsafe { raw::c_free(merged) };
    data
}

/// `CcsMerge_concat(size, local, remote, n)`: a new buffer with the
/// replies' data one after another; frees `local`.
///
/// # Safety
/// `local` and the `n` buffers at `remote` are merge buffers (see
/// `conv-ccs.h`) given to C; `*size` is `local`'s size.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsMerge_concat(
    size: *mut c_int,
    local: *mut c_void,
    remote: *mut *mut c_void,
    n: c_int,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let (local, remote) = unsafe { merge_args(local, remote, n, "CcsMerge_concat") };
    let mut parts = vec![local];
    parts.extend_from_slice(remote);
    // SAFETY: each is a merge buffer (the caller's promise).
    let lens: Vec<usize> = parts.iter().map(|&b| unsafe { data_len(b) }).collect();
    let total: usize = lens.iter().sum();
    let out = raw::c_alloc(DATA_AT + total)
        .unwrap_or_else(|| converse::abort("CcsMerge_concat: the merged reply is too large"));
    // SAFETY: `out` is new and holds `DATA_AT + total` bytes; each part
    // holds its headers and `len` data bytes (`data_len` checked it).
    unsafe {
        let o = out.as_ptr();
        std::ptr::copy_nonoverlapping(
            local.as_ptr().add(MSG_HEADER_SIZE),
            o.add(MSG_HEADER_SIZE),
            IMPL_HEADER_SIZE,
        );
        let len = u32::try_from(total)
            .expect("below the largest message")
            .to_be_bytes();
        std::ptr::copy_nonoverlapping(len.as_ptr(), o.add(MSG_HEADER_SIZE + LEN_AT), 4);
        let mut at = DATA_AT;
        for (part, len) in parts.iter().zip(&lens) {
            std::ptr::copy_nonoverlapping(part.as_ptr().add(DATA_AT), o.add(at), *len);
            at += len;
        }
        raw::c_free(local);
        *size = c_int::try_from(DATA_AT + total).unwrap_or(c_int::MAX);
    }
    out.as_ptr().cast()
}

/// The non-null `local` and the `n` remote buffers at `remote`.
///
/// # Safety
/// `remote` points at `n` pointers.
unsafe fn merge_args<'a>(
    local: *mut c_void,
    remote: *mut *mut c_void,
    n: c_int,
    call: &str,
) -> (NonNull<u8>, &'a [NonNull<u8>]) {
    let Some(local) = NonNull::new(local.cast::<u8>()) else {
        converse::abort(&format!("{call}: the local reply is null"))
    };
    let n = nonneg(n, call);
    if n == 0 {
        return (local, &[]);
    }
    // SAFETY: `n` pointers at `remote` (the caller's promise); a null
    // pointer has the same layout as `Option<NonNull>`, checked below.
    let all = unsafe { std::slice::from_raw_parts(remote.cast::<Option<NonNull<u8>>>(), n) };
    if all.iter().any(Option::is_none) {
        converse::abort(&format!("{call}: a remote reply is null"));
    }
    // SAFETY: none is null (checked), so each is a valid `NonNull`.
    let remote = unsafe { std::slice::from_raw_parts(remote.cast::<NonNull<u8>>(), n) };
    (local, remote)
}

/// The data length of merge buffer `buf`, checked against its capacity.
///
/// # Safety
/// `buf` is a live buffer given to C.
unsafe fn data_len(buf: NonNull<u8>) -> usize {
    // SAFETY: the caller's promise.
    let capacity = unsafe { raw::c_capacity(buf) };
    let len = if capacity >= DATA_AT {
        // SAFETY: at least `DATA_AT` bytes.
        unsafe { claimed_len(buf.as_ptr()) }
    } else {
        usize::MAX
    };
    if len > capacity.saturating_sub(DATA_AT) {
        converse::abort(&format!(
            "a CCS merge: a reply buffer of {capacity} bytes does not hold the headers and the data its header claims"
        ));
    }
    len
}

/// Combines merge buffers element by element into `local` (Charm++'s
/// merges over native-endian numbers of `N` bytes).
///
/// # Safety
/// As [`CcsMerge_concat`].
unsafe fn elementwise<const N: usize>(
    local: *mut c_void,
    remote: *mut *mut c_void,
    n: c_int,
    call: &str,
    combine: impl Fn([u8; N], [u8; N]) -> [u8; N],
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let (local, remote) = unsafe { merge_args(local, remote, n, call) };
    // SAFETY: a merge buffer (the caller's promise).
    let len = unsafe { data_len(local) };
    let elems = len / N;
    for &r in remote {
        // SAFETY: a merge buffer (the caller's promise).
        let rlen = unsafe { data_len(r) };
        if rlen != len {
            converse::abort(&format!(
                "{call}: replies of different lengths ({len} and {rlen} bytes)"
            ));
        }
        for i in 0..elems {
            // SAFETY: element `i` lies within both buffers' data, which
            // are distinct buffers; the reads and writes are unaligned (the
            // data starts 90 bytes into the buffer, as in Charm++).
            unsafe {
                let a = local.as_ptr().add(DATA_AT + i * N);
                let b = r.as_ptr().add(DATA_AT + i * N);
                let v = combine(a.cast::<[u8; N]>().read(), b.cast::<[u8; N]>().read());
                a.cast::<[u8; N]>().write(v);
            }
        }
    }
    local.as_ptr().cast()
}

macro_rules! c_merges {
    ($($name:ident, $t:ty, $op:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "(size, local, remote, n)`: combines equal-length replies element by element, as native-endian `", stringify!($t), "`, into `local`.")]
        ///
        /// # Safety
        /// As [`CcsMerge_concat`].
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            _size: *mut c_int,
            local: *mut c_void,
            remote: *mut *mut c_void,
            n: c_int,
        ) -> *mut c_void {
            const N: usize = std::mem::size_of::<$t>();
            let op: fn($t, $t) -> $t = $op;
            // SAFETY: the caller's promise.
            unsafe {
                elementwise::<N>(local, remote, n, stringify!($name), |a, b| {
                    op(<$t>::from_ne_bytes(a), <$t>::from_ne_bytes(b)).to_ne_bytes()
                })
            }
        }
    )*};
}

c_merges! {
    CcsMerge_logical_and, c_int, |a, b| c_int::from(a != 0 && b != 0);
    CcsMerge_logical_or, c_int, |a, b| c_int::from(a != 0 || b != 0);
    CcsMerge_bitvec_and, c_int, |a, b| a & b;
    CcsMerge_bitvec_or, c_int, |a, b| a | b;
    CcsMerge_sum_int, c_int, |a, b| a.wrapping_add(b);
    CcsMerge_sum_float, f32, |a, b| a + b;
    CcsMerge_sum_double, f64, |a, b| a + b;
    CcsMerge_product_int, c_int, |a, b| a.wrapping_mul(b);
    CcsMerge_product_float, f32, |a, b| a * b;
    CcsMerge_product_double, f64, |a, b| a * b;
    CcsMerge_max_int, c_int, |a, b| if a < b { b } else { a };
    CcsMerge_max_float, f32, |a, b| if a < b { b } else { a };
    CcsMerge_max_double, f64, |a, b| if a < b { b } else { a };
    CcsMerge_min_int, c_int, |a, b| if a > b { b } else { a };
    CcsMerge_min_float, f32, |a, b| if a > b { b } else { a };
    CcsMerge_min_double, f64, |a, b| if a > b { b } else { a };
}

// ---- in a handler ---------------------------------------------------------------

/// `CcsEnabled()`: 1 if this build has the CCS server.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcsEnabled() -> c_int {
    c_int::from(ccs::enabled())
}

/// `CcsIsRemoteRequest()`: 1 while a handler runs for a CCS request.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcsIsRemoteRequest() -> c_int {
    c_int::from(ccs::is_remote_request())
}

/// `skt_ip_t`: an IPv4 address, most significant byte first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SktIp {
    /// The address's bytes.
    pub data: [u8; 4],
}

/// `CcsCallerId(pip, pport)`: the client's address and port; in a CCS
/// handler only.
///
/// # Safety
/// `pip` and `pport` are null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsCallerId(pip: *mut SktIp, pport: *mut c_uint) {
    let Some((ip, port)) = ccs::caller_id() else {
        converse::abort("CcsCallerId called outside a CCS handler");
    };
    // SAFETY: null or writable (the caller's promise).
    unsafe {
        if let Some(pip) = pip.as_mut() {
            pip.data = ip;
        }
        if let Some(pport) = pport.as_mut() {
            *pport = c_uint::from(port);
        }
    }
}

/// The `size` bytes at `data` (none for a null pointer with size 0).
///
/// # Safety
/// `data` points at `size` readable bytes.
unsafe fn bytes<'a>(size: c_int, data: *const c_void, call: &str) -> &'a [u8] {
    let n = nonneg(size, call);
    if n == 0 {
        return &[];
    }
    if data.is_null() {
        converse::abort(&format!("{call}: {n} bytes at a null pointer"));
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), n) }
}

fn in_handler(call: &str) {
    if !ccs::is_remote_request() {
        converse::abort(&format!("{call} called outside a CCS handler"));
    }
}

/// `CcsSendReply(size, reply)`: answers the request being handled.
///
/// # Safety
/// `reply` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendReply(size: c_int, reply: *const c_void) {
    // SAFETY: the caller's promise.
    let reply = unsafe { bytes(size, reply, "CcsSendReply") };
    in_handler("CcsSendReply");
    ccs::send_reply(reply);
}

/// `CcsSendReplyNoError(size, reply)`: as `CcsSendReply` where a reply
/// is owed (in a CCS handler whose request is not yet answered); elsewhere
/// nothing, as in Charm++.
///
/// # Safety
/// `reply` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendReplyNoError(size: c_int, reply: *const c_void) {
    if ccs::reply_pending() {
        // SAFETY: the caller's promise.
        let reply = unsafe { bytes(size, reply, "CcsSendReplyNoError") };
        ccs::send_reply(reply);
    }
}

/// `CcsNoReply()`: closes the client's connection without a reply; does
/// nothing where no reply is owed (outside a CCS handler, or once the
/// request is answered), as in Charm++.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcsNoReply() {
    if ccs::reply_pending() {
        ccs::no_reply();
    }
}

/// `CcsDelayedReply`: the key of a delayed reply in `DELAYED`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcsDelayedReply {
    /// The node (process) that delayed the reply, above `NODE_SHIFT`
    /// bits of a per-process count (never 0).
    pub id: u64,
}

/// Where a delayed reply's key keeps its node.
const NODE_SHIFT: u32 = 40;

/// The delayed replies this process's PEs delayed, by key; any of them
/// answers them.
static DELAYED: Mutex<Option<HashMap<u64, DelayedReply>>> = Mutex::new(None);
static NEXT_DELAYED: AtomicU64 = AtomicU64::new(1);

fn delayed() -> std::sync::MutexGuard<'static, Option<HashMap<u64, DelayedReply>>> {
    DELAYED.lock().unwrap_or_else(|e| e.into_inner())
}

/// `CcsDelayReply()`: keeps the request being handled open after its
/// handler returns; a PE of this node (process) answers it later.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcsDelayReply() -> CcsDelayedReply {
    in_handler("CcsDelayReply");
    let reply = ccs::delay_reply();
    let count = NEXT_DELAYED.fetch_add(1, Ordering::Relaxed) & ((1 << NODE_SHIFT) - 1);
    let id = ((converse::my_node() as u64) << NODE_SHIFT) | count;
    delayed().get_or_insert_with(HashMap::new).insert(id, reply);
    CcsDelayedReply { id }
}

/// The delayed reply `d`, taken out of the table, or the job ends.
fn take_delayed(d: CcsDelayedReply, call: &str) -> DelayedReply {
    let node = converse::my_node() as u64;
    if d.id >> NODE_SHIFT != node {
        converse::abort(&format!(
            "{call}: delayed reply {:#x} was delayed on node {}, and only that node's PEs (its process) can answer it; this is node {node}",
            d.id,
            d.id >> NODE_SHIFT
        ));
    }
    let found = delayed().as_mut().and_then(|t| t.remove(&d.id));
    found.unwrap_or_else(|| {
        converse::abort(&format!(
            "{call}: delayed reply {:#x} was already answered (or never came from CcsDelayReply)",
            d.id
        ))
    })
}

/// `CcsSendDelayedReply(d, size, reply)`: answers delayed reply `d`, from
/// any PE; consumes it.
///
/// # Safety
/// `reply` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendDelayedReply(
    d: CcsDelayedReply,
    size: c_int,
    reply: *const c_void,
) {
    // SAFETY: the caller's promise.
    let reply = unsafe { bytes(size, reply, "CcsSendDelayedReply") };
    take_delayed(d, "CcsSendDelayedReply").send(reply);
}

/// `CcsNoDelayedReply(d)`: closes delayed reply `d`'s connection without a
/// reply; consumes it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CcsNoDelayedReply(d: CcsDelayedReply) {
    take_delayed(d, "CcsNoDelayedReply").no_reply();
}
