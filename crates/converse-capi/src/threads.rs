//! User-level threads (Cth) and thread-private variables (Ctv) from C:
//! `CthSelf`, `CthCreate`, `CthSuspend`, `CthAwaken`, `CthPup`, … over the
//! core's [`Thread`] (and its migration, `converse::cth::migrate`), and the
//! storage behind the header's `Ctv*` macros.
//!
//! # Handles (`CthThread`)
//!
//! A C `CthThread` is the address of a [`CthThreadStruct`], a handle the
//! PE keeps in its handle table (a `Cpv`) for one core [`Thread`]. The
//! table finds a handle by the thread's id, so a thread has one handle:
//! `CthSelf()` returns the same pointer every time in one thread, and the
//! pointer `CthCreate` returned.
//!
//! Invariants:
//!
//! - `by_id` and `by_addr` hold the same handles; a handle's address is
//!   its key in `by_addr` (the box never moves).
//! - A handle is freed when its thread ends. For a thread `CthCreate` made,
//!   that is at the end of its body, as that thread: when the C function
//!   returns, or while its stack unwinds after `CthFree(CthSelf());
//!   CthSuspend();`, a `ConverseExit` or the PE's teardown (a guard,
//!   `BodyEnd`, the body's outermost frame, frees the thread's Ctv storage
//!   and its handle). A flow that never ends (the PE's main flow, the
//!   scheduler's stand-ins) keeps its handle for the PE's life. A thread of
//!   Rust code that C met through `CthSelf` or `CthGetNext` has no such
//!   guard: its handle is freed by a sweep of ended threads, run when those
//!   handles have doubled since the last sweep (amortised O(1)).
//! - Every function that takes a `CthThread` looks it up in the calling
//!   PE's table before use, and never reads through the pointer. So the
//!   rule for C is Converse's ("a `CthThread` is valid until its thread
//!   ends, on its PE"), and breaking it ends the job with a message naming
//!   the call, instead of touching freed memory: a pointer of an ended
//!   thread, or of another PE's, is not in the table. (Until the address
//!   is reused for a newer handle: then it names that thread, as any freed
//!   pointer reused by `malloc` would in C.)
//! - Dropping a handle may drop the last reference to a thread, whose Ctv
//!   values' C++ destructors may call back in here: handles are dropped
//!   with no borrow of the table held.
//!
//! # Strategies (`CthSetStrategy`)
//!
//! The core's strategy is a pair of closures; the C pair is
//! `void awakenfn(CthThread, int strategy, int priobits, int *prio)` and
//! `CthThread choosefn(void)`, as in the manual. An awakening that comes
//! from C (`CthAwaken`, `CthAwakenPrio`, `CthYieldPrio`) reaches
//! `awakenfn` with C's own `strategy`, `priobits` and `prio` pointer
//! (stashed for the core's call, `C_AWAKEN`); one from the runtime (a
//! `CthYield`, Rust code) with the same values rebuilt from the core's
//! [`Queueing`], `prio` then pointing at a copy valid during the call.
//!
//! # Ctv
//!
//! Each `CtvDeclare`d variable is a C descriptor ([`CtvDesc`], the
//! header's `CmiCtvDesc_`): its size and alignment, and in C++ the
//! constructor and destructor of its type. `CtvInitialize` gives it a slot
//! number, once per process (all PEs share the descriptor). Each thread's
//! values are blocks, one per slot, in a core [`Ctv`] (`THREAD_BLOCKS`):
//! made on the thread's first `CtvAccess` of that variable (zeroed, then
//! constructed in C++), at an address that stays put for the thread's life,
//! and freed (destroyed first in C++) when the thread ends: by `BodyEnd`,
//! as that thread, for threads `CthCreate` made; with the thread's other
//! values otherwise (the main flow's at the PE's teardown).
//!
//! # Concurrency
//!
//! Everything is per PE (a PE is one OS thread; its handle table is a
//! `Cpv`, the awaken stash a thread-local), except the Ctv slot numbers:
//! drawn from a process-wide atomic counter and published in the C
//! descriptor with a compare-exchange, so that two PEs initialising the
//! same variable at once agree on one slot.
use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};

use converse::{Cpv, Ctv, Queueing, Thread};

