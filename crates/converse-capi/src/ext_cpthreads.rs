//! Converse-POSIX threads from C (`cpthreads.h`, the extensions manual's
//! chapter 9): the `Cpthread_*` functions (the header also names them
//! `pthread_*` unless `SUPPRESS_PTHREADS` is defined), over
//! [`converse_ext::cpthreads`].
//!
//! # Handles and objects
//!
//! - A `Cpthread_t` is a number (an `unsigned long`, as glibc's
//!   `pthread_t`), the key of the thread's entry in the PE's table
//!   (`Threads`), which maps it to the Rust [`Pthread`] and back. An
//!   entry lives until the thread is joined, or, once it is detached and
//!   finished, until the next `Cpthread_create` of the PE sweeps it.
//! - A `Cpthread_key_t` is the index of a slot of the PE's table holding
//!   the Rust key and the C destructor. A thread's value is kept in the
//!   Rust thread-specific data as a `Specific`: the pointer and that
//!   destructor, which the Rust destructor hook calls at thread exit for a
//!   non-null value, as POSIX says.
//! - Mutexes and condition variables are C structs (`magic`, `pe`, `impl`)
//!   whose `impl` is a boxed Rust [`PthreadMutex`] or [`PthreadCond`],
//!   made by `*_init` or, for a struct set by `CPTHREAD_MUTEX_INITIALIZER`
//!   (or the condition's), on its first use; `*_destroy` frees it. The
//!   `magic` word says which (0 for the static initializer; another value
//!   than the module's two is `EINVAL`), read and set atomically so that a
//!   first use racing on two PEs is caught rather than torn: an object
//!   belongs to the PE that made it, and using it on another ends the job
//!   naming both (the Rust objects are per PE).
//! - A `Cpthread_once_t` is identified by its address: each PE keeps one
//!   Rust [`PthreadOnce`] per address, so a global once object runs its
//!   function once per PE (everything is per PE here).
//! - Attribute objects are plain C data (a magic word and the values).
//!
//! # Exit and cleanup handlers
//!
//! `Cpthread_exit` runs the thread's cleanup handlers (pushed with
//! `Cpthread_cleanup_push`, last first), then ends the thread through the
//! Rust `pthread_exit`, which unwinds the C frames back to where the thread
//! started (C is compiled with unwind tables). A thread whose function
//! returns does not run them (POSIX leaves that undefined; pop them).
//! Cancellation is not offered (Charm++'s Cpthreads has none), so these are
//! the only ways a pthread ends besides the job's end.
//!
//! # Concurrency
//!
//! Per PE: the tables are a `Cpv`, touched by the PE's threads one at a
//! time, never borrowed while C code runs or the running thread may
//! switch.
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_ulong, c_void};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use converse::Cpv;
use converse_ext::cpthreads::{
    self, DetachState, Exit, MutexKind, Pthread, PthreadAttr, PthreadCond, PthreadError,
    PthreadKey, PthreadMutex, PthreadMutexAttr, PthreadOnce,
};

/// A thread's function: `void *fn(void *arg)`.
pub type StartFn = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;
/// A key's destructor or a cleanup handler: `void fn(void *)`.
pub type VoidPtrFn = unsafe extern "C-unwind" fn(*mut c_void);
/// A once function: `void fn(void)`.
pub type OnceFn = unsafe extern "C-unwind" fn();
/// `Cpthreads_start_main`'s function: `main(argc, argv)` (its result, if
/// any, is not read).
pub type MainFn = unsafe extern "C-unwind" fn(c_int, *mut *mut c_char);

/// `CPTHREAD_CREATE_JOINABLE`.
pub const CREATE_JOINABLE: c_int = 0;
/// `CPTHREAD_CREATE_DETACHED`.
pub const CREATE_DETACHED: c_int = 1;
/// `CPTHREAD_PROCESS_PRIVATE`.
pub const PROCESS_PRIVATE: c_int = 0;
/// `CPTHREAD_PROCESS_SHARED` (refused: `ENOTSUP`).
pub const PROCESS_SHARED: c_int = 1;
/// `CPTHREAD_MUTEX_NORMAL` (and `_DEFAULT`).
pub const MUTEX_NORMAL: c_int = 0;
/// `CPTHREAD_MUTEX_RECURSIVE`.
pub const MUTEX_RECURSIVE: c_int = 1;
/// `CPTHREAD_MUTEX_ERRORCHECK`.
pub const MUTEX_ERRORCHECK: c_int = 2;
/// `CPTHREAD_STACK_MIN`: the header's value is the runtime's smallest
/// thread stack.
pub const STACK_MIN: usize = 16384;
const _: () = assert!(STACK_MIN == converse::machine::args::MIN_STACK);

const ATTR_MAGIC: c_int = 0x4370_6174;
const MUTEXATTR_MAGIC: c_int = 0x4370_6d61;
const CONDATTR_MAGIC: c_int = 0x4370_6361;
const MUTEX_MAGIC: c_int = 0x4370_6d78;
const COND_MAGIC: c_int = 0x4370_6364;
/// An object being made by its first use (a static initializer's).
const MAKING: c_int = 1;
/// A destroyed object.
const DESTROYED: c_int = 0x2d2d_2d2d;

