//! Priorities and queues from C: the `CQS_QUEUEING_*` strategies with
//! their `(priobits, prioptr)` pair as every C call that places work in a
//! queue takes them ([`queueing_from_c`], used by `CsdEnqueueGeneral`,
//! `CthAwakenPrio`, `CqsEnqueueGeneral`, …); the scheduler's general and
//! node-level enqueues and its queue's state (`CsdEnqueueGeneral`,
//! `CsdNodeEnqueue*`, `CsdEmpty`, `CsdNodeEmpty`, `CsdLength`); and Cqs,
//! the Converse queue as a C library of its own (`queueing.h`: a `Queue`
//! of `void *` over the core's [`Cqs`]).
//!
//! # Invariants
//!
//! - The strategies' numbers are Charm++'s (`converse-rs/sched.h` defines
//!   them).
//! - `prioptr` is read only for the strategies that have a priority: one
//!   `int` for `IFIFO`/`ILIFO`, one 64-bit integer for `LFIFO`/`LLIFO`,
//!   `ceil(priobits / 32)` unsigned words, most significant first, for
//!   `BFIFO`/`BLIFO`. A null `prioptr` where one is needed, a negative
//!   `priobits` for a bit-vector, or an unknown strategy ends the job
//!   naming the call and the value. The priority is copied: unlike
//!   Converse, the caller may reuse it at once.
//! - A buffer given to `CsdEnqueueGeneral` or a `CsdNodeEnqueue*` is taken,
//!   as an `AndFree` send takes it; the handler owns it when it runs.
//! - A `Queue` is a [`CqsQueue`] that `CqsCreate` boxed and `CqsDelete`
//!   frees; a null `Queue` given to any `Cqs*` call ends the job naming
//!   the call. Its items are C pointers the queue never reads nor frees.
//!   Priorities compare as numbers (the core's rule): `CQS_QUEUEING_FIFO`,
//!   `IFIFO` 0, `LFIFO` 0 and the bit-vector `.1` are one priority, the
//!   middle one, and keep FIFO/LIFO order among themselves.
//!
//! # Concurrency
//!
//! The Csd calls act on the calling PE's queue or its node's queue (the
//! core locks the node queue). A `Queue` has no lock: one thread at a time
//! may use it (the PE that made it, typically; handing it to another
//! thread with the program's own synchronisation is fine).
use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;

use converse::csd::PrioRef;
use converse::{BitPrio, Cqs, Queueing};
use converse_msg::raw;

use crate::msgs::take_whole;

/// `CQS_QUEUEING_FIFO`.
pub const CQS_QUEUEING_FIFO: c_int = 2;
/// `CQS_QUEUEING_LIFO`.
pub const CQS_QUEUEING_LIFO: c_int = 3;
/// `CQS_QUEUEING_IFIFO`.
pub const CQS_QUEUEING_IFIFO: c_int = 4;
/// `CQS_QUEUEING_ILIFO`.
pub const CQS_QUEUEING_ILIFO: c_int = 5;
/// `CQS_QUEUEING_BFIFO`.
pub const CQS_QUEUEING_BFIFO: c_int = 6;
/// `CQS_QUEUEING_BLIFO`.
pub const CQS_QUEUEING_BLIFO: c_int = 7;
/// `CQS_QUEUEING_LFIFO`.
pub const CQS_QUEUEING_LFIFO: c_int = 8;
/// `CQS_QUEUEING_LLIFO`.
pub const CQS_QUEUEING_LLIFO: c_int = 9;