use crate::queueing::{
    CQS_QUEUEING_BFIFO, CQS_QUEUEING_BLIFO, CQS_QUEUEING_FIFO, CQS_QUEUEING_IFIFO,
    CQS_QUEUEING_ILIFO, CQS_QUEUEING_LFIFO, CQS_QUEUEING_LIFO, CQS_QUEUEING_LLIFO, queueing_from_c,
};
use crate::{c_str, nonneg};

/// What a C `CthThread` points at: the PE's handle for one thread. C never
/// sees inside (the header declares the struct without members).
pub struct CthThreadStruct {
    thread: Thread,
    /// Made by `CthCreate`: its body's end frees it (else a sweep does).
    created_by_c: bool,
}

/// A C `CthThread`.
pub type CthThread = *mut CthThreadStruct;

/// A thread's function: `void fn(void *arg)` (`CthVoidFn`).
pub type CthVoidFn = extern "C-unwind" fn(*mut c_void);

/// A strategy's awaken function (`CthAwkFn`):
/// `void awakenfn(CthThread t, int strategy, int priobits, int *prio)`.
pub type CthAwkFn = extern "C-unwind" fn(CthThread, c_int, c_int, *mut c_int);

/// A strategy's choose function (`CthThFn`): `CthThread choosefn(void)`.
pub type CthThFn = extern "C-unwind" fn() -> CthThread;

/// A PE's handles (see the module comment).
#[derive(Default)]
struct Handles {
    by_addr: HashMap<usize, Box<CthThreadStruct>>,
    /// Thread id to handle address.
    by_id: HashMap<u64, usize>,
    /// Handles of threads `CthCreate` did not make (swept, not retired).
    foreign: usize,
    /// Sweep when `foreign` reaches this.
    sweep_at: usize,
}

/// The fewest foreign handles worth a sweep.
const FIRST_SWEEP: usize = 64;

static HANDLES: Cpv<RefCell<Handles>> = Cpv::new();

/// The calling PE's handle table, installed on first use.
fn handles() -> Rc<RefCell<Handles>> {
    HANDLES.try_get().unwrap_or_else(|| {
        HANDLES.initialize(RefCell::default());
        HANDLES.get()
    })
}

/// The handle of `t` on the calling PE, made if it has none
/// (`created_by_c`: by `CthCreate`).
fn handle_of(t: &Thread, created_by_c: bool) -> CthThread {
    let table = handles();
    let (addr, sweep) = {
        let mut h = table.borrow_mut();
        if let Some(&addr) = h.by_id.get(&t.id()) {
            return addr as CthThread;
        }
        let mut handle = Box::new(CthThreadStruct {
            thread: t.clone(),
            created_by_c,
        });
        let addr = std::ptr::from_mut(&mut *handle) as usize;
        h.by_addr.insert(addr, handle);
        h.by_id.insert(t.id(), addr);
        let mut sweep = false;
        if !created_by_c {
            h.foreign += 1;
            sweep = h.foreign >= h.sweep_at.max(FIRST_SWEEP);
        }
        (addr, sweep)
    };
    if sweep {
        sweep_foreign(&table);
    }
    addr as CthThread
}

/// Frees the handles of ended threads that `CthCreate` did not make.
fn sweep_foreign(table: &RefCell<Handles>) {
    let ended: Vec<Box<CthThreadStruct>> = {
        let mut h = table.borrow_mut();
        let addrs: Vec<usize> = h
            .by_addr
            .iter()
            .filter(|(_, s)| !s.created_by_c && s.thread.is_finished())
            .map(|(&a, _)| a)
            .collect();
        let mut ended = Vec::with_capacity(addrs.len());
        for addr in addrs {
            if let Some(s) = h.by_addr.remove(&addr) {
                h.by_id.remove(&s.thread.id());
                ended.push(s);
            }
        }
        h.foreign -= ended.len();
        h.sweep_at = 2 * h.foreign;
        ended
    };
    // Dropped with no borrow held (see the module invariants).
    drop(ended);
}

/// Frees the handle of `t`, which is ending.
fn retire(t: &Thread) {
    let Some(table) = HANDLES.try_get() else {
        return;
    };
    let handle = {
        let mut h = table.borrow_mut();
        h.by_id
            .remove(&t.id())
            .and_then(|addr| h.by_addr.remove(&addr))
    };
    drop(handle);
}