/// `Cpthread_attr_t`.
#[repr(C)]
pub struct AttrC {
    magic: c_int,
    detachstate: c_int,
    stacksize: usize,
}

/// `Cpthread_mutexattr_t`.
#[repr(C)]
pub struct MutexAttrC {
    magic: c_int,
    pshared: c_int,
    kind: c_int,
}

/// `Cpthread_condattr_t`.
#[repr(C)]
pub struct CondAttrC {
    magic: c_int,
    pshared: c_int,
}

/// `Cpthread_mutex_t` and `Cpthread_cond_t`: the magic word, the owning
/// PE, the boxed Rust object.
#[repr(C)]
pub struct ObjectC {
    magic: c_int,
    pe: c_int,
    imp: *mut c_void,
}

/// `Cpthread_once_t` (its address is what counts).
#[repr(C)]
pub struct OnceC {
    unused: c_int,
}

/// A thread's result, as the Rust thread returns it.
struct CValue(*mut c_void);

/// A thread's value for a key.
struct Specific {
    ptr: *mut c_void,
    destructor: Option<VoidPtrFn>,
}

/// One thread's entry.
struct Entry {
    pthread: Pthread,
    detached: bool,
    /// Its function has returned, or it called `Cpthread_exit`.
    finished: bool,
    cleanup: Vec<(VoidPtrFn, *mut c_void)>,
}

/// A PE's Cpthreads tables (see the module comment).
#[derive(Default)]
struct Threads {
    next: c_ulong,
    by_handle: HashMap<c_ulong, Entry>,
    by_pthread: HashMap<Pthread, c_ulong>,
    keys: Vec<Option<(PthreadKey, Option<VoidPtrFn>)>>,
    onces: HashMap<usize, Rc<PthreadOnce>>,
}

static THREADS: Cpv<RefCell<Threads>> = Cpv::new();

fn tables(call: &str) -> Rc<RefCell<Threads>> {
    THREADS.try_get().unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {} before CpthreadModuleInit (call it on every PE first)",
            converse::my_pe()
        ))
    })
}

fn errno(e: PthreadError) -> c_int {
    match e {
        PthreadError::Invalid => libc::EINVAL,
        PthreadError::NoSuchThread => libc::ESRCH,
        PthreadError::Deadlock => libc::EDEADLK,
        PthreadError::Busy => libc::EBUSY,
        PthreadError::NotOwner => libc::EPERM,
        PthreadError::TimedOut => libc::ETIMEDOUT,
        PthreadError::Again => libc::EAGAIN,
    }
}

fn code(r: Result<(), PthreadError>) -> c_int {
    r.map_or_else(errno, |()| 0)
}

/// `CpthreadModuleInit()`: sets pthreads up on the calling PE; call it on
/// every PE before any other pthread function. Idempotent.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CpthreadModuleInit() {
    cpthreads::module_init();
    if THREADS.try_get().is_none() {
        THREADS.initialize(RefCell::new(Threads {
            next: 1,
            ..Threads::default()
        }));
    }
}

/// The handle of the calling pthread (the job ends if it is none).
fn self_handle(call: &str) -> c_ulong {
    let t = tables(call);
    let me = cpthreads::pthread_self();
    let found = t.borrow().by_pthread.get(&me).copied();
    found.unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {} in a pthread Cpthread_create did not make",
            converse::my_pe()
        ))
    })
}

/// Makes a pthread running `body` with attributes `attr`; its handle.
fn create(
    attr: &PthreadAttr,
    body: impl FnOnce() -> *mut c_void + 'static,
    call: &str,
) -> Result<c_ulong, PthreadError> {
    let t = tables(call);
    let handle = {
        let mut t = t.borrow_mut();
        // Entries of detached threads that have finished go now.
        let gone: Vec<c_ulong> = t
            .by_handle
            .iter()
            .filter(|(_, e)| e.detached && e.finished)
            .map(|(&h, _)| h)
            .collect();
        for h in gone {
            if let Some(e) = t.by_handle.remove(&h) {
                t.by_pthread.remove(&e.pthread);
            }
        }
        let h = t.next;
        t.next += 1;
        h
    };
    let finish_tables = Rc::clone(&t);
    let pthread = cpthreads::pthread_create(attr, move || {
        let value = body();
        if let Some(e) = finish_tables.borrow_mut().by_handle.get_mut(&handle) {
            e.finished = true;
        }
        Box::new(CValue(value)) as Box<dyn Any>
    })?;
    let mut t = t.borrow_mut();
    t.by_handle.insert(
        handle,
        Entry {
            pthread,
            detached: attr.detach_state() == DetachState::Detached,
            finished: false,
            cleanup: Vec::new(),
        },
    );
    t.by_pthread.insert(pthread, handle);
    Ok(handle)
}

