//! Parallel arrays of threads (the manual's chapter 10, CPath: "Converse
//! Parallel Array of Threads"): arrays of user-level threads spread over
//! the PEs, that send each other tagged messages, multicast to rows, and
//! reduce over sets of elements.
//!
//! # The model
//!
//! - An array has a descriptor, [`CPath`]: plain data (copy it, put it in
//!   messages with [`CPath::to_bytes`]) naming the array (the PE that made
//!   it and a number there), its dimensions, its thread function and its
//!   mapper. [`make_array`] (`CPathMakeArray`) makes one from any PE;
//!   [`make_thread`] (`CPathMakeThread`) makes a zero-dimensional one, a
//!   single thread on a given PE.
//! - Each element is a Converse user-level thread ([`converse::Thread`])
//!   on the PE its mapper gives, running the array's thread function with
//!   a copy of the descriptor and its indices. The thread knows which
//!   element it is ([`current_element`]): a thread-private variable (a
//!   `converse::Ctv`) set when it starts.
//! - Functions are named by numbers: mappers ([`register_mapper`]), thread
//!   functions ([`register_thread_fn`]) and reducers
//!   ([`register_reducer`]) are registered on every PE **in the same
//!   order** (the start function, or a module-init hook registered with
//!   [`converse::register_module_init`] after [`install`], is the place),
//!   so that a number means the same function everywhere. Mappers must be
//!   deterministic: every PE computes layouts with them. This module's
//!   [`module_init`] registers the built-in mappers and reducers first
//!   ([`MAPPER_BLOCK`], [`REDUCER_SUM_I64`], …).
//! - [`send`] (`CPathSend`) addresses one element, or with [`CPATH_ALL`]
//!   in some index positions every element matching the pattern (a
//!   multicast). The message goes to each target's PE, one message per PE,
//!   and waits there in the element's mailbox (a [`CmmTable`], FIFO per
//!   tags) until the element's thread takes it with [`recv`]
//!   (`CPathRecv`), which blocks the thread (never spins) until a message
//!   with matching tags is there ([`CPATH_WILD`] matches any tag).
//! - [`reduce`] (`CPathReduce`): every element of a pattern contributes;
//!   the contributions are combined on each PE, then across PEs at the
//!   *root* (the PE of the pattern's first element, in row-major order),
//!   which sends the result as a message with the reduction's tags to the
//!   destination element(s).
//!
//! # The C clause grammar as builders
//!
//! | C clause | Rust |
//! |---|---|
//! | `CPathSend(…)` | [`send()`]`…` |
//! | `CPathRecv(…)` | [`recv()`]`…` |
//! | `CPathReduce(…)` | [`reduce()`]`…` |
//! | `CPATH_DEST, path, i, j` | [`.dest(&path, &[i, j])`](SendBuilder::dest) (any index may be [`CPATH_ALL`]) |
//! | `CPATH_OVER, path, i, CPATH_ALL` | [`.over(&path, &[i, CPATH_ALL])`](ReduceBuilder::over) |
//! | `CPATH_TAG, t` | [`.tag(t)`](SendBuilder::tag) |
//! | `CPATH_TAGS, t1, t2, …, 0` | [`.tags(&[t1, t2])`](SendBuilder::tags) |
//! | `CPATH_TAGVEC, n, v` | [`.tags(&v[..n])`](SendBuilder::tags) |
//! | `CPATH_BYTES, n, buf` (send) | [`.bytes(&buf[..n])`](SendBuilder::bytes) |
//! | `CPATH_BYTES, vecsize, eltsize, data` (reduce) | [`.bytes(vecsize, eltsize, data)`](ReduceBuilder::bytes), or typed [`.data_of(&values)`](ReduceBuilder::data_of) |
//! | `CPATH_REDUCER, fn` | [`.reducer(index)`](ReduceBuilder::reducer) |
//! | `CPATH_END` | [`.send()`](SendBuilder::send), [`.wait()`](RecvBuilder::wait), [`.contribute()`](ReduceBuilder::contribute) |
//!
//! `.tag` and `.tags` append, so `.tag(a).tag(b)` is `.tags(&[a, b])`.
//! A message may have no tags at all; it then matches a receive with none.
//!
//! # Invariants
//!
//! - An array's elements are the indices below its dimensions (each at
//!   least 1; fewer than 2^32 elements); element `[i, j, …]` lives on PE
//!   `mapper(path, [i, j, …])`, which must be a PE of the job (else the job
//!   aborts naming the array, the element and the PE).
//! - A PE's record of an element (its mailbox) is made by whichever comes
//!   first: the order to start its thread, or a message for it (a message
//!   may overtake the creation order, which comes from another PE). A
//!   message for an element whose thread has returned, or left in its
//!   mailbox when it returns, is discarded and reported on stderr.
//! - A PE knows one descriptor per array identity: the first it saw (made
//!   here, or in a message: it remembers which, and from which PE). Every
//!   descriptor from a message is checked against it before anything
//!   (an element list, a layout) is computed from it; a contradiction
//!   aborts naming the sender and where the known one came from. A PE
//!   keeps a record only of arrays it holds elements of, or saw in a
//!   message (the creator recognizes its other arrays by their numbers).
//! - Memory: a returned element's record shrinks to a tombstone (its
//!   number); once every element the creation started on a PE has
//!   returned, the array's record there shrinks to its descriptor (every
//!   element of the PE then counts as returned) and its layouts are
//!   dropped. Layouts are cached per whole descriptor and pattern, a
//!   bounded number; the creation's layout is not cached.
//! - A creation message comes from the array's creator, lists elements of
//!   the receiving PE that have not started, in increasing order, and comes
//!   once; a delivery lists elements of the receiving PE in increasing
//!   order (each gets the message once).
//! - Sent tags are never [`CPATH_WILD`] (refused): only receive patterns
//!   hold wildcards, so a mailbox's stored tags are exact.
//! - A reduction is named by its array, its over-pattern and its tags; an
//!   element's k-th contribution under a name belongs to round k, so an
//!   element that runs ahead to the next round of the same reduction never
//!   mixes rounds. Each PE combines its elements' contributions of a round
//!   and sends one partial to the root, which combines one partial per PE
//!   holding participants. Reducers must be associative and commutative:
//!   the order of combination is the order of arrival.
//!   A participant that returns while a round of its PE waits for its
//!   contribution aborts the job (the reduction could never complete);
//!   one whose partner on another PE waits is not detected.
//! - Nothing read from a message is trusted: a malformed CPath message
//!   (short, bad lengths, unknown function numbers, a descriptor of a 0
//!   dimension or 2^32 elements or more, one contradicting the known one,
//!   a mapper naming no PE, an element out of range, twice, not on the
//!   receiving PE or already started) aborts the job naming the sending PE
//!   and the cause. A descriptor from [`CPath::from_bytes`] has a checked
//!   shape; its numbers and PEs are checked where it is used.
//!
//! # Concurrency
//!
//! Each PE's state (registrations, its known descriptors and its arrays'
//! elements and mailboxes, its reductions in progress, the layouts it
//! computed) is its own (a `Cpv`),
//! touched by its own threads and handlers, one at a time; no borrow of it
//! is held while user code (a mapper, a thread function, a reducer) runs.
//! Other PEs reach it only through this module's three handlers: start
//! elements, deliver a message to elements, and a partial reduction for
//! the root. Sends to elements of the sending PE are delivered at once,
//! without a message.
mod msg;
mod path;
mod reduce;
mod wire;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use converse::{Cpv, Ctv, Event, Message, Thread};