/// The thread C names with `handle`, or the job ends naming `call`.
fn thread_of(handle: CthThread, call: &str) -> Thread {
    if handle.is_null() {
        converse::abort(&format!("{call}: the thread is null"));
    }
    let found = handles()
        .borrow()
        .by_addr
        .get(&(handle as usize))
        .map(|s| s.thread.clone());
    found.unwrap_or_else(|| {
        converse::abort(&format!(
            "{call}: {handle:p} is no live thread of PE {} (a thread that has ended, or one of another PE)",
            converse::my_pe()
        ))
    })
}

/// The outermost frame of a thread `CthCreate` made: when the body ends
/// (its C function returns, or its stack unwinds), frees the thread's Ctv
/// values and its handle, as that thread.
struct BodyEnd;

impl Drop for BodyEnd {
    fn drop(&mut self) {
        drop_thread_blocks();
        retire(&Thread::current());
    }
}

fn create(
    call: &str,
    f: Option<CthVoidFn>,
    arg: *mut c_void,
    size: c_int,
    migratable: bool,
) -> CthThread {
    let Some(f) = f else {
        converse::abort(&format!("{call}: the thread's function is null"));
    };
    let size = nonneg(size, call);
    if size > converse::cth::MAX_STACK_SIZE {
        converse::abort(&format!(
            "{call}: a stack of {size} bytes is larger than the largest, {} bytes",
            converse::cth::MAX_STACK_SIZE
        ));
    }
    let body = move || {
        let _end = BodyEnd;
        f(arg);
    };
    let t = if migratable {
        Thread::create_migratable(body, size)
    } else {
        Thread::create(body, size)
    };
    handle_of(&t, true)
}

/// `CthImplemented()`: 1, threads are available.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthImplemented() -> c_int {
    1
}

/// `CthSelf()`: the running thread (the PE's main flow included); the same
/// pointer every time in one thread.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthSelf() -> CthThread {
    handle_of(&Thread::current(), false)
}

/// `CthCreate(fn, arg, size)`: a thread that will run `fn(arg)` once
/// awakened, on a stack of `size` bytes (0: the default, `+stacksize`).
/// It ends when `fn` returns, or after `CthFree(CthSelf()); CthSuspend();`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthCreate(
    f: Option<CthVoidFn>,
    arg: *mut c_void,
    size: c_int,
) -> CthThread {
    create("CthCreate", f, arg, size, false)
}

/// `CthCreateMigratable(fn, arg, size)`: as `CthCreate`, on a stack at an
/// address no other PE uses, so that `CthPup` can move it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthCreateMigratable(
    f: Option<CthVoidFn>,
    arg: *mut c_void,
    size: c_int,
) -> CthThread {
    create("CthCreateMigratable", f, arg, size, true)
}

/// The most bytes `CthPup` unpacks for one thread: what one `pup_bytes`
/// call moves (a C `int`).
const MAX_PACKED_THREAD: u64 = c_int::MAX as u64;