/// The Rust attributes of `attr` (null: the defaults).
///
/// # Safety
/// `attr` is null or points at an attribute object.
unsafe fn rust_attr(attr: *const AttrC) -> Result<PthreadAttr, PthreadError> {
    let mut a = PthreadAttr::new();
    // SAFETY: null or an attribute object (the caller's promise).
    let Some(c) = (unsafe { attr.as_ref() }) else {
        return Ok(a);
    };
    if c.magic != ATTR_MAGIC {
        return Err(PthreadError::Invalid);
    }
    a.set_stack_size(c.stacksize)?;
    a.set_detach_state(if c.detachstate == CREATE_DETACHED {
        DetachState::Detached
    } else {
        DetachState::Joinable
    });
    Ok(a)
}

/// `Cpthread_create(&thread, attr, fn, arg)`: a pthread of the calling PE
/// running `fn(arg)`; it runs once the caller blocks, yields or returns to
/// the scheduler.
///
/// # Safety
/// `thread` points at a writable `Cpthread_t`; `attr` is null or an
/// initialized attribute object.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_create(
    thread: *mut c_ulong,
    attr: *const AttrC,
    f: Option<StartFn>,
    arg: *mut c_void,
) -> c_int {
    let Some(f) = f else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's promise.
    let a = match unsafe { rust_attr(attr) } {
        Ok(a) => a,
        Err(e) => return errno(e),
    };
    let body = move || {
        // SAFETY: the C thread function, called with its argument in the
        // new thread.
        unsafe { f(arg) }
    };
    match create(&a, body, "Cpthread_create") {
        Ok(h) => {
            if !thread.is_null() {
                // SAFETY: a writable `Cpthread_t` (the caller's promise).
                unsafe { thread.write(h) };
            }
            0
        }
        Err(e) => errno(e),
    }
}

/// `Cpthread_self()`: the calling pthread.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_self() -> c_ulong {
    self_handle("Cpthread_self")
}

/// `Cpthread_equal(a, b)`: nonzero for the same thread.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_equal(a: c_ulong, b: c_ulong) -> c_int {
    c_int::from(a == b)
}

/// `Cpthread_yield()`: lets the PE's other threads and messages run.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_yield() -> c_int {
    cpthreads::pthread_yield();
    0
}

/// The Rust thread of handle `h` (`ESRCH` if none).
fn pthread_of(h: c_ulong, call: &str) -> Result<Pthread, PthreadError> {
    let t = tables(call);
    let found = t.borrow().by_handle.get(&h).map(|e| e.pthread);
    found.ok_or(PthreadError::NoSuchThread)
}

/// `Cpthread_join(thread, &status)`: waits for `thread` to end and takes
/// its result.
///
/// # Safety
/// `status` is null or points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_join(thread: c_ulong, status: *mut *mut c_void) -> c_int {
    let p = match pthread_of(thread, "Cpthread_join") {
        Ok(p) => p,
        Err(e) => return errno(e),
    };
    match cpthreads::pthread_join(p) {
        Ok(exit) => {
            let t = tables("Cpthread_join");
            let mut t = t.borrow_mut();
            t.by_handle.remove(&thread);
            t.by_pthread.remove(&p);
            drop(t);
            let value = match exit {
                Exit::Returned(v) => v.downcast::<CValue>().map_or(std::ptr::null_mut(), |v| v.0),
                Exit::Canceled => usize::MAX as *mut c_void,
            };
            if !status.is_null() {
                // SAFETY: a writable pointer (the caller's promise).
                unsafe { status.write(value) };
            }
            0
        }
        Err(e) => errno(e),
    }
}

/// `Cpthread_detach(thread)`: its entry goes once it has finished.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_detach(thread: c_ulong) -> c_int {
    let p = match pthread_of(thread, "Cpthread_detach") {
        Ok(p) => p,
        Err(e) => return errno(e),
    };
    if let Err(e) = cpthreads::pthread_detach(p) {
        return errno(e);
    }
    let t = tables("Cpthread_detach");
    let mut t = t.borrow_mut();
    let finished = t.by_handle.get_mut(&thread).is_some_and(|e| {
        e.detached = true;
        e.finished
    });
    if finished {
        t.by_handle.remove(&thread);
        t.by_pthread.remove(&p);
    }
    0
}

/// `Cpthread_exit(status)`: runs the calling pthread's cleanup handlers,
/// then ends it with `status` (what a join gets).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_exit(status: *mut c_void) -> ! {
    let h = self_handle("Cpthread_exit");
    let t = tables("Cpthread_exit");
    loop {
        let next = t
            .borrow_mut()
            .by_handle
            .get_mut(&h)
            .and_then(|e| e.cleanup.pop());
        let Some((f, arg)) = next else { break };
        // SAFETY: a cleanup handler with its argument, as pushed.
        unsafe { f(arg) };
    }
    if let Some(e) = t.borrow_mut().by_handle.get_mut(&h) {
        e.finished = true;
    }
    drop(t);
    cpthreads::pthread_exit(Box::new(CValue(status)))
}

