//! Converse-POSIX threads (the manual's chapter 9, `cthreads.h`): the
//! pthreads API over Converse user-level threads, with `pthread_*` names
//! (the manual's `Cpthread*` names are doc aliases).
//!
//! # The model
//!
//! - A pthread is a Converse thread ([`converse::Thread`]) of the PE that
//!   made it, with a record here: its result, its joiner, whether it is
//!   detached, its thread-specific data and its cancellation state. Its
//!   handle, [`Pthread`] (`pthread_t`), is the thread's number.
//! - Everything is per PE: a pthread, mutex, condition variable or key
//!   belongs to the PE that made it and is used by that PE's pthreads
//!   (the types are not `Send`). To talk to other PEs, pthreads send
//!   messages, as the manual's §9.1 says.
//! - Scheduling is the PE's: threads give up the PE only when they block
//!   (a mutex, a condition variable, a join) or yield ([`pthread_yield`]).
//!   There is no time-slicing (the manual's §9.4): a thread that
//!   busy-waits must yield.
//! - Blocking is allowed in pthreads only. The main flow, handlers and the
//!   start function must keep the PE's scheduler running (§9.5), so a
//!   blocking call there ends the job with that explanation; run the
//!   program's `main` in a pthread with [`cpthreads_start_main`].
//! - Results and thread-specific values are Rust values: a thread function
//!   returns a `Box<dyn Any>` (the C `void *`), [`pthread_join`] gives it
//!   back as [`Exit::Returned`], or [`Exit::Canceled`]
//!   (`PTHREAD_CANCELED`).
//!
//! # Exit and cancellation
//!
//! [`pthread_exit`] and an acted-on cancellation unwind the thread's stack
//! (with `std::panic::resume_unwind`, which runs destructors and prints
//! nothing) to the frame that started it, which records the result. A
//! panic of the program's own goes on up as before. Destructors that run
//! during that unwind must not block (lock a held mutex, wait, join): the
//! runtime sees an unwinding thread that suspends as one that has ended.
//! Once acted on, cancellation is disabled, as POSIX says, so a
//! destructor reaching a cancellation point does not start another. Cancellation is
//! *deferred* only (`PTHREAD_CANCEL_DEFERRED`): it acts at the
//! cancellation points [`pthread_testcancel`], [`pthread_join`],
//! [`PthreadCond::wait`] and [`PthreadCond::timedwait`]; asynchronous
//! cancellation would need preemption and is refused (`EINVAL`).
//!
//! # Mutexes and condition variables
//!
//! A mutex hands itself to the longest waiter on unlock (FIFO, no
//! barging): ownership passes before the waiter runs. Relocking a mutex one
//! owns is `EDEADLK` unless it is recursive (a non-preemptive thread
//! would otherwise wait for itself for ever). A condition variable's
//! waiters are woken in order; a waiter cancelled or timed out leaves the
//! queue and retakes the mutex before it returns or unwinds, as POSIX
//! requires.
//!
//! # Invariants
//!
//! - A record lives from `pthread_create` until the thread has finished and
//!   was joined, or has finished while detached.
//! - A mutex's `owner` is the pthread holding it (every mutex call checks
//!   it is made in a pthread); each waiter in its queue is suspended in
//!   `lock` until `unlock` makes it the owner.
//! - A thread detached while another joins it still wakes its joiner when
//!   it ends; a condition wait that is over (returned or unwound) is never
//!   woken by its timer.
//!
//! # Concurrency
//!
//! None across OS threads: each PE's state is its own (a `Cpv`), touched by
//! its own threads, one at a time.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::Rc;
use std::time::Duration;

use converse::{Cpv, Thread};

/// A pthreads error code (the C functions' non-zero return values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PthreadError {
    /// An invalid argument or state (`EINVAL`): joining a detached thread,
    /// a second joiner, asynchronous cancellation.
    Invalid,
    /// No such thread here (`ESRCH`).
    NoSuchThread,
    /// The call would wait for the caller itself (`EDEADLK`).
    Deadlock,
    /// The resource is held (`EBUSY`): `trylock` of a locked mutex, destroying
    /// a locked mutex or a condition variable with waiters.
    Busy,
    /// The caller does not own the mutex (`EPERM`).
    NotOwner,
    /// A timed wait ran out (`ETIMEDOUT`).
    TimedOut,
    /// No more keys (`EAGAIN`).
    Again,
}

impl std::fmt::Display for PthreadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PthreadError::Invalid => "EINVAL: invalid argument or state",
            PthreadError::NoSuchThread => "ESRCH: no such thread",
            PthreadError::Deadlock => "EDEADLK: the call would wait for the caller itself",
            PthreadError::Busy => "EBUSY: the resource is held",
            PthreadError::NotOwner => "EPERM: the caller does not own the mutex",
            PthreadError::TimedOut => "ETIMEDOUT: the wait ran out",
            PthreadError::Again => "EAGAIN: no more keys",
        })
    }
}

