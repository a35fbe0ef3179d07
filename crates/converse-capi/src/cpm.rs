//! CPM for C (`conv-cpm.h`): the built-in destinations (`CpmSend`,
//! `CpmEnqueue` and its kinds, `CpmMakeThread`, `CpmMakeThreadSize`) and
//! `CpmModuleInit`, which the launchers and receive stubs the `cpm` scanner
//! writes (`convcc -gen-cpm`) use.
//!
//! # The model (the manual's §6.3)
//!
//! A destination is a C structure whose first two fields are the send
//! function and the envelope size ([`CpmDestinationStruct`]); the built-in
//! ones add their own fields after those. A launcher allocates the message
//! (`struct CpmHeader`, its arguments, an envelope of `envsize` bytes at
//! `envpos`, 16-aligned), sets the handler to its receive stub and calls
//! the send function, which owns the message from then on:
//!
//! - `CpmSend`: sent as it is (an `AndFree` send or broadcast).
//! - `CpmEnqueue*`: the envelope gets the stub's handler, the strategy, the
//!   priority bits and the priority's words; the message goes to this
//!   module's enqueue handler, which puts the stub's handler back and
//!   queues the message with `CsdEnqueueGeneral` (which copies the
//!   priority, so it may point into the message).
//! - `CpmMakeThread*`: the envelope gets the stub's handler and the stack
//!   size; this module's thread handler makes a thread (`CthCreate`,
//!   awakened FIFO) that puts the handler back and calls the stub.
//!
//! # Invariants
//!
//! - A destination lives in a per-PE slot of its destination function
//!   (each function has its own): it stays valid until the next call of
//!   the same function on the same PE, as in Charm++. A slot is written
//!   only by its function, and read by the send functions, which copy what
//!   they need before sending.
//! - A destination's PE is checked when it is made: a PE of the job,
//!   `CpmALL` or `CpmOTHERS`. Its priority is checked and copied then too
//!   (`prioptr` need only be valid during the call).
//! - The handlers' indices are per PE, set once by `CpmModuleInit` and
//!   forgotten when the PE ends (`ForgetIndices`, a PE-private variable):
//!   a later job's PE on the same thread registers its own. A
//!   destination that needs them, made before it, ends the job naming the
//!   call. An envelope that does not fit in its message ends the job.
//!
//! # Concurrency
//!
//! Everything is per PE: a PE is one OS thread (its Cth threads are
//! coroutines on it), and the slots and indices are thread-locals.
use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;

use converse::{MSG_HEADER_SIZE, MsgHeader};

use crate::handlers::{CmiHandlerToFunction, CmiRegisterHandler};
use crate::msgs::{
    CmiSyncBroadcastAllAndFree, CmiSyncBroadcastAndFree, CmiSyncSendAndFree, msg_len,
};
use crate::queueing::{
    CQS_QUEUEING_BFIFO, CQS_QUEUEING_BLIFO, CQS_QUEUEING_FIFO, CQS_QUEUEING_IFIFO,
    CQS_QUEUEING_ILIFO, CQS_QUEUEING_LFIFO, CQS_QUEUEING_LIFO, CQS_QUEUEING_LLIFO,
    CsdEnqueueGeneral, queueing_from_c,
};
use crate::threads::{CthAwaken, CthCreate};

/// `CpmALL`: every PE.
pub const CPM_ALL: c_int = -1;
/// `CpmOTHERS`: every PE but the caller.
pub const CPM_OTHERS: c_int = -2;

/// A send function (`CpmSender`):
/// `void *sendfn(CpmDestination dest, int msglen, void *msg)`.
pub type CpmSender =
    unsafe extern "C-unwind" fn(*mut CpmDestinationStruct, c_int, *mut c_void) -> *mut c_void;

/// The fields every destination starts with (`struct
/// CpmDestinationStruct`; a `CpmDestination` points at one).
#[repr(C)]
pub struct CpmDestinationStruct {
    /// Sends the message the launcher filled.
    pub sendfn: Option<CpmSender>,
    /// The bytes of envelope the launcher reserves for `sendfn`.
    pub envsize: c_int,
}

/// A `CpmDestination`.
pub type CpmDestination = *mut CpmDestinationStruct;

/// Where a CPM message's envelope is: `struct CpmHeader`'s `envpos`,
/// right after the Converse header.
const ENVPOS_AT: usize = MSG_HEADER_SIZE;