/// `Cpthread_cleanup_push(routine, arg)`: pushes a cleanup handler of the
/// calling pthread, run by `Cpthread_exit` or a `Cpthread_cleanup_pop` of
/// nonzero.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_cleanup_push(routine: Option<VoidPtrFn>, arg: *mut c_void) {
    let Some(f) = routine else {
        converse::abort("Cpthread_cleanup_push: the routine is null")
    };
    let h = self_handle("Cpthread_cleanup_push");
    let t = tables("Cpthread_cleanup_push");
    if let Some(e) = t.borrow_mut().by_handle.get_mut(&h) {
        e.cleanup.push((f, arg));
    }
}

/// `Cpthread_cleanup_pop(execute)`: pops the calling pthread's last cleanup
/// handler, running it if `execute` is nonzero.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_cleanup_pop(execute: c_int) {
    let h = self_handle("Cpthread_cleanup_pop");
    let t = tables("Cpthread_cleanup_pop");
    let top = t
        .borrow_mut()
        .by_handle
        .get_mut(&h)
        .and_then(|e| e.cleanup.pop());
    drop(t);
    match top {
        // SAFETY: a cleanup handler with its argument, as pushed.
        Some((f, arg)) if execute != 0 => unsafe { f(arg) },
        Some(_) => {}
        None => converse::abort(&format!(
            "Cpthread_cleanup_pop on PE {} with no cleanup handler pushed",
            converse::my_pe()
        )),
    }
}

// ---- attributes ----------------------------------------------------------

/// The attribute object at `p` if initialized.
///
/// # Safety
/// `p` is null or points at an attribute object of its type.
unsafe fn live<'a, T>(p: *mut T, magic: impl Fn(&T) -> c_int, want: c_int) -> Option<&'a mut T> {
    // SAFETY: null or an object of its type (the caller's promise).
    let r = unsafe { p.as_mut() }?;
    (magic(r) == want).then_some(r)
}

/// `Cpthread_attr_init(attr)`: joinable, the job's default stack.
///
/// # Safety
/// `attr` points at a writable `Cpthread_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_init(attr: *mut AttrC) -> c_int {
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable (the caller's promise).
    unsafe {
        attr.write(AttrC {
            magic: ATTR_MAGIC,
            detachstate: CREATE_JOINABLE,
            stacksize: 0,
        })
    };
    0
}

/// `Cpthread_attr_destroy(attr)`.
///
/// # Safety
/// `attr` points at a `Cpthread_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_destroy(attr: *mut AttrC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(attr, |a| a.magic, ATTR_MAGIC) } {
        Some(a) => {
            a.magic = 0;
            0
        }
        None => libc::EINVAL,
    }
}