impl std::error::Error for PthreadError {}

/// What a pthread left (`pthread_join`'s `value_ptr`).
#[derive(Debug)]
pub enum Exit {
    /// Its function returned this, or it called [`pthread_exit`] with it.
    Returned(Box<dyn Any>),
    /// It was cancelled (`PTHREAD_CANCELED`).
    #[doc(alias = "PTHREAD_CANCELED")]
    Canceled,
}

/// A pthread's handle (`pthread_t`, `Cpthread_t`): its thread's number on
/// the PE that made it.
#[doc(alias = "pthread_t")]
#[doc(alias = "Cpthread")]
#[doc(alias = "Cpthread_t")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pthread(u64);

/// Whether a new thread is joinable or detached
/// (`PTHREAD_CREATE_JOINABLE`, `PTHREAD_CREATE_DETACHED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DetachState {
    /// Joinable (the default).
    #[doc(alias = "PTHREAD_CREATE_JOINABLE")]
    #[default]
    Joinable,
    /// Detached: its record goes when it finishes.
    #[doc(alias = "PTHREAD_CREATE_DETACHED")]
    Detached,
}

/// Thread attributes (`pthread_attr_t`): stack size and detach state.
#[doc(alias = "pthread_attr_t")]
#[doc(alias = "Cpthread_attr_t")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PthreadAttr {
    stack_size: usize,
    detach: DetachState,
}

impl PthreadAttr {
    /// The default attributes (`pthread_attr_init`): the job's default
    /// stack (`+stacksize`), joinable.
    #[doc(alias = "pthread_attr_init")]
    #[doc(alias = "Cpthread_attr_init")]
    pub fn new() -> PthreadAttr {
        PthreadAttr::default()
    }

    /// Sets the stack size in bytes (`pthread_attr_setstacksize`); 0 is the
    /// job's default. Below 16 KiB is `EINVAL`.
    #[doc(alias = "pthread_attr_setstacksize")]
    #[doc(alias = "Cpthread_attr_setstacksize")]
    pub fn set_stack_size(&mut self, bytes: usize) -> Result<(), PthreadError> {
        if bytes != 0 && bytes < converse::machine::args::MIN_STACK {
            return Err(PthreadError::Invalid);
        }
        self.stack_size = bytes;
        Ok(())
    }

    /// The stack size (`pthread_attr_getstacksize`); 0 is the job's default.
    #[doc(alias = "pthread_attr_getstacksize")]
    #[doc(alias = "Cpthread_attr_getstacksize")]
    pub fn stack_size(&self) -> usize {
        self.stack_size
    }

    /// Sets the detach state (`pthread_attr_setdetachstate`).
    #[doc(alias = "pthread_attr_setdetachstate")]
    #[doc(alias = "Cpthread_attr_setdetachstate")]
    pub fn set_detach_state(&mut self, state: DetachState) {
        self.detach = state;
    }

    /// The detach state (`pthread_attr_getdetachstate`).
    #[doc(alias = "pthread_attr_getdetachstate")]
    #[doc(alias = "Cpthread_attr_getdetachstate")]
    pub fn detach_state(&self) -> DetachState {
        self.detach
    }
}

/// A thread-specific data key (`pthread_key_t`).
#[doc(alias = "pthread_key_t")]
#[doc(alias = "Cpthread_key_t")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PthreadKey(usize);

/// A key's destructor: called at thread exit with the thread's value, if
/// it has one.
pub type KeyDestructor = fn(Rc<dyn Any>);

/// Most keys a PE may have at once (`PTHREAD_KEYS_MAX`).
#[doc(alias = "PTHREAD_KEYS_MAX")]
pub const KEYS_MAX: usize = 1024;

/// Rounds of destructor calls at thread exit (`PTHREAD_DESTRUCTOR_ITERATIONS`):
/// a destructor that sets values makes another round, up to this many.
#[doc(alias = "PTHREAD_DESTRUCTOR_ITERATIONS")]
pub const DESTRUCTOR_ITERATIONS: usize = 4;

/// One pthread's record.
struct Record {
    thread: Thread,
    detached: Cell<bool>,
    /// Set when its function has returned (or it exited).
    exit: RefCell<Option<Exit>>,
    finished: Cell<bool>,
    /// The thread waiting in `pthread_join` for it.
    joiner: RefCell<Option<Rc<Record>>>,
    specific: RefCell<HashMap<usize, Rc<dyn Any>>>,
    cancel_pending: Cell<bool>,
    cancel_enabled: Cell<bool>,
    /// Suspended at a cancellation point: a cancel awakens it.
    at_cancel_point: Cell<bool>,
    /// Awakened and not yet run: a second waker (a signal and a cancel, a
    /// timeout and a cancel) must not awaken it again.
    woken: Cell<bool>,
}

