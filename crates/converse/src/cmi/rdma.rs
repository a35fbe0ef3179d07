//! One-sided communication (the manual's "Converse One Sided Communication
//! Interface"): a PE reads ([`get`]) or writes ([`put`]) memory that a
//! process registered ([`register_memory`], [`dma_alloc`]) without the PE
//! that owns it calling anything; completion is learnt from a handle
//! ([`RdmaHandle::wait_test`]) or a callback that runs as a message on the
//! initiating PE ([`put_cb`], [`get_cb`]).
//!
//! # What registration means
//!
//! No network this runtime drives pins memory, so registering a range
//! records it in the process's table of ranges that one-sided operations
//! may touch; that table is what makes them safe. A put or get whose bytes
//! are not all inside one registered range of the target's process is
//! refused there and the initiating PE gets an error naming the target PE,
//! the address and the size: never a wild read or write. [`expose`]
//! registers borrowed bytes for gets only, while its guard lives (safe:
//! puts into them are refused), for a library that lets a receiver pull
//! large data straight from the sender's memory (GAMMA's large sends).
//!
//! # How the bytes move
//!
//! - Target PE in this process: the initiating PE copies at once (the
//!   manual's hardware case); the handle is complete when the call returns.
//! - Target PE in another process: a runtime message carries the request
//!   to the target PE, which checks the range when its scheduler runs the
//!   message and answers. Over tcp and mpi (the manual's emulation "for
//!   machines which do not have a one-sided hardware") the bytes travel in
//!   the messages: a put's with the request, a get's with the answer. Over
//!   shm where one process may read and write another's memory, an
//!   operation of [`SINGLE_COPY_MIN`] bytes or more moves them in one copy,
//!   made or allowed by the target's process, which alone knows its
//!   registration. A put's bytes are read (`process_vm_readv`) by the
//!   target's process from the initiator's copy of them (the request
//!   carries that copy's address) before it answers. A get's are written
//!   (`process_vm_writev`) by the target's process into the buffer the get
//!   names, before it answers; from [`INITIATOR_READS_MIN`] bytes on, the
//!   target only checks the range and answers, and the initiator's process
//!   reads the bytes (`process_vm_readv`) when the answer comes: for 4 MiB
//!   the target's write took 0.53 ms at the median where the waiting
//!   side's read of the same bytes took 0.34, while below about 1 MiB the
//!   read after the answer measured no faster (docs/benchmarks.md,
//!   "`rdma_get_4MiB`").
//!
//! # Invariants
//!
//! - Bytes of registered memory are copied by the runtime with relaxed
//!   atomic loads and stores (a word at a time where aligned, bytes at the
//!   edges), and [`DmaBuffer`] reads and writes the same way, so no
//!   access to it is a plain data race. Two that overlap at different
//!   alignments are mixed-size atomics, which Rust's memory model leaves
//!   undefined: as with MPI's one-sided windows, a program must not let an
//!   operation race its own accesses to the same bytes (wait for the
//!   handle, or the callback, first). Memory registered with the `unsafe`
//!   [`register_memory`] is the caller's to keep valid.
//! - A copy by this process holds the registration table's read lock;
//!   unregistering takes its write lock, so once [`unregister_memory`]
//!   returns (or a [`DmaBuffer`] is dropped) no put writes the range and
//!   no operation of this process reads it. A get of
//!   [`INITIATOR_READS_MIN`] bytes or more from another process that was
//!   answered before may still read it: it only reads,
//!   and a program that unregisters memory a get is reading races itself
//!   (as freeing an MPI window under an access epoch does): the get then
//!   fails, naming the target, or brings what the memory holds after.
//! - Each operation completes exactly once: its handle turns complete, or
//!   its callback runs, on the initiating PE.
//!
//! # Concurrency
//!
//! The registration table is process-wide (an `RwLock`). Operations in
//! flight are per PE, in a PE-private variable (`IN_FLIGHT`, a [`Cpv`]),
//! touched only on the PE's thread and dropped with the PE.
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use crate::msg::message::Message;
use crate::msg::system::{self, Kind, Reader};
use crate::rt::globals::Cpv;
use crate::rt::pe::{self, Pe};

/// One registered range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    len: u64,
    /// Registered by [`expose`]: gets may read it, puts are refused.
    read_only: bool,
}

/// The registered ranges of this process: start address -> range.
static REGISTERED: RwLock<BTreeMap<u64, Range>> = RwLock::new(BTreeMap::new());

fn registered() -> RwLockReadGuard<'static, BTreeMap<u64, Range>> {
    REGISTERED.read().unwrap_or_else(PoisonError::into_inner)
}

/// Why a one-sided operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaError {
    /// The PE whose memory it addressed.
    pub target_pe: usize,
    /// What went wrong.
    pub why: String,
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "one-sided operation on PE {}: {}",
            self.target_pe, self.why
        )
    }
}

impl std::error::Error for RdmaError {}

/// The registered range (of `map`) that `[addr, addr + len)` lies inside.
fn holder(map: &BTreeMap<u64, Range>, addr: u64, len: u64) -> Option<Range> {
    let end = addr.checked_add(len)?;
    map.range(..=addr)
        .next_back()
        .filter(|&(&start, r)| end <= start + r.len)
        .map(|(_, &r)| r)
}

/// True if `[addr, addr + len)` lies inside one registered range (of
/// `map`): a get may read it.
fn covered(map: &BTreeMap<u64, Range>, addr: u64, len: u64) -> bool {
    holder(map, addr, len).is_some()
}

/// True if `[addr, addr + len)` lies inside one registered range (of
/// `map`) that is not read-only: a put may write it.
fn writable(map: &BTreeMap<u64, Range>, addr: u64, len: u64) -> bool {
    holder(map, addr, len).is_some_and(|r| !r.read_only)
}

