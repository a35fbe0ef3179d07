//! User-level threads (Cth): stackful coroutines scheduled through their PE's
//! scheduler queue, like messages.
//!
//! # The model
//!
//! A [`Thread`] created with [`Thread::create`] is a `corosensei` coroutine on
//! a stack taken from the PE's pool (`cth::stack`): creating one maps no memory
//! once the pool is warm. [`Thread::awaken`] puts a token for it in the PE's
//! priority queue; when the scheduler takes the token it resumes the thread,
//! which runs until it suspends ([`suspend`], [`yield_now`], a blocking
//! helper such as [`Event::wait`]), transfers control ([`Thread::resume`]) or
//! returns (which frees it). Control then comes back to the scheduler that
//! resumed it.
//!
//! The flow of control that entered the PE (its start function, the code of
//! the thread that called `init_returns`) is a thread too: [`Thread::current`]
//! returns it, and it may yield or suspend. It has no coroutine of its own, so
//! when it suspends the PE's scheduler keeps running *on top of it* (a nested
//! scheduler loop, standing in for Converse's stand-in scheduler thread) until
//! someone awakens or resumes it. While it is suspended, [`Thread::current`]
//! in that loop is a separate "stand-in" thread, as in Converse.
//!
//! # Switching protocol (the trampoline)
//!
//! Coroutines are asymmetric: a suspended coroutine goes back to whoever
//! resumed it. Converse's symmetric `CthResume(t)` is built on that: the
//! running coroutine yields `Switch::Transfer(t)` to its resumer, the
//! *trampoline* (`run`), which resumes `t` next, and so on until a thread
//! yields `Switch::Suspend` (back to the scheduler) or returns. A transfer to a
//! flow without a coroutine (the main flow) sets that flow's `resumed` flag
//! and ends the trampoline; the main flow's nested loop sees the flag.
//!
//! # Invariants
//!
//! - Everything here is PE-local (`Rc`, `Cell`): a `Thread` is `!Send`.
//! - A coroutine thread's `co` is `None` exactly while it runs (it is on the
//!   call chain): resuming it then is an error, never a second borrow.
//! - A thread is in the scheduler queue at most once (`queued`); awakening it
//!   again before it runs aborts with a clear message.
//! - `current` is the thread whose code runs now; the trampoline restores the
//!   previous value when a thread yields, returns or unwinds.
//! - A thread is freed (its stack back in the pool, or a migratable one's
//!   isomalloc stack freed and its heap orphaned) when it returns, or,
//!   after [`Thread::free`], when it next suspends. Threads still suspended
//!   when the PE ends are unwound at teardown (their stacks hold handles to
//!   the PE), while the PE is still installed.
//! - A coroutine knows its stack by bounds only (`stack::StackView`); the
//!   memory is the thread's `StackOwner`, dropped after the coroutine. A
//!   migratable thread packed to move ([`Thread::pack`]) leaves this handle
//!   `Moved`, without coroutine or stack.
//! - The PE's handler and scheduler depths a thread leaves raised when it
//!   suspends inside a handler or a nested scheduler are the thread's own
//!   (`Depths`): saved with it, taken off the PE, and put back on top of
//!   whoever resumes it next.
//!
//! # Direct yields
//!
//! A [`yield_now`] whose scheduler would run another thread next (no arrived
//! message waits, the front of the queue is a thread token) queues its own
//! token and transfers straight to that thread, without the round trip
//! through the scheduler loop; at most `DIRECT_YIELDS` in a row, never when
//! a timer poll is due, `exit_scheduler` was called or the job is exiting,
//! and never for a chain the scheduler did not start (`direct_ok`).
//!
//! # Blocking restrictions
//!
//! The manual forbids blocking in a handler and in the start function: the
//! flow that polls for messages must not stop. Blocking helpers
//! ([`Event::wait`], [`sleep`]) call [`check_can_block`], which aborts with an
//! explanation in those places. The raw calls ([`suspend`], [`yield_now`])
//! are the primitives and stay allowed everywhere, as in Converse.
pub mod ctv;
mod event;
mod heap;
pub mod migrate;
pub(crate) mod stack;
pub(crate) mod state;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use corosensei::{CoroutineResult, Yielder};

use crate::csd::cqs::Queueing;
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};

pub(crate) use crate::csd::state::Task;
pub(crate) use crate::cth::state::CthState;
pub(crate) use crate::cth::state::Switch;
pub use crate::cth::state::Thread;
use crate::cth::state::{
    Co, Depths, Inner, IsoStack, LiveEntry, LiveThreads, StackOwner, State, Strategy,
};
pub use ctv::Ctv;
pub use event::{Event, sleep};
pub use heap::{ThreadHeap, on_thread_heap};

/// Default stack size of a user-level thread when neither `create` nor
/// `+stacksize` gives one.
pub const DEFAULT_STACK_SIZE: usize = 256 << 10;

