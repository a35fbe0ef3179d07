//! The per-PE state of user-level threads, and the thread itself: the
//! types only, on the floor below `rt`, so that `rt::Pe` holds them
//! without naming `cth` (DESIGN.md §3, first rule; the floors are in
//! `tests/layering.rs`).
//!
//! # Invariants
//!
//! The fields are visible to `cth` alone; what they mean, and the code
//! that keeps them, is in `cth`'s other modules (`impl` blocks there, and
//! the module comment of `cth`). Everything here is touched only by its
//! PE's thread.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use corosensei::{Coroutine, Yielder};

use crate::csd::cqs::Queueing;
use crate::cth::stack::{self, StackPool};

/// What a suspending coroutine asks its trampoline to do.
pub(crate) enum Switch {
    /// Go back to the scheduler (or whoever resumed the chain).
    Suspend,
    /// Resume this thread next.
    Transfer(Thread),
}

/// A thread's coroutine. Its stack is a [`stack::StackView`] (bounds
/// only; the memory is the thread's [`StackOwner`]), so that a suspended
/// one is plain data (see `migrate`).
pub(in crate::cth) type Co = Coroutine<(), Switch, (), stack::StackView>;

/// The memory of a thread's stack.
pub(in crate::cth) enum StackOwner {
    /// From the PE's pool, back to it when the thread ends.
    Pooled(corosensei::stack::DefaultStack),
    /// An isomalloc block (a migratable thread's), its lowest page a guard
    /// page; freed when the thread ends, packed when it moves.
    Iso(IsoStack),
}

/// A migratable thread's stack block: freed when dropped (a packed one is
/// forgotten instead: it left the process).
pub(in crate::cth) struct IsoStack {
    pub(in crate::cth) block: usize,
    pub(in crate::cth) len: usize,
}

/// Where a thread is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::cth) enum State {
    /// Created, never run.
    New,
    /// On the call chain (running, or resumed something that runs).
    Running,
    /// Suspended; may be awakened or resumed.
    Suspended,
    /// Returned or freed; may not run again.
    Finished,
    /// Packed to move to another PE ([`Thread::pack`]): this handle is
    /// spent; the thread lives on where it was unpacked.
    Moved,
}

/// A user-level thread (`CthThread`): a handle, cheap to clone, compared by
/// identity. A thread lives on one PE; a migratable one can be packed and
/// moved to another ([`migrate`](crate::cth::migrate)), which spends this handle.
///
/// The manual's `CthThread` is a pointer to an opaque `CthThreadStruct`;
/// here both are this handle.
#[doc(alias = "CthThread")]
#[doc(alias = "CthThreadStruct")]
#[derive(Clone)]
pub struct Thread(pub(in crate::cth) Rc<Inner>);

/// An awaken function of [`Thread::set_strategy`].
pub(in crate::cth) type AwakenFn = Box<dyn Fn(&Thread, Queueing)>;

/// The awaken and choose functions of [`Thread::set_strategy`].
pub(in crate::cth) struct Strategy {
    pub(in crate::cth) awaken: AwakenFn,
    pub(in crate::cth) choose: Box<dyn Fn() -> Thread>,
}