impl Record {
    /// Awakens the thread, suspended in [`Record::block`], once.
    fn wake(&self) {
        if !self.woken.replace(true) {
            self.thread.awaken();
        }
    }

    /// Suspends the calling thread (this record's) until a [`wake`](Record::wake).
    fn block(&self) {
        converse::suspend();
        self.woken.set(false);
    }
}

/// Hashes thread numbers (unique `u64`s) with one multiplication: the
/// record lookup is on the path of every contended lock, and SipHash cost
/// a few percent of a hand-off there.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type ById<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// One PE's pthreads.
#[derive(Default)]
struct State {
    threads: RefCell<ById<Rc<Record>>>,
    keys: RefCell<Vec<Option<Option<KeyDestructor>>>>,
}

impl State {
    /// The record of `thread`, a pthread of this PE (`ESRCH` if none).
    fn record(&self, thread: Pthread) -> Result<Rc<Record>, PthreadError> {
        self.threads
            .borrow()
            .get(&thread.0)
            .cloned()
            .ok_or(PthreadError::NoSuchThread)
    }
}

static STATE: Cpv<State> = Cpv::new();

/// Sets up pthreads on the calling PE (`CpthreadModuleInit`): call it on
/// every PE before any other pthread function (the manual's §9.6), or
/// [`install`] once before the job. A second call does nothing.
#[doc(alias = "CpthreadModuleInit")]
pub fn module_init() {
    if !STATE.is_initialized() {
        STATE.initialize(State::default());
    }
}

/// Registers [`module_init`] as a module-init hook of the core: every PE of
/// the jobs started afterwards runs it. Returns false if it was already.
pub fn install() -> bool {
    converse::register_module_init("converse-ext cpthreads", module_init)
}

fn state(what: &str) -> Rc<State> {
    if !STATE.is_initialized() {
        converse::abort(&format!(
            "{what} on PE {} before CpthreadModuleInit (cpthreads::module_init on every PE, or cpthreads::install before the job)",
            converse::my_pe()
        ));
    }
    STATE.get()
}

/// The record of the calling pthread; the job ends, with the manual's
/// explanation, if the caller is no pthread.
fn me(what: &str) -> Rc<Record> {
    let s = state(what);
    let id = Thread::current().id();
    let record = s.threads.borrow().get(&id).cloned();
    record.unwrap_or_else(|| {
        converse::abort(&format!(
            "{what} on PE {} outside a pthread: pthread functions may only be called in threads made by pthread_create, and the main flow, handlers and the start function must not block (manual §9.3, §9.5); run your main in a pthread with Cpthreads_start_main",
            converse::my_pe()
        ))
    })
}

/// What unwinds a pthread's stack on exit or cancellation; the exit itself
/// waits in the record (an unwind payload must be `Send`, a result need
/// not be).
struct Unwind;

/// Ends the calling pthread `r` with `exit`, unwinding its stack.
fn unwind_with(r: &Record, exit: Exit) -> ! {
    *r.exit.borrow_mut() = Some(exit);
    resume_unwind(Box::new(Unwind))
}

/// Acts on a pending cancellation of `r` (a cancellation point).
fn cancellation_point(r: &Record) {
    if r.cancel_enabled.get() && r.cancel_pending.get() {
        // As POSIX: once acted on, cancellation is disabled, so a
        // destructor that reaches a cancellation point during the unwind
        // does not start a second one.
        r.cancel_enabled.set(false);
        unwind_with(r, Exit::Canceled);
    }
}

/// Creates a pthread on the calling PE running `start` (`pthread_create`);
/// it runs once the caller blocks, yields or returns to the scheduler.
/// `start` returns the thread's result (the C `void *`).
#[doc(alias = "Cpthread_create")]
pub fn pthread_create(
    attr: &PthreadAttr,
    start: impl FnOnce() -> Box<dyn Any> + 'static,
) -> Result<Pthread, PthreadError> {
    let s = state("pthread_create");
    let slot: Rc<RefCell<Option<Rc<Record>>>> = Rc::default();
    let mine = Rc::clone(&slot);
    let thread = Thread::create(
        move || {
            let outcome = catch_unwind(AssertUnwindSafe(start));
            let record = mine.borrow_mut().take().expect("the record was made");
            let exit = match outcome {
                Ok(v) => Exit::Returned(v),
                Err(payload) => match payload.downcast::<Unwind>() {
                    Ok(_) => record
                        .exit
                        .borrow_mut()
                        .take()
                        .expect("an unwinding pthread left its exit"),
                    Err(other) => resume_unwind(other),
                },
            };
            finish(&record, exit);
        },
        attr.stack_size,
    );
    let record = Rc::new(Record {
        thread: thread.clone(),
        detached: Cell::new(attr.detach == DetachState::Detached),
        exit: RefCell::new(None),
        finished: Cell::new(false),
        joiner: RefCell::new(None),
        specific: RefCell::new(HashMap::new()),
        cancel_pending: Cell::new(false),
        cancel_enabled: Cell::new(true),
        at_cancel_point: Cell::new(false),
        woken: Cell::new(false),
    });
    *slot.borrow_mut() = Some(Rc::clone(&record));
    s.threads.borrow_mut().insert(thread.id(), record);
    thread.awaken();
    Ok(Pthread(thread.id()))
}

