//! The calling thread's PE: its identity, handler table and PE-private
//! variables, and each subsystem's per-PE state, reachable through a
//! thread-local.
//!
//! `Pe` is context, not behaviour (DESIGN.md §3, rule 1): it holds one state
//! type per subsystem (`SendState`, `SchedState`, `CollState`, `QdState`,
//! `CthState`, `CcdState`), each defined in its subsystem's `state` module
//! on the floor below this one, with fields only that subsystem sees; the
//! subsystem adds its behaviour as `impl Pe` in its own modules (the send
//! path in `cmi::send`, the pass order, idle wait and delivery in
//! `csd::deliver`, quiescence counting in `ccd::quiescence`). This module
//! names no subsystem above `rt` and calls no subsystem function.
//!
//! # Invariants
//!
//! - A thread is at most one PE at a time; `CURRENT` holds it from start-up
//!   until the PE finishes.
//! - Everything here is touched only by the PE's own thread (`Rc`, `RefCell`).
//!   What other threads may touch lives in `rt::job`.
//! - No `RefCell` borrow is ever held while a handler or user callback runs:
//!   handlers may send, enqueue, register handlers and run a nested scheduler.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::job::{Job, PeShared, SharedValue};
// The subsystems' state types (DESIGN.md §3, rule 1: the context names
// state, not behaviour), from the floor below this one.
use crate::ccd::state::{CcdState, QdState};
use crate::cmi::state::{CollState, SendState};
use crate::csd::state::SchedState;
use crate::cth::state::CthState;
use crate::msg::handler::HandlerTable;

/// How the thread came to be a PE; decides what "leave now" means.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// A thread whose PE body runs inside the runtime's `catch_unwind`: it
    /// leaves by unwinding to it.
    Worker,
    /// The thread that called `init_returns`: its code is the caller's own, so
    /// it leaves only through `exit`.
    ReturnedMain,
}

pub(crate) struct Pe {
    pub job: Arc<Job>,
    /// `job.pe(pe)`, found once: the scheduler looks at this PE's inbox
    /// before every message (the lookup, a subtraction, a bounds check and
    /// a multiplication, was 6 instructions of each self-send, callgrind).
    /// Points into `job`'s slice of PE parts, which never moves and lives
    /// as long as `job`, which this PE holds.
    shared: std::ptr::NonNull<PeShared>,
    pub pe: usize,
    pub node: usize,
    pub rank: usize,
    pub role: Role,
    pub(in crate::rt) handlers: RefCell<HandlerTable>,
    /// Whether this PE's handler table has been checked against the others.
    handlers_checked: Cell<bool>,
    /// The handlers of runtime messages, filled by the subsystems at PE
    /// start (`msg::system::Dispatch`).
    pub dispatch: crate::msg::system::Dispatch<Pe>,
    /// PE-private variables (`Cpv`), by slot.
    pub(in crate::rt) globals: RefCell<Vec<Option<Rc<dyn Any>>>>,
    /// This PE's cache of node-shared variables (`Csv`), by slot.
    pub(in crate::rt) node_globals: RefCell<Vec<Option<SharedValue>>>,
    // The subsystems' state, one type each; each type's fields are private
    // to the module that defines it, which adds its behaviour as `impl Pe`.
    /// The send path (`cmi::send`).
    pub send: SendState,
    /// Queues, pass order and nesting of the scheduler (`csd`).
    pub sched: SchedState,
    /// Groups, pending multicasts and reductions (`cmi`).
    pub coll: CollState,
    /// This PE's part in quiescence detection (`ccd::quiescence`).
    pub qd: QdState,
    /// User-level threads (`cth`).
    pub cth: CthState,
    /// Conditions and timers (`ccd`).
    pub ccd: CcdState,
    /// The PE's timeline recorder (`trace`; records only under `+trace`).
    pub trace: crate::trace::Tracer,
    /// The PE's default random stream (`random`), made at its first use:
    /// it ends with the PE, so a later job's PE on the same thread starts
    /// its own.
    pub(in crate::rt) random: super::random::DefaultStream,
}