/// Registers `len` bytes at `addr` for one-sided operations from any PE
/// (`CmiRegisterMemory`). Fails if the range overlaps one registered
/// already, or wraps around the address space.
///
/// # Safety
/// Until [`unregister_memory`] of the same range returns, the range must
/// stay allocated, and puts and gets from any PE may write and read it at
/// any time: the program must not hold Rust references to it across them
/// (read and write it through raw pointers, or use [`dma_alloc`], which
/// needs none of this).
#[doc(alias = "CmiRegisterMemory")]
pub unsafe fn register_memory(addr: *mut u8, len: usize) -> Result<(), RdmaError> {
    register(addr as u64, len as u64)
}

/// Bytes registered for one-sided gets only, while this guard lives (see
/// [`expose`]).
#[must_use = "the bytes are unregistered when the guard drops"]
pub struct Exposed<'a> {
    bytes: &'a [u8],
}

impl Exposed<'_> {
    /// The address a [`get`] names to read the bytes.
    pub fn addr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }

    /// How many bytes are exposed.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True if no bytes are exposed.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl Drop for Exposed<'_> {
    fn drop(&mut self) {
        // Waits for copies out of the range by this process (see
        // `unregister_memory`).
        let _ = unregister(self.addr(), self.bytes.len() as u64);
    }
}

impl fmt::Debug for Exposed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Exposed({} bytes at {:#x})", self.len(), self.addr())
    }
}

/// Registers `bytes` for one-sided gets from any PE until the guard drops:
/// a safe, read-only form of [`register_memory`] for memory the caller
/// only lends (a library's send that lets the receiver pull large data).
/// Puts into the range are refused, naming the PE and address, and the
/// bytes cannot change while the borrow lasts, so gets read exactly them.
/// Fails as `register_memory` does if the range overlaps one registered
/// already.
pub fn expose(bytes: &[u8]) -> Result<Exposed<'_>, RdmaError> {
    insert(bytes.as_ptr() as u64, bytes.len() as u64, true)?;
    Ok(Exposed { bytes })
}

fn register(addr: u64, len: u64) -> Result<(), RdmaError> {
    insert(addr, len, false)
}

fn insert(addr: u64, len: u64, read_only: bool) -> Result<(), RdmaError> {
    let here = || pe::try_current().map_or(usize::MAX, |pe| pe.pe);
    let end = addr.checked_add(len).ok_or_else(|| RdmaError {
        target_pe: here(),
        why: format!("cannot register {len} bytes at {addr:#x}: the range wraps around"),
    })?;
    let mut map = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    let before = map.range(..end).next_back();
    if let Some((&start, &Range { len: rlen, .. })) = before
        && (start + rlen > addr || (len == 0 && start == addr))
    {
        return Err(RdmaError {
            target_pe: here(),
            why: format!(
                "cannot register {len} bytes at {addr:#x}: it overlaps the registered range of {rlen} bytes at {start:#x}"
            ),
        });
    }
    map.insert(addr, Range { len, read_only });
    Ok(())
}

/// Unregisters the range registered at `addr` (`CmiUnRegisterMemory`):
/// `len` must be its length. Waits for one-sided copies into or out of it
/// that are under way; none starts after.
#[doc(alias = "CmiUnRegisterMemory")]
pub fn unregister_memory(addr: *mut u8, len: usize) -> Result<(), RdmaError> {
    unregister(addr as u64, len as u64)
}

fn unregister(addr: u64, len: u64) -> Result<(), RdmaError> {
    let mut map = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    match map.get(&addr).map(|r| r.len) {
        Some(l) if l == len => {
            map.remove(&addr);
            Ok(())
        }
        found => Err(RdmaError {
            target_pe: pe::try_current().map_or(usize::MAX, |pe| pe.pe),
            why: match found {
                Some(l) => format!(
                    "cannot unregister {len} bytes at {addr:#x}: {l} bytes are registered there"
                ),
                None => {
                    format!("cannot unregister {len} bytes at {addr:#x}: no range registered there")
                }
            },
        }),
    }
}

/// Copies `src` to `dst` with relaxed atomic stores.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes, and every access
/// to it that may race must be atomic too.
unsafe fn store_bytes(dst: *mut u8, src: &[u8]) {
    let mut i = 0;
    while i < src.len() {
        // SAFETY: `dst + i` is inside the caller's range.
        let at = unsafe { dst.add(i) };
        if (at as usize).is_multiple_of(8) && src.len() - i >= 8 {
            let word = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
            // SAFETY: aligned, in range; atomics only (the caller's promise).
            unsafe { AtomicU64::from_ptr(at.cast()) }.store(word, Ordering::Relaxed);
            i += 8;
        } else {
            // SAFETY: in range; atomics only.
            unsafe { AtomicU8::from_ptr(at) }.store(src[i], Ordering::Relaxed);
            i += 1;
        }
    }
}

/// Copies from `src` into `dst` with relaxed atomic loads.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes, and every access to
/// it that may race must be atomic too.
unsafe fn load_bytes(src: *const u8, dst: &mut [u8]) {
    let mut i = 0;
    while i < dst.len() {
        // SAFETY: `src + i` is inside the caller's range.
        let at = unsafe { src.add(i) };
        if (at as usize).is_multiple_of(8) && dst.len() - i >= 8 {
            // SAFETY: aligned, in range; atomics only.
            let word = unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Ordering::Relaxed);
            dst[i..i + 8].copy_from_slice(&word.to_ne_bytes());
            i += 8;
        } else {
            // SAFETY: in range; atomics only.
            dst[i] = unsafe { AtomicU8::from_ptr(at as *mut u8) }.load(Ordering::Relaxed);
            i += 1;
        }
    }
}