use crate::cmm::CmmTable;
pub use msg::{CPathMsg, RecvBuilder, SendBuilder, recv, send};
pub use path::CPath;
use path::show_pattern;
pub use reduce::{
    REDUCER_MAX_I64, REDUCER_MIN_I64, REDUCER_SUM_F64, REDUCER_SUM_I64, ReduceBuilder,
    ReduceElement, ReduceFn, reduce, register_reducer, register_reducer_of,
};
use wire::{Cause, Reader, Writer};

/// The index wildcard (`CPATH_ALL`): in a destination or over-pattern, every
/// index of that dimension.
pub const CPATH_ALL: u32 = u32::MAX;

/// The tag wildcard (`CPATH_WILD`): in a receive pattern, any tag at that
/// position. The same value as [`crate::cmm::WILDCARD`]; sends may not
/// use it.
pub const CPATH_WILD: i32 = crate::cmm::WILDCARD;

/// A mapping function (the manual's `MapFn`): the PE of the element at
/// `indices` of the array `path`. Must give the same answer on every PE.
pub type MapFn = fn(path: &CPath, indices: &[u32]) -> usize;

/// A thread function (the manual's `ThreadFn`): what each element's
/// thread runs, with a copy of the array's descriptor and its indices.
pub type ThreadFn = fn(path: &CPath, indices: &[u32]);