/// The enqueue envelope: the stub's handler, the strategy, the priority
/// bits and the number of priority words, then the words (at 16: 8-aligned
/// for a 64-bit priority).
const ENQ_FIXED: usize = 16;

/// The thread envelope: the stub's handler and the stack size.
const THREAD_ENV: usize = 8;

/// `CpmSend`'s destination.
#[repr(C)]
struct Direct {
    head: CpmDestinationStruct,
    pe: c_int,
}

/// A `CpmEnqueue*` destination.
#[repr(C)]
struct Enqueue {
    head: CpmDestinationStruct,
    pe: c_int,
    strategy: c_int,
    priobits: c_int,
    words: Vec<c_uint>,
}

/// A `CpmMakeThread*` destination.
#[repr(C)]
struct MakeThread {
    head: CpmDestinationStruct,
    pe: c_int,
    stack: c_int,
}

/// The enqueue destination functions, each with its slot.
#[derive(Clone, Copy)]
enum EnqueueKind {
    General,
    Fifo,
    Lifo,
    IFifo,
    ILifo,
    BFifo,
    BLifo,
    LFifo,
    LLifo,
}

const ENQUEUE_KINDS: usize = 9;

/// This PE's handler indices (`CpmModuleInit`).
#[derive(Clone, Copy)]
struct Indices {
    enqueue: c_int,
    thread: c_int,
}

const fn head(sendfn: CpmSender) -> CpmDestinationStruct {
    CpmDestinationStruct {
        sendfn: Some(sendfn),
        envsize: 0,
    }
}

thread_local! {
    static INDICES: Cell<Option<Indices>> = const { Cell::new(None) };
    static DIRECT: UnsafeCell<Direct> = const {
        UnsafeCell::new(Direct { head: head(send_direct), pe: 0 })
    };
    static ENQUEUE: [UnsafeCell<Enqueue>; ENQUEUE_KINDS] = const {
        [const {
            UnsafeCell::new(Enqueue {
                head: head(send_enqueue),
                pe: 0,
                strategy: CQS_QUEUEING_FIFO,
                priobits: 0,
                words: Vec::new(),
            })
        }; ENQUEUE_KINDS]
    };
    static THREAD: [UnsafeCell<MakeThread>; 2] = const {
        [const { UnsafeCell::new(MakeThread { head: head(send_thread), pe: 0, stack: 0 }) }; 2]
    };
}

/// `pe` if it is a PE of the job, `CpmALL` or `CpmOTHERS`; else the job
/// ends naming `call`.
fn target(pe: c_int, call: &str) -> c_int {
    let n = converse::num_pes();
    if pe == CPM_ALL || pe == CPM_OTHERS || usize::try_from(pe).is_ok_and(|p| p < n) {
        pe
    } else {
        converse::abort(&format!(
            "{call}({pe}): no such PE (the job has {n}; CpmALL and CpmOTHERS are -1 and -2)"
        ))
    }
}

/// This PE's handler indices, or the job ends naming `call`.
fn indices(call: &str) -> Indices {
    INDICES.get().unwrap_or_else(|| {
        converse::abort(&format!(
            "{call}: CpmModuleInit() was not called on PE {}",
            converse::my_pe()
        ))
    })
}

/// Sends `msg` (`len` bytes, from `CmiAlloc`) to `pe`, `CpmALL` or
/// `CpmOTHERS`.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
unsafe fn deliver(pe: c_int, len: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        match pe {
            CPM_ALL => CmiSyncBroadcastAllAndFree(len, msg),
            CPM_OTHERS => CmiSyncBroadcastAndFree(len, msg),
            _ => CmiSyncSendAndFree(pe, len, msg),
        }
    }
}

/// The envelope of CPM message `msg`, checked to hold `need` bytes inside
/// the message; else the job ends naming `call`.
///
/// # Safety
/// `msg` is a live buffer from `CmiAlloc` or a handler, of at least a
/// `struct CpmHeader` (its envelope position written by a launcher).
unsafe fn envelope(msg: *mut c_void, need: usize, call: &str) -> NonNull<u8> {
    let Some(ptr) = NonNull::new(msg.cast::<u8>()) else {
        converse::abort(&format!("{call}: the message pointer is null"))
    };
    // SAFETY: a live buffer given to C (the caller's promise).
    let len = unsafe { msg_len(ptr) };
    if len < ENVPOS_AT + 4 {
        converse::abort(&format!(
            "{call}: a message of {len} bytes is no CPM message"
        ));
    }
    // SAFETY: `envpos` is inside the message (checked just above).
    let pos = unsafe { ptr.as_ptr().add(ENVPOS_AT).cast::<c_int>().read_unaligned() };
    match usize::try_from(pos) {
        Ok(p)
            if p >= ENVPOS_AT + 4
                && p % 4 == 0
                && p.checked_add(need).is_some_and(|end| end <= len) =>
        {
            // SAFETY: inside the message (checked).
            unsafe { ptr.add(p) }
        }
        _ => converse::abort(&format!(
            "{call}: the message's envelope ({need} bytes at {pos}) is not inside its {len} bytes"
        )),
    }
}