/// The largest stack a thread may ask for: `+stacksize`'s bound (1 GiB).
/// A library that takes a stack size from a message checks it against
/// this before [`Thread::create`].
pub const MAX_STACK_SIZE: usize = crate::proc::args::MAX_STACK;

// One pointer (the variant without data takes the null niche): every switch
// moves one through corosensei. A move (`migrate::migrate_self`) is a
// `Suspend` with the thread's `migrate_to` set.
const _: () = assert!(std::mem::size_of::<Switch>() == std::mem::size_of::<usize>());

/// `Inner::slot` of a thread not in `LiveThreads`.
const NO_SLOT: usize = usize::MAX;

impl LiveThreads {
    fn insert(&mut self, t: LiveEntry) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.entries[slot] = Some(t);
                slot
            }
            None => {
                self.entries.push(Some(t));
                self.entries.len() - 1
            }
        }
    }

    fn remove(&mut self, slot: usize) {
        if let Some(entry) = self.entries.get_mut(slot)
            && entry.take().is_some()
        {
            self.free.push(slot);
        }
    }

    /// The thread at `slot` has started: hold it strongly.
    fn started(&mut self, slot: usize, t: &Thread) {
        if let Some(entry @ Some(LiveEntry::New(_))) = self.entries.get_mut(slot) {
            *entry = Some(LiveEntry::Started(t.0.clone()));
        }
    }
}

impl Pe {
    /// Marks the PE as running its start function in normal mode, where
    /// threads may not block (see [`check_can_block`]).
    #[inline]
    pub(crate) fn set_in_start(&self, in_start: bool) {
        self.cth.in_start.set(in_start);
    }

    /// Whether the scheduler loop running now lets threads yield directly to
    /// each other; sets it to `allows` and returns what it was (a
    /// scheduler call puts it back when it ends).
    #[inline]
    pub(crate) fn replace_direct_yields(&self, allows: bool) -> bool {
        self.cth.sched_allows_direct.replace(allows)
    }
}

impl CthState {
    pub fn new(pe: usize) -> CthState {
        let main = Thread::native(0, pe);
        CthState {
            current: RefCell::new(main.clone()),
            main,
            standins: RefCell::new(Vec::new()),
            stacks: RefCell::new(stack::StackPool::new()),
            next_id: Cell::new(1),
            block_base: Cell::new(0),
            in_start: Cell::new(false),
            sched_allows_direct: Cell::new(false),
            direct_ok: Cell::new(false),
            direct_streak: Cell::new(0),
            direct_gen: Cell::new(0),
            live: RefCell::new(LiveThreads::default()),
        }
    }

    pub fn current(&self) -> Thread {
        self.current.borrow().clone()
    }

    /// Records a new coroutine thread in `live` (`started`: one that has
    /// run already, as a thread that moved here).
    fn track(&self, t: &Thread, started: bool) {
        let entry = if started {
            LiveEntry::Started(t.0.clone())
        } else {
            LiveEntry::New(Rc::downgrade(&t.0))
        };
        let slot = self.live.borrow_mut().insert(entry);
        t.0.slot.set(slot);
    }

    /// Removes a finished or dropped coroutine thread from `live`.
    fn untrack(&self, slot: usize) {
        if slot != NO_SLOT {
            self.live.borrow_mut().remove(slot);
        }
    }

    fn fresh_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    fn standin(&self, pe: usize) -> Thread {
        let reused = self.standins.borrow_mut().pop();
        reused.unwrap_or_else(|| Thread::native(self.fresh_id(), pe))
    }
}

impl Inner {
    /// A thread with coroutine `co` (`None`: a flow without one, running).
    fn new(
        id: u64,
        pe: usize,
        co: Option<(Co, StackOwner)>,
        guard: (usize, usize),
        stack_size: usize,
        migratable: bool,
    ) -> Inner {
        let native = co.is_none();
        let (co, stack) = co.unzip();
        Inner {
            id,
            pe,
            co: RefCell::new(co),
            stack: RefCell::new(stack),
            clean: Cell::new(false),
            heap: Cell::new(0),
            heap_on: Cell::new(false),
            migrate_to: Cell::new(None),
            native,
            yielder: Cell::new(std::ptr::null()),
            stack_size,
            guard,
            slot: Cell::new(NO_SLOT),
            depths: Cell::new(Depths::default()),
            migratable,
            state: Cell::new(if native { State::Running } else { State::New }),
            queued: Cell::new(false),
            free_pending: Cell::new(false),
            resumed: Cell::new(false),
            next: RefCell::new(None),
            strategy: RefCell::new(None),
            locals: RefCell::new(Vec::new()),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A thread dropped before it finished (never run, or suspended for
        // good) leaves the PE's `live` slab; its coroutine, dropped next,
        // unwinds what is on its stack.
        let slot = self.slot.replace(NO_SLOT);
        if slot != NO_SLOT
            && let Some(pe) = pe::try_current()
        {
            pe.cth.untrack(slot);
        }
        // Its heap goes once nothing of it is in use (a finished thread's
        // was orphaned already).
        let heap = self.heap.replace(0);
        if heap != 0 {
            // SAFETY: the thread's own heap, in this process; the thread
            // will not run again.
            unsafe { heap::orphan(heap) };
        }
    }
}

impl Inner {
    /// True if `addr` lies in this thread's stack (a coroutine's; never a
    /// flow without one).
    fn stack_holds(&self, addr: usize) -> bool {
        match &*self.stack.borrow() {
            Some(StackOwner::Iso(IsoStack { block, len })) => (*block..block + len).contains(&addr),
            Some(StackOwner::Pooled(stack)) => {
                let view = stack::StackView::of(stack);
                (view.limit..view.base).contains(&addr)
            }
            None => false,
        }
    }
}

impl PartialEq for Thread {
    fn eq(&self, other: &Thread) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Thread {}

impl std::fmt::Debug for Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Thread({} on PE {}, {:?})",
            self.0.id,
            self.0.pe,
            self.0.state.get()
        )
    }
}