/// Writes `bytes` at `addr` of this process if a registered range holds
/// them all; else says why (for the initiator of a put to `target`).
fn write_registered(target: usize, addr: u64, bytes: &[u8]) -> Result<(), String> {
    let map = registered();
    if !writable(&map, addr, bytes.len() as u64) {
        return Err(put_refusal(&map, target, addr, bytes.len()));
    }
    // SAFETY: the range is registered (its owner keeps it valid until it
    // unregisters, which waits for this read lock to go) and registered
    // memory is accessed atomically.
    unsafe { store_bytes(addr as usize as *mut u8, bytes) };
    Ok(())
}

/// Reads `len` bytes at `addr` of this process if a registered range holds
/// them all.
fn read_registered(target: usize, addr: u64, len: usize) -> Result<Vec<u8>, String> {
    let map = registered();
    if !covered(&map, addr, len as u64) {
        return Err(refusal("get", target, addr, len));
    }
    let mut out = vec![0u8; len];
    // SAFETY: as in `write_registered`.
    unsafe { load_bytes(addr as usize as *const u8, &mut out) };
    Ok(out)
}

fn refusal(what: &str, target: usize, addr: u64, len: usize) -> String {
    format!(
        "a {what} of {len} bytes at {addr:#x} refused: no range registered in PE {target}'s process holds it"
    )
}

/// Why a put into `[addr, addr + len)` is refused (it is not [`writable`]).
fn put_refusal(map: &BTreeMap<u64, Range>, target: usize, addr: u64, len: usize) -> String {
    match holder(map, addr, len as u64) {
        Some(r) if r.read_only => format!(
            "a put of {len} bytes at {addr:#x} refused: PE {target}'s process exposed that range for gets only"
        ),
        _ => refusal("put", target, addr, len),
    }
}

// ---------------------------------------------------------------------------
// Registered buffers

/// Memory the runtime allocated and registered (`CmiDMAAlloc`): zeroed,
/// 8-byte aligned, unregistered and freed on drop. Its bytes are read and
/// written with copies ([`DmaBuffer::read`], [`DmaBuffer::write`]), never
/// lent out as references, since puts from other PEs may change them at
/// any time.
#[doc(alias = "CmiDMAAlloc")]
pub struct DmaBuffer {
    words: Box<[AtomicU64]>,
    len: usize,
}

/// Allocates and registers `len` bytes (`CmiDMAAlloc`).
#[doc(alias = "CmiDMAAlloc")]
pub fn dma_alloc(len: usize) -> DmaBuffer {
    DmaBuffer::new(len)
}

impl DmaBuffer {
    /// `len` zeroed bytes, registered.
    pub fn new(len: usize) -> DmaBuffer {
        let words: Box<[AtomicU64]> = (0..len.div_ceil(8).max(1))
            .map(|_| AtomicU64::new(0))
            .collect();
        let buf = DmaBuffer { words, len };
        if let Err(e) = register(buf.addr(), len as u64) {
            // Only a range registered and then freed without being
            // unregistered can overlap fresh memory.
            panic!("dma_alloc: {e} (memory freed while still registered?)");
        }
        buf
    }

    /// Its address, as a [`put`] or [`get`] names it.
    pub fn addr(&self) -> u64 {
        self.words.as_ptr() as u64
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies bytes from `offset` into `out`.
    ///
    /// # Panics
    /// If they are not all inside the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked); the words are atomics.
        unsafe { load_bytes((self.addr() as usize as *const u8).add(offset), out) }
    }

    /// Its bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        self.read_vec(0, self.len)
    }

    /// `len` of its bytes from `offset`, copied.
    ///
    /// # Panics
    /// If they are not all inside the buffer.
    pub fn read_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(offset, &mut v);
        v
    }

    /// Copies `bytes` in at `offset`.
    ///
    /// # Panics
    /// If they do not all fit inside the buffer.
    pub fn write(&self, offset: usize, bytes: &[u8]) {
        self.check(offset, bytes.len());
        // SAFETY: in bounds (checked); the words are atomics.
        unsafe { store_bytes((self.addr() as usize as *mut u8).add(offset), bytes) }
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "DmaBuffer: {len} bytes at offset {offset} of a buffer of {}",
            self.len
        );
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        let _ = unregister(self.addr(), self.len as u64);
    }
}

impl fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DmaBuffer({} bytes at {:#x})", self.len, self.addr())
    }
}

// ---------------------------------------------------------------------------
// Operations

/// Operations between processes from this many bytes on move in one copy
/// where the network allows it (see "How the bytes move").
pub const SINGLE_COPY_MIN: usize = 4 << 10;

/// Single-copy gets from this many bytes on are read by the initiator's
/// process after the target's answer, instead of written by the target's
/// process before it (see "How the bytes move").
pub const INITIATOR_READS_MIN: usize = 1 << 20;

/// How a get's bytes move (the request's fourth word).
const GET_IN_ANSWER: u64 = 0;
/// The target writes them at the request's fifth word, then answers.
const GET_TARGET_WRITES: u64 = 1;
/// The target checks the range and answers; the initiator reads them.
const GET_INITIATOR_READS: u64 = 2;

/// Where an operation's outcome goes.
type Outcome = Result<Vec<u8>, RdmaError>;