/// `Cpthread_attr_getstacksize(attr, &size)`: 0 is the job's default.
///
/// # Safety
/// `attr` points at a `Cpthread_attr_t`; `size` at a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_getstacksize(
    attr: *const AttrC,
    size: *mut usize,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(attr.cast_mut(), |a| a.magic, ATTR_MAGIC) } {
        Some(a) if !size.is_null() => {
            // SAFETY: writable (the caller's promise).
            unsafe { size.write(a.stacksize) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_attr_setstacksize(attr, size)`: 0 (the job's default) or at
/// least `CPTHREAD_STACK_MIN`.
///
/// # Safety
/// `attr` points at a `Cpthread_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_setstacksize(attr: *mut AttrC, size: usize) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(attr, |a| a.magic, ATTR_MAGIC) } {
        Some(a) if size == 0 || size >= STACK_MIN => {
            a.stacksize = size;
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_attr_getdetachstate(attr, &state)`.
///
/// # Safety
/// `attr` points at a `Cpthread_attr_t`; `state` at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_getdetachstate(
    attr: *const AttrC,
    state: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(attr.cast_mut(), |a| a.magic, ATTR_MAGIC) } {
        Some(a) if !state.is_null() => {
            // SAFETY: writable (the caller's promise).
            unsafe { state.write(a.detachstate) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_attr_setdetachstate(attr, state)`: `CPTHREAD_CREATE_JOINABLE`
/// or `CPTHREAD_CREATE_DETACHED`.
///
/// # Safety
/// `attr` points at a `Cpthread_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_attr_setdetachstate(
    attr: *mut AttrC,
    state: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(attr, |a| a.magic, ATTR_MAGIC) } {
        Some(a) if state == CREATE_JOINABLE || state == CREATE_DETACHED => {
            a.detachstate = state;
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_mutexattr_init(mattr)`: a normal, process-private mutex.
///
/// # Safety
/// `mattr` points at a writable `Cpthread_mutexattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_init(mattr: *mut MutexAttrC) -> c_int {
    if mattr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable (the caller's promise).
    unsafe {
        mattr.write(MutexAttrC {
            magic: MUTEXATTR_MAGIC,
            pshared: PROCESS_PRIVATE,
            kind: MUTEX_NORMAL,
        })
    };
    0
}

/// `Cpthread_mutexattr_destroy(mattr)`.
///
/// # Safety
/// `mattr` points at a `Cpthread_mutexattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_destroy(mattr: *mut MutexAttrC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(mattr, |a| a.magic, MUTEXATTR_MAGIC) } {
        Some(a) => {
            a.magic = 0;
            0
        }
        None => libc::EINVAL,
    }
}

/// `Cpthread_mutexattr_getpshared(mattr, &pshared)`.
///
/// # Safety
/// `mattr` points at a `Cpthread_mutexattr_t`; `pshared` at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_getpshared(
    mattr: *const MutexAttrC,
    pshared: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(mattr.cast_mut(), |a| a.magic, MUTEXATTR_MAGIC) } {
        Some(a) if !pshared.is_null() => {
            // SAFETY: writable (the caller's promise).
            unsafe { pshared.write(a.pshared) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_mutexattr_setpshared(mattr, pshared)`: process-private only
/// (`ENOTSUP` for shared: a mutex belongs to one PE).
///
/// # Safety
/// `mattr` points at a `Cpthread_mutexattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_setpshared(
    mattr: *mut MutexAttrC,
    pshared: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(mattr, |a| a.magic, MUTEXATTR_MAGIC) } {
        Some(a) if pshared == PROCESS_PRIVATE => {
            a.pshared = pshared;
            0
        }
        Some(_) if pshared == PROCESS_SHARED => libc::ENOTSUP,
        _ => libc::EINVAL,
    }
}

/// `Cpthread_mutexattr_gettype(mattr, &type)`.
///
/// # Safety
/// `mattr` points at a `Cpthread_mutexattr_t`; `kind` at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_gettype(
    mattr: *const MutexAttrC,
    kind: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(mattr.cast_mut(), |a| a.magic, MUTEXATTR_MAGIC) } {
        Some(a) if !kind.is_null() => {
            // SAFETY: writable (the caller's promise).
            unsafe { kind.write(a.kind) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_mutexattr_settype(mattr, type)`: `CPTHREAD_MUTEX_NORMAL`
/// (`_DEFAULT`), `_RECURSIVE` or `_ERRORCHECK`.
///
/// # Safety
/// `mattr` points at a `Cpthread_mutexattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutexattr_settype(
    mattr: *mut MutexAttrC,
    kind: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(mattr, |a| a.magic, MUTEXATTR_MAGIC) } {
        Some(a) if [MUTEX_NORMAL, MUTEX_RECURSIVE, MUTEX_ERRORCHECK].contains(&kind) => {
            a.kind = kind;
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_condattr_init(cattr)`.
///
/// # Safety
/// `cattr` points at a writable `Cpthread_condattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_condattr_init(cattr: *mut CondAttrC) -> c_int {
    if cattr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: writable (the caller's promise).
    unsafe {
        cattr.write(CondAttrC {
            magic: CONDATTR_MAGIC,
            pshared: PROCESS_PRIVATE,
        })
    };
    0
}

/// `Cpthread_condattr_destroy(cattr)`.
///
/// # Safety
/// `cattr` points at a `Cpthread_condattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_condattr_destroy(cattr: *mut CondAttrC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(cattr, |a| a.magic, CONDATTR_MAGIC) } {
        Some(a) => {
            a.magic = 0;
            0
        }
        None => libc::EINVAL,
    }
}

/// `Cpthread_condattr_getpshared(cattr, &pshared)`.
///
/// # Safety
/// `cattr` points at a `Cpthread_condattr_t`; `pshared` at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_condattr_getpshared(
    cattr: *const CondAttrC,
    pshared: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(cattr.cast_mut(), |a| a.magic, CONDATTR_MAGIC) } {
        Some(a) if !pshared.is_null() => {
            // SAFETY: writable (the caller's promise).
            unsafe { pshared.write(a.pshared) };
            0
        }
        _ => libc::EINVAL,
    }
}

/// `Cpthread_condattr_setpshared(cattr, pshared)`: process-private only.
///
/// # Safety
/// `cattr` points at a `Cpthread_condattr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_condattr_setpshared(
    cattr: *mut CondAttrC,
    pshared: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { live(cattr, |a| a.magic, CONDATTR_MAGIC) } {
        Some(a) if pshared == PROCESS_PRIVATE => {
            a.pshared = pshared;
            0
        }
        Some(_) if pshared == PROCESS_SHARED => libc::ENOTSUP,
        _ => libc::EINVAL,
    }
}

// ---- mutexes and condition variables ------------------------------------

/// The magic word of `o`, read and written atomically.
///
/// # Safety
/// `o` points at a live object struct.
unsafe fn magic<'a>(o: *mut ObjectC) -> &'a AtomicI32 {
    // SAFETY: an aligned, live `int` (the caller's promise); every access
    // to it here is atomic.
    unsafe { AtomicI32::from_ptr(&raw mut (*o).magic) }
}

/// The Rust object of the C object at `o` (of kind `want`), made now for a
/// static initializer's; `EINVAL` for another magic word. An object of
/// another PE ends the job.
///
/// # Safety
/// `o` is null or points at a live object struct of that kind.
unsafe fn object<'a, T>(
    o: *mut ObjectC,
    want: c_int,
    make: impl Fn() -> T,
    call: &str,
) -> Result<&'a T, c_int> {
    if o.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: live (the caller's promise).
    let m = unsafe { magic(o) };
    loop {
        match m.load(Ordering::Acquire) {
            0 => {
                if m.compare_exchange(0, MAKING, Ordering::Acquire, Ordering::Acquire)
                    .is_ok()
                {
                    let imp = Box::into_raw(Box::new(make())).cast::<c_void>();
                    // SAFETY: ours alone while `MAKING` (the others wait).
                    unsafe {
                        (*o).pe = c_int::try_from(converse::my_pe()).unwrap_or(c_int::MAX);
                        (*o).imp = imp;
                    }
                    m.store(want, Ordering::Release);
                }
            }
            MAKING => std::hint::spin_loop(),
            w if w == want => break,
            _ => return Err(libc::EINVAL),
        }
    }
    // SAFETY: published before the magic word (Release/Acquire), not
    // written again while the object lives.
    let (pe, imp) = unsafe { ((*o).pe, (*o).imp) };
    let me = converse::my_pe();
    if usize::try_from(pe).ok() != Some(me) {
        converse::abort(&format!(
            "{call} on PE {me} of an object of PE {pe} (pthread mutexes and condition variables belong to the PE that made them)"
        ));
    }
    // SAFETY: a box of `T` (the magic word says which kind), alive until
    // destroyed, used by this PE's threads only.
    Ok(unsafe { &*imp.cast::<T>() })
}

/// `Cpthread_mutex_init(mutex, mattr)`: a new unlocked mutex of the calling
/// PE (its kind from `mattr`, normal if null).
///
/// # Safety
/// `mutex` points at a writable `Cpthread_mutex_t`; `mattr` is null or an
/// initialized mutex attribute object.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutex_init(
    mutex: *mut ObjectC,
    mattr: *const MutexAttrC,
) -> c_int {
    if mutex.is_null() {
        return libc::EINVAL;
    }
    let kind = if mattr.is_null() {
        MutexKind::Normal
    } else {
        // SAFETY: an attribute object (the caller's promise).
        match unsafe { live(mattr.cast_mut(), |a| a.magic, MUTEXATTR_MAGIC) } {
            Some(a) if a.kind == MUTEX_RECURSIVE => MutexKind::Recursive,
            Some(a) if a.kind == MUTEX_ERRORCHECK => MutexKind::ErrorCheck,
            Some(_) => MutexKind::Normal,
            None => return libc::EINVAL,
        }
    };
    let imp = Box::into_raw(Box::new(PthreadMutex::new(&PthreadMutexAttr { kind })));
    // SAFETY: writable (the caller's promise); the magic word last.
    unsafe {
        (*mutex).pe = c_int::try_from(converse::my_pe()).unwrap_or(c_int::MAX);
        (*mutex).imp = imp.cast();
        magic(mutex).store(MUTEX_MAGIC, Ordering::Release);
    }
    0
}

/// # Safety
/// `mutex` is null or points at a live `Cpthread_mutex_t`.
unsafe fn mutex<'a>(mutex: *mut ObjectC, call: &str) -> Result<&'a PthreadMutex, c_int> {
    // SAFETY: the caller's promise.
    unsafe { object(mutex, MUTEX_MAGIC, PthreadMutex::default, call) }
}

/// `Cpthread_mutex_lock(mutex)`: waits (in a pthread) while another thread
/// holds it; `EDEADLK` if the caller does (unless recursive).
///
/// # Safety
/// `mutex` points at an initialized (or statically initialized) mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutex_lock(m: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { mutex(m, "Cpthread_mutex_lock") } {
        Ok(m) => code(m.lock()),
        Err(e) => e,
    }
}

/// `Cpthread_mutex_trylock(mutex)`: `EBUSY` if held.
///
/// # Safety
/// As [`Cpthread_mutex_lock`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutex_trylock(m: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { mutex(m, "Cpthread_mutex_trylock") } {
        Ok(m) => code(m.trylock()),
        Err(e) => e,
    }
}