/// `CthPup(p, t)`: sizes, packs or unpacks a migratable thread
/// (`CthCreateMigratable`) suspended by its own `CthSuspend`, as the
/// manual's `CthPup`: an 8-byte length, then the core's packed form (its
/// coroutine, the used part of its stack, its thread heap).
///
/// - Sizing counts those bytes and leaves the thread alone; returns `t`.
/// - Packing writes them and moves the thread out of this PE (its stack's
///   pages and heap blocks leave): `t` is then no thread any more (its
///   handle is freed), and `CthPup` returns NULL (Charm++'s answer once a
///   thread is gone).
/// - Unpacking makes the thread again on the calling PE, suspended where
///   it was packed, and returns its new handle: `CthAwaken` it to go on.
///   In another process, the program's code must be at the same address
///   (run with `convrun ++no-aslr`).
///
/// A thread that cannot move (not migratable, not suspended by its own
/// `CthSuspend`, awakened, with Ctv values or a strategy), or bytes that
/// are no packed thread (a length beyond what a sized unpacker holds
/// included), end the job, naming the reason.
///
/// # Safety
/// `p` is a live `pup_er`; `t` is ignored when unpacking.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CthPup(p: crate::pup::pup_er, t: CthThread) -> CthThread {
    use crate::pup::{pup_bytes, pup_isSizing, pup_isUnpacking};
    const CALL: &str = "CthPup";
    // SAFETY: a live `pup_er` (the caller's promise).
    if unsafe { pup_isUnpacking(p) } != 0 {
        let mut len: u64 = 0;
        // SAFETY: 8 writable bytes; `p` as above.
        unsafe { pup_bytes(p, (&raw mut len).cast(), 8) };
        // SAFETY: as above.
        let room = unsafe { crate::pup::remaining(p, CALL) };
        if len > MAX_PACKED_THREAD || room.is_some_and(|r| len > r as u64) {
            converse::abort(&format!(
                "{CALL}: a packed thread of {len} bytes cannot be read here ({})",
                match room {
                    Some(r) => format!("{r} bytes are left to unpack"),
                    None => format!("more than {MAX_PACKED_THREAD}"),
                }
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        // SAFETY: `len` writable bytes; `p` as above.
        unsafe { pup_bytes(p, bytes.as_mut_ptr().cast(), c_int_len(len)) };
        let thread = converse::cth::migrate::PackedThread::from_bytes(&bytes)
            .and_then(|packed| packed.unpack())
            .unwrap_or_else(|e| converse::abort(&format!("{CALL}: {e}")));
        return handle_of(&thread, true);
    }
    let thread = thread_of(t, CALL);
    // SAFETY: as above.
    if unsafe { pup_isSizing(p) } != 0 {
        let len = thread
            .packed_len()
            .unwrap_or_else(|e| converse::abort(&format!("{CALL}: {e}")));
        let mut n = len as u64;
        // SAFETY: `p` is a sizer: it counts, reads nothing but the length
        // word (readable here), and the body is counted without a buffer.
        unsafe {
            pup_bytes(p, (&raw mut n).cast(), 8);
            pup_bytes(p, std::ptr::null_mut(), c_int_len(n));
        }
        return t;
    }
    let packed = thread
        .pack()
        .unwrap_or_else(|e| converse::abort(&format!("{CALL}: {e}")));
    let bytes = packed.as_bytes();
    let mut len = bytes.len() as u64;
    // SAFETY: `p` as above; the length and the bytes are readable (a
    // packer only reads them).
    unsafe {
        pup_bytes(p, (&raw mut len).cast(), 8);
        pup_bytes(p, bytes.as_ptr().cast_mut().cast(), c_int_len(len));
    }
    // Packed: the thread has left this PE.
    retire(&thread);
    std::ptr::null_mut()
}

/// `len` as `pup_bytes` takes it, or the job ends (a thread too big for
/// one C `int` of bytes cannot be packed by Charm++'s PUP either).
fn c_int_len(len: u64) -> c_int {
    c_int::try_from(len).unwrap_or_else(|_| {
        converse::abort(&format!(
            "CthPup: the packed thread's {len} bytes are more than one pup_bytes call takes"
        ))
    })
}

/// `CthResume(t)`: transfers control to `t` at once.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthResume(t: CthThread) {
    thread_of(t, "CthResume").resume();
}

/// `CthSuspend()`: stops the running thread until it is awakened or
/// resumed; ends it if it called `CthFree` on itself.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthSuspend() {
    converse::suspend();
}

/// An awakening as C asked for it, for a strategy's `awakenfn`.
#[derive(Clone, Copy)]
struct CAwaken {
    strategy: c_int,
    priobits: c_int,
    prio: *mut c_uint,
}

thread_local! {
    /// The awakening C asked for, while the core awakens the thread (see
    /// "Strategies" in the module comment).
    static C_AWAKEN: Cell<Option<CAwaken>> = const { Cell::new(None) };
}

/// Runs `f` (which awakens a thread) with `c` stashed for a strategy's
/// `awakenfn`; the previous stash is back afterwards, unwinding included.
fn with_c_awaken(c: CAwaken, f: impl FnOnce()) {
    struct Restore(Option<CAwaken>);
    impl Drop for Restore {
        fn drop(&mut self) {
            C_AWAKEN.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(C_AWAKEN.with(|s| s.replace(Some(c))));
    f();
}

/// `CthAwaken(t)`: queues `t` (FIFO, middle priority), or hands it to its
/// strategy's `awakenfn`. A thread may be queued once.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthAwaken(t: CthThread) {
    let t = thread_of(t, "CthAwaken");
    let c = CAwaken {
        strategy: CQS_QUEUEING_FIFO,
        priobits: 0,
        prio: std::ptr::null_mut(),
    };
    with_c_awaken(c, || t.awaken());
}

/// `CthAwakenPrio(t, strategy, priobits, prio)`: queues `t` with a
/// `CQS_QUEUEING_*` strategy and priority (read now: the runtime keeps a
/// copy).
///
/// # Safety
/// `prio` is null or points at the priority `strategy` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CthAwakenPrio(
    t: CthThread,
    strategy: c_int,
    priobits: c_int,
    prio: *mut c_uint,
) {
    let t = thread_of(t, "CthAwakenPrio");
    // SAFETY: the caller's promise.
    let q = unsafe { queueing_from_c(strategy, priobits, prio, "CthAwakenPrio") };
    let c = CAwaken {
        strategy,
        priobits,
        prio,
    };
    with_c_awaken(c, || t.awaken_prio(q));
}