/// An operation in flight on its initiating PE.
struct Pending {
    target: usize,
    slot: Rc<RefCell<Option<Outcome>>>,
    callback: Option<Box<dyn FnOnce(Outcome)>>,
    /// A single-copy operation's buffer, which the target's process reads
    /// (put) until it answers, or this process reads the bytes into after
    /// the answer (get): kept here, untouched, until then.
    buffer: Option<Vec<u8>>,
    /// A single-copy get that this process reads ([`INITIATOR_READS_MIN`]):
    /// where the bytes are (address in the target's process, length) and
    /// where they go here, read once the target answers that the range is
    /// registered.
    read: Option<(u64, usize, u64)>,
    /// A registered buffer of this process that the operation reads or
    /// writes: kept alive (and so registered) until the answer.
    keep: Option<Arc<DmaBuffer>>,
    /// A get into a registered buffer whose bytes come in the answer: where
    /// they go (offset) and how many are due.
    deliver_into: Option<(usize, usize)>,
}

/// What an operation does at its target.
enum Op<'a> {
    /// Writes `src` at `addr`.
    Put { src: &'a [u8], addr: u64 },
    /// Reads `len` bytes at `addr`, returned in a new vector.
    Get { addr: u64, len: usize },
    /// Writes `len` bytes of the registered `from`, at `offset`, at `addr`.
    PutFrom {
        from: &'a Arc<DmaBuffer>,
        offset: usize,
        len: usize,
        addr: u64,
    },
    /// Reads `len` bytes at `addr` into the registered `into`, at `offset`.
    GetInto {
        addr: u64,
        len: usize,
        into: &'a Arc<DmaBuffer>,
        offset: usize,
    },
}

impl Op<'_> {
    fn len(&self) -> usize {
        match *self {
            Op::Put { src, .. } => src.len(),
            Op::Get { len, .. } | Op::PutFrom { len, .. } | Op::GetInto { len, .. } => len,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Op::Put { .. } | Op::PutFrom { .. } => "one-sided put to",
            Op::Get { .. } | Op::GetInto { .. } => "one-sided get from",
        }
    }

    /// The registered buffer of this process it uses, if any.
    fn local_buffer(&self) -> Option<(&Arc<DmaBuffer>, usize)> {
        match *self {
            Op::PutFrom { from, offset, .. } => Some((from, offset)),
            Op::GetInto { into, offset, .. } => Some((into, offset)),
            _ => None,
        }
    }

    /// The operation done here, on memory of this process.
    fn local(&self, target_pe: usize) -> Outcome {
        match *self {
            Op::Put { src, addr } => write_registered(target_pe, addr, src).map(|()| Vec::new()),
            Op::Get { addr, len } => read_registered(target_pe, addr, len),
            Op::PutFrom {
                from,
                offset,
                len,
                addr,
            } => {
                write_registered(target_pe, addr, &from.read_vec(offset, len)).map(|()| Vec::new())
            }
            Op::GetInto {
                addr,
                len,
                into,
                offset,
            } => read_registered(target_pe, addr, len).map(|bytes| {
                into.write(offset, &bytes);
                Vec::new()
            }),
        }
        .map_err(|why| RdmaError { target_pe, why })
    }

    /// The request for the target's process (`buffer`: the address of the
    /// buffer its process copies from or into, 0 for none: the bytes then
    /// travel in the messages).
    fn request(&self, id: u64, buffer: u64) -> Message {
        match *self {
            Op::Put { src, addr } => system::message(
                Kind::RdmaPut,
                &[id, addr, src.len() as u64, buffer],
                if buffer == 0 { src } else { &[] },
            ),
            Op::PutFrom {
                from,
                offset,
                len,
                addr,
            } => {
                // With a single copy the target reads `from` itself.
                let bytes = if buffer == 0 {
                    from.read_vec(offset, len)
                } else {
                    Vec::new()
                };
                system::message(Kind::RdmaPut, &[id, addr, len as u64, buffer], &bytes)
            }
            Op::Get { addr, len } | Op::GetInto { addr, len, .. } => {
                let how = match buffer {
                    0 => GET_IN_ANSWER,
                    _ if len >= INITIATOR_READS_MIN => GET_INITIATOR_READS,
                    _ => GET_TARGET_WRITES,
                };
                system::message(Kind::RdmaGet, &[id, addr, len as u64, how, buffer], &[])
            }
        }
    }
}

/// A PE's operations in flight.
#[derive(Default)]
struct InFlight {
    next_id: u64,
    ops: HashMap<u64, Pending>,
}

/// The calling PE's operations in flight: a PE-private variable, so they
/// end with their PE (what a job that ended left in flight is dropped
/// with it, and never seen by a later job's PE on the same thread).
static IN_FLIGHT: Cpv<RefCell<InFlight>> = Cpv::new();

/// Runs `f` on the calling PE's operations in flight.
fn with_in_flight<R>(f: impl FnOnce(&mut InFlight) -> R) -> R {
    let in_flight = IN_FLIGHT.try_get().unwrap_or_else(|| {
        IN_FLIGHT.initialize(RefCell::default());
        IN_FLIGHT.get()
    });
    let mut in_flight = in_flight.borrow_mut();
    f(&mut in_flight)
}

/// What a handle waits on.
#[derive(Clone)]
struct Slot(Rc<RefCell<Option<Outcome>>>);

impl Slot {
    fn is_done(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// Runs this PE's scheduler (or yields this user-level thread) until
    /// the outcome is in, then takes it.
    fn wait(self, target: usize) -> Outcome {
        while !self.is_done() {
            if pe::with(|pe| pe.job.is_exiting()) {
                return Err(RdmaError {
                    target_pe: target,
                    why: "the job ended before the operation completed".into(),
                });
            }
            if crate::cth::Thread::current().is_main_flow() {
                crate::rt::reentry::run_count(1);
            } else {
                crate::cth::yield_now();
            }
        }
        self.0.borrow_mut().take().expect("done")
    }
}

/// A put in flight (`CmiPut`'s handle).
#[must_use = "a put's handle says when it is done and whether it failed"]
pub struct RdmaHandle {
    slot: Slot,
    target: usize,
}

impl RdmaHandle {
    /// True once the put is done, or failed (`CmiWaitTest`).
    #[doc(alias = "CmiWaitTest")]
    pub fn wait_test(&self) -> bool {
        self.slot.is_done()
    }