/// `Cpthread_mutex_unlock(mutex)`: hands it to the longest waiter; `EPERM`
/// if the caller does not hold it.
///
/// # Safety
/// As [`Cpthread_mutex_lock`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutex_unlock(m: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { mutex(m, "Cpthread_mutex_unlock") } {
        Ok(m) => code(m.unlock()),
        Err(e) => e,
    }
}

/// `Cpthread_mutex_destroy(mutex)`: frees it; `EBUSY` while held.
///
/// # Safety
/// As [`Cpthread_mutex_lock`]; no thread waits on it.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_mutex_destroy(m: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { destroy::<PthreadMutex>(m, MUTEX_MAGIC, |x| x.destroy(), "Cpthread_mutex_destroy") }
}

/// Frees the Rust object of `o` if `check` allows.
///
/// # Safety
/// `o` is null or a live object struct of kind `want`.
unsafe fn destroy<T: Default>(
    o: *mut ObjectC,
    want: c_int,
    check: impl FnOnce(&T) -> Result<(), PthreadError>,
    call: &str,
) -> c_int {
    if o.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: live (the caller's promise).
    if unsafe { magic(o) }.load(Ordering::Acquire) == 0 {
        // A static initializer's, never used.
        // SAFETY: as above.
        unsafe { magic(o) }.store(DESTROYED, Ordering::Release);
        return 0;
    }
    // SAFETY: as above.
    let obj: &T = match unsafe { object(o, want, T::default, call) } {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Err(e) = check(obj) {
        return errno(e);
    }
    // SAFETY: as above; the magic word first, then the box (made by
    // `Box::into_raw` as a `T`), freed once.
    unsafe {
        magic(o).store(DESTROYED, Ordering::Release);
        drop(Box::from_raw((*o).imp.cast::<T>()));
        (*o).imp = std::ptr::null_mut();
    }
    0
}

/// `Cpthread_cond_init(cond, cattr)`: a condition variable of the calling
/// PE.
///
/// # Safety
/// `cond` points at a writable `Cpthread_cond_t`; `cattr` is null or an
/// initialized condition attribute object.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_init(
    cond: *mut ObjectC,
    cattr: *const CondAttrC,
) -> c_int {
    if cond.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: null or an attribute object (the caller's promise).
    if !cattr.is_null() && unsafe { live(cattr.cast_mut(), |a| a.magic, CONDATTR_MAGIC) }.is_none()
    {
        return libc::EINVAL;
    }
    let imp = Box::into_raw(Box::new(PthreadCond::new()));
    // SAFETY: writable (the caller's promise); the magic word last.
    unsafe {
        (*cond).pe = c_int::try_from(converse::my_pe()).unwrap_or(c_int::MAX);
        (*cond).imp = imp.cast();
        magic(cond).store(COND_MAGIC, Ordering::Release);
    }
    0
}

/// # Safety
/// `cond` is null or points at a live `Cpthread_cond_t`.
unsafe fn cond<'a>(cond: *mut ObjectC, call: &str) -> Result<&'a PthreadCond, c_int> {
    // SAFETY: the caller's promise.
    unsafe { object(cond, COND_MAGIC, PthreadCond::new, call) }
}

/// `Cpthread_cond_wait(cond, mutex)`: unlocks `mutex`, waits for a signal,
/// locks it again; `EPERM` if the caller does not hold it.
///
/// # Safety
/// `cond` and `mutex` point at initialized objects.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_wait(c: *mut ObjectC, m: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    let (c, m) = match unsafe {
        (
            cond(c, "Cpthread_cond_wait"),
            mutex(m, "Cpthread_cond_wait"),
        )
    } {
        (Ok(c), Ok(m)) => (c, m),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    code(c.wait(m))
}

/// `Cpthread_cond_timedwait(cond, mutex, abstime)`: as
/// `Cpthread_cond_wait`, giving up at `abstime` (`CLOCK_REALTIME`) with
/// `ETIMEDOUT`, the mutex locked again.
///
/// # Safety
/// As [`Cpthread_cond_wait`]; `abstime` points at a `struct timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_timedwait(
    c: *mut ObjectC,
    m: *mut ObjectC,
    abstime: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's promise.
    let (c, m) = match unsafe {
        (
            cond(c, "Cpthread_cond_timedwait"),
            mutex(m, "Cpthread_cond_timedwait"),
        )
    } {
        (Ok(c), Ok(m)) => (c, m),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    // SAFETY: null or a timespec (the caller's promise).
    let Some(at) = (unsafe { abstime.as_ref() }) else {
        return libc::EINVAL;
    };
    if !(0..1_000_000_000).contains(&at.tv_nsec) {
        return libc::EINVAL;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let deadline = Duration::new(u64::try_from(at.tv_sec).unwrap_or(0), at.tv_nsec as u32);
    code(c.timedwait(m, deadline.saturating_sub(now)))
}

/// `Cpthread_cond_signal(cond)`: wakes the longest waiter.
///
/// # Safety
/// `cond` points at an initialized condition variable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_signal(c: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { cond(c, "Cpthread_cond_signal") } {
        Ok(c) => {
            c.signal();
            0
        }
        Err(e) => e,
    }
}