/// `CthYield()`: gives up control until the scheduler comes back to this
/// thread (awaken, then suspend).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthYield() {
    converse::yield_now();
}

/// `CthYieldPrio(strategy, priobits, prio)`: as `CthYield`, queued with a
/// strategy and priority.
///
/// # Safety
/// As [`CthAwakenPrio`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CthYieldPrio(strategy: c_int, priobits: c_int, prio: *mut c_uint) {
    // SAFETY: the caller's promise.
    let q = unsafe { queueing_from_c(strategy, priobits, prio, "CthYieldPrio") };
    let c = CAwaken {
        strategy,
        priobits,
        prio,
    };
    with_c_awaken(c, || converse::yield_prio(q));
}

/// `CthFree(t)`: `t` must be the running thread; it ends when it next
/// suspends (`CthFree(CthSelf()); CthSuspend();` ends a thread).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthFree(t: CthThread) {
    thread_of(t, "CthFree").free();
}

/// `CthSetNext(t, next)`: the user's "next" field of `t` (null clears it).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthSetNext(t: CthThread, next: CthThread) {
    let t = thread_of(t, "CthSetNext");
    let next = (!next.is_null()).then(|| thread_of(next, "CthSetNext"));
    t.set_next(next);
}

/// `CthGetNext(t)`: the user's "next" field of `t`, or null.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthGetNext(t: CthThread) -> CthThread {
    match thread_of(t, "CthGetNext").next() {
        Some(next) => handle_of(&next, false),
        None => std::ptr::null_mut(),
    }
}

/// `CthIsMainThread(t)`: 1 for the flow that entered the PE (and the
/// scheduler's stand-ins for it while it is suspended), else 0.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthIsMainThread(t: CthThread) -> c_int {
    c_int::from(thread_of(t, "CthIsMainThread").is_main_flow())
}

/// The C values of the awakening `q` (see "Strategies" in the module
/// comment), passed to `f` with `prio` valid during the call.
fn with_c_values(q: &Queueing, f: impl FnOnce(c_int, c_int, *mut c_int)) {
    /// Where the C priority lives.
    enum Prio {
        None,
        Int(c_int),
        Long(i64),
        Words(*mut c_int),
    }
    let words = |b: &converse::BitPrio| {
        let bits = c_int::try_from(b.bits()).unwrap_or(c_int::MAX);
        let prio = if b.words().is_empty() {
            Prio::None
        } else {
            // Read-only for C, as C's own `prio` is.
            Prio::Words(b.words().as_ptr().cast::<c_int>().cast_mut())
        };
        (bits, prio)
    };
    let (strategy, priobits, mut prio) = match q {
        Queueing::Fifo => (CQS_QUEUEING_FIFO, 0, Prio::None),
        Queueing::Lifo => (CQS_QUEUEING_LIFO, 0, Prio::None),
        Queueing::IFifo(p) => (CQS_QUEUEING_IFIFO, c_int::BITS as c_int, Prio::Int(*p)),
        Queueing::ILifo(p) => (CQS_QUEUEING_ILIFO, c_int::BITS as c_int, Prio::Int(*p)),
        Queueing::LFifo(p) => (CQS_QUEUEING_LFIFO, i64::BITS as c_int, Prio::Long(*p)),
        Queueing::LLifo(p) => (CQS_QUEUEING_LLIFO, i64::BITS as c_int, Prio::Long(*p)),
        Queueing::BFifo(b) => {
            let (bits, prio) = words(b);
            (CQS_QUEUEING_BFIFO, bits, prio)
        }
        Queueing::BLifo(b) => {
            let (bits, prio) = words(b);
            (CQS_QUEUEING_BLIFO, bits, prio)
        }
    };
    let ptr = match &mut prio {
        Prio::None => std::ptr::null_mut(),
        Prio::Int(p) => std::ptr::from_mut(p),
        Prio::Long(p) => std::ptr::from_mut(p).cast::<c_int>(),
        Prio::Words(p) => *p,
    };
    f(strategy, priobits, ptr);
}