    /// Waits until the put is done: the bytes are in the target's memory.
    /// On the main flow of a PE it runs the scheduler meanwhile; on a
    /// user-level thread it yields.
    pub fn wait(self) -> Result<(), RdmaError> {
        self.slot.wait(self.target).map(|_| ())
    }
}

/// A get in flight (`CmiGet`'s handle); the bytes come with its end.
#[must_use = "a get's handle holds the bytes it fetched"]
pub struct GetHandle {
    slot: Slot,
    target: usize,
}

impl GetHandle {
    /// True once the get is done, or failed (`CmiWaitTest`).
    #[doc(alias = "CmiWaitTest")]
    pub fn wait_test(&self) -> bool {
        self.slot.is_done()
    }

    /// Waits until the get is done and returns its bytes (as
    /// [`RdmaHandle::wait`] waits).
    pub fn wait(self) -> Result<Vec<u8>, RdmaError> {
        self.slot.wait(self.target)
    }
}

/// Starts `op` on `target_pe` from the calling PE: copies at once if the
/// target is in this process, else sends the request there. Returns the
/// slot its outcome goes to.
/// `reuse`: for a get, a vector whose heap block may hold the bytes (see
/// [`get_cb_reusing`]).
fn start(
    target_pe: usize,
    op: Op<'_>,
    callback: Option<Box<dyn FnOnce(Outcome)>>,
    reuse: Option<Vec<u8>>,
) -> Slot {
    pe::with(|pe| {
        pe.check_pe(target_pe, op.what());
        if let Some((buf, offset)) = op.local_buffer() {
            buf.check(offset, op.len());
        }
        let slot = Slot(Rc::new(RefCell::new(None)));
        let id = with_in_flight(|s| {
            s.next_id += 1;
            s.next_id
        });
        let in_process = target_pe == pe.pe || pe.job.local_pe(target_pe).is_some();
        if in_process && callback.is_none() {
            *slot.0.borrow_mut() = Some(op.local(target_pe));
            return slot;
        }
        let single_copy = !in_process
            && op.len() >= SINGLE_COPY_MIN
            && pe
                .job
                .remote()
                .copies_memory_of(pe.job.topo.node_of(target_pe));
        // A single copy goes between the target's memory and a buffer here
        // that stays put until the answer: the registered one the
        // operation names, or a vector's heap block (which stays where it
        // is while the `Vec` sits in the table).
        let buffer = match op {
            Op::Put { src, .. } if single_copy => Some(src.to_vec()),
            Op::Get { len, .. } if single_copy => Some(match reuse {
                // Bytes it already holds are overwritten by the copy, not
                // zeroed first (4 MiB of zeroes cost as much as the copy).
                Some(mut v) => {
                    v.resize(len, 0);
                    v
                }
                None => vec![0; len],
            }),
            _ => None,
        };
        let buffer_addr = match (&buffer, op.local_buffer()) {
            _ if !single_copy => 0,
            (Some(b), _) => b.as_ptr() as u64,
            (None, Some((buf, offset))) => buf.addr() + offset as u64,
            (None, None) => 0,
        };
        let deliver_into = match op {
            Op::GetInto { offset, len, .. } if !single_copy => Some((offset, len)),
            _ => None,
        };
        let read = match op {
            Op::Get { addr, len } | Op::GetInto { addr, len, .. }
                if single_copy && len >= INITIATOR_READS_MIN =>
            {
                Some((addr, len, buffer_addr))
            }
            _ => None,
        };
        with_in_flight(|s| {
            s.ops.insert(
                id,
                Pending {
                    target: target_pe,
                    slot: slot.0.clone(),
                    callback,
                    buffer,
                    keep: op.local_buffer().map(|(b, _)| b.clone()),
                    deliver_into,
                    read,
                },
            )
        });
        if in_process {
            // The copy now; the callback as a message on this PE.
            let msg = reply(id, op.local(target_pe));
            pe.send_runtime(pe.pe, msg);
        } else {
            pe.send_runtime(target_pe, op.request(id, buffer_addr));
        }
        slot
    })
}

/// The answer to operation `id`: its bytes (a get's; none for a put) or
/// why it failed.
fn reply(id: u64, outcome: Outcome) -> Message {
    match outcome {
        Ok(bytes) => system::message(Kind::RdmaDone, &[id, DONE_OK], &bytes),
        Err(e) => system::message(Kind::RdmaDone, &[id, DONE_FAILED], e.why.as_bytes()),
    }
}

/// Writes `src` at `remote_addr` in PE `target_pe`'s process (`CmiPut`;
/// the calling PE is the manual's `sourceId`). `src` is copied before the
/// call returns. The handle completes once the bytes are there, or the
/// target refused them (a range it has not registered).
#[doc(alias = "CmiPut")]
pub fn put(target_pe: usize, src: &[u8], remote_addr: u64) -> RdmaHandle {
    RdmaHandle {
        slot: start_put(target_pe, src, remote_addr, None),
        target: target_pe,
    }
}

/// As [`put`]; `callback` then runs as a message on the calling PE, with
/// the outcome (`CmiPutCb`, whose `CmiRdmaCallbackFn` and `param` a
/// closure stands for).
#[doc(alias = "CmiPutCb")]
#[doc(alias = "CmiRdmaCallbackFn")]
pub fn put_cb(
    target_pe: usize,
    src: &[u8],
    remote_addr: u64,
    callback: impl FnOnce(Result<(), RdmaError>) + 'static,
) {
    let cb: Box<dyn FnOnce(Outcome)> = Box::new(move |o: Outcome| callback(o.map(|_| ())));
    let _ = start_put(target_pe, src, remote_addr, Some(cb));
}

fn start_put(
    target_pe: usize,
    src: &[u8],
    remote_addr: u64,
    callback: Option<Box<dyn FnOnce(Outcome)>>,
) -> Slot {
    let op = Op::Put {
        src,
        addr: remote_addr,
    };
    start(target_pe, op, callback, None)
}

/// Reads `len` bytes at `remote_addr` in PE `target_pe`'s process
/// (`CmiGet`; the calling PE is the manual's `sourceId`, and the bytes come
/// with the handle's end rather than at a local address).
#[doc(alias = "CmiGet")]
pub fn get(target_pe: usize, remote_addr: u64, len: usize) -> GetHandle {
    GetHandle {
        slot: start_get(target_pe, remote_addr, len, None, None),
        target: target_pe,
    }
}

/// As [`get`]; `callback` then runs as a message on the calling PE with
/// the bytes, or why they could not be read (`CmiGetCb`).
#[doc(alias = "CmiGetCb")]
pub fn get_cb(
    target_pe: usize,
    remote_addr: u64,
    len: usize,
    callback: impl FnOnce(Result<Vec<u8>, RdmaError>) + 'static,
) {
    let _ = start_get(target_pe, remote_addr, len, Some(Box::new(callback)), None);
}

/// As [`get_cb`], with `buffer`'s heap block reused for the bytes where
/// this process reads them itself (a single-copy get over shm): the vector
/// the callback gets is `buffer`, resized to `len`, its old bytes
/// overwritten rather than zeroed first. A library that gets large data
/// again and again passes back the vector its last callback got, and so
/// neither allocates nor zeroes per get. Elsewhere the bytes come in a
/// new vector, as with `get_cb`.
pub fn get_cb_reusing(
    target_pe: usize,
    remote_addr: u64,
    len: usize,
    buffer: Vec<u8>,
    callback: impl FnOnce(Result<Vec<u8>, RdmaError>) + 'static,
) {
    let callback = Some(Box::new(callback) as Box<dyn FnOnce(Outcome)>);
    let _ = start_get(target_pe, remote_addr, len, callback, Some(buffer));
}

/// Writes `len` bytes of `from` (at `offset`) at `remote_addr` in PE
/// `target_pe`'s process: the manual's `CmiPut` from registered memory,
/// which over shm the target's process reads in one copy (nothing is
/// copied here first). `from` is kept alive until the put is done; its
/// bytes should not change meanwhile.
///
/// # Panics
/// If the bytes are not all inside `from`.
pub fn put_from(
    target_pe: usize,
    from: &Arc<DmaBuffer>,
    offset: usize,
    len: usize,
    remote_addr: u64,
) -> RdmaHandle {
    let op = Op::PutFrom {
        from,
        offset,
        len,
        addr: remote_addr,
    };
    RdmaHandle {
        slot: start(target_pe, op, None, None),
        target: target_pe,
    }
}

/// Reads `len` bytes at `remote_addr` in PE `target_pe`'s process into
/// `into` at `offset`: the manual's `CmiGet` into registered memory, which
/// over shm the target's process writes in one copy. `into` is kept alive
/// until the get is done; read the bytes after that.
///
/// # Panics
/// If the bytes do not all fit inside `into`.
pub fn get_into(
    target_pe: usize,
    remote_addr: u64,
    into: &Arc<DmaBuffer>,
    offset: usize,
    len: usize,
) -> RdmaHandle {
    let op = Op::GetInto {
        addr: remote_addr,
        len,
        into,
        offset,
    };
    RdmaHandle {
        slot: start(target_pe, op, None, None),
        target: target_pe,
    }
}

fn start_get(
    target_pe: usize,
    remote_addr: u64,
    len: usize,
    callback: Option<Box<dyn FnOnce(Outcome)>>,
    reuse: Option<Vec<u8>>,
) -> Slot {
    let op = Op::Get {
        addr: remote_addr,
        len,
    };
    start(target_pe, op, callback, reuse)
}

// ---------------------------------------------------------------------------
// Global pointers (the CMI chapter)

/// A pointer to registered memory of one PE that any PE may read and write
/// (`GlobalPtr`): the PE, the address in its process, the length. Plain
/// data: send it in a message ([`GlobalPtr::to_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GlobalPtr {
    /// The PE whose memory it points to.
    pub pe: usize,
    /// The address there.
    pub addr: u64,
    /// How many bytes it covers.
    pub len: usize,
}