/// The end of a pthread: destructors of its keys, then its result for a
/// joiner (or its record goes, if detached).
fn finish(r: &Rc<Record>, exit: Exit) {
    let s = state("a pthread's end");
    for _ in 0..DESTRUCTOR_ITERATIONS {
        let values: Vec<(usize, Rc<dyn Any>)> = r.specific.borrow_mut().drain().collect();
        if values.is_empty() {
            break;
        }
        for (key, value) in values {
            let destructor = s.keys.borrow().get(key).copied().flatten().flatten();
            if let Some(d) = destructor {
                d(value);
            }
        }
    }
    // Values set by the last round's destructors: dropped after the borrow.
    let left = std::mem::take(&mut *r.specific.borrow_mut());
    drop(left);
    *r.exit.borrow_mut() = Some(exit);
    r.finished.set(true);
    let joiner = r.joiner.borrow_mut().take();
    if let Some(j) = joiner {
        j.wake();
    }
    if r.detached.get() {
        s.threads.borrow_mut().remove(&r.thread.id());
    }
}

/// The calling pthread (`pthread_self`).
#[doc(alias = "Cpthread_self")]
pub fn pthread_self() -> Pthread {
    me("pthread_self");
    Pthread(Thread::current().id())
}

/// True if `a` and `b` are the same thread (`pthread_equal`).
#[doc(alias = "Cpthread_equal")]
pub fn pthread_equal(a: Pthread, b: Pthread) -> bool {
    a == b
}

/// Gives the PE to the other threads and messages waiting for it
/// (`pthread_yield`, `sched_yield`): the only way a busy thread lets others
/// run (no time-slicing, §9.4).
#[doc(alias = "Cpthread_yield")]
pub fn pthread_yield() {
    converse::yield_now();
}

/// Ends the calling pthread with `value` (`pthread_exit`): its stack
/// unwinds (destructors run) to where it started.
#[doc(alias = "Cpthread_exit")]
pub fn pthread_exit(value: Box<dyn Any>) -> ! {
    unwind_with(&me("pthread_exit"), Exit::Returned(value))
}

/// Waits for `thread` to finish and takes its result (`pthread_join`); a
/// cancellation point. `EDEADLK` for the caller itself, `EINVAL` for a
/// detached thread or one another thread joins, `ESRCH` for no thread of
/// this PE.
#[doc(alias = "Cpthread_join")]
pub fn pthread_join(thread: Pthread) -> Result<Exit, PthreadError> {
    let caller = me("pthread_join");
    let s = state("pthread_join");
    if thread.0 == Thread::current().id() {
        return Err(PthreadError::Deadlock);
    }
    let target = s.record(thread)?;
    if target.detached.get() || target.joiner.borrow().is_some() {
        return Err(PthreadError::Invalid);
    }
    cancellation_point(&caller);
    if !target.finished.get() {
        converse::check_can_block("pthread_join");
        *target.joiner.borrow_mut() = Some(Rc::clone(&caller));
        while !target.finished.get() {
            caller.at_cancel_point.set(true);
            caller.block();
            caller.at_cancel_point.set(false);
            if caller.cancel_enabled.get() && caller.cancel_pending.get() {
                target.joiner.borrow_mut().take();
                cancellation_point(&caller);
            }
        }
    }
    s.threads.borrow_mut().remove(&thread.0);
    Ok(target
        .exit
        .borrow_mut()
        .take()
        .expect("a finished thread left its exit"))
}

/// Detaches `thread` (`pthread_detach`): its record goes when it finishes,
/// and it cannot be joined. `EINVAL` if already detached, `ESRCH` for no
/// thread of this PE.
#[doc(alias = "Cpthread_detach")]
pub fn pthread_detach(thread: Pthread) -> Result<(), PthreadError> {
    let s = state("pthread_detach");
    let target = s.record(thread)?;
    if target.detached.replace(true) {
        return Err(PthreadError::Invalid);
    }
    if target.finished.get() {
        s.threads.borrow_mut().remove(&thread.0);
    }
    Ok(())
}