/// `CthSetStrategy(t, awakenfn, choosefn)`: awakening `t` calls
/// `awakenfn(t, strategy, priobits, prio)` instead of queueing it, and its
/// suspending transfers control to the thread `choosefn()` returns (which
/// must want the CPU) instead of the scheduler.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthSetStrategy(
    t: CthThread,
    awaken: Option<CthAwkFn>,
    choose: Option<CthThFn>,
) {
    let thread = thread_of(t, "CthSetStrategy");
    let (Some(awaken), Some(choose)) = (awaken, choose) else {
        converse::abort("CthSetStrategy: the awaken or the choose function is null");
    };
    thread.set_strategy(
        move |t: &Thread, q: Queueing| {
            let handle = handle_of(t, false);
            match C_AWAKEN.with(|s| s.take()) {
                Some(c) => awaken(handle, c.strategy, c.priobits, c.prio.cast::<c_int>()),
                None => with_c_values(&q, |s, bits, prio| awaken(handle, s, bits, prio)),
            }
        },
        move || thread_of(choose(), "CthSetStrategy's choose function"),
    );
}

/// `CthSetStrategyDefault(t)`: `t` is queued and suspends through the
/// scheduler again.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CthSetStrategyDefault(t: CthThread) {
    thread_of(t, "CthSetStrategyDefault").set_strategy_default();
}

// ---- Ctv ------------------------------------------------------------------

/// A C or C++ constructor or destructor of a Ctv's type, run on a block.
pub type CtvFn = extern "C-unwind" fn(*mut c_void);

/// A thread-private variable as C declares it (`CmiCtvDesc_` in the
/// header; `CtvDeclare` defines one, statically initialised).
#[repr(C)]
pub struct CtvDesc {
    /// 0 until the first `CtvInitialize`, then the slot number plus 1
    /// (written by the runtime only, atomically).
    slot: AtomicI32,
    /// `sizeof` the type.
    size: usize,
    /// Its alignment (16 in C before C11).
    align: usize,
    /// The variable's name, for messages.
    name: *const c_char,
    /// C++: constructs a value in a zeroed block (null in C and for
    /// trivially constructible types).
    construct: Option<CtvFn>,
    /// C++: destroys a value (null in C and for trivially destructible
    /// types).
    destruct: Option<CtvFn>,
}

/// Slot numbers drawn so far in this process.
static NEXT_CTV_SLOT: AtomicI32 = AtomicI32::new(0);

/// One thread's value of one Ctv: a zeroed block at a fixed address.
struct CtvBlock {
    ptr: NonNull<u8>,
    layout: Layout,
    destruct: Option<CtvFn>,
    /// The constructor (if any) has returned: the destructor must run.
    constructed: Cell<bool>,
}

impl Drop for CtvBlock {
    fn drop(&mut self) {
        if self.constructed.get()
            && let Some(d) = self.destruct
        {
            d(self.ptr.as_ptr().cast());
        }
        // SAFETY: allocated in `CmiCtvAccess_` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A thread's Ctv values by slot.
#[derive(Default)]
struct CtvBlocks(RefCell<Vec<Option<CtvBlock>>>);

impl Drop for CtvBlocks {
    fn drop(&mut self) {
        self.free_all();
    }
}

impl CtvBlocks {
    /// Frees the values, last slot first, one at a time with no borrow
    /// held (a C++ destructor may use other Ctvs).
    fn free_all(&self) {
        loop {
            let last = self.0.borrow_mut().pop();
            match last {
                Some(block) => drop(block),
                None => break,
            }
        }
    }
}

static THREAD_BLOCKS: Ctv<CtvBlocks> = Ctv::new(CtvBlocks::default);

/// Frees the running thread's Ctv values (it is ending).
fn drop_thread_blocks() {
    THREAD_BLOCKS.get().free_all();
}

/// The descriptor at `desc`, or the job ends naming `call`.
///
/// # Safety
/// `desc` is null or a descriptor the header's macros declared.
unsafe fn desc_ref<'a>(desc: *const CtvDesc, call: &str) -> &'a CtvDesc {
    if desc.is_null() {
        converse::abort(&format!("{call}: the variable's descriptor is null"));
    }
    // SAFETY: a live descriptor (the caller's promise; they are statics).
    unsafe { &*desc }
}

/// `CtvInitialize(t, v)`: gives `v` its slot (once per process); `size` is
/// `sizeof(t)` where it is called, checked against the declaration's.
///
/// # Safety
/// `desc` is a descriptor the header's `CtvDeclare` macros declared.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiCtvInitialize_(desc: *const CtvDesc, size: usize) {
    // SAFETY: the caller's promise.
    let d = unsafe { desc_ref(desc, "CtvInitialize") };
    if size != d.size {
        // SAFETY: the name the macros wrote (a string literal).
        let name = unsafe { c_str(d.name) };
        converse::abort(&format!(
            "CtvInitialize({name}): a type of {size} bytes, but {name} was declared with {} (CtvExtern and CtvDeclare disagree)",
            d.size
        ));
    }
    if d.slot.load(Ordering::Acquire) != 0 {
        return;
    }
    let fresh = NEXT_CTV_SLOT.fetch_add(1, Ordering::Relaxed) + 1;
    // Another PE may have drawn one first: then its number stands.
    let _ = d
        .slot
        .compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire);
}