impl Thread {
    fn native(id: u64, pe: usize) -> Thread {
        Thread(Rc::new(Inner::new(id, pe, None, (0, 0), 0, false)))
    }

    /// The thread running now (`CthSelf`). The flow that entered the PE
    /// counts as a thread too.
    #[doc(alias = "CthSelf")]
    pub fn current() -> Thread {
        pe::with(|pe| pe.cth.current())
    }

    /// Creates a thread that will run `body` once awakened (`CthCreate`); it
    /// does not run yet. `stack_size` is in bytes; 0 means the job's default
    /// (`+stacksize`, else [`DEFAULT_STACK_SIZE`]). The thread is freed when
    /// `body` returns.
    ///
    /// `body` stands for the manual's `CthVoidFn fn` and its `void *arg`: a
    /// closure that captures what the C function would get through `arg`.
    #[doc(alias = "CthCreate")]
    #[doc(alias = "CthVoidFn")]
    pub fn create(body: impl FnOnce() + 'static, stack_size: usize) -> Thread {
        Thread::create_impl(body, stack_size, false)
    }

    /// As [`create`](Thread::create), for a thread that may move to
    /// another PE, of this process or another (`CthCreateMigratable`): its
    /// stack is an isomalloc block, at an address no other PE uses, so it
    /// can be packed while the thread is suspended ([`Thread::pack`],
    /// [`migrate::migrate_self`]) and unpacked at the same address
    /// elsewhere. `body` is a closure, as in [`create`](Thread::create)
    /// (`CthVoidFn` and its argument); see [`migrate`] for what may live on
    /// the stack of a thread that moves.
    #[doc(alias = "CthCreateMigratable")]
    #[doc(alias = "CthVoidFn")]
    pub fn create_migratable(body: impl FnOnce() + 'static, stack_size: usize) -> Thread {
        Thread::create_impl(body, stack_size, true)
    }

    fn create_impl(body: impl FnOnce() + 'static, stack_size: usize, migratable: bool) -> Thread {
        let pe = pe::current();
        let size = if stack_size == 0 {
            pe.job.config.stack_size.unwrap_or(DEFAULT_STACK_SIZE)
        } else {
            stack_size.max(crate::proc::args::MIN_STACK)
        };
        let (view, owner, guard) = if migratable {
            migrate::iso_stack(&pe, size)
        } else {
            let stack = pe.cth.stacks.borrow_mut().take(size, pe.pe);
            let guard = stack::guard_of(&stack);
            (
                stack::StackView::of(&stack),
                StackOwner::Pooled(stack),
                guard,
            )
        };
        let co = Co::with_stack(view, move |yielder, ()| {
            pe::with(|pe| {
                let me = pe.cth.current();
                me.0.yielder.set(yielder as *const Yielder<(), Switch>);
            });
            body();
        });
        let thread = Thread(Rc::new(Inner::new(
            pe.cth.fresh_id(),
            pe.pe,
            Some((co, owner)),
            guard,
            size,
            migratable,
        )));
        pe.cth.track(&thread, false);
        thread
    }

    /// A number naming this thread on its PE (the main flow is 0).
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// True for the flow that entered the PE (and the scheduler stand-ins
    /// that run while it is suspended): threads without a coroutine.
    pub fn is_main_flow(&self) -> bool {
        self.0.native
    }

    /// True if the thread was created with
    /// [`create_migratable`](Thread::create_migratable).
    pub fn is_migratable(&self) -> bool {
        self.0.migratable
    }

    /// True once the thread has returned or been freed.
    pub fn is_finished(&self) -> bool {
        self.0.state.get() == State::Finished
    }

    /// The stack size the thread was created with, in bytes (0 for the main
    /// flow).
    pub fn stack_size(&self) -> usize {
        self.0.stack_size
    }

    fn describe(&self) -> String {
        if self.0.id == 0 {
            format!("the main flow of PE {}", self.0.pe)
        } else {
            format!("thread {} of PE {}", self.0.id, self.0.pe)
        }
    }

