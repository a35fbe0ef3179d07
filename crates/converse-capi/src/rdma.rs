//! One-sided communication from C (the manual's "Converse One Sided
//! Communication Interface"): `CmiRegisterMemory`, `CmiUnRegisterMemory`,
//! `CmiDMAAlloc`, `CmiPut`, `CmiGet`, `CmiPutCb`, `CmiGetCb`,
//! `CmiWaitTest`; and the CMI chapter's global pointers: `CmiGptrCreate`,
//! `CmiGptrDref`, `CmiSyncGet`. Over [`converse::cmi::rdma`], whose module
//! comment says how the bytes move in one process and between processes.
//!
//! # What C sees
//!
//! - A put or get names memory of the target PE's process by its address
//!   there (`Taddr`), a plain pointer value the target sent in a message.
//!   The bytes must lie inside one range registered in that process
//!   (`CmiRegisterMemory`, `CmiDMAAlloc`, `CmiGptrCreate`); the target
//!   refuses any other, and the job ends naming the call, the target PE,
//!   the address and the size. A failed operation has no other way out:
//!   the manual's calls return no error.
//! - The calling PE is the manual's `sourceId` (`Saddr` is its memory):
//!   any other `sourceId` ends the job.
//! - `CmiPut` copies `Saddr` before it returns. `CmiGet` writes the bytes
//!   at `Saddr` when the operation is seen complete: before `CmiGet`
//!   returns if the target PE is in this process (the copy is done at
//!   once), else in the `CmiWaitTest` that first returns 1. A refused
//!   operation ends the job at the same points.
//! - The callback forms run `fn(param)` as a message on the calling PE
//!   once the bytes are in place (a get's at `Saddr`), from the scheduler:
//!   the PE must schedule for it to run.
//! - `CmiWaitTest` only tests: the answers of operations to other
//!   processes come as messages, so the PE schedules (`CsdSchedulePoll`)
//!   between tests, as in Charm++'s emulated layer.
//!
//! # Invariants
//!
//! - A handle (`CmiPut`, `CmiGet`) is a token, not an address: its PE
//!   (plus one) above bit [`ID_BITS`], its number on that PE below. The
//!   PE's table (`OPS`, a `Cpv`) holds the operations not yet seen
//!   complete; `CmiWaitTest` drops one the first time it returns 1. So a
//!   handle is never freed by C, never dangles, and testing it again
//!   returns 1; a handle no PE issued, or another PE's, ends the job.
//! - `CmiDMAAlloc` buffers live until the process ends (the manual has no
//!   call to free them), registered all that time, in `DMA_BUFFERS`.
//! - `Saddr` is the caller's memory: valid for the size given until the
//!   bytes are in place (a get) or the call returns (a put), and not
//!   touched by anything else meanwhile. Registered memory is the C
//!   program's to keep valid until it unregisters it.
//!
//! # Concurrency
//!
//! Operations are per PE (their table is a `Cpv`, touched by the PE's
//! thread only). The registration table and `DMA_BUFFERS` are
//! process-wide and locked.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::rc::Rc;
use std::sync::{Mutex, PoisonError};

use converse::Cpv;
use converse::cmi::rdma::{self, DmaBuffer, GetHandle, GlobalPtr, RdmaError, RdmaHandle};

use crate::nonneg;

/// `CmiRdmaCallbackFn`: `void fn(void *param)`, run when a `CmiPutCb` or
/// `CmiGetCb` completes.
pub type CmiRdmaCallbackFn = extern "C-unwind" fn(*mut c_void);

/// Bits of a handle that number the operation on its PE; the PE, plus
/// one, is above them (so no handle is null).
pub const ID_BITS: u32 = 40;

/// An operation C started with a handle and has not yet seen complete.
enum Op {
    Put(RdmaHandle),
    Get {
        handle: GetHandle,
        /// Where the bytes go (the caller's `Saddr`).
        into: *mut u8,
        len: usize,
    },
}

impl Op {
    fn is_done(&self) -> bool {
        match self {
            Op::Put(h) => h.wait_test(),
            Op::Get { handle, .. } => handle.wait_test(),
        }
    }