/// `CtvInitialized(v)`: 1 once `CtvInitialize(t, v)` ran in this process.
///
/// # Safety
/// As [`CmiCtvInitialize_`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiCtvInitialized_(desc: *const CtvDesc) -> c_int {
    // SAFETY: the caller's promise.
    let d = unsafe { desc_ref(desc, "CtvInitialized") };
    c_int::from(d.slot.load(Ordering::Acquire) != 0)
}

/// `CtvAccess(v)`: the address of the running thread's value of `v`, made
/// (zeroed, constructed in C++) on the thread's first access; the same
/// address for the thread's life.
///
/// # Safety
/// As [`CmiCtvInitialize_`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiCtvAccess_(desc: *const CtvDesc) -> *mut c_void {
    // SAFETY: the caller's promise.
    let d = unsafe { desc_ref(desc, "CtvAccess") };
    block_of(d, &THREAD_BLOCKS.get(), "CtvAccess")
}

/// `CtvAccessOther(t, v)`: the address of thread `t`'s value of `v` (a
/// thread of the calling PE), made as `CtvAccess` makes it if `t` has none
/// yet; the same address `CtvAccess(v)` gives inside `t`.
///
/// # Safety
/// As [`CmiCtvInitialize_`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiCtvAccessOther_(
    t: CthThread,
    desc: *const CtvDesc,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    let d = unsafe { desc_ref(desc, "CtvAccessOther") };
    let thread = thread_of(t, "CtvAccessOther");
    block_of(d, &THREAD_BLOCKS.get_of(&thread), "CtvAccessOther")
}

/// The address of `d`'s value in `blocks` (one thread's), made zeroed (and
/// constructed in C++) if there is none; `call` names the C call.
fn block_of(d: &CtvDesc, blocks: &CtvBlocks, call: &str) -> *mut c_void {
    let slot = d.slot.load(Ordering::Acquire);
    let Some(index) = usize::try_from(slot).ok().and_then(|s| s.checked_sub(1)) else {
        // SAFETY: the name the macros wrote (a string literal).
        let name = unsafe { c_str(d.name) };
        converse::abort(&format!(
            "{call}({name}) before CtvInitialize({name}) in this process"
        ));
    };
    if let Some(Some(block)) = blocks.0.borrow().get(index) {
        return block.ptr.as_ptr().cast();
    }
    let layout = Layout::from_size_align(d.size.max(1), d.align.max(16)).unwrap_or_else(|e| {
        // SAFETY: as above.
        let name = unsafe { c_str(d.name) };
        converse::abort(&format!(
            "{call}({name}): size {} with alignment {}: {e}",
            d.size, d.align
        ))
    });
    // SAFETY: `layout` has a nonzero size.
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
    {
        let mut table = blocks.0.borrow_mut();
        if table.len() <= index {
            table.resize_with(index + 1, || None);
        }
        table[index] = Some(CtvBlock {
            ptr,
            layout,
            destruct: d.destruct,
            constructed: Cell::new(d.construct.is_none()),
        });
    }
    if let Some(construct) = d.construct {
        // With no borrow held: the constructor may use other Ctvs.
        construct(ptr.as_ptr().cast());
        if let Some(Some(block)) = blocks.0.borrow().get(index) {
            block.constructed.set(true);
        }
    }
    ptr.as_ptr().cast()
}