impl GlobalPtr {
    /// Bytes of [`GlobalPtr::to_bytes`].
    pub const BYTES: usize = 24;

    /// A global pointer to `len` bytes at `lptr` on the calling PE
    /// (`CmiGptrCreate`), registering them ([`register_memory`]).
    ///
    /// # Safety
    /// As for [`register_memory`]: the memory stays valid, and is touched
    /// only through raw pointers, until it is unregistered.
    #[doc(alias = "CmiGptrCreate")]
    pub unsafe fn create(lptr: *mut u8, len: usize) -> Result<GlobalPtr, RdmaError> {
        // SAFETY: the caller's promise.
        unsafe { register_memory(lptr, len) }?;
        Ok(GlobalPtr {
            pe: pe::with(|pe| pe.pe),
            addr: lptr as u64,
            len,
        })
    }

    /// A global pointer to `buf`, on the calling PE.
    pub fn to_buffer(buf: &DmaBuffer) -> GlobalPtr {
        GlobalPtr {
            pe: pe::with(|pe| pe.pe),
            addr: buf.addr(),
            len: buf.len(),
        }
    }

    /// The local address it points to (`CmiGptrDref`), if the calling PE
    /// is in the process of the pointer's PE; `None` elsewhere, where the
    /// address means nothing.
    #[doc(alias = "CmiGptrDref")]
    pub fn dref(&self) -> Option<*mut u8> {
        pe::with(|pe| {
            (self.pe == pe.pe || pe.job.local_pe(self.pe).is_some())
                .then_some(self.addr as usize as *mut u8)
        })
    }