/// Built-in mapper: elements in row-major order, cut into `num_pes`
/// consecutive blocks of (nearly) equal size.
pub const MAPPER_BLOCK: usize = 0;
/// Built-in mapper: element number `k` in row-major order on PE
/// `k % num_pes`.
pub const MAPPER_ROUND_ROBIN: usize = 1;
/// Built-in mapper: every element on PE 0.
pub const MAPPER_PE0: usize = 2;
/// Built-in mapper: every element on the array's home PE ([`CPath::home`]:
/// the PE that made it, or the one given to [`make_thread`]).
pub const MAPPER_HOME: usize = 3;

/// An array's identity: the PE that made it and its number there.
type ArrayId = (usize, u64);

/// One live element's record on its PE (started, or with mail that came
/// before the order to start it).
struct Element {
    /// Messages that arrived and were not received yet.
    mailbox: CmmTable<CPathMsg>,
    /// The pattern the element's thread waits for in [`recv`], if it does.
    waiting: Option<Box<[i32]>>,
    /// Set when a message matching `waiting` arrives.
    arrived: Rc<Event>,
    started: bool,
    /// The next round of each reduction (over-pattern, tags) it takes part
    /// in.
    rounds: HashMap<(Vec<u32>, Vec<i32>), u64>,
}

impl Element {
    fn new() -> Element {
        Element {
            mailbox: CmmTable::new(),
            waiting: None,
            arrived: Rc::new(Event::new()),
            started: false,
            rounds: HashMap::new(),
        }
    }
}

/// Where a PE first saw an array's descriptor (named when another
/// descriptor claims the same identity).
#[derive(Clone, Copy, Debug)]
enum Origin {
    /// [`make_array`] or [`make_thread`] on this PE.
    Made,
    /// This PE's own code (a send to, or a reduction over, its elements).
    Used,
    /// A message of `kind` from PE `src`.
    Message { kind: &'static str, src: usize },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Made => write!(f, "made on this PE"),
            Origin::Used => write!(f, "used by this PE's code"),
            Origin::Message { kind, src } => write!(f, "from a {kind} message from PE {src}"),
        }
    }
}

/// What a PE knows of an array: its descriptor, and its elements there.
struct LocalArray {
    /// The descriptor every other one under this identity must equal.
    path: CPath,
    /// Where `path` was first seen.
    since: Origin,
    /// Live elements of this PE.
    elements: HashMap<usize, Element>,
    /// Elements of this PE whose thread returned (tombstones: their
    /// messages are reported as discarded), until every element has.
    finished: HashSet<usize>,
    /// How many elements the creation started here (`None` before it).
    created: Option<usize>,
    /// Every element the creation started here has returned: `elements`
    /// and `finished` are emptied, and every element of this PE (by the
    /// mapper) counts as finished. The record stays this small for ever.
    done: bool,
}

impl LocalArray {
    fn new(path: &CPath, since: Origin) -> LocalArray {
        LocalArray {
            path: path.clone(),
            since,
            elements: HashMap::new(),
            finished: HashSet::new(),
            created: None,
            done: false,
        }
    }

    /// True if element `flat` (of this PE) has returned.
    fn is_finished(&self, flat: usize) -> bool {
        self.done || self.finished.contains(&flat)
    }

    /// True if element `flat` (of this PE) has started (and maybe
    /// returned).
    fn has_started(&self, flat: usize) -> bool {
        self.is_finished(flat) || self.elements.get(&flat).is_some_and(|e| e.started)
    }
}

/// Where the elements matching a pattern live.
struct Layout {
    /// The PEs holding matching elements, with their elements (row-major).
    by_pe: BTreeMap<usize, Vec<usize>>,
    /// The PE of the first matching element: a reduction's root.
    root: usize,
}