/// Whether cancellation acts (`PTHREAD_CANCEL_ENABLE`,
/// `PTHREAD_CANCEL_DISABLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelState {
    /// Acted on at cancellation points (the default).
    #[doc(alias = "PTHREAD_CANCEL_ENABLE")]
    Enable,
    /// Kept pending until enabled again.
    #[doc(alias = "PTHREAD_CANCEL_DISABLE")]
    Disable,
}

/// When cancellation acts (`PTHREAD_CANCEL_DEFERRED`,
/// `PTHREAD_CANCEL_ASYNCHRONOUS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelType {
    /// At cancellation points (the only type here).
    #[doc(alias = "PTHREAD_CANCEL_DEFERRED")]
    Deferred,
    /// At any moment: needs preemption, which Converse threads do not have
    /// (§9.4); refused.
    #[doc(alias = "PTHREAD_CANCEL_ASYNCHRONOUS")]
    Asynchronous,
}

/// Asks `thread` to end (`pthread_cancel`): it does so at its next
/// cancellation point with cancellation enabled (it is awakened if it
/// waits at one). `ESRCH` for no thread of this PE.
#[doc(alias = "Cpthread_cancel")]
pub fn pthread_cancel(thread: Pthread) -> Result<(), PthreadError> {
    let s = state("pthread_cancel");
    let target = s.record(thread)?;
    if target.finished.get() {
        return Ok(());
    }
    target.cancel_pending.set(true);
    if target.cancel_enabled.get() && target.at_cancel_point.get() {
        target.wake();
    }
    Ok(())
}

/// Sets the calling pthread's cancel state and returns the old one
/// (`pthread_setcancelstate`).
#[doc(alias = "Cpthread_setcancelstate")]
pub fn pthread_setcancelstate(state: CancelState) -> CancelState {
    let r = me("pthread_setcancelstate");
    let old = r.cancel_enabled.replace(state == CancelState::Enable);
    if old {
        CancelState::Enable
    } else {
        CancelState::Disable
    }
}

/// Sets the calling pthread's cancel type (`pthread_setcanceltype`):
/// deferred only; asynchronous is `EINVAL` (no preemption, §9.4).
#[doc(alias = "Cpthread_setcanceltype")]
pub fn pthread_setcanceltype(kind: CancelType) -> Result<CancelType, PthreadError> {
    me("pthread_setcanceltype");
    match kind {
        CancelType::Deferred => Ok(CancelType::Deferred),
        CancelType::Asynchronous => Err(PthreadError::Invalid),
    }
}

/// A cancellation point (`pthread_testcancel`): ends the calling pthread if
/// a cancellation is pending and enabled.
#[doc(alias = "Cpthread_testcancel")]
pub fn pthread_testcancel() {
    cancellation_point(&me("pthread_testcancel"));
}

/// Makes a key for thread-specific data (`pthread_key_create`), with an
/// optional destructor. `EAGAIN` past [`KEYS_MAX`].
#[doc(alias = "Cpthread_key_create")]
pub fn pthread_key_create(destructor: Option<KeyDestructor>) -> Result<PthreadKey, PthreadError> {
    let s = state("pthread_key_create");
    let mut keys = s.keys.borrow_mut();
    if let Some(free) = keys.iter().position(Option::is_none) {
        keys[free] = Some(destructor);
        return Ok(PthreadKey(free));
    }
    if keys.len() == KEYS_MAX {
        return Err(PthreadError::Again);
    }
    keys.push(Some(destructor));
    Ok(PthreadKey(keys.len() - 1))
}

/// Deletes `key` (`pthread_key_delete`); threads' values for it are
/// dropped without their destructor, as POSIX says. `EINVAL` for no such
/// key.
#[doc(alias = "Cpthread_key_delete")]
pub fn pthread_key_delete(key: PthreadKey) -> Result<(), PthreadError> {
    let s = state("pthread_key_delete");
    match s.keys.borrow_mut().get_mut(key.0) {
        Some(k @ Some(_)) => *k = None,
        _ => return Err(PthreadError::Invalid),
    }
    // The values are dropped after the borrows end: a value's `Drop` may
    // call back into this module.
    let records: Vec<Rc<Record>> = s.threads.borrow().values().cloned().collect();
    let values: Vec<Rc<dyn Any>> = records
        .iter()
        .filter_map(|r| r.specific.borrow_mut().remove(&key.0))
        .collect();
    drop(values);
    Ok(())
}

/// Sets the calling pthread's value for `key` (`pthread_setspecific`);
/// `None` clears it. `EINVAL` for no such key.
#[doc(alias = "Cpthread_setspecific")]
pub fn pthread_setspecific(
    key: PthreadKey,
    value: Option<Rc<dyn Any>>,
) -> Result<(), PthreadError> {
    let r = me("pthread_setspecific");
    let s = state("pthread_setspecific");
    if !matches!(s.keys.borrow().get(key.0), Some(Some(_))) {
        return Err(PthreadError::Invalid);
    }
    let old = match value {
        Some(v) => r.specific.borrow_mut().insert(key.0, v),
        None => r.specific.borrow_mut().remove(&key.0),
    };
    drop(old); // after the borrow: its `Drop` may call back in
    Ok(())
}