/// Reads the `i`-th `int` of an envelope.
///
/// # Safety
/// The envelope holds `4 * (i + 1)` bytes.
unsafe fn env_int(env: NonNull<u8>, i: usize) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { env.as_ptr().add(4 * i).cast::<c_int>().read_unaligned() }
}

/// Writes the `i`-th `int` of an envelope.
///
/// # Safety
/// As [`env_int`], and the envelope is writable.
unsafe fn set_env_int(env: NonNull<u8>, i: usize, v: c_int) {
    // SAFETY: the caller's promise.
    unsafe { env.as_ptr().add(4 * i).cast::<c_int>().write_unaligned(v) }
}

/// The handler field of message `msg`.
///
/// # Safety
/// `msg` is a live, writable message buffer.
unsafe fn handler_of(msg: *mut c_void) -> *mut u32 {
    // SAFETY: the caller's promise; `handler` is the header's first field.
    unsafe { &raw mut (*msg.cast::<MsgHeader>()).handler }
}

// ---- the send functions --------------------------------------------------

/// `CpmSend`'s send function.
///
/// # Safety
/// `dest` is `CpmSend`'s destination; `msg` a launcher's message.
unsafe extern "C-unwind" fn send_direct(
    dest: *mut CpmDestinationStruct,
    len: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    // SAFETY: `CpmSend`'s slot (the caller's promise); read before sending.
    let pe = unsafe { (*dest.cast::<Direct>()).pe };
    // SAFETY: the launcher's message, given up to us.
    unsafe { deliver(pe, len, msg) };
    std::ptr::null_mut()
}

/// The `CpmEnqueue*` send function.
///
/// # Safety
/// `dest` is one of the enqueue slots; `msg` a launcher's message with the
/// envelope `dest` asked for.
unsafe extern "C-unwind" fn send_enqueue(
    dest: *mut CpmDestinationStruct,
    len: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    const CALL: &str = "CpmEnqueue (sending)";
    let index = indices(CALL).enqueue;
    // SAFETY: an enqueue slot (the caller's promise); nothing here runs
    // code that could write it while it is read.
    let d = unsafe { &*dest.cast::<Enqueue>() };
    let pe = d.pe;
    let need = ENQ_FIXED + 4 * d.words.len();
    // SAFETY: the launcher's message, with its envelope (the caller's
    // promise; checked to fit).
    unsafe {
        let env = envelope(msg, need, CALL);
        let handler = handler_of(msg);
        set_env_int(env, 0, *handler as c_int);
        set_env_int(env, 1, d.strategy);
        set_env_int(env, 2, d.priobits);
        set_env_int(env, 3, d.words.len() as c_int);
        for (i, w) in d.words.iter().enumerate() {
            set_env_int(env, ENQ_FIXED / 4 + i, *w as c_int);
        }
        *handler = index as u32;
        deliver(pe, len, msg);
    }
    std::ptr::null_mut()
}

/// The `CpmMakeThread*` send function.
///
/// # Safety
/// `dest` is one of the thread slots; `msg` a launcher's message with an
/// envelope of [`THREAD_ENV`] bytes.
unsafe extern "C-unwind" fn send_thread(
    dest: *mut CpmDestinationStruct,
    len: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    const CALL: &str = "CpmMakeThread (sending)";
    let index = indices(CALL).thread;
    // SAFETY: a thread slot (the caller's promise), read before sending.
    let (pe, stack) = unsafe {
        let d = &*dest.cast::<MakeThread>();
        (d.pe, d.stack)
    };
    // SAFETY: the launcher's message, with its envelope (checked to fit).
    unsafe {
        let env = envelope(msg, THREAD_ENV, CALL);
        let handler = handler_of(msg);
        set_env_int(env, 0, *handler as c_int);
        set_env_int(env, 1, stack);
        *handler = index as u32;
        deliver(pe, len, msg);
    }
    std::ptr::null_mut()
}