    /// Copies its first `len` bytes here, waiting until they come
    /// (`CmiSyncGet`; as [`GetHandle::wait`] waits).
    #[doc(alias = "CmiSyncGet")]
    pub fn sync_get(&self, len: usize) -> Result<Vec<u8>, RdmaError> {
        self.get(len).wait()
    }

    /// Starts copying its first `len` bytes here (the CMI chapter's
    /// `CmiGet` on a global pointer).
    pub fn get(&self, len: usize) -> GetHandle {
        self.check(len);
        get(self.pe, self.addr, len)
    }

    /// Starts copying `data` to where it points (the CMI chapter's `CmiPut`
    /// on a global pointer).
    pub fn put(&self, data: &[u8]) -> RdmaHandle {
        self.check(data.len());
        put(self.pe, data, self.addr)
    }

    fn check(&self, len: usize) {
        assert!(
            len <= self.len,
            "global pointer to {} bytes on PE {}: {len} bytes asked for",
            self.len,
            self.pe
        );
    }

    /// Its bytes, to send in a message.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..8].copy_from_slice(&(self.pe as u64).to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..].copy_from_slice(&(self.len as u64).to_le_bytes());
        b
    }

    /// The pointer `to_bytes` gave, if `bytes` are one.
    pub fn from_bytes(bytes: &[u8]) -> Option<GlobalPtr> {
        let b: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(GlobalPtr {
            pe: usize::try_from(word(0)).ok()?,
            addr: word(8),
            len: usize::try_from(word(16)).ok()?,
        })
    }
}

// ---------------------------------------------------------------------------
// The messages

/// Registers the one-sided messages' handlers on `pe`.
pub(crate) fn init_pe(pe: &Pe) {
    let d = &pe.dispatch;
    d.on(Kind::RdmaPut, |pe, _, msg| on_put(pe, &msg));
    d.on(Kind::RdmaGet, |pe, _, msg| on_get(pe, &msg));
    d.on(Kind::RdmaDone, |pe, _, msg| on_done(pe, &msg));
}

/// Status words of an answer.
const DONE_OK: u64 = 0;
const DONE_FAILED: u64 = 1;

/// A put for this PE's process: write (from the message, or straight from
/// the initiator's buffer), answer.
fn on_put(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "one-sided put");
    let (id, addr, len, from) = (r.word(), r.word(), r.word(), r.word());
    let bytes = r.rest();
    let outcome = if from == 0 {
        if bytes.len() as u64 != len {
            r.malformed(&format!("it says {len} bytes and carries {}", bytes.len()));
        }
        write_registered(pe.pe, addr, bytes)
    } else if pe.job.local_pe(msg.src_pe()).is_some() {
        Err(from_this_process("put"))
    } else {
        let node = pe.job.topo.node_of(msg.src_pe());
        let map = registered();
        match usize::try_from(len) {
            Ok(n) if writable(&map, addr, len) => {
                // SAFETY: the range is registered (kept so while the read
                // lock is held), and registered memory is never Rust memory
                // a reference covers (it is touched atomically, or through
                // raw pointers by its owner's contract).
                unsafe {
                    pe.job
                        .remote()
                        .read_memory_of(node, from, addr as usize as *mut u8, n)
                }
            }
            _ => Err(put_refusal(&map, pe.pe, addr, len as usize)),
        }
    }
    .map(|()| Vec::new());
    answer(pe, msg, id, outcome);
}

/// Why a single-copy request that claims to come from this process is
/// refused (its initiator copies itself; such a message is no one's).
fn from_this_process(what: &str) -> String {
    format!("a single-copy {what} from a PE of this process (those copy at once)")
}

/// Answers operation `id` (of `msg`'s sender) with `outcome`: bytes, or why
/// this PE's process refused it.
fn answer(pe: &Pe, msg: &Message, id: u64, outcome: Result<Vec<u8>, String>) {
    let outcome = outcome.map_err(|why| RdmaError {
        target_pe: pe.pe,
        why,
    });
    pe.send_runtime(msg.src_pe(), reply(id, outcome));
}

/// A get from this PE's process: read, answer with the bytes; or, for a
/// single copy, write them straight into the initiator's buffer and
/// answer, or check the range and answer yes (its initiator reads them).
fn on_get(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "one-sided get");
    let (id, addr, len, how, into) = (r.word(), r.word(), r.word(), r.word(), r.word());
    let Some(n) = usize::try_from(len)
        .ok()
        .filter(|&n| n <= crate::msg::message::MAX_MESSAGE_SIZE)
    else {
        let why = format!("a get of {len} bytes is larger than the largest message");
        return answer(pe, msg, id, Err(why));
    };
    let outcome = match how {
        GET_IN_ANSWER => read_registered(pe.pe, addr, n),
        GET_TARGET_WRITES | GET_INITIATOR_READS if pe.job.local_pe(msg.src_pe()).is_some() => {
            Err(from_this_process("get"))
        }
        GET_TARGET_WRITES => {
            let node = pe.job.topo.node_of(msg.src_pe());
            let map = registered();
            if covered(&map, addr, len) {
                // SAFETY: registered (kept so while the read lock is
                // held): valid for reads of `n` bytes during the copy.
                unsafe {
                    pe.job
                        .remote()
                        .write_memory_of(node, into, addr as usize as *const u8, n)
                }
                .map(|()| Vec::new())
            } else {
                Err(refusal("get", pe.pe, addr, n))
            }
        }
        GET_INITIATOR_READS if covered(&registered(), addr, len) => Ok(Vec::new()),
        GET_INITIATOR_READS => Err(refusal("get", pe.pe, addr, n)),
        other => r.malformed(&format!("its copy mode is {other}, not 0, 1 or 2")),
    };
    answer(pe, msg, id, outcome);
}