/// An array's cached layouts, by pattern.
type Layouts = HashMap<Vec<u32>, Rc<Layout>>;

/// At most this many descriptors, and this many patterns of each, have
/// their layouts cached on a PE; past it the cache starts over.
const LAYOUT_CACHE: usize = 64;

/// The handlers of this module.
struct Handlers {
    /// Start elements of an array on this PE.
    create: usize,
    /// A message for elements of this PE.
    deliver: usize,
    /// A PE's partial reduction, for the root.
    partial: usize,
}

/// One PE's CPath state.
struct State {
    handlers: Handlers,
    mappers: RefCell<Vec<MapFn>>,
    thread_fns: RefCell<Vec<ThreadFn>>,
    reducers: RefCell<Vec<reduce::Reducer>>,
    next_seq: Cell<u64>,
    arrays: RefCell<HashMap<ArrayId, LocalArray>>,
    /// By the whole descriptor (so a forged one never shares a layout
    /// with the genuine one), then the pattern; bounded (`LAYOUT_CACHE`).
    layouts: RefCell<HashMap<CPath, Layouts>>,
    reductions: reduce::Reductions,
}

static STATE: Cpv<State> = Cpv::new();

/// The element the running thread is (set when an element's thread
/// starts).
struct Current {
    path: CPath,
    flat: usize,
    indices: Vec<u32>,
}

static CURRENT: Ctv<Option<Rc<Current>>> = Ctv::new(|| None);

/// The handler that delivers CPath messages to a PE's elements, on the
/// calling PE: for tools and tests that forge or inspect messages.
///
/// # Panics
/// Aborts the job if the module is not set up on this PE.
pub fn delivery_handler_index() -> usize {
    state().handlers.deliver
}

/// The handler that starts a PE's elements of a new array, on the calling
/// PE: for tools and tests that forge or inspect messages.
///
/// # Panics
/// Aborts the job if the module is not set up on this PE.
pub fn creation_handler_index() -> usize {
    state().handlers.create
}

/// The handler that takes a PE's partial reduction at the root, on the
/// calling PE: for tools and tests that forge or inspect messages.
///
/// # Panics
/// Aborts the job if the module is not set up on this PE.
pub fn partial_handler_index() -> usize {
    state().handlers.partial
}

/// How much CPath keeps on the calling PE (for tests of its memory use).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Arrays with a record here.
    pub arrays: usize,
    /// Of those, arrays whose elements here have all returned (a small
    /// record each).
    pub done: usize,
    /// Live element records.
    pub elements: usize,
    /// Tombstones of returned elements of arrays not done yet.
    pub finished: usize,
    /// Cached layouts.
    pub layouts: usize,
    /// Reductions in progress (partials on their way, at a PE or a root).
    pub reductions: usize,
}

/// What CPath keeps on the calling PE now.
#[doc(hidden)]
pub fn footprint() -> Footprint {
    let s = state();
    let arrays = s.arrays.borrow();
    Footprint {
        arrays: arrays.len(),
        done: arrays.values().filter(|a| a.done).count(),
        elements: arrays.values().map(|a| a.elements.len()).sum(),
        finished: arrays.values().map(|a| a.finished.len()).sum(),
        layouts: s.layouts.borrow().values().map(HashMap::len).sum(),
        reductions: s.reductions.len(),
    }
}

/// Registers CPath's handlers on the calling PE, makes its state and
/// registers the built-in mappers ([`MAPPER_BLOCK`], …) and reducers
/// ([`REDUCER_SUM_I64`], …), in that order. Call it on every PE in the
/// same place of the handler registrations, or [`install`] once before
/// the job; a second call on a PE does nothing.
pub fn module_init() {
    if STATE.is_initialized() {
        return;
    }
    let handlers = Handlers {
        create: converse::register_handler(on_create),
        deliver: converse::register_handler(msg::on_deliver),
        partial: converse::register_handler(reduce::on_partial),
    };
    STATE.initialize(State {
        handlers,
        mappers: RefCell::new(Vec::new()),
        thread_fns: RefCell::new(Vec::new()),
        reducers: RefCell::new(Vec::new()),
        next_seq: Cell::new(1),
        arrays: RefCell::new(HashMap::new()),
        layouts: RefCell::new(HashMap::new()),
        reductions: reduce::Reductions::default(),
    });
    let builtin: [(usize, MapFn); 4] = [
        (MAPPER_BLOCK, map_block),
        (MAPPER_ROUND_ROBIN, map_round_robin),
        (MAPPER_PE0, |_, _| 0),
        (MAPPER_HOME, |path, _| path.home()),
    ];
    for (want, f) in builtin {
        let got = register_mapper(f);
        debug_assert_eq!(got, want);
    }
    reduce::register_builtin();
}