thread_local! {
    static CURRENT: RefCell<Installed> = const { RefCell::new(Installed(None)) };
    /// The `Rc` inside `CURRENT` while the thread is a PE, else null: what
    /// [`with`] reads. Every Converse call starts there, so it is one load
    /// of a plain thread-local (no destructor, hence no lazy registration
    /// check) and one null test, instead of a `RefCell` borrow of
    /// `CURRENT`. It points into `CURRENT`'s own storage, which lives as
    /// long as the thread; `install` sets it after filling `CURRENT` and
    /// `uninstall` clears it before emptying it.
    static CURRENT_PTR: Cell<*const Rc<Pe>> = const { Cell::new(std::ptr::null()) };
}

/// The thread's PE, if it is one (`CURRENT`'s value).
struct Installed(Option<Rc<Pe>>);

impl Drop for Installed {
    /// A thread that ends while still a PE drops it here, as its
    /// thread-locals are destroyed: `CURRENT_PTR` is cleared first, so a
    /// destructor the PE runs meanwhile finds no PE rather than one being
    /// dropped.
    fn drop(&mut self) {
        let _ = CURRENT_PTR.try_with(|p| p.set(std::ptr::null()));
    }
}

/// The payload the runtime unwinds with to take a PE out of user code when
/// the job ends (`exit`). Never seen by users: the runtime catches it.
pub(crate) struct ExitUnwind;

impl Pe {
    pub fn new(job: Arc<Job>, pe: usize, role: Role) -> Pe {
        let topo = job.topo;
        let trace = crate::trace::Tracer::new(
            job.trace.as_ref(),
            job.watchdog.as_ref().map(|w| w.pe(pe)),
            pe,
            topo.node_of(pe),
        );
        let shared = std::ptr::NonNull::from(job.pe(pe));
        Pe {
            shared,
            pe,
            node: topo.node_of(pe),
            rank: topo.rank_of(pe),
            role,
            handlers: RefCell::new(HandlerTable::new()),
            handlers_checked: Cell::new(false),
            dispatch: crate::msg::system::Dispatch::new(),
            globals: RefCell::new(Vec::new()),
            node_globals: RefCell::new(Vec::new()),
            send: SendState::default(),
            sched: SchedState::new(job.msgq_seed, pe, topo.num_pes()),
            coll: CollState::default(),
            qd: QdState::default(),
            cth: CthState::new(pe),
            ccd: CcdState::new(),
            trace,
            random: Default::default(),
            job,
        }
    }

    /// The job's branching factor of spanning trees (`++spantree-branch`,
    /// else `proc::spantree::DEFAULT_BRANCH`): the trees broadcasts,
    /// reductions and quiescence detection travel along.
    #[inline]
    pub fn branch(&self) -> usize {
        self.job
            .config
            .branch
            .unwrap_or(crate::proc::spantree::DEFAULT_BRANCH)
    }