/// The placement C asked for with `strategy`, `priobits` and `prioptr`;
/// `call` names the C function in the job's error message if they are
/// wrong.
///
/// # Safety
/// `prioptr` is null or points at what `strategy` reads (see the module
/// comment).
pub unsafe fn queueing_from_c(
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
    call: &str,
) -> Queueing {
    let needs_prio = |what: &str| {
        if prioptr.is_null() {
            converse::abort(&format!(
                "{call}: strategy {strategy} needs {what}, but prioptr is null"
            ));
        }
    };
    match strategy {
        CQS_QUEUEING_FIFO => Queueing::Fifo,
        CQS_QUEUEING_LIFO => Queueing::Lifo,
        CQS_QUEUEING_IFIFO | CQS_QUEUEING_ILIFO => {
            needs_prio("an int priority");
            // SAFETY: one int at `prioptr` (the caller's promise).
            let p = unsafe { prioptr.cast::<c_int>().read_unaligned() };
            if strategy == CQS_QUEUEING_IFIFO {
                Queueing::IFifo(p)
            } else {
                Queueing::ILifo(p)
            }
        }
        CQS_QUEUEING_LFIFO | CQS_QUEUEING_LLIFO => {
            needs_prio("a 64-bit priority");
            // SAFETY: one 64-bit integer at `prioptr` (the caller's promise).
            let p = unsafe { prioptr.cast::<i64>().read_unaligned() };
            if strategy == CQS_QUEUEING_LFIFO {
                Queueing::LFifo(p)
            } else {
                Queueing::LLifo(p)
            }
        }
        CQS_QUEUEING_BFIFO | CQS_QUEUEING_BLIFO => {
            let bits = u32::try_from(priobits).unwrap_or_else(|_| {
                converse::abort(&format!("{call}: priobits {priobits} is negative"))
            });
            let n = bits.div_ceil(32) as usize;
            let words: &[u32] = if n == 0 {
                &[]
            } else {
                needs_prio("a bit-vector priority");
                // SAFETY: `ceil(priobits / 32)` words at `prioptr` (the
                // caller's promise).
                unsafe { std::slice::from_raw_parts(prioptr, n) }
            };
            let prio = BitPrio::new(bits, words)
                .unwrap_or_else(|e| converse::abort(&format!("{call}: {e}")));
            if strategy == CQS_QUEUEING_BFIFO {
                Queueing::BFifo(prio)
            } else {
                Queueing::BLifo(prio)
            }
        }
        other => converse::abort(&format!(
            "{call}: {other} is no queueing strategy (CQS_QUEUEING_FIFO .. CQS_QUEUEING_LLIFO, 2..9)"
        )),
    }
}

// ---- the scheduler's queues (Csd) -------------------------------------

/// `CsdEnqueueGeneral(msg, strategy, priobits, prioptr)`: queues the
/// buffer on the calling PE with that priority and strategy; it runs when
/// it reaches the front (after every message that arrived from other PEs).
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler, and the caller gives it up;
/// `prioptr` is as [`queueing_from_c`] reads it.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdEnqueueGeneral(
    msg: *mut c_void,
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) {
    const CALL: &str = "CsdEnqueueGeneral";
    // SAFETY: the caller's promise.
    let queueing = unsafe { queueing_from_c(strategy, priobits, prioptr, CALL) };
    // SAFETY: the caller's promise.
    converse::enqueue_general(unsafe { take_whole(msg, CALL) }, queueing);
}

/// `CsdNodeEnqueueGeneral(msg, strategy, priobits, prioptr)`: queues the
/// buffer in the calling PE's node queue; whichever PE of the node reaches
/// it first runs it.
///
/// # Safety
/// As [`CsdEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdNodeEnqueueGeneral(
    msg: *mut c_void,
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) {
    const CALL: &str = "CsdNodeEnqueueGeneral";
    // SAFETY: the caller's promise.
    let queueing = unsafe { queueing_from_c(strategy, priobits, prioptr, CALL) };
    // SAFETY: the caller's promise.
    converse::node_enqueue_general(unsafe { take_whole(msg, CALL) }, queueing);
}

/// `CsdNodeEnqueue(msg)`: the node queue, FIFO at the middle priority.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdNodeEnqueue(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::node_enqueue(unsafe { take_whole(msg, "CsdNodeEnqueue") });
}

/// `CsdNodeEnqueueFifo(msg)`: as [`CsdNodeEnqueue`].
///
/// # Safety
/// As [`CsdNodeEnqueue`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdNodeEnqueueFifo(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::node_enqueue_fifo(unsafe { take_whole(msg, "CsdNodeEnqueueFifo") });
}

/// `CsdNodeEnqueueLifo(msg)`: the node queue, LIFO at the middle priority.
///
/// # Safety
/// As [`CsdNodeEnqueue`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CsdNodeEnqueueLifo(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::node_enqueue_lifo(unsafe { take_whole(msg, "CsdNodeEnqueueLifo") });
}

/// `CsdEmpty()`: nonzero when the calling PE's scheduler queue is empty.
/// That queue holds what `CsdEnqueue*` put there and awakened threads, not
/// messages that arrived and wait to run, nor the node queue.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdEmpty() -> c_int {
    c_int::from(converse::csd::is_empty())
}

/// `CsdNodeEmpty()`: nonzero when the calling PE's node queue is empty.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdNodeEmpty() -> c_int {
    c_int::from(converse::csd::node_is_empty())
}

/// `CsdLength()`: the number of entries in the calling PE's scheduler
/// queue (the queue [`CsdEmpty`] looks at).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdLength() -> c_int {
    c_int::try_from(converse::csd::length()).unwrap_or(c_int::MAX)
}