/// Registers [`module_init`] with the core, so that every PE of the jobs
/// started after this call runs it before the start function. Returns
/// false if it was registered already.
pub fn install() -> bool {
    converse::register_module_init("converse-ext cpath", module_init)
}

fn state() -> Rc<State> {
    if !STATE.is_initialized() {
        converse::abort(&format!(
            "CPath used on PE {} before cpath::module_init (call it on every PE, or cpath::install before the job)",
            converse::my_pe()
        ));
    }
    STATE.get()
}

/// [`MAPPER_BLOCK`].
fn map_block(path: &CPath, indices: &[u32]) -> usize {
    let flat = path.flat_index(indices).unwrap_or(0) as u128;
    let total = path.num_elements().max(1) as u128;
    (flat * converse::num_pes() as u128 / total) as usize
}

/// [`MAPPER_ROUND_ROBIN`].
fn map_round_robin(path: &CPath, indices: &[u32]) -> usize {
    path.flat_index(indices).unwrap_or(0) % converse::num_pes()
}

/// Registers a mapper (`CPathRegisterMapper`) and returns its number, for
/// [`make_array`]. Register the same mappers in the same order on every
/// PE (see the module comment); the built-in ones come first.
#[doc(alias = "CPathRegisterMapper")]
pub fn register_mapper(mapper: MapFn) -> usize {
    let s = state();
    let mut m = s.mappers.borrow_mut();
    m.push(mapper);
    m.len() - 1
}

/// Registers a thread function (`CPathRegisterThreadFn`) and returns its
/// number, for [`make_array`] and [`make_thread`]. Register the same
/// functions in the same order on every PE.
#[doc(alias = "CPathRegisterThreadFn")]
pub fn register_thread_fn(thread_fn: ThreadFn) -> usize {
    let s = state();
    let mut t = s.thread_fns.borrow_mut();
    t.push(thread_fn);
    t.len() - 1
}

/// Makes an array of threads of dimensions `dims` (`CPathMakeArray`; the
/// C call's trailing 0 is the slice's end), from any PE: each element
/// starts on the PE `mapper` gives it, running `thread_fn`. Returns the
/// descriptor at once; the elements of other PEs start when the order
/// reaches them.
///
/// # Panics
/// Aborts the job if a number is not registered, a dimension is 0, the
/// array is too big (2^32 elements or more: element numbers travel as
/// 32-bit values), or the mapper puts an element on no
/// PE of the job.
#[doc(alias = "CPathMakeArray")]
pub fn make_array(thread_fn: usize, mapper: usize, dims: &[u32]) -> CPath {
    let me = converse::my_pe();
    make(thread_fn, mapper, dims, me, "CPathMakeArray")
}

/// Makes a single thread (a zero-dimensional array, `CPathMakeThread`) on
/// PE `pe`, running `thread_fn` with no indices. Its mapper is
/// [`MAPPER_HOME`], its home `pe`.
///
/// # Panics
/// Aborts the job if `thread_fn` is not registered or `pe` is no PE of the
/// job.
#[doc(alias = "CPathMakeThread")]
pub fn make_thread(thread_fn: usize, pe: usize) -> CPath {
    if pe >= converse::num_pes() {
        converse::abort(&format!(
            "CPathMakeThread on PE {} for PE {pe}, which is no PE of the job ({} PEs)",
            converse::my_pe(),
            converse::num_pes()
        ));
    }
    make(thread_fn, MAPPER_HOME, &[], pe, "CPathMakeThread")
}

