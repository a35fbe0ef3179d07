//! Parallel arrays of threads from C (`conv-cpath.h`, the extensions
//! manual's chapter 10), over [`converse_ext::cpath`]: `CPathMakeArray`,
//! `CPathMakeThread`, `CPathRegisterMapper`, `CPathRegisterThreadFn`,
//! `CPathRegisterReducer`, `CPathSend`, `CPathRecv`, `CPathReduce`,
//! `CPathMsgDecodeBytes`, `CPathMsgDecodeReduction`, `CPathMsgFree`, and
//! Charm++'s `CPathModuleInit`.
//!
//! The C functions of the manual with clause lists (`CPathMakeArray`,
//! `CPathSend`, `CPathRecv`, `CPathReduce`) are `static inline` in the
//! header: they read their arguments with `va_arg` and call the functions
//! here with arrays (`CPathMakeArray_`, `CPathSend_`, `CPathRecv_`,
//! `CPathReduce_`), since a Rust function cannot take C's `...`.
//!
//! # The C descriptor
//!
//! A C `CPath` ([`CPathC`]) is plain data the program copies freely: the
//! fields C reads (`nsizes`, `sizes`: the dimensions; `creator`, `seqno`,
//! `startfn`, `mapfn`) and the Rust descriptor's own bytes
//! ([`CPath::to_bytes`]), from which every call rebuilds it
//! ([`CPath::from_bytes`]; a descriptor whose bytes do not parse ends the
//! job naming the call). At most [`CPATH_MAX_DIMS`] dimensions, as in
//! Converse.
//!
//! # C functions
//!
//! Mappers, thread functions and reducers are registered with the Rust
//! module as Rust functions that call the C ones, under the Rust numbers
//! (returned to C). A mapper or thread function finds its C function by
//! the descriptor's number (`mapper()`, `thread_fn()`) in the PE's table;
//! a reducer, which gets no number, is one of [`REDUCER_SLOTS`] fixed Rust
//! functions, the k-th C reducer registered on a PE taking slot k (every
//! PE registers them in the same order). C gets a copy of the descriptor
//! and the indices as ints (`CPATH_ALL` is -1), and reducers aligned copies
//! of the two vectors (the first copied back): C may write only the first.
//!
//! # Messages
//!
//! `CPathRecv` returns a boxed [`CPathMsg`]; `CPathMsgDecodeBytes` and
//! `CPathMsgDecodeReduction` give pointers into it (valid until
//! `CPathMsgFree`, which frees the box).
//!
//! # Invariants
//!
//! - The module is set up on a PE by its first `CPathModuleInit` or
//!   `CPathRegister*` there (which a program calls on every PE at the same
//!   place); any other call before that ends the job naming it.
//!
//! # Concurrency
//!
//! Per PE: the tables are a `Cpv`, never borrowed while C code runs.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::rc::Rc;

use converse::Cpv;
use converse_ext::cpath::{self, CPath, CPathMsg, ReduceFn};

/// Most dimensions of an array from C (`CPATH_MAX_DIMS`).
pub const CPATH_MAX_DIMS: usize = 13;
/// Room in a C descriptor for the Rust descriptor's bytes.
pub const DESC_BYTES: usize = 96;

/// A C `CPath` (see the module comment).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CPathC {
    /// The PE that made the array.
    pub creator: c_int,
    /// Its thread function's number.
    pub startfn: c_int,
    /// Its mapper's number.
    pub mapfn: c_int,
    /// The number of dimensions.
    pub nsizes: c_int,
    /// The dimensions.
    pub sizes: [c_int; CPATH_MAX_DIMS],
    /// The length of `desc`'s bytes.
    pub desc_len: c_uint,
    /// The array's number on `creator`.
    pub seqno: u64,
    /// The Rust descriptor's bytes.
    pub desc: [u8; DESC_BYTES],
}

/// A C mapper: `unsigned int f(CPath *path, int *indices)`.
pub type MapFnC = unsafe extern "C-unwind" fn(*mut CPathC, *mut c_int) -> c_uint;
/// A C thread function: `void f(CPath *self, int *indices)`.
pub type ThreadFnC = unsafe extern "C-unwind" fn(*mut CPathC, *mut c_int);
/// A C reducer: `void f(int vecsize, void *data1, void *data2)`.
pub type ReduceFnC = unsafe extern "C-unwind" fn(c_int, *mut c_void, *mut c_void);