/// `CsdNodeLength()`: the number of entries in the calling PE's node
/// queue (what `CsdNodeEnqueue*` put there and no PE of the node has taken
/// yet).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CsdNodeLength() -> c_int {
    c_int::try_from(converse::csd::node_length()).unwrap_or(c_int::MAX)
}

// ---- Cqs: the queue as a C library ------------------------------------

/// What a C `Queue` points at (`struct Queue_struct`, opaque to C): the
/// core's queue of C pointers, and what the C API adds to it.
pub struct CqsQueue {
    /// The items, in the core's order.
    items: Cqs<*mut c_void>,
    /// The most items ever queued at once (`CqsMaxLength`).
    max_len: usize,
    /// The `struct prio_struct` that `CqsGetPriority` last returned: its
    /// header word (`bits`, `ints`), then its words. Rewritten in place by
    /// the next `CqsGetPriority`.
    front_prio: Vec<u32>,
}

impl CqsQueue {
    /// Puts `item` in per `queueing`.
    fn push(&mut self, item: *mut c_void, queueing: Queueing) {
        self.items.enqueue(item, queueing);
        self.max_len = self.max_len.max(self.items.len());
    }

    /// Takes every item out, in dequeue order, each with its priority.
    /// [`put_back`](Self::put_back) of the list (changed or not) restores a
    /// queue that behaves as this one did: dequeued in the same order, and
    /// placing later items the same way (a FIFO item goes behind every
    /// item of its priority, a LIFO item in front of all of them).
    fn take_all(&mut self) -> Vec<(*mut c_void, BitPrio)> {
        let mut all = Vec::with_capacity(self.items.len());
        while let Some(prio) = self.items.front_priority().map(whole_words) {
            let item = self
                .items
                .dequeue()
                .expect("a front priority means a front item");
            all.push((item, prio));
        }
        all
    }

    /// Puts the items [`take_all`](Self::take_all) took back, in their
    /// order: FIFO each, so equal priorities keep it.
    fn put_back(&mut self, all: Vec<(*mut c_void, BitPrio)>) {
        for (item, prio) in all {
            self.items.enqueue(item, Queueing::BFifo(prio));
        }
    }
}

/// The normalised priority `p` as a bit-vector of its whole words (the
/// same number).
fn whole_words(p: PrioRef<'_>) -> BitPrio {
    let words: Vec<u32> = p.words().collect();
    let bits = u32::try_from(words.len() * 32).expect("a C priority has fewer than 2^31 bits");
    BitPrio::new(bits, &words).expect("whole words")
}

/// The queue `q` points at, or the job ends naming `call`.
///
/// # Safety
/// `q` is null or a live `Queue` from `CqsCreate` that no other thread
/// uses during the call.
unsafe fn queue<'a>(q: *mut CqsQueue, call: &str) -> &'a mut CqsQueue {
    if q.is_null() {
        converse::abort(&format!("{call}: the queue is null"));
    }
    // SAFETY: live and not shared during the call (the caller's promise).
    unsafe { &mut *q }
}

/// `CqsCreate()`: a new, empty queue, for `CqsDelete` to free.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CqsCreate() -> *mut CqsQueue {
    Box::into_raw(Box::new(CqsQueue {
        items: Cqs::new(),
        max_len: 0,
        front_prio: Vec::new(),
    }))
}

/// `CqsDelete(q)`: frees the queue (not the items still in it: they are
/// the caller's).
///
/// # Safety
/// `q` comes from `CqsCreate`, was not deleted, and is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsDelete(q: *mut CqsQueue) {
    if q.is_null() {
        converse::abort("CqsDelete: the queue is null");
    }
    // SAFETY: made by `Box::into_raw` in `CqsCreate`, freed once (the
    // caller's promise).
    drop(unsafe { Box::from_raw(q) });
}

/// `CqsEnqueueGeneral(q, data, strategy, priobits, prioPtr)`: queues
/// `data` with that priority and strategy (see [`queueing_from_c`]).
///
/// # Safety
/// `q` as [`CqsDelete`] takes it, but live afterwards; `prioptr` as
/// [`queueing_from_c`] reads it.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEnqueueGeneral(
    q: *mut CqsQueue,
    data: *mut c_void,
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
) {
    const CALL: &str = "CqsEnqueueGeneral";
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, CALL) };
    // SAFETY: the caller's promise.
    let queueing = unsafe { queueing_from_c(strategy, priobits, prioptr, CALL) };
    q.push(data, queueing);
}