fn make(thread_fn: usize, mapper: usize, dims: &[u32], home: usize, what: &str) -> CPath {
    let s = state();
    let me = converse::my_pe();
    let seq = s.next_seq.get();
    s.next_seq.set(seq + 1);
    let path = CPath {
        creator: me,
        seq,
        home,
        thread_fn,
        mapper,
        dims: dims.to_vec(),
    };
    if let Err(why) = path.check(&s) {
        converse::abort(&format!("{what} on PE {me}: {why}"));
    }
    // Not cached: the creation is the only use of the whole layout.
    let all = vec![CPATH_ALL; dims.len()];
    let layout = compute_layout(&s, &path, &all).unwrap_or_else(|why| converse::abort(&why));
    for (&pe, flats) in &layout.by_pe {
        if pe == me {
            continue;
        }
        let mut w = Writer::default();
        w.path(&path).flats(flats);
        converse::sync_send_and_free(pe, Message::from_payload(s.handlers.create, &w.0));
    }
    // The creator keeps a record only if it holds elements (its other
    // arrays' descriptors are recognized by their numbers: `CPath::check`).
    if let Some(flats) = layout.by_pe.get(&me) {
        s.arrays
            .borrow_mut()
            .insert(path.id(), LocalArray::new(&path, Origin::Made));
        start_elements(&s, &path, flats);
    }
    path
}

/// The PE of element `flat` of `path` by its mapper, checked: an error
/// says which mapper put which element where (the caller names the
/// descriptor's source).
fn mapped_pe(s: &State, path: &CPath, flat: usize) -> Result<usize, Cause> {
    let mapper = s.mappers.borrow().get(path.mapper).copied();
    let Some(mapper) = mapper else {
        return Err(format!(
            "{path}: mapper {} is not registered on PE {}",
            path.mapper,
            converse::my_pe()
        ));
    };
    let indices = path.indices_of(flat).unwrap_or_default();
    let pe = mapper(path, &indices);
    if pe >= converse::num_pes() {
        return Err(format!(
            "{path}: mapper {} put element {indices:?} on PE {pe}, but the job has {} PEs",
            path.mapper,
            converse::num_pes()
        ));
    }
    Ok(pe)
}

/// Where the elements of `path` matching `pattern` (checked) live,
/// computed now.
fn compute_layout(s: &State, path: &CPath, pattern: &[u32]) -> Result<Layout, Cause> {
    let mut by_pe: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut root = None;
    for flat in path.matching(pattern) {
        let pe = mapped_pe(s, path, flat)?;
        root.get_or_insert(pe);
        by_pe.entry(pe).or_default().push(flat);
    }
    Ok(Layout {
        by_pe,
        root: root.unwrap_or(0),
    })
}

/// Where the elements of `path` matching `pattern` (checked) live; cached
/// (see `LAYOUT_CACHE`).
fn try_layout(s: &State, path: &CPath, pattern: &[u32]) -> Result<Rc<Layout>, Cause> {
    if let Some(l) = s.layouts.borrow().get(path).and_then(|p| p.get(pattern)) {
        return Ok(l.clone());
    }
    let layout = Rc::new(compute_layout(s, path, pattern)?);
    let mut cache = s.layouts.borrow_mut();
    if !cache.contains_key(path) && cache.len() >= LAYOUT_CACHE {
        cache.clear();
    }
    let patterns = cache.entry(path.clone()).or_default();
    if patterns.len() >= LAYOUT_CACHE {
        patterns.clear();
    }
    patterns.insert(pattern.to_vec(), layout.clone());
    Ok(layout)
}

/// [`try_layout`] for a descriptor of this PE's own code: an error aborts.
fn layout(s: &State, path: &CPath, pattern: &[u32]) -> Rc<Layout> {
    try_layout(s, path, pattern).unwrap_or_else(|why| converse::abort(&why))
}

/// Checks `path` against the descriptor this PE knows under its identity;
/// if it knows none, `path` becomes it (seen at `origin`). Call it before
/// computing anything from a descriptor that came from elsewhere.
fn known(s: &State, path: &CPath, origin: Origin) -> Result<(), Cause> {
    let mut arrays = s.arrays.borrow_mut();
    match arrays.get(&path.id()) {
        Some(a) => conflict(a, path),
        None => {
            arrays.insert(path.id(), LocalArray::new(path, origin));
            Ok(())
        }
    }
}