/// The calling pthread's value for `key` (`pthread_getspecific`), if any.
#[doc(alias = "Cpthread_getspecific")]
pub fn pthread_getspecific(key: PthreadKey) -> Option<Rc<dyn Any>> {
    me("pthread_getspecific")
        .specific
        .borrow()
        .get(&key.0)
        .cloned()
}

/// A one-time initialization (`pthread_once_t`, `PTHREAD_ONCE_INIT` is
/// [`PthreadOnce::new`]).
#[doc(alias = "pthread_once_t")]
#[doc(alias = "Cpthread_once_t")]
#[doc(alias = "PTHREAD_ONCE_INIT")]
#[derive(Default)]
pub struct PthreadOnce {
    state: Cell<u8>,
    waiters: RefCell<Vec<Rc<Record>>>,
}

const ONCE_NEW: u8 = 0;
const ONCE_RUNNING: u8 = 1;
const ONCE_DONE: u8 = 2;

impl PthreadOnce {
    /// Not yet run.
    pub const fn new() -> PthreadOnce {
        PthreadOnce {
            state: Cell::new(ONCE_NEW),
            waiters: RefCell::new(Vec::new()),
        }
    }
}

/// Runs `init` the first time any thread calls this with `once`
/// (`pthread_once`); a thread that comes while another runs it waits until
/// it has finished.
#[doc(alias = "Cpthread_once")]
pub fn pthread_once(once: &PthreadOnce, init: impl FnOnce()) {
    /// Ends a run of the init: done, or (it unwound: an exit or a cancel)
    /// not run, as POSIX says; either way the waiters look again.
    struct Finish<'a> {
        once: &'a PthreadOnce,
        done: bool,
    }
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            let state = if self.done { ONCE_DONE } else { ONCE_NEW };
            self.once.state.set(state);
            let waiters: Vec<Rc<Record>> = self.once.waiters.borrow_mut().drain(..).collect();
            for r in waiters {
                r.wake();
            }
        }
    }
    let mut init = Some(init);
    loop {
        match once.state.get() {
            ONCE_DONE => return,
            ONCE_RUNNING => {
                let r = me("pthread_once");
                converse::check_can_block("pthread_once");
                while once.state.get() == ONCE_RUNNING {
                    once.waiters.borrow_mut().push(Rc::clone(&r));
                    r.block();
                }
            }
            _ => {
                once.state.set(ONCE_RUNNING);
                let mut finish = Finish { once, done: false };
                (init.take().expect("the init runs at most once here"))();
                finish.done = true;
                return;
            }
        }
    }
}

/// A mutex's kind (`PTHREAD_MUTEX_NORMAL`, `_ERRORCHECK`, `_RECURSIVE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MutexKind {
    /// The default. Relocking by the owner is `EDEADLK` (it would wait for
    /// itself for ever on a non-preemptive PE).
    #[doc(alias = "PTHREAD_MUTEX_NORMAL")]
    #[doc(alias = "PTHREAD_MUTEX_DEFAULT")]
    #[default]
    Normal,
    /// Errors for every misuse: relocking (`EDEADLK`), unlocking another's
    /// (`EPERM`).
    #[doc(alias = "PTHREAD_MUTEX_ERRORCHECK")]
    ErrorCheck,
    /// The owner may lock again; it is free after as many unlocks.
    #[doc(alias = "PTHREAD_MUTEX_RECURSIVE")]
    Recursive,
}

/// Mutex attributes (`pthread_mutexattr_t`): the kind.
#[doc(alias = "pthread_mutexattr_t")]
#[doc(alias = "pthread_mutexattr_init")]
#[doc(alias = "pthread_mutexattr_settype")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PthreadMutexAttr {
    /// The kind (`pthread_mutexattr_settype` / `_gettype`).
    pub kind: MutexKind,
}

/// A mutex of the calling PE's pthreads (`pthread_mutex_t`).
#[doc(alias = "pthread_mutex_t")]
#[doc(alias = "Cpthread_mutex_t")]
#[doc(alias = "PTHREAD_MUTEX_INITIALIZER")]
pub struct PthreadMutex {
    kind: MutexKind,
    /// The owner's thread number.
    owner: Cell<Option<u64>>,
    count: Cell<usize>,
    waiters: RefCell<VecDeque<Rc<Record>>>,
}

impl Default for PthreadMutex {
    fn default() -> Self {
        PthreadMutex::new(&PthreadMutexAttr::default())
    }
}