    /// Puts the thread in the scheduler queue at the middle priority, FIFO
    /// (`CthAwaken`), or hands it to its awaken function if
    /// [`set_strategy`](Thread::set_strategy) gave it one.
    ///
    /// Awakening a thread that is already in the queue, or one that has
    /// finished, aborts the job with a message naming the thread.
    #[doc(alias = "CthAwaken")]
    pub fn awaken(&self) {
        self.awaken_prio(Queueing::Fifo)
    }

    /// As [`awaken`](Thread::awaken), with the given queueing strategy and
    /// priority (`CthAwakenPrio`).
    #[doc(alias = "CthAwakenPrio")]
    pub fn awaken_prio(&self, queueing: Queueing) {
        match self.0.state.get() {
            State::Finished => abort(&format!(
                "awaken of {}, which has finished",
                self.describe()
            )),
            State::Moved => abort(&format!(
                "awaken of {}, which was packed to move to another PE (awaken it where it was unpacked)",
                self.describe()
            )),
            _ => {}
        }
        if self.0.free_pending.get() {
            abort(&format!(
                "awaken of {}, which was freed (it ends when it suspends)",
                self.describe()
            ));
        }
        let strategy = self.0.strategy.borrow().clone();
        if let Some(s) = strategy {
            (s.awaken)(self, queueing);
            return;
        }
        if self.0.queued.replace(true) {
            abort(&format!(
                "{} awakened twice: it is already in the scheduler queue (a thread may be queued once)",
                self.describe()
            ));
        }
        pe::with(|pe| {
            pe.count_created(1);
            pe.sched.enqueue(Task::Thread(self.clone()), queueing);
        });
    }

    /// Transfers control to this thread at once (`CthResume`); the caller
    /// stops until something resumes or awakens it. For schedulers; most code
    /// wants [`awaken`](Thread::awaken) and [`suspend`].
    ///
    /// Resuming the main flow from a handler running on the scheduler that
    /// stands in for it takes effect when that handler returns. Resuming a
    /// thread that is running aborts.
    #[doc(alias = "CthResume")]
    pub fn resume(&self) {
        let pe = pe::current();
        let me = pe.cth.current();
        if *self == me {
            return;
        }
        self.check_resumable();
        transfer(&pe, &me, self.clone());
    }

    fn check_resumable(&self) {
        match self.0.state.get() {
            State::Finished => abort(&format!(
                "resume of {}, which has finished",
                self.describe()
            )),
            State::Moved => abort(&format!(
                "resume of {}, which was packed to move to another PE",
                self.describe()
            )),
            State::Running if !self.0.native => abort(&format!(
                "resume of {}, which is running (it is on the call chain)",
                self.describe()
            )),
            _ => {}
        }
    }

    /// Frees the thread (`CthFree`). Only the running thread may be freed;
    /// the free happens when it next suspends (so free, then suspend). A
    /// thread whose body returns is freed without this call.
    #[doc(alias = "CthFree")]
    pub fn free(&self) {
        let me = Thread::current();
        if *self != me {
            abort(&format!(
                "free of {}, which is not the running thread (a thread frees only itself)",
                self.describe()
            ));
        }
        if self.0.native {
            abort(&format!(
                "free of {}: the main flow cannot be freed",
                self.describe()
            ));
        }
        if self.0.queued.get() {
            abort(&format!(
                "free of {}, which is in the scheduler queue",
                self.describe()
            ));
        }
        self.0.free_pending.set(true);
    }

    /// The thread's "next" field (`CthGetNext`); the runtime never reads it.
    #[doc(alias = "CthGetNext")]
    pub fn next(&self) -> Option<Thread> {
        self.0.next.borrow().clone()
    }

    /// Sets the thread's "next" field (`CthSetNext`), for linking threads
    /// into queues.
    #[doc(alias = "CthSetNext")]
    pub fn set_next(&self, next: Option<Thread>) {
        *self.0.next.borrow_mut() = next;
    }

    /// Routes the thread through a scheduler of the caller's
    /// (`CthSetStrategy`): [`awaken`](Thread::awaken) calls `awaken(t,
    /// queueing)` instead of queueing it, and [`suspend`] transfers control
    /// to the thread `choose()` returns instead of going back to the
    /// scheduler. `choose` must return a thread that wants the CPU (or wait
    /// until one does).
    ///
    /// The manual's function types are closures here: `awaken` is a
    /// `CthAwkFn` (C's `strategy, priobits, prio` are one [`Queueing`]) and
    /// `choose` a `CthThFn`.
    #[doc(alias = "CthSetStrategy")]
    #[doc(alias = "CthAwkFn")]
    #[doc(alias = "CthThFn")]
    pub fn set_strategy(
        &self,
        awaken: impl Fn(&Thread, Queueing) + 'static,
        choose: impl Fn() -> Thread + 'static,
    ) {
        *self.0.strategy.borrow_mut() = Some(Rc::new(Strategy {
            awaken: Box::new(awaken),
            choose: Box::new(choose),
        }));
    }