/// A PE's C functions by their Rust numbers (reducers by slot).
#[derive(Default)]
struct Fns {
    mappers: HashMap<usize, MapFnC>,
    thread_fns: HashMap<usize, ThreadFnC>,
    reducers: Vec<ReduceFnC>,
}

static FNS: Cpv<RefCell<Fns>> = Cpv::new();

/// Sets the module up on the calling PE (idempotent).
fn set_up() -> Rc<RefCell<Fns>> {
    if let Some(f) = FNS.try_get() {
        return f;
    }
    cpath::module_init();
    FNS.initialize(RefCell::default());
    FNS.get()
}

fn fns(call: &str) -> Rc<RefCell<Fns>> {
    FNS.try_get().unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {} before CPathModuleInit or a CPathRegister* call there",
            converse::my_pe()
        ))
    })
}

/// The C form of `p`.
fn to_c(p: &CPath) -> CPathC {
    let bytes = p.to_bytes();
    if bytes.len() > DESC_BYTES || p.dimensions() > CPATH_MAX_DIMS {
        converse::abort(&format!(
            "CPath on PE {}: {p} does not fit a C descriptor ({} dimensions at most)",
            converse::my_pe(),
            CPATH_MAX_DIMS
        ));
    }
    let int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut c = CPathC {
        creator: int(p.id().0),
        startfn: int(p.thread_fn()),
        mapfn: int(p.mapper()),
        nsizes: int(p.dimensions()),
        sizes: [0; CPATH_MAX_DIMS],
        desc_len: bytes.len() as c_uint,
        seqno: p.id().1,
        desc: [0; DESC_BYTES],
    };
    for (s, &d) in c.sizes.iter_mut().zip(p.dims()) {
        *s = c_int::try_from(d).unwrap_or(c_int::MAX);
    }
    c.desc[..bytes.len()].copy_from_slice(&bytes);
    c
}

/// The Rust descriptor of the C one at `p`, or the job ends naming `call`.
///
/// # Safety
/// `p` is null or points at a `CPath`.
unsafe fn from_c(p: *const CPathC, call: &str) -> CPath {
    // SAFETY: null or a `CPath` (the caller's promise).
    let c = unsafe { p.as_ref() }
        .unwrap_or_else(|| converse::abort(&format!("{call}: the CPath pointer is null")));
    let n = c.desc_len as usize;
    (n <= DESC_BYTES)
        .then(|| CPath::from_bytes(&c.desc[..n]))
        .flatten()
        .unwrap_or_else(|| {
            converse::abort(&format!(
                "{call} on PE {}: the CPath at {p:p} was not filled by CPathMakeArray or CPathMakeThread",
                converse::my_pe()
            ))
        })
}

/// `n` C indices at `indices` as the Rust module's (-1, `CPATH_ALL`, is
/// its `CPATH_ALL`).
///
/// # Safety
/// `indices` points at `n` ints (when `n > 0`).
unsafe fn indices_of(indices: *const c_int, n: usize) -> Vec<u32> {
    if n == 0 {
        return Vec::new();
    }
    // SAFETY: `n` ints (the caller's promise).
    let ints = unsafe { std::slice::from_raw_parts(indices, n) };
    ints.iter().map(|&i| i as u32).collect()
}

/// The C ints of Rust indices.
fn c_indices(indices: &[u32]) -> Vec<c_int> {
    indices.iter().map(|&i| i as c_int).collect()
}