pub(in crate::cth) struct Inner {
    /// Unique on the PE; for messages.
    pub(in crate::cth) id: u64,
    pub(in crate::cth) pe: usize,
    /// The coroutine; `None` for a flow without one (main, stand-ins) and
    /// while the thread runs.
    pub(in crate::cth) co: RefCell<Option<Co>>,
    /// The coroutine's stack memory (`None` for a flow without one, and
    /// once given back). Declared after `co`: a coroutine dropped
    /// unfinished unwinds on this memory first.
    pub(in crate::cth) stack: RefCell<Option<StackOwner>>,
    /// The thread last suspended through its own call of [`suspend`] (or
    /// `migrate_self`), nothing of the runtime's held across the switch:
    /// it may be packed.
    pub(in crate::cth) clean: Cell<bool>,
    /// A migratable thread's heap (`heap`): its header's address, 0 until
    /// its first allocation.
    pub(in crate::cth) heap: Cell<usize>,
    /// The thread is inside `heap::on_thread_heap`.
    pub(in crate::cth) heap_on: Cell<bool>,
    /// The thread suspended to move to this PE (`migrate::migrate_self`).
    pub(in crate::cth) migrate_to: Cell<Option<usize>>,
    /// Whether this thread has a coroutine at all.
    pub(in crate::cth) native: bool,
    /// The coroutine's yielder, set when its body starts. Valid while the
    /// coroutine has not finished (it lives on the coroutine's stack).
    pub(in crate::cth) yielder: Cell<*const Yielder<(), Switch>>,
    /// Requested stack size (the pool's key).
    pub(in crate::cth) stack_size: usize,
    /// The stack's guard page, for the overflow report.
    pub(in crate::cth) guard: (usize, usize),
    /// Where the thread is in its PE's `live` slab (`NO_SLOT` if not).
    pub(in crate::cth) slot: Cell<usize>,
    /// Handler and scheduler depths the thread had when it last suspended
    /// (above its resumer's); see `Depths`.
    pub(in crate::cth) depths: Cell<Depths>,
    pub(in crate::cth) migratable: bool,
    pub(in crate::cth) state: Cell<State>,
    /// A token for it is in the scheduler queue.
    pub(in crate::cth) queued: Cell<bool>,
    /// `free` was called: destroy it when it next suspends.
    pub(in crate::cth) free_pending: Cell<bool>,
    /// A flow without a coroutine was awakened or resumed while suspended.
    pub(in crate::cth) resumed: Cell<bool>,
    /// The user's "next" field (`CthSetNext`).
    pub(in crate::cth) next: RefCell<Option<Thread>>,
    pub(in crate::cth) strategy: RefCell<Option<Rc<Strategy>>>,
    /// Thread-private variables (`Ctv`), by slot.
    pub(crate) locals: RefCell<Vec<Option<Rc<dyn Any>>>>,
}

/// A slab of the PE's unfinished coroutine threads: O(1) insert and
/// remove, slots reused.
#[derive(Default)]
pub(in crate::cth) struct LiveThreads {
    pub(in crate::cth) entries: Vec<Option<LiveEntry>>,
    pub(in crate::cth) free: Vec<usize>,
}

/// How the PE holds an unfinished thread.
pub(in crate::cth) enum LiveEntry {
    /// Never run: weakly (dropping its last handle frees it; nothing ran
    /// on its stack).
    New(std::rc::Weak<Inner>),
    /// Started: strongly, until it finishes, moves, or the PE ends. Its
    /// stack may hold guards of the PE's state (a handler's depth), which
    /// only unwind correctly as that thread (`as_thread`): dropping its
    /// last handle must not unwind it from wherever that happens.
    Started(Rc<Inner>),
}

/// A PE's thread state (a field of `Pe`).
pub(crate) struct CthState {
    /// The thread whose code runs now.
    pub(in crate::cth) current: RefCell<Thread>,
    /// The flow that entered the PE.
    pub(in crate::cth) main: Thread,
    /// Stand-in threads not in use.
    pub(in crate::cth) standins: RefCell<Vec<Thread>>,
    pub(in crate::cth) stacks: RefCell<StackPool>,
    pub(in crate::cth) next_id: Cell<u64>,
    /// The PE's handler depth when the running thread was last resumed: a
    /// deeper one means a handler runs on top of the thread.
    pub(in crate::cth) block_base: Cell<u32>,
    /// The PE runs its start function in normal mode (no blocking).
    pub(in crate::cth) in_start: Cell<bool>,
    /// The scheduler loop running now lets threads yield directly to each
    /// other (it does not count deliveries).
    pub(in crate::cth) sched_allows_direct: Cell<bool>,
    /// The running thread was resumed by such a scheduler, so a yield may
    /// switch directly (see `direct_yield`).
    pub(in crate::cth) direct_ok: Cell<bool>,
    /// Direct yields since control was last back in the scheduler.
    pub(in crate::cth) direct_streak: Cell<u32>,
    /// The PE's `stop_gen` when the scheduler resumed the running chain: a
    /// change means `exit_scheduler` was called, and the scheduler must get
    /// control back.
    pub(in crate::cth) direct_gen: Cell<u64>,
    /// The PE's unfinished coroutine threads (a slab indexed by
    /// `Inner::slot`), so that teardown can unwind the suspended ones (see
    /// [`unwind_suspended`]). A thread leaves it when it finishes, moves,
    /// or (never run) is dropped; a started one is held strongly (see
    /// `LiveEntry`).
    pub(in crate::cth) live: RefCell<LiveThreads>,
}

/// The PE-wide counters a thread may leave raised when it suspends inside a
/// handler or a nested scheduler call (their guards live on its stack).
/// They are the thread's own: saved with it when it suspends, the resumer's
/// put back, and re-applied on top of the next resumer's when it resumes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::cth) struct Depths {
    pub(in crate::cth) handler: u32,
    pub(in crate::cth) sched: u32,
    pub(in crate::cth) allows_direct: bool,
}