    /// True if an arrived message waits (set aside, released, self-sent,
    /// held for a random draw, or in the PE's inbox, its node's inbox or its
    /// node's queue): what the scheduler takes before its own queue, and
    /// what a yielding thread (`cth`) leaves the scheduler to.
    #[inline]
    pub fn has_arrivals(&self) -> bool {
        let node = &self.job.node(self.node);
        self.sched.has_held_arrivals()
            // SAFETY: this PE's own thread (the only one with a `&Pe`) is
            // its inbox's single consumer, as `csd::deliver` relies on.
            || !(unsafe { self.shared().inbox.is_empty() })
            || !node.inbox.is_empty()
            || node.queue_len.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// What other threads may touch of this PE (its inbox and idle
    /// state): `self.job.pe(self.pe)`, without the lookup.
    #[inline(always)]
    pub fn shared(&self) -> &PeShared {
        // SAFETY: `shared` points into `self.job`'s PE parts (set in
        // `new`), a boxed slice that never moves and lives as long as the
        // job, which `self` keeps alive (`self.job`).
        unsafe { self.shared.as_ref() }
    }

    /// Makes `pe` the calling thread's PE.
    ///
    /// # Panics
    /// If the thread already is a PE.
    pub fn install(pe: Rc<Pe>) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            assert!(
                c.0.is_none(),
                "this thread is already a Converse PE; a thread can run one job at a time"
            );
            // What the floor below needs to know of the PE: its number (for
            // abort messages) and its job's start (for the timers).
            crate::proc::exit::set_thread_pe(Some(pe.pe));
            // A reason left by a panic before this PE (an earlier job's on
            // this thread) is not this PE's.
            drop(crate::proc::panic::take_reason());
            crate::proc::timer::set_thread_epoch(Some(pe.job.start));
            crate::trace::Tracer::install(Some(&pe.trace));
            c.0 = Some(pe);
            let inside: *const Rc<Pe> = c.0.as_ref().expect("just filled");
            CURRENT_PTR.with(|p| p.set(inside));
        });
    }

    /// Ends the calling thread's PE; returns it so the caller decides when it
    /// is dropped.
    pub fn uninstall() -> Option<Rc<Pe>> {
        CURRENT_PTR.with(|p| p.set(std::ptr::null()));
        crate::proc::exit::set_thread_pe(None);
        crate::proc::timer::set_thread_epoch(None);
        crate::trace::Tracer::install(None);
        crate::proc::affinity::end_pe_placement();
        CURRENT.with(|c| c.borrow_mut().0.take())
    }

    /// Leaves the PE's code at once because the job is ending: unwinds to the
    /// runtime on worker threads; returns on the `init_returns` main thread,
    /// whose caller must then stop (scheduler calls return immediately).
    #[inline]
    pub fn leave_if_exiting(&self) -> bool {
        if !self.job.is_exiting() {
            return false;
        }
        if self.role == Role::Worker {
            std::panic::resume_unwind(Box::new(ExitUnwind));
        }
        true
    }

    /// Aborts with a clear message if `node` is no node of the job.
    pub fn check_node(&self, node: usize, what: &str) {
        let nodes = self.job.topo.num_nodes();
        if node >= nodes {
            crate::proc::exit::abort(&format!(
                "{what} node {node}, but the job has nodes 0..{nodes}"
            ));
        }
    }

    /// Aborts with a clear message if `pe` is no PE of the job.
    pub fn check_pe(&self, pe: usize, what: &str) {
        let n = self.job.topo.num_pes();
        if pe >= n {
            crate::proc::exit::abort(&format!("{what} PE {pe}, but the job has PEs 0..{n}"));
        }
    }

    /// The user handler registered at `index`, if any.
    #[inline(always)]
    pub fn handler(&self, index: usize) -> Option<crate::msg::handler::Entry> {
        self.handlers.borrow().get(index).cloned()
    }

    /// Checks this PE's handler table against the other PEs' unless that
    /// was done (what every scheduler call does first).
    #[inline]
    pub fn check_handlers_once(&self) {
        if !self.handlers_checked.get() {
            self.check_handlers();
        }
    }

    /// Whether this PE's handler table has been checked (a later
    /// registration is then checked at once).
    pub(in crate::rt) fn handlers_checked(&self) -> bool {
        self.handlers_checked.get()
    }

    /// Drops this PE's PE-private variables one at a time, last slot
    /// first, with no borrow held while each destructor runs (it may use
    /// the others).
    pub fn drop_globals(&self) {
        loop {
            let next = self.globals.borrow_mut().pop();
            match next {
                Some(value) => drop(value),
                None => break,
            }
        }
    }

    /// Checks this PE's handler table against the other PEs' (once, then on
    /// every later `register`); aborts on a difference.
    pub fn check_handlers(&self) {
        let result = self
            .job
            .check_handlers(self.pe, self.handlers.borrow().registered_idents());
        if let Err(e) = result {
            crate::proc::exit::abort(&e);
        }
        self.handlers_checked.set(true);
    }
}