    /// Restores the default awaken and suspend behaviour
    /// (`CthSetStrategyDefault`).
    #[doc(alias = "CthSetStrategyDefault")]
    pub fn set_strategy_default(&self) {
        *self.0.strategy.borrow_mut() = None;
    }
}

/// Stops the running thread until it is awakened or resumed (`CthSuspend`);
/// control goes to the next task of the scheduler, or to the thread its
/// choose function names (see [`Thread::set_strategy`]). A thread that called
/// [`Thread::free`] is freed here and never returns.
#[doc(alias = "CthSuspend")]
pub fn suspend() {
    suspend_as(true)
}

/// [`suspend`], from a caller of the runtime's (`clean` false) whose frame
/// holds handles across it (an `Event` wait, a yield): such a suspension
/// may not be packed.
pub(crate) fn suspend_as(clean: bool) {
    // A coroutine thread's plain suspension holds nothing of the runtime's
    // across the switch (`suspend_coroutine`): it may resume on another PE.
    let yielder = {
        let pe = pe::current();
        let me = pe.cth.current();
        let strategy = me.0.strategy.borrow().clone();
        if let Some(s) = strategy {
            let next = (s.choose)();
            if next != me {
                next.check_resumable();
                transfer(&pe, &me, next);
            }
            return;
        }
        if me.0.native {
            suspend_main_flow(&pe, &me);
            return;
        }
        me.0.clean.set(clean);
        me.0.yielder.get()
    };
    suspend_coroutine(yielder, Switch::Suspend);
}

/// Suspends the running coroutine thread, whose yielder is `yielder`, with
/// `switch` for its trampoline. It holds no handle of the runtime's (no
/// `Pe`, no `Thread`) across the switch, so a caller that holds none
/// either ([`suspend`], `migrate::migrate_self`) leaves a stack that may be
/// packed and resumed on another PE (see `migrate`): nothing on it then
/// refers to the PE it left.
fn suspend_coroutine(yielder: *const Yielder<(), Switch>, switch: Switch) {
    debug_assert!(!yielder.is_null(), "a running coroutine has a yielder");
    // SAFETY: `yielder` is the running coroutine thread's (the caller read
    // it from the thread that is `current`), set when its body started and
    // living on its stack until the body returns, which it has not; this
    // runs on that coroutine's own stack, as corosensei requires.
    unsafe { (*yielder).suspend(switch) };
    // Resumed: possibly on another PE, or in another process. Touch nothing
    // from before the switch but the stack itself.
}

/// Gives up control until the scheduler comes back to this thread
/// (`CthYield`): awaken, then suspend.
#[doc(alias = "CthYield")]
pub fn yield_now() {
    let pe = pe::current();
    let me = pe.cth.current();
    if me.0.free_pending.get() {
        // A freed thread gives up control for good.
        suspend_as(false);
        return;
    }
    if me.0.native && pe.job.is_exiting() {
        // Nothing more will run: unwinds on a worker PE, returns on the main
        // flow of an `init_returns` job.
        pe.leave_if_exiting();
        return;
    }
    if direct_yield(&pe, &me) {
        return;
    }
    me.awaken();
    suspend_as(false);
}

/// Most switches between threads that yield to each other need not go back
/// to the scheduler loop: when no arrived message is waiting and the front
/// of the PE's queue is another thread's token, `yield_now` queues its own
/// token and transfers straight to that thread, which is what the scheduler
/// would do next. At most this many in a row, so that the scheduler still
/// looks at stop requests, job exit and its own bookkeeping regularly.
const DIRECT_YIELDS: u32 = 64;

/// The fast path of [`yield_now`] for `me`; returns true if it handled the
/// yield (switched to the next thread and came back, or found nothing else
/// to run).
fn direct_yield(pe: &Pe, me: &Thread) -> bool {
    if me.0.native
        || !pe.cth.direct_ok.get()
        || me.0.strategy.borrow().is_some()
        || me.0.queued.get()
        || pe.sched.stop_gen() != pe.cth.direct_gen.get()
        || pe.job.is_exiting()
        || pe.has_arrivals()
    {
        return false;
    }
    // Timers and periodic callbacks run from the scheduler, never in the
    // middle of a switch: if a poll is due, take the slow path.
    if pe.ccd_armed() && crate::ccd::poll_due(pe) {
        return false;
    }
    let streak = pe.cth.direct_streak.get();
    if streak >= DIRECT_YIELDS {
        pe.cth.direct_streak.set(0);
        return false;
    }
    let next = {
        let mut queue = pe.sched.queue_mut();
        if queue.is_empty() {
            // Nothing else to run: the scheduler would resume us at once.
            None
        } else {
            let swapped = queue.swap_middle_front(Task::Thread(me.clone()), |front| {
                matches!(front, Task::Thread(t) if !t.0.native && t.0.state.get() == State::Suspended)
            });
            match swapped {
                Ok(Task::Thread(t)) => Some(t),
                Ok(Task::Message(_)) => unreachable!("the front was a thread token"),
                Err(_) => return false,
            }
        }
    };
    pe.cth.direct_streak.set(streak + 1);
    let Some(next) = next else {
        return true;
    };
    me.0.queued.set(true);
    next.0.queued.set(false);
    // Our token was created and the other's processed.
    pe.count_created(1);
    pe.count_processed(1);
    yield_to_trampoline(me, Switch::Transfer(next));
    true
}