impl PthreadMutex {
    /// An unlocked mutex (`pthread_mutex_init`).
    #[doc(alias = "pthread_mutex_init")]
    #[doc(alias = "Cpthread_mutex_init")]
    pub fn new(attr: &PthreadMutexAttr) -> PthreadMutex {
        PthreadMutex {
            kind: attr.kind,
            owner: Cell::new(None),
            count: Cell::new(0),
            waiters: RefCell::new(VecDeque::new()),
        }
    }

    /// Locks it, waiting while another thread holds it
    /// (`pthread_mutex_lock`). `EDEADLK` if the caller holds it (unless
    /// recursive).
    #[doc(alias = "pthread_mutex_lock")]
    #[doc(alias = "Cpthread_mutex_lock")]
    pub fn lock(&self) -> Result<(), PthreadError> {
        let r = crate::cpthreads::me("pthread_mutex_lock");
        let me = Thread::current();
        match self.owner.get() {
            None => {
                self.owner.set(Some(me.id()));
                self.count.set(1);
                Ok(())
            }
            Some(o) if o == me.id() => {
                if self.kind == MutexKind::Recursive {
                    self.count.set(self.count.get() + 1);
                    Ok(())
                } else {
                    Err(PthreadError::Deadlock)
                }
            }
            Some(_) => {
                converse::check_can_block("pthread_mutex_lock");
                self.waiters.borrow_mut().push_back(Rc::clone(&r));
                // `unlock` makes the first waiter the owner before it
                // awakens it.
                while self.owner.get() != Some(me.id()) {
                    r.block();
                }
                Ok(())
            }
        }
    }

    /// Locks it if it is free (`pthread_mutex_trylock`); `EBUSY` if not.
    #[doc(alias = "pthread_mutex_trylock")]
    #[doc(alias = "Cpthread_mutex_trylock")]
    pub fn trylock(&self) -> Result<(), PthreadError> {
        me("pthread_mutex_trylock");
        let me = Thread::current().id();
        match self.owner.get() {
            None => {
                self.owner.set(Some(me));
                self.count.set(1);
                Ok(())
            }
            Some(o) if o == me && self.kind == MutexKind::Recursive => {
                self.count.set(self.count.get() + 1);
                Ok(())
            }
            Some(_) => Err(PthreadError::Busy),
        }
    }

    /// Unlocks it (`pthread_mutex_unlock`), handing it to the longest
    /// waiter. `EPERM` if the caller does not hold it.
    #[doc(alias = "pthread_mutex_unlock")]
    #[doc(alias = "Cpthread_mutex_unlock")]
    pub fn unlock(&self) -> Result<(), PthreadError> {
        me("pthread_mutex_unlock");
        if self.owner.get() != Some(Thread::current().id()) {
            return Err(PthreadError::NotOwner);
        }
        if self.count.get() > 1 {
            self.count.set(self.count.get() - 1);
            return Ok(());
        }
        let next = self.waiters.borrow_mut().pop_front();
        match next {
            Some(r) => {
                self.owner.set(Some(r.thread.id()));
                self.count.set(1);
                r.wake();
            }
            None => {
                self.owner.set(None);
                self.count.set(0);
            }
        }
        Ok(())
    }

    /// Checks it may be destroyed (`pthread_mutex_destroy`): `EBUSY` while
    /// it is held. Dropping it frees it; it stays usable after an error.
    #[doc(alias = "pthread_mutex_destroy")]
    #[doc(alias = "Cpthread_mutex_destroy")]
    pub fn destroy(&self) -> Result<(), PthreadError> {
        if self.owner.get().is_some() {
            return Err(PthreadError::Busy);
        }
        Ok(())
    }

    /// True while some thread holds it.
    pub fn is_locked(&self) -> bool {
        self.owner.get().is_some()
    }
}

/// A waiter of a condition variable.
struct CondWaiter {
    record: Rc<Record>,
    /// Woken by `signal`/`broadcast` (not by a cancel or a timeout).
    signaled: Cell<bool>,
    timed_out: Cell<bool>,
    /// The wait is over (returned or unwound): a late timer does nothing.
    done: Cell<bool>,
}

/// A condition variable of the calling PE's pthreads (`pthread_cond_t`).
#[doc(alias = "pthread_cond_t")]
#[doc(alias = "Cpthread_cond_t")]
#[doc(alias = "PTHREAD_COND_INITIALIZER")]
#[derive(Default)]
pub struct PthreadCond {
    waiters: RefCell<VecDeque<Rc<CondWaiter>>>,
}

impl PthreadCond {
    /// A condition variable no thread waits on (`pthread_cond_init`).
    #[doc(alias = "pthread_cond_init")]
    #[doc(alias = "Cpthread_cond_init")]
    pub fn new() -> PthreadCond {
        PthreadCond::default()
    }

