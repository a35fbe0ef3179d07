//! Seed load balancing from C (the extensions manual's chapter 7): the
//! interface Charm++'s `converse.h` declares (`converse-rs/ext.h`:
//! `CldRegisterInfoFn`, `CldRegisterPackFn`, `CldEnqueue`,
//! `CldEnqueueMulti`, `CldNodeEnqueue`, `CldModuleInit`, `CldGetStrategy`)
//! and the token facilities of `cldb.h` (`CldCountTokens`, `CldLoad`,
//! `CldPutToken`, `CldGetToken`, `CldMultipleSend`, `CldSwitchHandler`,
//! `CldRestoreHandler`, `CldModuleGeneralInit`), over
//! [`converse_ext::cld`]. The strategy is the job's (`+balancer NAME`).
//! The balancer's own entry points are exported as `CmiCldDefault…_`;
//! Charm++'s names for them are weak functions `convcc` links in, so a
//! program may bring its own balancer (`cld_weak`).
//!
//! # C info and pack functions
//!
//! As in Charm++, `CldRegisterInfoFn` and `CldRegisterPackFn` register the
//! function with `CmiRegisterHandler` and return that index, so that
//! `CmiHandlerToFunction(index)` gives the function back (the manual's
//! example finds its pack function so). An info function is also
//! registered with the balancer as one Rust function, `c_info`, under a
//! Rust index; the PE's table (`CldC`) maps the C index to the Rust one
//! and the Rust one to the C function. `c_info` finds the C function by
//! the Rust index in the seed's info slot ([`cld::info_fn_index`]), calls
//! it on the message (read-only: the pointer may be shared), and turns its
//! answers into a [`SeedInfo`]: `queueing`, `priobits` and `prioptr` as
//! `CsdEnqueueGeneral` reads them (the priority copied at once), and, if
//! it names a pack function, `c_pack`. That one asks the info function
//! again for the pack function (info functions are pure) and calls it
//! with the address of the C message pointer, as Converse does; the pack
//! function may change the message in place or replace it (freeing the
//! old one with `CmiFree`).
//!
//! # Invariants
//!
//! - Every C entry point that hands a seed to the balancer has first put
//!   the Rust index of its info function in the seed's info slot, so the
//!   balancer's first call of `c_info` finds it too.
//! - The module is set up on a PE by its first `CldModuleInit`,
//!   `CldRegisterInfoFn` or `CldRegisterPackFn` there (Charm++'s
//!   `ConverseInit` does it before the start function; here it is done
//!   at the first of these, which a program calls on every PE at the same
//!   place, since info functions must be registered there). Seeds given
//!   on a PE where it is not set up end the job naming the call.
//! - A message given to `CldEnqueue` and friends is taken (the manual:
//!   freed with `CmiFree`): it comes from `CmiAlloc` or a handler.
//! - `CldSwitchHandler` keeps the message's handler in the low
//!   [`cld::XHANDLER_BITS`] bits of the info slot, as the balancer does
//!   (C's `xhdl` field, `CmiGetXHandler`); `CldRestoreHandler` puts it
//!   back. C's `info` field (`CmiSetInfo`) is the slot's high half, where
//!   the balancer keeps the info function: a C index on the C side, the
//!   Rust one while the balancer holds the seed.
//!
//! # Concurrency
//!
//! Per PE: the tables are a `Cpv`, touched by the PE's own code, never
//! borrowed while C code runs.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Mutex;

use converse::{Cpv, Message, MsgHeader};
use converse_ext::cld::{self, Dest, NodeDest, SeedInfo};
use converse_msg::raw::MessageRaw;

use crate::handlers::{CmiHandler, CmiRegisterHandler};
use crate::msgs::take_whole;
use crate::queueing::{CQS_QUEUEING_FIFO, queueing_from_c};

/// A C pack function (`CldPackFn`): called with the address of the message
/// pointer (`void **`), as Converse does.
pub type CldPackFn = unsafe extern "C-unwind" fn(*mut c_void);

/// A C info function (`CldInfoFn`):
/// `void f(void *msg, CldPackFn *pfn, int *len, int *queueing,
/// int *priobits, unsigned int **prioptr)`.
pub type CldInfoFn = unsafe extern "C-unwind" fn(
    *mut c_void,
    *mut Option<CldPackFn>,
    *mut c_int,
    *mut c_int,
    *mut c_int,
    *mut *mut c_uint,
);