/// As [`yield_now`], queueing this thread with `queueing` (`CthYieldPrio`).
#[doc(alias = "CthYieldPrio")]
pub fn yield_prio(queueing: Queueing) {
    let me = Thread::current();
    if !me.0.free_pending.get() {
        me.awaken_prio(queueing);
    }
    suspend_as(false);
}

/// Aborts with an explanation if the calling code may not block: a handler
/// (or a condition callback) runs, or the start function in normal mode.
/// `what` names the blocking operation. Blocking helpers call this first.
pub fn check_can_block(what: &str) {
    pe::with(|pe| {
        let me = pe.cth.current();
        let in_handler = pe.sched.handler_depth() > pe.cth.block_base.get();
        let in_start = me == pe.cth.main && pe.cth.in_start.get();
        if in_handler || in_start {
            let place = if in_handler {
                "a handler"
            } else {
                "the start function"
            };
            abort(&format!(
                "{what} would block in {place}, which must not block (the flow that polls for messages must keep running); create a thread with Thread::create and block there"
            ));
        }
    })
}

/// `me` (running) hands control to `next`.
fn transfer(pe: &Pe, me: &Thread, next: Thread) {
    if !me.0.native {
        yield_to_trampoline(me, Switch::Transfer(next));
    } else if next.0.native {
        // A flow without a coroutine lies below us on this stack: it
        // continues when control is back in its loop.
        wake_main_flow(&next);
    } else {
        // Run `next` (and whatever it transfers to) on this stack; the chain's
        // last suspend comes back here, to the flow that schedules. Its
        // yields must come back here too, not switch among queued threads.
        let _restore = RestoreDirect(pe, DirectState::of(pe));
        pe.cth.direct_ok.set(false);
        run(pe, next);
    }
}

/// Suspends the running coroutine thread `me` with `switch` for its
/// trampoline.
fn yield_to_trampoline(me: &Thread, switch: Switch) {
    suspend_coroutine(me.0.yielder.get(), switch);
}

/// The main flow (or a stand-in) suspends: the scheduler runs on top of it
/// until it is awakened or resumed.
fn suspend_main_flow(pe: &Pe, me: &Thread) {
    if me.0.resumed.replace(false) {
        return;
    }
    let standin = pe.cth.standin(pe.pe);
    pe.trace.switch(standin.0.id as u32);
    let previous = pe.cth.current.replace(standin.clone());
    me.0.state.set(State::Suspended);
    struct Back<'a>(&'a Pe, Option<Thread>, Thread);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            let previous = self.1.take().expect("set once");
            previous.0.state.set(State::Running);
            self.0.trace.switch(previous.0.id as u32);
            self.0.cth.current.replace(previous);
            self.0.cth.standins.borrow_mut().push(self.2.clone());
        }
    }
    let _back = Back(pe, Some(previous), standin);
    crate::rt::reentry::run_until(pe, &|| me.0.resumed.get());
    me.0.resumed.set(false);
}

/// Control goes to `flow`, a thread without a coroutine. If it is suspended
/// (in `suspend_main_flow`'s loop), tell the loop to end; if it is running
/// (it called the trampoline that is ending now), control simply returns to
/// it, and no flag may be left behind for its next suspend.
fn wake_main_flow(flow: &Thread) {
    if flow.0.state.get() == State::Suspended {
        flow.0.resumed.set(true);
    }
}

/// Runs a queued thread's token: the scheduler took it from the queue.
pub(crate) fn run_token(pe: &Pe, t: Thread) {
    t.0.queued.set(false);
    pe.count_processed(1);
    if t.0.native {
        wake_main_flow(&t);
    } else {
        t.check_resumable();
        let _restore = RestoreDirect(pe, DirectState::of(pe));
        DirectState {
            ok: pe.cth.sched_allows_direct.get(),
            streak: 0,
            stop_gen: pe.sched.stop_gen(),
        }
        .apply(pe);
        run(pe, t);
    }
}

/// The direct-yield state of the chain a trampoline runs (see
/// `direct_yield`); saved when a trampoline starts and put back when it ends
/// (unwinding too), so a scheduler run inside a thread does not reset the
/// outer chain's streak or stop count.
#[derive(Clone, Copy)]
struct DirectState {
    ok: bool,
    streak: u32,
    stop_gen: u64,
}

impl DirectState {
    fn of(pe: &Pe) -> DirectState {
        DirectState {
            ok: pe.cth.direct_ok.get(),
            streak: pe.cth.direct_streak.get(),
            stop_gen: pe.cth.direct_gen.get(),
        }
    }

    fn apply(self, pe: &Pe) {
        pe.cth.direct_ok.set(self.ok);
        pe.cth.direct_streak.set(self.streak);
        pe.cth.direct_gen.set(self.stop_gen);
    }
}