    fn call(&self) -> &'static str {
        match self {
            Op::Put(_) => "CmiPut",
            Op::Get { .. } => "CmiGet",
        }
    }

    /// Completes a done operation: a get's bytes go to `Saddr`; a refused
    /// operation ends the job.
    fn finish(self) {
        let call = self.call();
        match self {
            Op::Put(h) => {
                if let Err(e) = h.wait() {
                    failed(call, &e);
                }
            }
            Op::Get { handle, into, len } => match handle.wait() {
                // SAFETY: `into` is the `Saddr` of the `CmiGet`, writable
                // for `len` bytes until now (its caller's promise).
                Ok(bytes) => unsafe { deliver(into, len, &bytes, call) },
                Err(e) => failed(call, &e),
            },
        }
    }
}

/// A PE's operations in flight with a handle.
#[derive(Default)]
struct Ops {
    /// Handles issued so far (the last one's number).
    issued: u64,
    pending: HashMap<u64, Op>,
}

static OPS: Cpv<RefCell<Ops>> = Cpv::new();

fn ops() -> Rc<RefCell<Ops>> {
    OPS.try_get().unwrap_or_else(|| {
        OPS.initialize(RefCell::default());
        OPS.get()
    })
}

/// The token C holds for entry `id` of a per-PE table of the calling PE
/// (this module's operations, `persistent`'s handles): the PE plus one
/// above [`ID_BITS`], `id` below.
pub(crate) fn token(id: u64) -> *mut c_void {
    let pe = converse::my_pe() as u64 + 1;
    std::ptr::without_provenance_mut((pe << ID_BITS | id) as usize)
}

/// What a token C gave back names.
pub(crate) enum Token {
    /// Entry `id` of the calling PE's table (`1..=issued`).
    Mine(u64),
    /// An entry of PE `pe`'s table, not the caller's.
    OtherPe(u64),
    /// No token of any PE.
    Bad,
}

/// Reads `obj` as a [`token`] of a table that has issued `issued`.
pub(crate) fn read_token(obj: *mut c_void, issued: u64) -> Token {
    let bits = obj.addr() as u64;
    let me = converse::my_pe() as u64;
    let (pe, id) = (
        (bits >> ID_BITS).wrapping_sub(1),
        bits & ((1 << ID_BITS) - 1),
    );
    if pe == me && (1..=issued).contains(&id) {
        Token::Mine(id)
    } else if pe != me && pe < converse::num_pes() as u64 && id != 0 {
        Token::OtherPe(pe)
    } else {
        Token::Bad
    }
}

/// The operation number of handle `obj`, which must be one the calling PE
/// issued; else the job ends naming `call`.
fn id_of(obj: *mut c_void, issued: u64, call: &str) -> u64 {
    let me = converse::my_pe();
    let pe = match read_token(obj, issued) {
        Token::Mine(id) => return id,
        Token::OtherPe(pe) => Some(pe),
        Token::Bad => None,
    };
    if obj.is_null() {
        converse::abort(&format!(
            "{call}: the handle is null (the callback forms, CmiPutCb and CmiGetCb, give none)"
        ));
    }
    if let Some(pe) = pe {
        converse::abort(&format!(
            "{call}: handle {obj:p} is PE {pe}'s, not PE {me}'s (an operation is tested on the PE that started it)"
        ));
    }
    converse::abort(&format!(
        "{call}: {obj:p} is no handle CmiPut or CmiGet gave PE {me}"
    ))
}

/// Gives C a handle for `op`: completed at once if it is done already
/// (the target is in this process), kept in the PE's table otherwise.
fn issue(op: Op) -> *mut c_void {
    let table = ops();
    let id = {
        let mut t = table.borrow_mut();
        t.issued += 1;
        t.issued
    };
    if op.is_done() {
        op.finish();
    } else {
        table.borrow_mut().pending.insert(id, op);
    }
    token(id)
}

#[cold]
#[inline(never)]
fn failed(call: &str, e: &RdmaError) -> ! {
    converse::abort(&format!("{call}: {e}"))
}