/// `CLD_ANYWHERE`.
pub const CLD_ANYWHERE: c_int = -1;
/// `CLD_BROADCAST`.
pub const CLD_BROADCAST: c_int = -2;
/// `CLD_BROADCAST_ALL`.
pub const CLD_BROADCAST_ALL: c_int = -3;

/// A PE's C info functions (see the module comment).
#[derive(Default)]
struct CldC {
    /// C index (a handler index) to Rust index.
    rust_of: HashMap<c_int, usize>,
    /// Rust index to the C function and its C index.
    c_of: HashMap<usize, (CldInfoFn, c_int)>,
}

static CLD_C: Cpv<RefCell<CldC>> = Cpv::new();

/// Sets the module up on the calling PE (idempotent).
fn set_up() -> Rc<RefCell<CldC>> {
    if let Some(t) = CLD_C.try_get() {
        return t;
    }
    if crate::cld_weak::program_has_balancer() {
        // The program's balancer balances: the token queue and handlers
        // only, whether or not its CldModuleInit called
        // CldModuleGeneralInit.
        cld::module_general_init();
    } else {
        cld::module_init();
    }
    CLD_C.initialize(RefCell::default());
    CLD_C.get()
}

/// The PE's tables, or the job ends naming `call`.
fn tables(call: &str) -> Rc<RefCell<CldC>> {
    CLD_C.try_get().unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {} before CldModuleInit or CldRegisterInfoFn there (register the info functions on every PE)",
            converse::my_pe()
        ))
    })
}

/// The Rust index of C info function `infofn`, or the job ends naming
/// `call`.
fn rust_index(infofn: c_int, call: &str) -> usize {
    let t = tables(call);
    let found = t.borrow().rust_of.get(&infofn).copied();
    found.unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {}: {infofn} is not an index CldRegisterInfoFn returned here",
            converse::my_pe()
        ))
    })
}

/// The C info function of Rust index `index`.
fn c_info_fn(index: usize, what: &str) -> CldInfoFn {
    let t = tables(what);
    let found = t.borrow().c_of.get(&index).map(|&(f, _)| f);
    found.unwrap_or_else(|| {
        converse::abort(&format!(
            "{what} on PE {}: the seed's info function ({index}) is not a C one registered here",
            converse::my_pe()
        ))
    })
}

/// What a C info function said.
struct Answers {
    pack: Option<CldPackFn>,
    len: c_int,
    queueing: c_int,
    priobits: c_int,
    prioptr: *mut c_uint,
}

/// Calls info function `f` on the message at `msg`.
///
/// # Safety
/// `msg` is a live message buffer, read-only for the call.
unsafe fn ask(f: CldInfoFn, msg: *mut c_void) -> Answers {
    let mut a = Answers {
        pack: None,
        len: -1,
        queueing: CQS_QUEUEING_FIFO,
        priobits: 0,
        prioptr: std::ptr::null_mut(),
    };
    // SAFETY: a C info function (registered as one) given a live message
    // and five writable out-parameters.
    unsafe {
        f(
            msg,
            &mut a.pack,
            &mut a.len,
            &mut a.queueing,
            &mut a.priobits,
            &mut a.prioptr,
        )
    };
    a
}

/// The balancer's info function for every C one: asks the seed's C info
/// function (see the module comment).
fn c_info(msg: &Message) -> SeedInfo {
    let f = c_info_fn(cld::info_fn_index(msg), "a Cld info function");
    let ptr = msg.as_bytes().as_ptr().cast_mut().cast::<c_void>();
    // SAFETY: the message's buffer, alive for the call; info functions
    // only read it.
    let a = unsafe { ask(f, ptr) };
    // SAFETY: `prioptr` is what the info function said: null or a priority
    // of the kind `queueing` reads, in the message (alive here).
    let queueing = unsafe {
        queueing_from_c(
            a.queueing,
            a.priobits,
            a.prioptr,
            "a Cld info function's priority",
        )
    };
    let info = SeedInfo {
        len: usize::try_from(a.len).unwrap_or(msg.len()),
        queueing,
        pack: None,
    };
    match a.pack {
        Some(_) => info.with_pack(c_pack),
        None => info,
    }
}