// ---- the handlers --------------------------------------------------------

/// A `CpmEnqueue*` message arrived: back to its stub's handler, into the
/// scheduler's queue.
extern "C-unwind" fn enqueue_arrived(msg: *mut c_void) {
    const CALL: &str = "CpmEnqueue (arrival)";
    // SAFETY: a message this handler received (it owns it), which a
    // launcher made and `send_enqueue` filled; every read is checked to be
    // inside the message first.
    unsafe {
        let env = envelope(msg, ENQ_FIXED, CALL);
        let words = usize::try_from(env_int(env, 3)).unwrap_or(usize::MAX);
        let env = envelope(msg, ENQ_FIXED.saturating_add(words.saturating_mul(4)), CALL);
        *handler_of(msg) = env_int(env, 0) as u32;
        let strategy = env_int(env, 1);
        let priobits = env_int(env, 2);
        // The words the strategy will read, within those checked above.
        let needed = match strategy {
            crate::queueing::CQS_QUEUEING_IFIFO | crate::queueing::CQS_QUEUEING_ILIFO => 1,
            crate::queueing::CQS_QUEUEING_LFIFO | crate::queueing::CQS_QUEUEING_LLIFO => 2,
            crate::queueing::CQS_QUEUEING_BFIFO | crate::queueing::CQS_QUEUEING_BLIFO => {
                usize::try_from(priobits).map_or(usize::MAX, |b| b.div_ceil(32))
            }
            _ => 0,
        };
        if needed > words {
            converse::abort(&format!(
                "{CALL}: strategy {strategy} with {priobits} priority bits needs {needed} words; the envelope holds {words}"
            ));
        }
        let prio = env.as_ptr().add(ENQ_FIXED).cast::<c_uint>();
        CsdEnqueueGeneral(msg, strategy, priobits, prio);
    }
}

/// A `CpmMakeThread*` message arrived: a thread runs its stub.
extern "C-unwind" fn thread_arrived(msg: *mut c_void) {
    // SAFETY: a message this handler received, which a launcher made and
    // `send_thread` filled (checked to hold the envelope).
    let stack = unsafe { env_int(envelope(msg, THREAD_ENV, "CpmMakeThread (arrival)"), 1) };
    let t = CthCreate(Some(thread_body), msg, stack);
    CthAwaken(t);
}

/// The body of a `CpmMakeThread` thread: the stub, called with the message
/// (which frees it).
extern "C-unwind" fn thread_body(msg: *mut c_void) {
    const CALL: &str = "CpmMakeThread (in the thread)";
    // SAFETY: the message `thread_arrived` received and gave this thread.
    let h = unsafe {
        let h = env_int(envelope(msg, THREAD_ENV, CALL), 0);
        *handler_of(msg) = h as u32;
        h
    };
    match CmiHandlerToFunction(h) {
        Some(stub) => stub(msg),
        None => converse::abort(&format!("{CALL}: handler {h} is no C function")),
    }
}

// ---- the destination functions --------------------------------------------

/// `CpmModuleInit()`: registers this module's two handlers on the calling
/// PE (once: calling it again does nothing).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmModuleInit() {
    if INDICES.get().is_some() {
        return;
    }
    let enqueue = CmiRegisterHandler(Some(enqueue_arrived));
    let thread = CmiRegisterHandler(Some(thread_arrived));
    INDICES.set(Some(Indices { enqueue, thread }));
    INDICES_END_WITH_PE.initialize(ForgetIndices);
}

/// Empties this thread's `INDICES` when dropped: held by the PE (a
/// PE-private variable), so the indices end with the PE that registered
/// them, and a later job's PE on the same thread registers its own.
struct ForgetIndices;

impl Drop for ForgetIndices {
    fn drop(&mut self) {
        let _ = INDICES.try_with(|i| i.set(None));
    }
}

static INDICES_END_WITH_PE: converse::Cpv<ForgetIndices> = converse::Cpv::new();

/// `CpmSend(pe)`: the message goes straight to its handler on `pe`
/// (`CpmALL`, `CpmOTHERS`: a broadcast).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmSend(pe: c_int) -> CpmDestination {
    let pe = target(pe, "CpmSend");
    DIRECT.with(|slot| {
        let d = slot.get();
        // SAFETY: this PE's slot; no reference to it is alive (the send
        // function reads it only during a launcher's call).
        unsafe {
            (*d).head.envsize = 0;
            (*d).pe = pe;
        }
        d.cast()
    })
}