/// `CqsEnqueueFifo(q, data)`: at the middle priority, behind every item of
/// that priority.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEnqueueFifo(q: *mut CqsQueue, data: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { queue(q, "CqsEnqueueFifo") }.push(data, Queueing::Fifo);
}

/// `CqsEnqueueLifo(q, data)`: at the middle priority, in front of every
/// item of that priority.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEnqueueLifo(q: *mut CqsQueue, data: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { queue(q, "CqsEnqueueLifo") }.push(data, Queueing::Lifo);
}

/// `CqsEnqueue(q, data)`: as [`CqsEnqueueFifo`].
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEnqueue(q: *mut CqsQueue, data: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { queue(q, "CqsEnqueue") }.push(data, Queueing::Fifo);
}

/// `CqsDequeue(q, &data)`: takes the most urgent item out into `*resp`, or
/// stores a null pointer if the queue is empty.
///
/// # Safety
/// As [`CqsEnqueueGeneral`]; `resp` points at a writable `void *`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsDequeue(q: *mut CqsQueue, resp: *mut *mut c_void) {
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, "CqsDequeue") };
    if resp.is_null() {
        converse::abort("CqsDequeue: the result pointer is null");
    }
    let item = q.items.dequeue().unwrap_or(std::ptr::null_mut());
    // SAFETY: writable (the caller's promise).
    unsafe { resp.write(item) };
}

/// `CqsLength(q)`: the number of items queued.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsLength(q: *mut CqsQueue) -> c_uint {
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, "CqsLength") };
    c_uint::try_from(q.items.len()).unwrap_or(c_uint::MAX)
}

/// `CqsEmpty(q)`: nonzero when no item is queued.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEmpty(q: *mut CqsQueue) -> c_int {
    // SAFETY: the caller's promise.
    c_int::from(unsafe { queue(q, "CqsEmpty") }.items.is_empty())
}

/// `CqsMaxLength(q)`: the most items the queue ever held at once.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsMaxLength(q: *mut CqsQueue) -> c_uint {
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, "CqsMaxLength") };
    c_uint::try_from(q.max_len).unwrap_or(c_uint::MAX)
}

/// The head of a C `struct prio_struct` (`_prio` points at one): its
/// words follow it, at offset 4.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PrioHead {
    /// Significant bits.
    pub bits: u16,
    /// Words that follow.
    pub ints: u16,
}

/// The number a C `struct prio_struct` holds: its first `bits` bits (the
/// words past them, and the padding bits of the last, are not read), or
/// the job ends naming `call` if it says more bits than words.
///
/// # Safety
/// `p` is null or points at a `prio_struct` followed by its `ints` words.
unsafe fn prio_from_c(p: *const PrioHead, call: &str) -> BitPrio {
    if p.is_null() {
        converse::abort(&format!("{call}: the priority is null"));
    }
    // SAFETY: a prio_struct's head (the caller's promise).
    let head = unsafe { p.read() };
    if u32::from(head.bits) > 32 * u32::from(head.ints) {
        converse::abort(&format!(
            "{call}: a priority of {} bits in {} words",
            head.bits, head.ints
        ));
    }
    let n = usize::from(head.bits).div_ceil(32);
    // SAFETY: the words follow the head (offset 4, 4-aligned as the struct
    // is), `ints >= n` of them (the caller's promise).
    let words = unsafe { std::slice::from_raw_parts(p.add(1).cast::<u32>(), n) };
    BitPrio::new(u32::from(head.bits), words).expect("ceil(bits / 32) words")
}

/// `CqsGetPriority(q)`: the priority of the item `CqsDequeue` would
/// return, as a `struct prio_struct` the queue holds until the next call
/// on it. Its words are the normalised number (trailing zero words
/// dropped), `bits` 32 times their count: the middle priority (of FIFO,
/// LIFO and integer 0 items) is `{32, 1, {0x80000000}}`, where Charm++
/// answers `{0, 0}`. An empty queue answers `{32, 1, {0xFFFFFFFF}}`, as
/// Charm++ does.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsGetPriority(q: *mut CqsQueue) -> *mut PrioHead {
    const CALL: &str = "CqsGetPriority";
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, CALL) };
    let words: Vec<u32> = match q.items.front_priority() {
        Some(p) => p.words().collect(),
        None => vec![u32::MAX],
    };
    let bits = u16::try_from(words.len() * 32).unwrap_or_else(|_| {
        converse::abort(&format!(
            "{CALL}: the front priority has {} words, more than a prio_struct's 16-bit bit count holds",
            words.len()
        ))
    });
    let [b0, b1] = bits.to_ne_bytes();
    let [i0, i1] = (bits / 32).to_ne_bytes();
    q.front_prio.clear();
    q.front_prio.push(u32::from_ne_bytes([b0, b1, i0, i1]));
    q.front_prio.extend_from_slice(&words);
    q.front_prio.as_mut_ptr().cast()
}