/// `n` items at `p` as a slice (empty for 0), or the job ends naming
/// `call`.
///
/// # Safety
/// `p` points at `n` items when `n > 0`.
unsafe fn slice_of<'a, T>(p: *const T, n: c_int, call: &str) -> &'a [T] {
    let n = crate::nonneg(n, call);
    if n == 0 {
        return &[];
    }
    if p.is_null() {
        converse::abort(&format!("{call}: {n} items at a null pointer"));
    }
    // SAFETY: `n` items at `p` (the caller's promise).
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// The Rust mapper of every C one.
fn c_mapper(path: &CPath, indices: &[u32]) -> usize {
    let t = fns("a CPath mapper");
    let f = t.borrow().mappers.get(&path.mapper()).copied();
    drop(t);
    let Some(f) = f else {
        converse::abort(&format!(
            "{path}: mapper {} is no C mapper of PE {}",
            path.mapper(),
            converse::my_pe()
        ))
    };
    let mut c = to_c(path);
    let mut ix = c_indices(indices);
    // SAFETY: the C mapper, with a descriptor and indices of its own.
    unsafe { f(&mut c, ix.as_mut_ptr()) as usize }
}

/// The Rust thread function of every C one.
fn c_thread_fn(path: &CPath, indices: &[u32]) {
    let t = fns("a CPath thread function");
    let f = t.borrow().thread_fns.get(&path.thread_fn()).copied();
    drop(t);
    let Some(f) = f else {
        converse::abort(&format!(
            "{path}: thread function {} is no C function of PE {}",
            path.thread_fn(),
            converse::my_pe()
        ))
    };
    let mut c = to_c(path);
    let mut ix = c_indices(indices);
    // SAFETY: the C thread function, with a descriptor and indices of its
    // own.
    unsafe { f(&mut c, ix.as_mut_ptr()) };
}

/// A 16-aligned copy of `bytes`.
fn aligned(bytes: &[u8]) -> Vec<u128> {
    let mut v = vec![0u128; bytes.len().div_ceil(16).max(1)];
    // SAFETY: `v` holds at least `bytes.len()` bytes; distinct buffers.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    v
}

/// Runs the PE's C reducer of slot `k`.
fn run_reducer(k: usize, vecsize: usize, acc: &mut [u8], other: &[u8]) {
    let t = fns("a CPath reducer");
    let f = t.borrow().reducers.get(k).copied();
    drop(t);
    let Some(f) = f else {
        converse::abort(&format!(
            "a CPath reducer of slot {k}, which PE {} did not register",
            converse::my_pe()
        ))
    };
    let mut a = aligned(acc);
    let mut b = aligned(other);
    let n = c_int::try_from(vecsize).unwrap_or(c_int::MAX);
    // SAFETY: the C reducer, with aligned copies of the two vectors.
    unsafe { f(n, a.as_mut_ptr().cast(), b.as_mut_ptr().cast()) };
    // SAFETY: `a` holds at least `acc.len()` bytes.
    let combined = unsafe { std::slice::from_raw_parts(a.as_ptr().cast::<u8>(), acc.len()) };
    acc.copy_from_slice(combined);
}

fn reduce_slot<const K: usize>(vecsize: usize, acc: &mut [u8], other: &[u8]) {
    run_reducer(K, vecsize, acc, other);
}

macro_rules! slots {
    ($($k:literal)*) => { [$(reduce_slot::<$k> as ReduceFn),*] };
}

/// The Rust reducers standing for C ones: the k-th C reducer of a PE is
/// slot k. A PE registers at most this many C reducers.
pub const REDUCER_SLOTS: [ReduceFn; 32] = slots!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
);

fn number(n: usize) -> c_int {
    c_int::try_from(n).expect("CPath numbers fit a C int")
}

/// `CPathModuleInit()` (Charm++'s): sets CPath up on the calling PE; the
/// first `CPathRegister*` call does it too. Idempotent.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CPathModuleInit() {
    set_up();
}

/// `CPathRegisterMapper(fn)`: registers a mapper on the calling PE and
/// returns its number, for `CPathMakeArray`. Register the same functions
/// in the same order on every PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CPathRegisterMapper(f: Option<MapFnC>) -> c_int {
    let Some(f) = f else {
        converse::abort("CPathRegisterMapper: the function is null")
    };
    let t = set_up();
    let n = cpath::register_mapper(c_mapper);
    t.borrow_mut().mappers.insert(n, f);
    number(n)
}

/// `CPathRegisterThreadFn(fn)`: registers a thread function on the
/// calling PE and returns its number.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CPathRegisterThreadFn(f: Option<ThreadFnC>) -> c_int {
    let Some(f) = f else {
        converse::abort("CPathRegisterThreadFn: the function is null")
    };
    let t = set_up();
    let n = cpath::register_thread_fn(c_thread_fn);
    t.borrow_mut().thread_fns.insert(n, f);
    number(n)
}

/// `CPathRegisterReducer(fn)`: registers a reducer on the calling PE and
/// returns its number, for `CPathReduce` (at most 32 C reducers a PE).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CPathRegisterReducer(f: Option<ReduceFnC>) -> c_int {
    let Some(f) = f else {
        converse::abort("CPathRegisterReducer: the function is null")
    };
    let t = set_up();
    let k = t.borrow().reducers.len();
    let Some(&slot) = REDUCER_SLOTS.get(k) else {
        converse::abort(&format!(
            "CPathRegisterReducer on PE {}: at most {} C reducers",
            converse::my_pe(),
            REDUCER_SLOTS.len()
        ))
    };
    t.borrow_mut().reducers.push(f);
    number(cpath::register_reducer(slot))
}