/// `Cpthread_cond_broadcast(cond)`: wakes every waiter.
///
/// # Safety
/// As [`Cpthread_cond_signal`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_broadcast(c: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { cond(c, "Cpthread_cond_broadcast") } {
        Ok(c) => {
            c.broadcast();
            0
        }
        Err(e) => e,
    }
}

/// `Cpthread_cond_destroy(cond)`: frees it; `EBUSY` while threads wait.
///
/// # Safety
/// As [`Cpthread_cond_signal`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_cond_destroy(c: *mut ObjectC) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { destroy::<PthreadCond>(c, COND_MAGIC, |x| x.destroy(), "Cpthread_cond_destroy") }
}

// ---- keys and once --------------------------------------------------------

/// The Rust destructor hook of keys with a C destructor.
fn key_destructor(value: Rc<dyn Any>) {
    if let Ok(s) = value.downcast::<Specific>()
        && let Some(d) = s.destructor
        && !s.ptr.is_null()
    {
        // SAFETY: the key's C destructor, with the thread's value.
        unsafe { d(s.ptr) };
    }
}

/// `Cpthread_key_create(&key, destructor)`: a key of the calling PE;
/// `destructor` (may be null) gets each thread's non-null value when the
/// thread ends.
///
/// # Safety
/// `key` points at a writable `Cpthread_key_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_key_create(
    key: *mut u32,
    destructor: Option<VoidPtrFn>,
) -> c_int {
    if key.is_null() {
        return libc::EINVAL;
    }
    let t = tables("Cpthread_key_create");
    let hook = destructor.map(|_| key_destructor as fn(Rc<dyn Any>));
    let k = match cpthreads::pthread_key_create(hook) {
        Ok(k) => k,
        Err(e) => return errno(e),
    };
    let mut t = t.borrow_mut();
    let slot = match t.keys.iter().position(Option::is_none) {
        Some(free) => free,
        None => {
            t.keys.push(None);
            t.keys.len() - 1
        }
    };
    t.keys[slot] = Some((k, destructor));
    // SAFETY: writable (the caller's promise).
    unsafe { key.write(u32::try_from(slot).expect("fewer keys than CPTHREAD_KEYS_MAX")) };
    0
}