/// The balancer's pack function for every C one: the seed's C info
/// function names it, and it is called with the address of the message
/// pointer.
fn c_pack(msg: Message) -> Message {
    let f = c_info_fn(cld::info_fn_index(&msg), "a Cld pack function");
    let ptr = msg.into_c_ptr();
    // SAFETY: the buffer just given to C, alive.
    let a = unsafe { ask(f, ptr.as_ptr().cast()) };
    let mut p: *mut c_void = ptr.as_ptr().cast();
    if let Some(pack) = a.pack {
        // SAFETY: a C pack function, given the address of the message
        // pointer; it may replace the message (freeing the old one).
        unsafe { pack((&raw mut p).cast()) };
    }
    // SAFETY: the buffer the pack function left (a Converse buffer: the
    // old one, or one it allocated), given back.
    unsafe { take_whole(p, "a Cld pack function's message") }
}

/// `CldModuleInit()`: sets seed balancing up on the calling PE (its
/// handlers and the job's strategy). Idempotent.
#[unsafe(export_name = "CmiCldDefaultModuleInit_")]
#[allow(non_snake_case)] // the C name, for readers of the manual (the symbol is CmiCldDefaultModuleInit_)
pub extern "C-unwind" fn CldModuleInit() {
    set_up();
}

/// `CldModuleGeneralInit(argv)`: sets up the token queue, the balancer's
/// handlers and the C tables on the calling PE; the library's strategy
/// too, unless the program has a balancer of its own (which calls this
/// from its `CldModuleInit`). `argv` is not read. Idempotent.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldModuleGeneralInit(_argv: *mut *mut c_char) {
    // With a balancer of the program's own (which calls this from its
    // CldModuleInit), the token queue and the C tables without the
    // library's strategy; without one, the library's balancer is set up
    // whole, as Charm++'s ConverseInit would have it.
    set_up();
}

/// The C function `f` as a `CmiHandler`, for its handler index (Charm++'s
/// registration; the runtime never sends that index a message itself).
fn as_handler<F: Copy>(f: F) -> CmiHandler {
    const { assert!(size_of::<F>() == size_of::<CmiHandler>()) };
    // SAFETY: both are C function pointers (same size, checked above);
    // the result is only stored as the function's identity, and called
    // only by a message a program sends to that index itself (as in
    // Converse).
    unsafe { std::mem::transmute_copy::<F, CmiHandler>(&f) }
}

/// `CldRegisterInfoFn(fn)`: registers an info function on the calling PE
/// and returns its index (a handler index: `CmiHandlerToFunction` gives the
/// function back). Register them on every PE in the same order.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldRegisterInfoFn(f: Option<CldInfoFn>) -> c_int {
    let Some(f) = f else {
        converse::abort("CldRegisterInfoFn: the function is null")
    };
    let t = set_up();
    let index = CmiRegisterHandler(Some(as_handler(f)));
    let rust = cld::register_info_fn(c_info);
    let mut t = t.borrow_mut();
    t.rust_of.insert(index, rust);
    t.c_of.insert(rust, (f, index));
    index
}

/// `CldRegisterPackFn(fn)`: registers a pack function on the calling PE and
/// returns its index, for an info function to find it with
/// `CmiHandlerToFunction` (as the manual's example does).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldRegisterPackFn(f: Option<CldPackFn>) -> c_int {
    let Some(f) = f else {
        converse::abort("CldRegisterPackFn: the function is null")
    };
    set_up();
    CmiRegisterHandler(Some(as_handler(f)))
}

/// The buffer at `msg` as a seed of C info function `infofn`: its info
/// slot names the Rust index, which is returned.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
unsafe fn seed(msg: *mut c_void, infofn: c_int, call: &str) -> (Message, usize) {
    let index = rust_index(infofn, call);
    // SAFETY: the caller's promise.
    let mut m = unsafe { take_whole(msg, call) };
    cld::set_info_fn(&mut m, index);
    (m, index)
}

/// `CldEnqueue(pe, msg, infofn)`: gives the seed `msg` (its handler set) to
/// the balancer: placed by the job's strategy for `CLD_ANYWHERE`, else
/// sent to PE `pe` (or every PE but this one, `CLD_BROADCAST`, or every PE,
/// `CLD_BROADCAST_ALL`) and enqueued there with its priority. Takes `msg`.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(export_name = "CmiCldDefaultEnqueue_")]
#[allow(non_snake_case)] // the C name, for readers of the manual (the symbol is CmiCldDefaultEnqueue_)
pub unsafe extern "C-unwind" fn CldEnqueue(pe: c_int, msg: *mut c_void, infofn: c_int) {
    let dest = match pe {
        CLD_ANYWHERE => Dest::Anywhere,
        CLD_BROADCAST => Dest::Broadcast,
        CLD_BROADCAST_ALL => Dest::BroadcastAll,
        p => Dest::Pe(crate::nonneg(p, "CldEnqueue (the PE)")),
    };
    // SAFETY: the caller's promise.
    let (m, index) = unsafe { seed(msg, infofn, "CldEnqueue") };
    cld::enqueue(dest, m, index);
}