/// `CPathMakeArray`'s work (the header's `CPathMakeArray` reads the
/// dimensions): makes an array of `ndims` dimensions `dims` running thread
/// function `startfn`, laid out by mapper `mapfn`, and fills `*path`.
///
/// # Safety
/// `path` points at a writable `CPath`; `dims` at `ndims` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathMakeArray_(
    path: *mut CPathC,
    startfn: c_int,
    mapfn: c_int,
    ndims: c_int,
    dims: *const c_int,
) {
    const CALL: &str = "CPathMakeArray";
    fns(CALL);
    if path.is_null() {
        converse::abort("CPathMakeArray: the CPath pointer is null");
    }
    // SAFETY: the caller's promise.
    let dims = unsafe { slice_of(dims, ndims, CALL) };
    if dims.len() > CPATH_MAX_DIMS {
        converse::abort(&format!(
            "CPathMakeArray: {} dimensions (at most {CPATH_MAX_DIMS})",
            dims.len()
        ));
    }
    let dims: Vec<u32> = dims
        .iter()
        .map(|&d| {
            u32::try_from(crate::nonneg(d, "CPathMakeArray (a dimension)")).unwrap_or(u32::MAX)
        })
        .collect();
    let p = cpath::make_array(
        crate::nonneg(startfn, CALL),
        crate::nonneg(mapfn, CALL),
        &dims,
    );
    // SAFETY: writable (the caller's promise).
    unsafe { path.write(to_c(&p)) };
}

/// `CPathMakeThread(path, startfn, pe)`: a single thread on PE `pe`
/// running `startfn` (no indices); fills `*path`.
///
/// # Safety
/// `path` points at a writable `CPath`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathMakeThread(path: *mut CPathC, startfn: c_int, pe: c_int) {
    const CALL: &str = "CPathMakeThread";
    fns(CALL);
    if path.is_null() {
        converse::abort("CPathMakeThread: the CPath pointer is null");
    }
    let p = cpath::make_thread(crate::nonneg(startfn, CALL), crate::nonneg(pe, CALL));
    // SAFETY: writable (the caller's promise).
    unsafe { path.write(to_c(&p)) };
}

/// `CPathSend`'s work: sends the `nbytes` bytes at `bytes` with the
/// `ntags` tags at `tags` to the elements of `path` at `indices` (one per
/// dimension; -1, `CPATH_ALL`, for every index there).
///
/// # Safety
/// `path` points at a `CPath`; `indices` at its number of dimensions of
/// ints; `tags` at `ntags` ints; `bytes` at `nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathSend_(
    path: *const CPathC,
    indices: *const c_int,
    ntags: c_int,
    tags: *const c_int,
    nbytes: c_int,
    bytes: *const c_void,
) {
    const CALL: &str = "CPathSend";
    fns(CALL);
    // SAFETY: the caller's promises.
    let (p, tags, bytes) = unsafe {
        (
            from_c(path, CALL),
            slice_of(tags, ntags, CALL),
            slice_of(bytes.cast::<u8>(), nbytes, CALL),
        )
    };
    // SAFETY: as many indices as dimensions (the caller's promise).
    let ix = unsafe { indices_of(indices, p.dimensions()) };
    cpath::send().dest(&p, &ix).tags(tags).bytes(bytes).send();
}

/// `CPathRecv`'s work: waits (in the calling element's thread) for the
/// oldest message whose tags match the `ntags` at `tags` (-1,
/// `CPATH_WILD`, matches any) and returns it (free it with
/// `CPathMsgFree`).
///
/// # Safety
/// `tags` points at `ntags` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathRecv_(ntags: c_int, tags: *const c_int) -> *mut c_void {
    const CALL: &str = "CPathRecv";
    fns(CALL);
    // SAFETY: the caller's promise.
    let tags = unsafe { slice_of(tags, ntags, CALL) };
    let m = cpath::recv().tags(tags).wait();
    Box::into_raw(Box::new(m)).cast()
}