/// Writes a get's `bytes` at `into`, which was asked for `len` of them.
///
/// # Safety
/// `into` is valid for writes of `len` bytes (or `len` is 0), and not
/// `bytes`.
unsafe fn deliver(into: *mut u8, len: usize, bytes: &[u8], call: &str) {
    if bytes.len() != len {
        converse::abort(&format!(
            "{call}: the get brought {} bytes, {len} were asked for",
            bytes.len()
        ));
    }
    if len > 0 {
        // SAFETY: the caller's promise; lengths checked above.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), into, len) };
    }
}

/// The `size` bytes at `saddr`, the source of a put.
///
/// # Safety
/// `saddr` is valid for reads of `size` bytes (or `size` is 0) while the
/// slice lives, and nothing writes them meanwhile.
unsafe fn source<'a>(saddr: *const c_void, size: usize, call: &str) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    if saddr.is_null() {
        converse::abort(&format!("{call}: Saddr is null for {size} bytes"));
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(saddr.cast::<u8>(), size) }
}

/// `saddr` as the destination of a get of `size` bytes.
fn destination(saddr: *mut c_void, size: usize, call: &str) -> *mut u8 {
    if size > 0 && saddr.is_null() {
        converse::abort(&format!("{call}: Saddr is null for {size} bytes"));
    }
    saddr.cast()
}

/// Checks that `source_id` is the calling PE (the manual's `sourceId`:
/// the PE whose memory `Saddr` is, which starts the operation).
fn check_source(source_id: c_uint, call: &str) {
    let me = converse::my_pe();
    if source_id as usize != me {
        converse::abort(&format!(
            "{call}: sourceId {source_id} is not the calling PE {me} (an operation starts on the PE whose memory Saddr is)"
        ));
    }
}

/// `size` as a byte count (`unsigned int` always fits).
#[inline]
fn len(size: c_uint) -> usize {
    size as usize
}

// ---- registration -----------------------------------------------------------

/// `CmiRegisterMemory(addr, size)`: lets one-sided operations from any PE
/// read and write the `size` bytes at `addr` (in this process, whichever
/// PE calls it). 1 on success; 0 if `addr` is null or the range overlaps
/// one registered already.
///
/// # Safety
/// Until `CmiUnRegisterMemory` of the same range returns, the memory
/// stays allocated, and puts and gets may write and read it at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiRegisterMemory(addr: *mut c_void, size: c_uint) -> c_int {
    if addr.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise (as `register_memory` asks).
    c_int::from(unsafe { rdma::register_memory(addr.cast(), len(size)) }.is_ok())
}

/// `CmiUnRegisterMemory(addr, size)`: ends a registration (`size` must be
/// the registered length). Copies into or out of the range under way end
/// first; none starts after. 1 on success; 0 if no range of that length
/// is registered at `addr`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiUnRegisterMemory(addr: *mut c_void, size: c_uint) -> c_int {
    c_int::from(rdma::unregister_memory(addr.cast(), len(size)).is_ok())
}

/// Buffers `CmiDMAAlloc` made: registered until the process ends.
static DMA_BUFFERS: Mutex<Vec<DmaBuffer>> = Mutex::new(Vec::new());

/// `CmiDMAAlloc(size)`: `size` zeroed bytes, 8-aligned, registered for
/// one-sided operations until the process ends (the manual has no call to
/// free them).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiDMAAlloc(size: c_int) -> *mut c_void {
    let buf = rdma::dma_alloc(nonneg(size, "CmiDMAAlloc"));
    // The buffer's address was exposed when the core took it as a number.
    let addr = std::ptr::with_exposed_provenance_mut::<c_void>(buf.addr() as usize);
    DMA_BUFFERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(buf);
    addr
}

// ---- operations -------------------------------------------------------------

/// `CmiPut(sourceId, targetId, Saddr, Taddr, size)`: writes the `size`
/// bytes at `Saddr` (copied before the call returns) at `Taddr` in PE
/// `targetId`'s process. Returns the handle `CmiWaitTest` tests.
///
/// # Safety
/// `Saddr` is valid for reads of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiPut(
    source_id: c_uint,
    target_id: c_uint,
    saddr: *mut c_void,
    taddr: *mut c_void,
    size: c_uint,
) -> *mut c_void {
    check_source(source_id, "CmiPut");
    // SAFETY: the caller's promise; `put` copies the bytes before it
    // returns.
    let src = unsafe { source(saddr, len(size), "CmiPut") };
    issue(Op::Put(rdma::put(
        target_id as usize,
        src,
        taddr.addr() as u64,
    )))
}