/// Puts back the saved direct-yield state when a trampoline ends.
struct RestoreDirect<'a>(&'a Pe, DirectState);

impl Drop for RestoreDirect<'_> {
    fn drop(&mut self) {
        self.1.apply(self.0);
    }
}

/// Restores the PE's running-thread state when a trampoline ends (normally
/// or by unwinding).
struct Resumed<'a> {
    pe: &'a Pe,
    previous: Option<Thread>,
    block_base: u32,
    overflow_guard: stack::RunningStack,
    /// The PE's depths when the trampoline started (see `Depths`).
    depths: Depths,
}

impl Drop for Resumed<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Unwinding out of the trampoline: the thread it ran last (still
            // `current`) ended with the panic (or the job's exit) and its
            // coroutine is gone.
            let t = self.pe.cth.current();
            if !t.0.native {
                t.0.state.set(State::Finished);
                self.pe.cth.untrack(t.0.slot.replace(NO_SLOT));
            }
        }
        let previous = self.previous.take().expect("set once");
        self.pe.cth.current.replace(previous);
        self.pe.cth.block_base.set(self.block_base);
        self.depths.apply(self.pe);
        stack::set_running(self.overflow_guard);
    }
}

impl Depths {
    fn of(pe: &Pe) -> Depths {
        Depths {
            handler: pe.sched.handler_depth(),
            sched: pe.sched.sched_depth(),
            allows_direct: pe.cth.sched_allows_direct.get(),
        }
    }

    /// A thread's own depths `own` on top of the resumer's `base`.
    fn stacked(base: Depths, own: Depths) -> Depths {
        Depths {
            handler: base.handler + own.handler,
            sched: base.sched + own.sched,
            allows_direct: if own.sched > 0 {
                own.allows_direct
            } else {
                base.allows_direct
            },
        }
    }

    fn apply(self, pe: &Pe) {
        pe.sched.set_depths(self.handler, self.sched);
        pe.cth.sched_allows_direct.set(self.allows_direct);
    }
}

/// The trampoline: resumes `first`, then whatever it transfers control to,
/// until a thread suspends or returns.
pub(crate) fn run(pe: &Pe, first: Thread) {
    let base = Depths::of(pe);
    let _restore = Resumed {
        pe,
        previous: Some(pe.cth.current()),
        block_base: pe.cth.block_base.replace(base.handler),
        overflow_guard: stack::running(),
        depths: base,
    };
    // The thread control comes back to whenever a resumed one yields (for
    // the trace).
    let resumer_id = _restore.previous.as_ref().map_or(0, |p| p.0.id as u32);
    let mut t = first;
    loop {
        let Some(mut co) = t.0.co.borrow_mut().take() else {
            abort(&format!("resume of {}, which is running", t.describe()))
        };
        stack::set_running(stack::RunningStack::new(t.0.guard, t.0.stack_size, pe.pe));
        if t.0.state.replace(State::Running) == State::New {
            pe.cth.live.borrow_mut().started(t.0.slot.get(), &t);
        }
        drop(pe.cth.current.replace(t.clone()));
        // The thread's own depths on top of the resumer's.
        let own = t.0.depths.get();
        if own.handler != 0 || own.sched != 0 {
            Depths::stacked(base, own).apply(pe);
        }
        pe.trace.switch(t.0.id as u32);
        let result = if t.0.migratable {
            resume_routed(pe, &t.0, &mut co)
        } else {
            co.resume(())
        };
        pe.trace.switch(resumer_id);
        let now = Depths::of(pe);
        if now.handler != base.handler || now.sched != base.sched {
            t.0.depths.set(Depths {
                handler: now.handler.saturating_sub(base.handler),
                sched: now.sched.saturating_sub(base.sched),
                allows_direct: now.allows_direct,
            });
            base.apply(pe);
        } else {
            t.0.depths.set(Depths::default());
        }
        match result {
            CoroutineResult::Return(()) => {
                t.0.state.set(State::Finished);
                pe.cth.untrack(t.0.slot.replace(NO_SLOT));
                drop(co);
                give_back_stack(pe, &t.0);
                return;
            }
            CoroutineResult::Yield(switch) => {
                t.0.state.set(State::Suspended);
                if !matches!(switch, Switch::Suspend) {
                    t.0.clean.set(false);
                }
                if t.0.free_pending.get() {
                    destroy(pe, &t, co);
                } else {
                    *t.0.co.borrow_mut() = Some(co);
                }
                match switch {
                    Switch::Suspend => {
                        if let Some(dest) = t.0.migrate_to.take() {
                            migrate::send_to(pe, &t, dest);
                        }
                        return;
                    }
                    Switch::Transfer(next) if next.0.native => {
                        wake_main_flow(&next);
                        return;
                    }
                    Switch::Transfer(next) => t = next,
                }
            }
        }
    }
}