/// `CPathReduce`'s work: the calling element's contribution (`vecsize`
/// values of `eltsize` bytes at `data`) to the reduction over the elements
/// of `over` at `overidx`, with the `ntags` tags at `tags`, combined by
/// `reducer`, the result sent to the elements of `dest` at `destidx`.
///
/// # Safety
/// `over` and `dest` point at `CPath`s; `overidx` and `destidx` at their
/// numbers of dimensions of ints; `tags` at `ntags` ints; `data` at
/// `vecsize * eltsize` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathReduce_(
    over: *const CPathC,
    overidx: *const c_int,
    ntags: c_int,
    tags: *const c_int,
    reducer: c_int,
    vecsize: c_int,
    eltsize: c_int,
    data: *const c_void,
    dest: *const CPathC,
    destidx: *const c_int,
) {
    const CALL: &str = "CPathReduce";
    fns(CALL);
    let vecsize = crate::nonneg(vecsize, "CPathReduce (vecsize)");
    let eltsize = crate::nonneg(eltsize, "CPathReduce (eltsize)");
    let total = vecsize
        .checked_mul(eltsize)
        .and_then(|n| c_int::try_from(n).ok());
    let Some(total) = total else {
        converse::abort(&format!(
            "CPathReduce: {vecsize} values of {eltsize} bytes is too much data"
        ))
    };
    // SAFETY: the caller's promises.
    let (o, d, tags, bytes) = unsafe {
        (
            from_c(over, CALL),
            from_c(dest, CALL),
            slice_of(tags, ntags, CALL),
            slice_of(data.cast::<u8>(), total, CALL),
        )
    };
    // SAFETY: as many indices as dimensions (the caller's promise).
    let (oi, di) = unsafe {
        (
            indices_of(overidx, o.dimensions()),
            indices_of(destidx, d.dimensions()),
        )
    };
    cpath::reduce()
        .over(&o, &oi)
        .tags(tags)
        .reducer(crate::nonneg(reducer, "CPathReduce (the reducer)"))
        .bytes(vecsize, eltsize, bytes)
        .dest(&d, &di)
        .contribute();
}

/// The message at `msg`, or the job ends naming `call`.
///
/// # Safety
/// `msg` is null or a message `CPathRecv` returned, not freed.
unsafe fn message<'a>(msg: *mut c_void, call: &str) -> &'a CPathMsg {
    // SAFETY: null or a live boxed message (the caller's promise).
    unsafe { msg.cast::<CPathMsg>().as_ref() }
        .unwrap_or_else(|| converse::abort(&format!("{call}: the message is null")))
}

/// `CPathMsgDecodeBytes(msg, &len, &bytes)`: the message's data (`*bytes`
/// is a `void *`), valid until `CPathMsgFree`.
///
/// # Safety
/// `msg` is a message `CPathRecv` returned, not freed; `len` points at a
/// writable int and `bytes` at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathMsgDecodeBytes(
    msg: *mut c_void,
    len: *mut c_int,
    bytes: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let m = unsafe { message(msg, "CPathMsgDecodeBytes") };
    let data = m.decode_bytes();
    // SAFETY: writable out-parameters (the caller's promise).
    unsafe {
        if !len.is_null() {
            len.write(c_int::try_from(data.len()).unwrap_or(c_int::MAX));
        }
        if !bytes.is_null() {
            bytes.cast::<*const u8>().write(data.as_ptr());
        }
    }
}

/// `CPathMsgDecodeReduction(msg, &vecsize, &eltsize, &bytes)`: a reduction
/// result's shape and data (`*bytes` is a `void *`), valid until
/// `CPathMsgFree`. A message of `CPathSend` ends the job.
///
/// # Safety
/// As [`CPathMsgDecodeBytes`]; `vecsize` and `eltsize` point at writable
/// ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathMsgDecodeReduction(
    msg: *mut c_void,
    vecsize: *mut c_int,
    eltsize: *mut c_int,
    bytes: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let m = unsafe { message(msg, "CPathMsgDecodeReduction") };
    let Some((v, e, data)) = m.decode_reduction() else {
        converse::abort(&format!(
            "CPathMsgDecodeReduction on PE {}: the message (tags {:?}) is no reduction result",
            converse::my_pe(),
            m.tags()
        ))
    };
    let int = |n: usize| c_int::try_from(n).unwrap_or(c_int::MAX);
    // SAFETY: writable out-parameters (the caller's promise).
    unsafe {
        if !vecsize.is_null() {
            vecsize.write(int(v));
        }
        if !eltsize.is_null() {
            eltsize.write(int(e));
        }
        if !bytes.is_null() {
            bytes.cast::<*const u8>().write(data.as_ptr());
        }
    }
}

/// `CPathMsgFree(msg)`: frees a message of `CPathRecv`.
///
/// # Safety
/// `msg` is a message `CPathRecv` returned, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CPathMsgFree(msg: *mut c_void) {
    if msg.is_null() {
        converse::abort("CPathMsgFree: the message is null");
    }
    // SAFETY: made by `Box::into_raw` in `CPathRecv_` (the caller's
    // promise), freed once.
    drop(unsafe { Box::from_raw(msg.cast::<CPathMsg>()) });
}