/// `CmiGet(sourceId, targetId, Saddr, Taddr, size)`: reads `size` bytes
/// at `Taddr` in PE `targetId`'s process into `Saddr`. Returns the handle
/// `CmiWaitTest` tests; the bytes are at `Saddr` once it returns 1.
///
/// # Safety
/// `Saddr` is valid for writes of `size` bytes until `CmiWaitTest` of the
/// handle returns 1 (or until the call returns, for a target in this
/// process).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGet(
    source_id: c_uint,
    target_id: c_uint,
    saddr: *mut c_void,
    taddr: *mut c_void,
    size: c_uint,
) -> *mut c_void {
    check_source(source_id, "CmiGet");
    let into = destination(saddr, len(size), "CmiGet");
    let handle = rdma::get(target_id as usize, taddr.addr() as u64, len(size));
    issue(Op::Get {
        handle,
        into,
        len: len(size),
    })
}

/// `CmiWaitTest(handle)`: 1 once the operation of a `CmiPut` or `CmiGet`
/// handle is complete (a get's bytes at its `Saddr`), else 0. Testing a
/// complete one again returns 1. A refused operation ends the job here.
/// The handle is checked (a handle of another PE, or none, ends the job);
/// the write to a get's `Saddr` is what its `CmiGet` was promised.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiWaitTest(obj: *mut c_void) -> c_int {
    let table = ops();
    let done = {
        let mut t = table.borrow_mut();
        let id = id_of(obj, t.issued, "CmiWaitTest");
        match t.pending.get(&id) {
            None => return 1,
            Some(op) if op.is_done() => t.pending.remove(&id),
            Some(_) => return 0,
        }
    };
    // Finished with no borrow held.
    if let Some(op) = done {
        op.finish();
    }
    1
}

/// `CmiPutCb(sourceId, targetId, Saddr, Taddr, size, fn, param)`: as
/// `CmiPut`; `fn(param)` then runs as a message on the calling PE once the
/// bytes are at `Taddr` (`fn` may be null: nothing runs).
///
/// # Safety
/// As [`CmiPut`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiPutCb(
    source_id: c_uint,
    target_id: c_uint,
    saddr: *mut c_void,
    taddr: *mut c_void,
    size: c_uint,
    f: Option<CmiRdmaCallbackFn>,
    param: *mut c_void,
) {
    check_source(source_id, "CmiPutCb");
    // SAFETY: the caller's promise; `put_cb` copies the bytes before it
    // returns.
    let src = unsafe { source(saddr, len(size), "CmiPutCb") };
    rdma::put_cb(
        target_id as usize,
        src,
        taddr.addr() as u64,
        move |outcome| match outcome {
            Ok(()) => {
                if let Some(f) = f {
                    f(param);
                }
            }
            Err(e) => failed("CmiPutCb", &e),
        },
    );
}

/// `CmiGetCb(sourceId, targetId, Saddr, Taddr, size, fn, param)`: as
/// `CmiGet`; once the bytes are at `Saddr`, `fn(param)` runs as a message
/// on the calling PE (`fn` may be null: nothing runs).
///
/// # Safety
/// `Saddr` is valid for writes of `size` bytes until the callback runs.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetCb(
    source_id: c_uint,
    target_id: c_uint,
    saddr: *mut c_void,
    taddr: *mut c_void,
    size: c_uint,
    f: Option<CmiRdmaCallbackFn>,
    param: *mut c_void,
) {
    check_source(source_id, "CmiGetCb");
    let into = destination(saddr, len(size), "CmiGetCb");
    let n = len(size);
    rdma::get_cb(
        target_id as usize,
        taddr.addr() as u64,
        n,
        move |outcome| match outcome {
            Ok(bytes) => {
                // SAFETY: `into` is the `Saddr` of the `CmiGetCb`, writable
                // for `n` bytes until this callback (its caller's promise).
                unsafe { deliver(into, n, &bytes, "CmiGetCb") };
                if let Some(f) = f {
                    f(param);
                }
            }
            Err(e) => failed("CmiGetCb", &e),
        },
    );
}

// ---- global pointers (the CMI chapter) --------------------------------------