    /// Unlocks `mutex`, waits for a signal, and locks `mutex` again before
    /// returning (`pthread_cond_wait`); a cancellation point. `EPERM` if
    /// the caller does not hold `mutex`.
    #[doc(alias = "pthread_cond_wait")]
    #[doc(alias = "Cpthread_cond_wait")]
    pub fn wait(&self, mutex: &PthreadMutex) -> Result<(), PthreadError> {
        self.wait_impl(mutex, None)
    }

    /// As [`wait`](PthreadCond::wait), giving up after `timeout`
    /// (`pthread_cond_timedwait`, with a relative time where C has an
    /// absolute one): `ETIMEDOUT`, with `mutex` locked again.
    #[doc(alias = "pthread_cond_timedwait")]
    #[doc(alias = "Cpthread_cond_timedwait")]
    pub fn timedwait(&self, mutex: &PthreadMutex, timeout: Duration) -> Result<(), PthreadError> {
        self.wait_impl(mutex, Some(timeout))
    }

    fn wait_impl(
        &self,
        mutex: &PthreadMutex,
        timeout: Option<Duration>,
    ) -> Result<(), PthreadError> {
        let r = me("pthread_cond_wait");
        if mutex.owner.get() != Some(Thread::current().id()) {
            return Err(PthreadError::NotOwner);
        }
        cancellation_point(&r);
        converse::check_can_block("pthread_cond_wait");
        let waiter = Rc::new(CondWaiter {
            record: Rc::clone(&r),
            signaled: Cell::new(false),
            timed_out: Cell::new(false),
            done: Cell::new(false),
        });
        self.waiters.borrow_mut().push_back(Rc::clone(&waiter));
        if let Some(t) = timeout {
            let w = Rc::clone(&waiter);
            converse::call_fn_after(
                move |_| {
                    if !w.signaled.get() && !w.done.get() {
                        w.timed_out.set(true);
                        w.record.wake();
                    }
                },
                t.as_secs_f64() * 1000.0,
            );
        }
        // A recursive mutex is released whole and retaken at its depth.
        let depth = mutex.count.replace(1);
        mutex.unlock()?;
        loop {
            r.at_cancel_point.set(true);
            r.block();
            r.at_cancel_point.set(false);
            let canceled = r.cancel_enabled.get() && r.cancel_pending.get();
            if waiter.signaled.get() || waiter.timed_out.get() || canceled {
                break;
            }
        }
        waiter.done.set(true);
        if !waiter.signaled.get() {
            self.waiters
                .borrow_mut()
                .retain(|w| !Rc::ptr_eq(w, &waiter));
        }
        mutex.lock()?;
        mutex.count.set(depth);
        if waiter.signaled.get() {
            return Ok(());
        }
        cancellation_point(&r);
        Err(PthreadError::TimedOut)
    }

    /// Wakes the longest waiter, if any (`pthread_cond_signal`).
    #[doc(alias = "pthread_cond_signal")]
    #[doc(alias = "Cpthread_cond_signal")]
    pub fn signal(&self) {
        let first = self.waiters.borrow_mut().pop_front();
        if let Some(w) = first {
            w.signaled.set(true);
            w.record.wake();
        }
    }

    /// Wakes every waiter (`pthread_cond_broadcast`).
    #[doc(alias = "pthread_cond_broadcast")]
    #[doc(alias = "Cpthread_cond_broadcast")]
    pub fn broadcast(&self) {
        let all: Vec<Rc<CondWaiter>> = self.waiters.borrow_mut().drain(..).collect();
        for w in all {
            w.signaled.set(true);
            w.record.wake();
        }
    }

    /// Checks it may be destroyed (`pthread_cond_destroy`): `EBUSY` while
    /// threads wait on it.
    #[doc(alias = "pthread_cond_destroy")]
    #[doc(alias = "Cpthread_cond_destroy")]
    pub fn destroy(&self) -> Result<(), PthreadError> {
        if self.waiters.borrow().is_empty() {
            Ok(())
        } else {
            Err(PthreadError::Busy)
        }
    }
}

/// Runs `main(args)` in the first pthread of the calling PE
/// (`Cpthreads_start_main`): call it from the start function, after
/// [`module_init`], so that the program's POSIX `main` may block (§9.5).
/// The job goes on when it returns; end it with `converse::exit`.
#[doc(alias = "Cpthreads_start_main")]
pub fn cpthreads_start_main(main: impl FnOnce(&[String]) + 'static, args: &[String]) -> Pthread {
    let args = args.to_vec();
    let mut attr = PthreadAttr::new();
    attr.set_detach_state(DetachState::Detached);
    pthread_create(&attr, move || {
        main(&args);
        Box::new(())
    })
    .expect("a detached thread with the default stack")
}