/// The Rust key and C destructor of `key`.
fn key_of(key: u32, call: &str) -> Option<(PthreadKey, Option<VoidPtrFn>)> {
    let t = tables(call);
    let t = t.borrow();
    t.keys.get(key as usize).copied().flatten()
}

/// `Cpthread_key_delete(key)`: threads' values are dropped without their
/// destructor.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_key_delete(key: u32) -> c_int {
    let Some((k, _)) = key_of(key, "Cpthread_key_delete") else {
        return libc::EINVAL;
    };
    if let Err(e) = cpthreads::pthread_key_delete(k) {
        return errno(e);
    }
    let t = tables("Cpthread_key_delete");
    t.borrow_mut().keys[key as usize] = None;
    0
}

/// `Cpthread_setspecific(key, value)`: the calling pthread's value.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_setspecific(key: u32, value: *const c_void) -> c_int {
    let Some((k, destructor)) = key_of(key, "Cpthread_setspecific") else {
        return libc::EINVAL;
    };
    let v: Option<Rc<dyn Any>> = (!value.is_null()).then(|| {
        Rc::new(Specific {
            ptr: value.cast_mut(),
            destructor,
        }) as Rc<dyn Any>
    });
    code(cpthreads::pthread_setspecific(k, v))
}

/// `Cpthread_getspecific(key)`: the calling pthread's value (null if none).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn Cpthread_getspecific(key: u32) -> *mut c_void {
    let Some((k, _)) = key_of(key, "Cpthread_getspecific") else {
        return std::ptr::null_mut();
    };
    cpthreads::pthread_getspecific(k)
        .and_then(|v| v.downcast::<Specific>().ok())
        .map_or(std::ptr::null_mut(), |s| s.ptr)
}

/// `Cpthread_once(once, fn)`: runs `fn` the first time a thread of the
/// calling PE calls this with `once` (a thread that comes while another
/// runs it waits).
///
/// # Safety
/// `once` points at a `Cpthread_once_t` (only its address is used).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthread_once(once: *mut OnceC, f: Option<OnceFn>) -> c_int {
    let Some(f) = f else { return libc::EINVAL };
    if once.is_null() {
        return libc::EINVAL;
    }
    let t = tables("Cpthread_once");
    let o = Rc::clone(t.borrow_mut().onces.entry(once as usize).or_default());
    drop(t);
    cpthreads::pthread_once(&o, || {
        // SAFETY: the C once function.
        unsafe { f() }
    });
    0
}

/// `Cpthreads_start_main(main, argc, argv)`: runs `main(argc, argv)` in the
/// first pthread of the calling PE (detached), so that it may block;
/// call it from the start function after `CpthreadModuleInit`.
///
/// # Safety
/// `argv` is what `main` may read for as long as it runs (the start
/// function's `argv`, which the runtime keeps for the process's life).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn Cpthreads_start_main(
    main: Option<MainFn>,
    argc: c_int,
    argv: *mut *mut c_char,
) {
    let Some(main) = main else {
        converse::abort("Cpthreads_start_main: the function is null")
    };
    let mut attr = PthreadAttr::new();
    attr.set_detach_state(DetachState::Detached);
    let body = move || {
        // SAFETY: the program's main, with the arguments it was given
        // (alive while it runs: the caller's promise).
        unsafe { main(argc, argv) };
        std::ptr::null_mut()
    };
    if let Err(e) = create(&attr, body, "Cpthreads_start_main") {
        converse::abort(&format!("Cpthreads_start_main: {e}"));
    }
}