/// Runs `f` with the calling thread's PE.
///
/// # Panics
/// If the thread is no Converse PE.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&Rc<Pe>) -> R) -> R {
    let pe = CURRENT_PTR.with(Cell::get);
    if pe.is_null() {
        not_a_pe()
    }
    // SAFETY: non-null, `CURRENT_PTR` points at the `Rc` in this thread's
    // `CURRENT` (set by `install`), which stays there until `uninstall`
    // clears the pointer first. We take our own count of it at once, with
    // no code run in between, so the PE outlives `f` even if `f` ends it
    // (on the `init_returns` thread, user code that `f` runs, a merge
    // function say, may call `finish`, which uninstalls the PE).
    let pe = unsafe { (*pe).clone() };
    f(&pe)
}

/// Runs `f` with the calling thread's PE without taking a count of it
/// (the count [`with`] takes is two writes to memory and a test a call;
/// the self-send path, the runtime's cheapest message, goes without).
///
/// # Panics
/// If the thread is no Converse PE.
///
/// # Safety
/// `f` runs no user code and nothing that could end the PE (uninstall it
/// and drop the last count): the PE must outlive `f`.
#[inline]
pub(crate) unsafe fn with_uncounted<R>(f: impl FnOnce(&Pe) -> R) -> R {
    let pe = CURRENT_PTR.with(Cell::get);
    if pe.is_null() {
        not_a_pe()
    }
    // SAFETY: non-null, `CURRENT_PTR` points at the `Rc` in `CURRENT` (as
    // in `with`), which only `uninstall` or the thread's end empties; `f`
    // does neither (the caller's promise).
    f(unsafe { &*pe })
}

/// The calling thread's PE number: the one the floor below keeps for its
/// abort messages (`proc::exit::thread_pe`, set and cleared with
/// `CURRENT`), one load where [`with`] also takes and drops a count of
/// the PE (`CmiMyPe` runs in nearly every handler). On a thread that ends
/// while still a PE, it still names that PE while `Installed` drops it.
///
/// # Panics
/// If the thread is no Converse PE.
#[inline]
pub(crate) fn number() -> usize {
    match crate::proc::exit::thread_pe() {
        Some(n) => n,
        None => not_a_pe(),
    }
}

/// The calling thread's PE (a counted reference: cheap, and safe to hold
/// across handler calls).
pub(crate) fn current() -> Rc<Pe> {
    with(Rc::clone)
}

/// Hands `msg`, which the network received for PE `dest` of the job at
/// `job`, to the calling thread's PE if it is that PE (see
/// `Pe::take_polled_arrival`); gives it back otherwise. Takes no count of
/// the PE: the network's upcalls run no user code.
#[inline]
pub(crate) fn hand_to_polling_pe(
    job: *const (),
    dest: usize,
    msg: crate::msg::Message,
) -> Result<(), crate::msg::Message> {
    let pe = CURRENT_PTR.with(Cell::get);
    if pe.is_null() {
        return Err(msg);
    }
    // SAFETY: as in `with`: non-null, `CURRENT_PTR` points at the `Rc` in
    // `CURRENT`, which only `uninstall` or the thread's end empties, and
    // `take_polled_arrival` does neither.
    unsafe { &*pe }.take_polled_arrival(job, dest, msg)
}

/// The calling thread's PE, if it is one.
pub(crate) fn try_current() -> Option<Rc<Pe>> {
    let pe = CURRENT_PTR.with(Cell::get);
    // SAFETY: as in `with`.
    (!pe.is_null()).then(|| unsafe { &*pe }.clone())
}

#[cold]
#[inline(never)]
fn not_a_pe() -> ! {
    panic!(
        "this thread is not a Converse PE: call Converse functions from the start function, \
         a handler, or the thread that called init_returns"
    )
}