/// `GlobalPtr`: `size` bytes at `addr` in PE `pe`'s process, registered.
/// Plain data: C copies it into messages.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CGlobalPtr {
    /// The PE whose memory it points to.
    pub pe: c_int,
    /// How many bytes it covers.
    pub size: c_uint,
    /// The address in that PE's process.
    pub addr: *mut c_void,
}

/// C's global pointer at `g`, copied, with the core's for it; or the job
/// ends naming `call`.
///
/// # Safety
/// `g` is null or points at a `GlobalPtr`.
unsafe fn gptr_of(g: *const CGlobalPtr, call: &str) -> (CGlobalPtr, GlobalPtr) {
    if g.is_null() {
        converse::abort(&format!("{call}: the global pointer is null"));
    }
    // SAFETY: the caller's promise; plain data, copied.
    let c = unsafe { *g };
    let core = GlobalPtr {
        pe: nonneg(c.pe, call),
        addr: c.addr.addr() as u64,
        len: c.size as usize,
    };
    if core.pe >= converse::num_pes() {
        converse::abort(&format!(
            "{call}: the global pointer's PE {} is no PE of the job",
            core.pe
        ));
    }
    (c, core)
}

/// `CmiGptrCreate(gptr, lptr, size)`: registers the `size` bytes at `lptr`
/// (as `CmiRegisterMemory`) and fills `*gptr` with a global pointer to
/// them on the calling PE. 1 on success; 0 if the range could not be
/// registered (null, or overlapping a registered one). Unregister it with
/// `CmiUnRegisterMemory(lptr, size)`.
///
/// # Safety
/// `gptr` points at a writable `GlobalPtr`; `lptr` as for
/// [`CmiRegisterMemory`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGptrCreate(
    gptr: *mut CGlobalPtr,
    lptr: *mut c_void,
    size: c_uint,
) -> c_int {
    if gptr.is_null() {
        converse::abort("CmiGptrCreate: the global pointer is null");
    }
    if lptr.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise (as `register_memory` asks).
    match unsafe { GlobalPtr::create(lptr.cast(), len(size)) } {
        Ok(g) => {
            let pe = c_int::try_from(g.pe).expect("a PE number fits an int");
            // SAFETY: `gptr` is writable (the caller's promise).
            unsafe {
                gptr.write(CGlobalPtr {
                    pe,
                    size,
                    addr: lptr,
                })
            };
            1
        }
        Err(_) => 0,
    }
}

/// `CmiGptrDref(gptr)`: the address it points to, if the calling PE is in
/// the process of its PE; null elsewhere (the address means nothing
/// there).
///
/// # Safety
/// `gptr` points at a `GlobalPtr`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGptrDref(gptr: *mut CGlobalPtr) -> *mut c_void {
    // SAFETY: the caller's promise.
    let (c, g) = unsafe { gptr_of(gptr, "CmiGptrDref") };
    match g.dref() {
        Some(_) => c.addr,
        None => std::ptr::null_mut(),
    }
}

/// `CmiSyncGet(gptr, lptr, size)`: copies the first `size` bytes it
/// points to into `lptr`, waiting until they are there (scheduling this
/// PE meanwhile, or yielding a user-level thread). 1 on success; a refused
/// get, or `size` beyond the pointer's, ends the job.
///
/// # Safety
/// `gptr` points at a `GlobalPtr`; `lptr` is valid for writes of `size`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncGet(
    gptr: *mut CGlobalPtr,
    lptr: *mut c_void,
    size: c_uint,
) -> c_int {
    // SAFETY: the caller's promise.
    let (_, g) = unsafe { gptr_of(gptr, "CmiSyncGet") };
    let n = len(size);
    if n > g.len {
        converse::abort(&format!(
            "CmiSyncGet: {n} bytes asked of a global pointer to {} bytes on PE {}",
            g.len, g.pe
        ));
    }
    let into = destination(lptr, n, "CmiSyncGet");
    match g.sync_get(n) {
        // SAFETY: `lptr` is writable for `n` bytes (the caller's promise).
        Ok(bytes) => unsafe { deliver(into, n, &bytes, "CmiSyncGet") },
        Err(e) => failed("CmiSyncGet", &e),
    }
    1
}