/// `CldEnqueueMulti(npes, pes, msg, infofn)` (Charm++'s): `CldEnqueue` to
/// each of the `npes` PEs at `pes` (a copy each). Takes `msg`.
///
/// # Safety
/// `pes` points at `npes` ints; `msg` as for [`CldEnqueue`].
#[unsafe(export_name = "CmiCldDefaultEnqueueMulti_")]
#[allow(non_snake_case)] // the C name, for readers of the manual (the symbol is CmiCldDefaultEnqueueMulti_)
pub unsafe extern "C-unwind" fn CldEnqueueMulti(
    npes: c_int,
    pes: *const c_int,
    msg: *mut c_void,
    infofn: c_int,
) {
    let n = crate::nonneg(npes, "CldEnqueueMulti");
    // SAFETY: the caller's promise.
    let (m, index) = unsafe { seed(msg, infofn, "CldEnqueueMulti") };
    if n == 0 {
        return;
    }
    if pes.is_null() {
        converse::abort(&format!("CldEnqueueMulti: {n} PEs at a null pointer"));
    }
    // SAFETY: `n` ints at `pes` (the caller's promise).
    let pes = unsafe { std::slice::from_raw_parts(pes, n) };
    let (last, rest) = pes.split_last().expect("n > 0");
    for &pe in rest {
        let pe = crate::nonneg(pe, "CldEnqueueMulti (a PE)");
        cld::enqueue(Dest::Pe(pe), m.to_owned_copy(), index);
    }
    cld::enqueue(
        Dest::Pe(crate::nonneg(*last, "CldEnqueueMulti (a PE)")),
        m,
        index,
    );
}

/// `CldNodeEnqueue(node, msg, infofn)`: as `CldEnqueue`, with nodes and
/// their node queues (`CLD_ANYWHERE`, `CLD_BROADCAST`, `CLD_BROADCAST_ALL`
/// or a node number). Takes `msg`.
///
/// # Safety
/// As [`CldEnqueue`].
#[unsafe(export_name = "CmiCldDefaultNodeEnqueue_")]
#[allow(non_snake_case)] // the C name, for readers of the manual (the symbol is CmiCldDefaultNodeEnqueue_)
pub unsafe extern "C-unwind" fn CldNodeEnqueue(node: c_int, msg: *mut c_void, infofn: c_int) {
    let dest = match node {
        CLD_ANYWHERE => NodeDest::Anywhere,
        CLD_BROADCAST => NodeDest::Broadcast,
        CLD_BROADCAST_ALL => NodeDest::BroadcastAll,
        n => NodeDest::Node(crate::nonneg(n, "CldNodeEnqueue (the node)")),
    };
    // SAFETY: the caller's promise.
    let (m, index) = unsafe { seed(msg, infofn, "CldNodeEnqueue") };
    cld::node_enqueue(dest, m, index);
}

/// `CldGetStrategy()`: the name of the job's strategy (`+balancer`), a
/// string that lives as long as the process.
#[unsafe(export_name = "CmiCldDefaultGetStrategy_")]
#[allow(non_snake_case)] // the C name, for readers of the manual (the symbol is CmiCldDefaultGetStrategy_)
pub extern "C-unwind" fn CldGetStrategy() -> *const c_char {
    tables("CldGetStrategy");
    static NAMES: Mutex<Vec<CString>> = Mutex::new(Vec::new());
    let name = cld::get_strategy();
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| n.as_bytes() == name.as_bytes()) {
        return n.as_ptr();
    }
    let n = CString::new(name).expect("strategy names hold no NUL");
    // The string's bytes stay put when the vector grows.
    let ptr = n.as_ptr();
    names.push(n);
    ptr
}

/// `CldCountTokens()`: the seeds in the calling PE's token queue.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldCountTokens() -> c_int {
    tables("CldCountTokens");
    c_int::try_from(cld::count_tokens()).unwrap_or(c_int::MAX)
}

/// `CldLoad()`: the calling PE's load (its scheduler queue, tokens
/// included).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldLoad() -> c_int {
    tables("CldLoad");
    c_int::try_from(cld::load()).unwrap_or(c_int::MAX)
}