/// `CqsPrioGT(p1, p2)`: 1 if `p1` is the greater number (the less urgent
/// priority), else 0. Compared as numbers, as the queue orders them: a
/// priority with extra zero words equals the shorter one (Charm++ ranks
/// it greater).
///
/// # Safety
/// Each points at a `prio_struct` followed by its `ints` words.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsPrioGT(p1: *const PrioHead, p2: *const PrioHead) -> c_int {
    // SAFETY: the caller's promise.
    let (a, b) = unsafe { (prio_from_c(p1, "CqsPrioGT"), prio_from_c(p2, "CqsPrioGT")) };
    c_int::from(a.prio() > b.prio())
}

/// `CqsPrioGT_(ints1, data1, ints2, data2)`: [`CqsPrioGT`] of two
/// priorities given as their words (every bit of each word significant).
///
/// # Safety
/// `data1` points at `ints1` words, `data2` at `ints2` (either may be null
/// for none).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsPrioGT_(
    ints1: c_uint,
    data1: *const c_uint,
    ints2: c_uint,
    data2: *const c_uint,
) -> c_int {
    let prio = |ints: c_uint, data: *const c_uint| {
        let bits = ints
            .checked_mul(32)
            .unwrap_or_else(|| converse::abort(&format!("CqsPrioGT_: a priority of {ints} words")));
        if ints == 0 {
            return BitPrio::new(0, &[]).expect("no bits, no words");
        }
        if data.is_null() {
            converse::abort(&format!("CqsPrioGT_: {ints} words at a null pointer"));
        }
        // SAFETY: `ints` words at `data` (the caller's promise).
        let words = unsafe { std::slice::from_raw_parts(data, ints as usize) };
        BitPrio::new(bits, words).expect("whole words")
    };
    c_int::from(prio(ints1, data1).prio() > prio(ints2, data2).prio())
}

/// `CqsEnumerateQueue(q, &array)`: stores in `*resp` a new array (free it
/// with `CmiFree`) of the `CqsLength(q)` items, in the order `CqsDequeue`
/// would return them (Charm++'s order is its heaps'); the queue is
/// unchanged. O(n log n): the items are taken out and put back.
///
/// # Safety
/// As [`CqsEnqueueGeneral`]; `resp` points at a writable `void **`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsEnumerateQueue(q: *mut CqsQueue, resp: *mut *mut *mut c_void) {
    const CALL: &str = "CqsEnumerateQueue";
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, CALL) };
    if resp.is_null() {
        converse::abort(&format!("{CALL}: the result pointer is null"));
    }
    let all = q.take_all();
    let bytes = all.len() * size_of::<*mut c_void>();
    let array: NonNull<*mut c_void> = raw::c_alloc(bytes)
        .unwrap_or_else(|| {
            converse::abort(&format!(
                "{CALL}: {} items need {bytes} bytes, more than the largest buffer",
                all.len()
            ))
        })
        .cast();
    for (i, (item, _)) in all.iter().enumerate() {
        // SAFETY: a new buffer of `all.len()` pointers, 16-aligned.
        unsafe { array.add(i).write(*item) };
    }
    q.put_back(all);
    // SAFETY: writable (the caller's promise).
    unsafe { resp.write(array.as_ptr()) };
}

/// `CqsRemoveSpecific(q, data)`: replaces the first item equal to `data`
/// (in dequeue order) by a null pointer, in place: the length is
/// unchanged, and `CqsDequeue` returns null where `data` was. If no item
/// is `data`, says so on standard output (as Charm++ does) and changes
/// nothing.
///
/// # Safety
/// As [`CqsEnqueueGeneral`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CqsRemoveSpecific(q: *mut CqsQueue, data: *const c_void) {
    // SAFETY: the caller's promise.
    let q = unsafe { queue(q, "CqsRemoveSpecific") };
    let mut all = q.take_all();
    let found = all.iter_mut().find(|(item, _)| item.cast_const() == data);
    let removed = found
        .map(|(item, _)| *item = std::ptr::null_mut())
        .is_some();
    q.put_back(all);
    if !removed {
        converse::printf(format_args!(
            "CqsRemoveSpecific: {data:p} is not in the queue; nothing removed\n"
        ));
    }
}