/// Resumes the migratable thread `inner` (its coroutine `co`) with its
/// allocations going where its heap scope says (`heap`), and no longer
/// once it has switched out (unwinding included).
#[inline(never)]
fn resume_routed(pe: &Pe, inner: &Inner, co: &mut Co) -> CoroutineResult<Switch, ()> {
    struct Reroute(heap::Routing);
    impl Drop for Reroute {
        fn drop(&mut self) {
            heap::set_routing(self.0);
        }
    }
    let _reroute = Reroute(heap::set_routing(heap::routing_of(inner, pe)));
    co.resume(())
}

/// At PE teardown: unwinds every coroutine thread still suspended, so that
/// what lives on its stack is dropped (the handles to the PE and to the
/// thread itself included, which would otherwise keep the whole PE alive).
pub(crate) fn unwind_suspended(pe: &Pe) {
    let live = std::mem::take(&mut *pe.cth.live.borrow_mut());
    let mut first_panic = None;
    for entry in live.entries.into_iter().flatten() {
        let inner = match entry {
            LiveEntry::Started(inner) => inner,
            LiveEntry::New(weak) => match weak.upgrade() {
                Some(inner) => inner,
                None => continue,
            },
        };
        inner.slot.set(NO_SLOT);
        let co = inner.co.borrow_mut().take();
        if let Some(mut co) = co {
            inner.state.set(State::Finished);
            // One thread's destructor that panics does not keep the others
            // from being unwound.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                as_thread(pe, &inner, || co.force_unwind());
            }));
            if let Err(payload) = result {
                first_panic.get_or_insert(payload);
            }
        }
        drop_locals(&inner);
    }
    // The main flow's and the stand-ins' thread-private values too, while
    // the PE is still installed (their destructors may ask which PE).
    drop_locals(&pe.cth.main.0);
    let standins = std::mem::take(&mut *pe.cth.standins.borrow_mut());
    for standin in &standins {
        drop_locals(&standin.0);
    }
    if let Some(payload) = first_panic {
        std::panic::resume_unwind(payload);
    }
}

/// Drops a thread's `Ctv` values one at a time, with no borrow held.
fn drop_locals(inner: &Inner) {
    loop {
        let value = inner.locals.borrow_mut().pop();
        match value {
            Some(v) => drop(v),
            None => break,
        }
    }
}

/// Frees a suspended thread: unwinds its stack (running the destructors of
/// what lives there) and returns the stack to the pool.
fn destroy(pe: &Pe, t: &Thread, mut co: Co) {
    t.0.state.set(State::Finished);
    pe.cth.untrack(t.0.slot.replace(NO_SLOT));
    as_thread(pe, &t.0, || co.force_unwind());
    drop(co);
    give_back_stack(pe, &t.0);
}

/// A finished thread's stack (its coroutine dropped already): a pooled one
/// back to the pool, an isomalloc one freed.
fn give_back_stack(pe: &Pe, inner: &Inner) {
    let heap = inner.heap.replace(0);
    if heap != 0 {
        // SAFETY: the thread's own heap; the thread has finished.
        unsafe { heap::orphan(heap) };
    }
    // An isomalloc stack is freed by its `Drop`, here.
    if let Some(StackOwner::Pooled(stack)) = inner.stack.borrow_mut().take() {
        pe.cth.stacks.borrow_mut().put(stack, inner.stack_size);
    }
}

impl Drop for IsoStack {
    fn drop(&mut self) {
        // A block this thread owns; nothing runs on it any more (its
        // coroutine is dropped first: see `Inner::stack`).
        if let Err(e) = crate::mem::isomalloc::free(self.block) {
            crate::proc::exit::abort(&format!("freeing a migratable thread's stack: {e}"));
        }
    }
}

/// Runs `f` (which unwinds `inner`'s stack) as that thread would run: it is
/// `current`, its stack is the one the overflow report names, and its own
/// handler and scheduler depths sit on top of the PE's, so the guards on its
/// stack count down from where they counted up. Everything is put back after,
/// unwinding included.
fn as_thread(pe: &Pe, inner: &Rc<Inner>, f: impl FnOnce()) {
    struct Back<'a> {
        pe: &'a Pe,
        previous: Option<Thread>,
        depths: Depths,
        stack: stack::RunningStack,
        routing: heap::Routing,
    }
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            if let Some(previous) = self.previous.take() {
                self.pe.cth.current.replace(previous);
            }
            self.depths.apply(self.pe);
            stack::set_running(self.stack);
            // What the unwound thread's heap scopes set, undone.
            heap::set_routing(self.routing);
        }
    }
    let base = Depths::of(pe);
    let _back = Back {
        pe,
        previous: Some(pe.cth.current.replace(Thread(inner.clone()))),
        depths: base,
        stack: stack::running(),
        routing: heap::set_routing(heap::NO_ROUTING),
    };
    Depths::stacked(base, inner.depths.replace(Depths::default())).apply(pe);
    stack::set_running(stack::RunningStack::new(
        inner.guard,
        inner.stack_size,
        pe.pe,
    ));
    f();
}