/// `CldPutToken(msg)`: puts the seed `msg` in the calling PE's token queue
/// at its priority, movable until it runs. Its handler is its own and its
/// info slot holds its info function's index (`CmiSetInfo(msg, infofn)`,
/// as the manual's balancer does). Takes `msg`.
///
/// # Safety
/// As [`CldEnqueue`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CldPutToken(msg: *mut c_void) {
    let ptr = NonNull::new(msg.cast::<MsgHeader>())
        .unwrap_or_else(|| converse::abort("CldPutToken: the message pointer is null"));
    // SAFETY: a live message buffer (the caller's promise) holds a header.
    // C's `info` is the slot's high half (`CmiSetInfo`), its `xhdl` the low.
    let infofn = (unsafe { (*ptr.as_ptr()).info } >> cld::XHANDLER_BITS) as c_int;
    // SAFETY: the caller's promise.
    let (m, _) = unsafe { seed(msg, infofn, "CldPutToken") };
    cld::put_token(m);
}

/// `CldGetToken(&msg)`: takes the most urgent seed out of the calling PE's
/// token queue (null if none), its info slot holding its info function's
/// index again (`CmiGetInfo`) if that is a C one.
///
/// # Safety
/// `msg` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CldGetToken(msg: *mut *mut c_char) {
    if msg.is_null() {
        converse::abort("CldGetToken: the out-pointer is null");
    }
    let t = tables("CldGetToken");
    let out = match cld::get_token() {
        Some(mut m) => {
            let c_index = t
                .borrow()
                .c_of
                .get(&cld::info_fn_index(&m))
                .map(|&(_, c)| c);
            if let Some(c) = c_index {
                // C's `info` half; the `xhdl` half stays.
                m.set_info(((c as u32) << cld::XHANDLER_BITS) | (m.info() & XHANDLER_MASK));
            }
            m.into_c_ptr().as_ptr().cast()
        }
        None => std::ptr::null_mut(),
    };
    // SAFETY: a writable pointer (the caller's promise).
    unsafe { msg.write(out) };
}

/// `CldMultipleSend(pe, numToSend)`: moves up to `numToSend` seeds of the
/// calling PE's token queue to PE `pe`, where they stay movable.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CldMultipleSend(pe: c_int, num_to_send: c_int) {
    tables("CldMultipleSend");
    cld::multiple_send(
        crate::nonneg(pe, "CldMultipleSend (the PE)"),
        crate::nonneg(num_to_send, "CldMultipleSend (the count)"),
    );
}

/// The header of the message at `msg`, or the job ends naming `call`.
///
/// # Safety
/// `msg` is null or a live message buffer, not used elsewhere meanwhile.
unsafe fn header<'a>(msg: *mut c_void, call: &str) -> &'a mut MsgHeader {
    match NonNull::new(msg.cast::<MsgHeader>()) {
        // SAFETY: a live buffer holds a header (the caller's promise).
        Some(p) => unsafe { &mut *p.as_ptr() },
        None => converse::abort(&format!("{call}: the message pointer is null")),
    }
}

const XHANDLER_MASK: u32 = (1 << cld::XHANDLER_BITS) - 1;

/// `CldSwitchHandler(msg, handler)`: sets the message's handler to
/// `handler`, keeping its own in the info slot's low bits.
///
/// # Safety
/// `msg` is a live message buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CldSwitchHandler(msg: *mut c_void, handler: c_int) {
    let handler = crate::nonneg(handler, "CldSwitchHandler (the handler)");
    // SAFETY: the caller's promise.
    let h = unsafe { header(msg, "CldSwitchHandler") };
    // C's `xhdl` holds 16 bits, every handler index (as in Charm++).
    if h.handler > XHANDLER_MASK {
        converse::abort(&format!(
            "CldSwitchHandler: the message's handler {} is no handler index (at most {XHANDLER_MASK})",
            h.handler
        ));
    }
    h.info = (h.info & !XHANDLER_MASK) | (h.handler & XHANDLER_MASK);
    h.handler = u32::try_from(handler).unwrap_or(u32::MAX);
}

/// `CldRestoreHandler(msg)`: puts back the handler `CldSwitchHandler` set
/// aside.
///
/// # Safety
/// `msg` is a live message buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CldRestoreHandler(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    let h = unsafe { header(msg, "CldRestoreHandler") };
    h.handler = h.info & XHANDLER_MASK;
}