/// The answer to one of this PE's operations.
fn on_done(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "one-sided answer");
    let (id, status) = (r.word(), r.word());
    let rest = r.rest();
    let Some(mut op) = with_in_flight(|s| s.ops.remove(&id)) else {
        r.malformed(&format!("PE {} has no one-sided operation {id}", pe.pe));
    };
    let single_copy_get = op.buffer.is_some() && rest.is_empty();
    let outcome = match (status, op.deliver_into, op.read) {
        (DONE_OK, _, Some((addr, len, into))) => {
            if !rest.is_empty() {
                r.malformed(&format!(
                    "the answer to single-copy get {id} carries {} bytes",
                    rest.len()
                ));
            }
            // The target's process found the range registered: read it.
            let node = pe.job.topo.node_of(op.target);
            // SAFETY: `into` is this operation's own buffer (`op.buffer`'s
            // heap block, or the registered `op.keep` at its offset,
            // checked to hold `len` bytes), alive until this function
            // returns, and nothing reads or writes it while the get is in
            // flight (the module's invariants).
            unsafe {
                pe.job
                    .remote()
                    .read_memory_of(node, addr, into as usize as *mut u8, len)
            }
            .map(|()| op.buffer.take().unwrap_or_default())
            .map_err(|why| RdmaError {
                target_pe: op.target,
                why: format!("reading {len} bytes at {addr:#x}: {why}"),
            })
        }
        (DONE_OK, Some((offset, len)), None) => match (&op.keep, rest.len() == len) {
            (Some(buf), true) => {
                buf.write(offset, rest);
                Ok(Vec::new())
            }
            _ => r.malformed(&format!(
                "the answer to get {id} carries {} bytes, {len} were asked for",
                rest.len()
            )),
        },
        (DONE_OK, None, None) if single_copy_get => {
            // The target's process wrote the bytes into the buffer (a
            // put's buffer was only read, and its answer is empty anyway).
            Ok(op.buffer.take().expect("checked"))
        }
        (DONE_OK, None, None) => Ok(rest.to_vec()),
        _ => Err(RdmaError {
            target_pe: op.target,
            why: String::from_utf8_lossy(rest).into_owned(),
        }),
    };
    match op.callback {
        Some(cb) => cb(outcome),
        None => *op.slot.borrow_mut() = Some(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_covered_only_whole() {
        let mut map = BTreeMap::new();
        let range = |len| Range {
            len,
            read_only: false,
        };
        map.insert(100, range(50));
        map.insert(200, range(0));
        assert!(covered(&map, 100, 50));
        assert!(covered(&map, 120, 30));
        assert!(covered(&map, 150, 0));
        assert!(!covered(&map, 120, 31));
        assert!(!covered(&map, 99, 2));
        assert!(!covered(&map, 151, 0));
        assert!(covered(&map, 200, 0));
        assert!(!covered(&map, 200, 1));
        assert!(!covered(&map, u64::MAX, 2));
    }

    #[test]
    fn registrations_may_not_overlap_and_unregister_exactly() {
        // Addresses no allocation of this test process has (a high page of
        // the canonical range): only the table is touched.
        let base = 0x7fff_0000_0000u64;
        register(base, 4096).unwrap();
        let e = register(base + 4095, 10).unwrap_err();
        assert!(
            e.why
                .contains("overlaps the registered range of 4096 bytes"),
            "{e}"
        );
        register(base + 4096, 10).unwrap();
        let e = unregister(base, 10).unwrap_err();
        assert!(e.why.contains("4096 bytes are registered there"), "{e}");
        unregister(base, 4096).unwrap();
        unregister(base + 4096, 10).unwrap();
        let e = unregister(base, 4096).unwrap_err();
        assert!(e.why.contains("no range registered there"), "{e}");
        assert!(register(u64::MAX - 1, 4).is_err());
    }

    #[test]
    fn a_dma_buffer_is_registered_while_it_lives() {
        let buf = dma_alloc(100);
        buf.write(3, b"hello");
        assert_eq!(read_registered(0, buf.addr() + 3, 5).unwrap(), b"hello");
        write_registered(0, buf.addr() + 95, b"world").unwrap();
        let mut out = [0u8; 5];
        buf.read(95, &mut out);
        assert_eq!(&out, b"world");
        let e = write_registered(0, buf.addr() + 96, b"world").unwrap_err();
        assert!(e.contains("a put of 5 bytes at"), "{e}");
        assert!(
            e.contains("refused: no range registered in PE 0's process holds it"),
            "{e}"
        );
        let addr = buf.addr();
        drop(buf);
        assert!(read_registered(0, addr, 1).is_err(), "gone with the buffer");
    }

    #[test]
    fn a_global_pointer_round_trips_as_bytes() {
        let g = GlobalPtr {
            pe: 3,
            addr: 0xdead_beef,
            len: 77,
        };
        assert_eq!(GlobalPtr::from_bytes(&g.to_bytes()), Some(g));
        assert_eq!(GlobalPtr::from_bytes(&[0; 23]), None);
    }

    #[test]
    fn atomic_copies_handle_every_alignment() {
        let buf = dma_alloc(64);
        for off in 0..16 {
            for len in 0..40 {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + off) as u8).collect();
                buf.write(off, &data);
                let mut back = vec![0; len];
                buf.read(off, &mut back);
                assert_eq!(back, data, "offset {off} length {len}");
            }
        }
    }
}