/// Checks `path` against the descriptor this PE knows under its identity,
/// if any (recording nothing).
fn check_known(s: &State, path: &CPath) -> Result<(), Cause> {
    match s.arrays.borrow().get(&path.id()) {
        Some(a) => conflict(a, path),
        None => Ok(()),
    }
}

fn conflict(a: &LocalArray, path: &CPath) -> Result<(), Cause> {
    if a.path == *path {
        return Ok(());
    }
    Err(format!(
        "descriptor {path:?} conflicts with {:?}, which this PE knows under the same identity ({})",
        a.path, a.since
    ))
}

/// Runs `f` on this PE's record of live element `flat` of `path`, made if
/// need be; `None` if the element's thread has returned. Aborts if another
/// descriptor with the same identity is known here (the handlers check
/// that first, naming the sender).
fn with_live<R>(
    s: &State,
    path: &CPath,
    flat: usize,
    f: impl FnOnce(&mut Element) -> R,
) -> Option<R> {
    let mut arrays = s.arrays.borrow_mut();
    let array = arrays
        .entry(path.id())
        .or_insert_with(|| LocalArray::new(path, Origin::Used));
    if array.path != *path {
        let why = conflict(array, path).err().unwrap_or_default();
        drop(arrays);
        converse::abort(&format!("CPath on PE {}: {why}", converse::my_pe()));
    }
    if array.is_finished(flat) {
        return None;
    }
    Some(f(array.elements.entry(flat).or_insert_with(Element::new)))
}

/// [`with_live`] for the calling element itself (which cannot have
/// returned).
fn with_current<R>(s: &State, me: &Current, f: impl FnOnce(&mut Element) -> R) -> R {
    with_live(s, &me.path, me.flat, f).unwrap_or_else(|| {
        converse::abort(&format!(
            "CPath on PE {}: element {:?} of {} runs after its thread returned",
            converse::my_pe(),
            me.indices,
            me.path
        ))
    })
}

/// Element `flat` of `path` returned: its record shrinks to a tombstone
/// (and, once every element the creation started here has returned, the
/// array's record to its descriptor, its layouts dropped). Returns its
/// record, for the mail left in it.
fn finish(s: &State, path: &CPath, flat: usize) -> Option<Element> {
    let mut arrays = s.arrays.borrow_mut();
    let array = arrays.get_mut(&path.id())?;
    let element = array.elements.remove(&flat);
    array.finished.insert(flat);
    if array.created == Some(array.finished.len()) {
        array.done = true;
        array.elements = HashMap::new();
        array.finished = HashSet::new();
        drop(arrays);
        s.layouts.borrow_mut().remove(path);
    }
    element
}

/// Starts the threads of elements `flats` (of this PE, checked: none
/// started before) of `path`.
fn start_elements(s: &State, path: &CPath, flats: &[usize]) {
    let thread_fn = s.thread_fns.borrow().get(path.thread_fn).copied();
    let Some(thread_fn) = thread_fn else {
        converse::abort(&format!(
            "{path}: thread function {} is not registered on PE {}",
            path.thread_fn,
            converse::my_pe()
        ));
    };
    for &flat in flats {
        let twice = with_live(s, path, flat, |e| std::mem::replace(&mut e.started, true));
        let indices = path.indices_of(flat).unwrap_or_default();
        if twice != Some(false) {
            converse::abort(&format!(
                "element {indices:?} of {path} started twice on PE {}",
                converse::my_pe()
            ));
        }
        let current = Rc::new(Current {
            path: path.clone(),
            flat,
            indices,
        });
        Thread::create(
            move || {
                CURRENT.set(Some(current.clone()));
                thread_fn(&current.path, &current.indices);
                let s = state();
                // Its mail goes, and what comes later is discarded; both
                // are reported (nothing is lost silently), as the C
                // module's table would keep them for ever.
                let Some(e) = finish(&s, &current.path, current.flat) else {
                    return;
                };
                if !e.mailbox.is_empty() {
                    discarded(&current.path, current.flat, e.mailbox.len(), "");
                }
                reduce::check_left(&s, &current, &e.rounds);
            },
            0,
        )
        .awaken();
    }
    if let Some(a) = s.arrays.borrow_mut().get_mut(&path.id()) {
        a.created = Some(a.created.unwrap_or(0) + flats.len());
    }
}