/// Fills enqueue slot `kind` (see [`CpmEnqueue`]).
///
/// # Safety
/// `prioptr` is null or points at what `strategy` reads.
unsafe fn enqueue_dest(
    kind: EnqueueKind,
    call: &str,
    pe: c_int,
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    let pe = target(pe, call);
    indices(call);
    // Checked as `CsdEnqueueGeneral` will check it, now, naming the call.
    // SAFETY: the caller's promise.
    let _ = unsafe { queueing_from_c(strategy, priobits, prioptr, call) };
    let n = match strategy {
        CQS_QUEUEING_IFIFO | CQS_QUEUEING_ILIFO => 1,
        CQS_QUEUEING_LFIFO | CQS_QUEUEING_LLIFO => 2,
        CQS_QUEUEING_BFIFO | CQS_QUEUEING_BLIFO => (priobits as u32).div_ceil(32) as usize,
        _ => 0,
    };
    let words = if n == 0 {
        Vec::new()
    } else {
        // SAFETY: `n` words at `prioptr` (the caller's promise; the check
        // above refused a null one).
        unsafe { std::slice::from_raw_parts(prioptr, n) }.to_vec()
    };
    let envsize = c_int::try_from(ENQ_FIXED + 4 * n).unwrap_or_else(|_| {
        converse::abort(&format!(
            "{call}: a priority of {priobits} bits is too long"
        ))
    });
    ENQUEUE.with(|slots| {
        let d = slots[kind as usize].get();
        // SAFETY: this PE's slot; no reference to it is alive.
        unsafe {
            (*d).head.envsize = envsize;
            (*d).pe = pe;
            (*d).strategy = strategy;
            (*d).priobits = priobits;
            (*d).words = words;
        }
        d.cast()
    })
}

/// `CpmEnqueue(pe, queueing, priobits, prioptr)`: on `pe`, through the
/// scheduler's queue with that strategy and priority (copied now).
///
/// # Safety
/// `prioptr` is null or points at the priority `queueing` reads (see
/// `CsdEnqueueGeneral`).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CpmEnqueue(
    pe: c_int,
    queueing: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    // SAFETY: the caller's promise.
    unsafe {
        enqueue_dest(
            EnqueueKind::General,
            "CpmEnqueue",
            pe,
            queueing,
            priobits,
            prioptr,
        )
    }
}

/// `CpmEnqueueFIFO(pe)`: the middle priority, FIFO.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmEnqueueFIFO(pe: c_int) -> CpmDestination {
    // SAFETY: FIFO reads no priority.
    unsafe {
        enqueue_dest(
            EnqueueKind::Fifo,
            "CpmEnqueueFIFO",
            pe,
            CQS_QUEUEING_FIFO,
            0,
            std::ptr::null(),
        )
    }
}

/// `CpmEnqueueLIFO(pe)`: the middle priority, LIFO.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmEnqueueLIFO(pe: c_int) -> CpmDestination {
    // SAFETY: LIFO reads no priority.
    unsafe {
        enqueue_dest(
            EnqueueKind::Lifo,
            "CpmEnqueueLIFO",
            pe,
            CQS_QUEUEING_LIFO,
            0,
            std::ptr::null(),
        )
    }
}

/// `CpmEnqueueIFIFO(pe, prio)`: integer priority `prio`, FIFO.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmEnqueueIFIFO(pe: c_int, prio: c_int) -> CpmDestination {
    let word = prio as c_uint;
    // SAFETY: one int at `&word`.
    unsafe {
        enqueue_dest(
            EnqueueKind::IFifo,
            "CpmEnqueueIFIFO",
            pe,
            CQS_QUEUEING_IFIFO,
            32,
            &word,
        )
    }
}

/// `CpmEnqueueILIFO(pe, prio)`: integer priority `prio`, LIFO.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmEnqueueILIFO(pe: c_int, prio: c_int) -> CpmDestination {
    let word = prio as c_uint;
    // SAFETY: one int at `&word`.
    unsafe {
        enqueue_dest(
            EnqueueKind::ILifo,
            "CpmEnqueueILIFO",
            pe,
            CQS_QUEUEING_ILIFO,
            32,
            &word,
        )
    }
}

/// `CpmEnqueueBFIFO(pe, priobits, prioptr)`: a bit-vector priority, FIFO.
///
/// # Safety
/// `prioptr` points at `ceil(priobits / 32)` words (or is anything when
/// that is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CpmEnqueueBFIFO(
    pe: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    // SAFETY: the caller's promise.
    unsafe {
        enqueue_dest(
            EnqueueKind::BFifo,
            "CpmEnqueueBFIFO",
            pe,
            CQS_QUEUEING_BFIFO,
            priobits,
            prioptr,
        )
    }
}