/// Reports on stderr `count` messages for element `flat` of `path` that
/// its thread, having returned, never received (`what`: their tags).
fn discarded(path: &CPath, flat: usize, count: usize, what: &str) {
    let element = path
        .indices_of(flat)
        .map_or_else(|| format!("#{flat}"), |ix| format!("{ix:?}"));
    converse::error(format_args!(
        "converse: PE {}: {count} message(s) for element {element} of {path}, whose thread \
         had returned, discarded unreceived{what}\n",
        converse::my_pe(),
    ));
}

/// The element the calling thread is, with the array's descriptor: `None`
/// outside the thread of an array element.
pub fn current_element() -> Option<(CPath, Vec<u32>)> {
    let c = CURRENT.get();
    c.as_ref()
        .as_ref()
        .map(|c| (c.path.clone(), c.indices.clone()))
}

/// The running element, or an abort saying `what` needs one.
fn current_or_abort(what: &str) -> Rc<Current> {
    match CURRENT.get().as_ref() {
        Some(c) => c.clone(),
        None => converse::abort(&format!(
            "{what} on PE {} outside the thread of a CPath array element (only an element's own thread may call it: it acts for that element)",
            converse::my_pe()
        )),
    }
}

/// Aborts the job: a malformed `kind` message from PE `src`.
fn malformed(kind: &str, src: usize, cause: &str) -> ! {
    converse::abort(&format!(
        "a malformed CPath {kind} message from PE {src} on PE {}: {cause}",
        converse::my_pe()
    ))
}

/// Checks that elements `flats` of `path` (a known descriptor) are
/// elements of this PE, in strictly increasing order; for a creation
/// (`creating`), also that none has started yet.
fn check_local_elements(
    s: &State,
    path: &CPath,
    flats: &[u64],
    creating: bool,
) -> Result<Vec<usize>, Cause> {
    let me = converse::my_pe();
    let total = path.num_elements();
    if flats.is_empty() {
        return Err(format!("no elements of {path} listed"));
    }
    let mut out = Vec::with_capacity(flats.len());
    for &f in flats {
        let flat = usize::try_from(f)
            .ok()
            .filter(|&f| f < total)
            .ok_or_else(|| format!("element number {f} of {path}, which has {total} elements"))?;
        if out.last().is_some_and(|&prev| prev >= flat) {
            return Err(format!(
                "element numbers {flats:?} of {path} not strictly increasing (an element listed twice?)"
            ));
        }
        let pe = mapped_pe(s, path, flat)?;
        if pe != me {
            return Err(format!(
                "element {:?} of {path} is on PE {pe}, not this one",
                path.indices_of(flat).unwrap_or_default()
            ));
        }
        if creating
            && s.arrays
                .borrow()
                .get(&path.id())
                .is_some_and(|a| a.has_started(flat))
        {
            return Err(format!(
                "element {:?} of {path} already started on this PE",
                path.indices_of(flat).unwrap_or_default()
            ));
        }
        out.push(flat);
    }
    Ok(out)
}

/// Start elements of an array here.
fn on_create(msg: Message) {
    let s = state();
    let src = msg.src_pe();
    let decoded = (|| -> Result<(CPath, Vec<usize>), Cause> {
        let mut r = Reader::new(msg.payload());
        let path = r.path("descriptor")?;
        let flats = r.u64s("elements")?;
        r.end("creation")?;
        if src != path.creator {
            return Err(format!(
                "the creation of {path}, which PE {} made",
                path.creator
            ));
        }
        path.check(&s)?;
        known(
            &s,
            &path,
            Origin::Message {
                kind: "creation",
                src,
            },
        )?;
        let flats = check_local_elements(&s, &path, &flats, true)?;
        if let Some(n) = s.arrays.borrow().get(&path.id()).and_then(|a| a.created) {
            return Err(format!(
                "a second creation of {path} on this PE (the first started {n} elements)"
            ));
        }
        Ok((path, flats))
    })();
    match decoded {
        Ok((path, flats)) => start_elements(&s, &path, &flats),
        Err(why) => malformed("creation", src, &why),
    }
}