/// `CpmEnqueueBLIFO(pe, priobits, prioptr)`: a bit-vector priority, LIFO.
///
/// # Safety
/// As [`CpmEnqueueBFIFO`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CpmEnqueueBLIFO(
    pe: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    // SAFETY: the caller's promise.
    unsafe {
        enqueue_dest(
            EnqueueKind::BLifo,
            "CpmEnqueueBLIFO",
            pe,
            CQS_QUEUEING_BLIFO,
            priobits,
            prioptr,
        )
    }
}

/// `CpmEnqueueLFIFO(pe, priobits, prioptr)`: a 64-bit integer priority at
/// `prioptr`, FIFO.
///
/// # Safety
/// `prioptr` points at one 64-bit integer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CpmEnqueueLFIFO(
    pe: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    // SAFETY: the caller's promise.
    unsafe {
        enqueue_dest(
            EnqueueKind::LFifo,
            "CpmEnqueueLFIFO",
            pe,
            CQS_QUEUEING_LFIFO,
            priobits,
            prioptr,
        )
    }
}

/// `CpmEnqueueLLIFO(pe, priobits, prioptr)`: a 64-bit integer priority,
/// LIFO.
///
/// # Safety
/// As [`CpmEnqueueLFIFO`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CpmEnqueueLLIFO(
    pe: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) -> CpmDestination {
    // SAFETY: the caller's promise.
    unsafe {
        enqueue_dest(
            EnqueueKind::LLifo,
            "CpmEnqueueLLIFO",
            pe,
            CQS_QUEUEING_LLIFO,
            priobits,
            prioptr,
        )
    }
}

/// Fills thread slot `slot`.
fn thread_dest(slot: usize, call: &str, pe: c_int, stack: c_int) -> CpmDestination {
    let pe = target(pe, call);
    indices(call);
    if stack < 0 {
        converse::abort(&format!("{call}: the stack size {stack} is negative"));
    }
    THREAD.with(|slots| {
        let d = slots[slot].get();
        // SAFETY: this PE's slot; no reference to it is alive.
        unsafe {
            (*d).head.envsize = THREAD_ENV as c_int;
            (*d).pe = pe;
            (*d).stack = stack;
        }
        d.cast()
    })
}

/// `CpmMakeThread(pe)`: on `pe`, a new thread (default stack) calls the
/// function.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmMakeThread(pe: c_int) -> CpmDestination {
    thread_dest(0, "CpmMakeThread", pe, 0)
}

/// `CpmMakeThreadSize(pe, size)`: as [`CpmMakeThread`], on a stack of
/// `size` bytes (0: the default).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpmMakeThreadSize(pe: c_int, size: c_int) -> CpmDestination {
    thread_dest(1, "CpmMakeThreadSize", pe, size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::CmiHandlerToFunction;

    /// Starts a job of two PEs whose PE 0 is this thread, each PE calling
    /// `CpmModuleInit`; returns PE 0's indices and what its handler table
    /// holds at them, then ends the job.
    fn job_with_cpm() -> (Indices, [Option<crate::handlers::CmiHandler>; 2]) {
        converse::Converse::new()
            .args(["cpm-test", "+p", "2"])
            .init_returns(|_| CpmModuleInit())
            .expect("the job starts");
        CpmModuleInit();
        let got = indices("the test");
        let functions = [
            CmiHandlerToFunction(got.enqueue),
            CmiHandlerToFunction(got.thread),
        ];
        assert_eq!(converse::finish(0), 0);
        (got, functions)
    }

    #[test]
    fn a_second_job_on_the_same_thread_registers_its_own_handlers() {
        let enqueue: crate::handlers::CmiHandler = enqueue_arrived;
        let thread: crate::handlers::CmiHandler = thread_arrived;
        for job in 0..2 {
            let (_, [e, t]) = job_with_cpm();
            // In the second job, PE 0 (this thread) registered again: its
            // indices hold the module's handlers, not empty places.
            assert_eq!(e.map(|f| f as usize), Some(enqueue as usize), "job {job}");
            assert_eq!(t.map(|f| f as usize), Some(thread as usize), "job {job}");
        }
        assert!(INDICES.get().is_none(), "the indices ended with the PE");
    }
}
