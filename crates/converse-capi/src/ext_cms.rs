//! Master-slave from C (`cms.h`, the extensions manual's chapter 3):
//! `CmsInit`, `CmsFireTask`, `CmsAwaitResponses`, `CmsGetResponse`,
//! `CmsProcessResponses`, `CmsExit`, over [`converse_ext::cms`].
//!
//! # Starting and ending, as Converse's Cms does
//!
//! `CmsInit` is called from the program's `main` and starts the job itself
//! (`ConverseInit` in its init-returns mode, with the process's command
//! line): the calling thread becomes the first PE of its process. It
//! registers the module on every PE, in the same order: this module's stop
//! handler, then the Rust module's handlers and the worker. It returns on
//! PE 0 only, the manager; every other PE (the other threads, and the main
//! thread of every other process) serves tasks in its scheduler until the
//! manager's `CmsExit`, then ends (the main thread of another process ends
//! its process). `CmsExit` on PE 0 sends every other PE the stop message
//! (their schedulers return, so their start functions do) and ends the job
//! with exit code 0.
//!
//! # Memory
//!
//! - A task's bytes reach the worker in an aligned copy the worker may
//!   change. The worker allocates its response with `malloc` and returns its
//!   size; the library copies the response into the message to PE 0 and
//!   frees it with `free`.
//! - `CmsGetResponse` returns a copy of the response that the library
//!   keeps ("extracted from the system's buffers", as the manual says; the
//!   program does not free it): asked again before the task is fired
//!   again, it returns the same pointer. The consumer of
//!   `CmsProcessResponses` gets such a copy too. A copy is freed when its
//!   task number is fired again, or at `CmsExit`.
//!
//! # Invariants
//!
//! - `CmsInit` runs once per process, on a thread that is no PE yet.
//! - The worker function is the PE's (a `Cpv`), set before the Rust module
//!   can run a task there.
//!
//! # Concurrency
//!
//! Per PE: the state is a `Cpv`; tasks, responses and the stop are
//! messages.
use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use converse::{Cpv, Message};
use converse_ext::cms;

/// The worker (`CmsWorkerFn`): `int worker(void *task, void **response)`,
/// returning the response's size. Declared `int (*)(void *, void *)`, as
/// Converse's `cms.h` has it (programs cast their worker to it): the
/// second argument is the `void **`, passed as a `void *`.
pub type CmsWorkerFn = unsafe extern "C-unwind" fn(*mut c_void, *mut c_void) -> c_int;

/// The consumer (`CmsConsumerFn`): `int consumer(void *response, int ref)`.
pub type CmsConsumerFn = unsafe extern "C-unwind" fn(*mut c_void, c_int) -> c_int;

/// A PE's Cms state.
struct CmsC {
    worker: CmsWorkerFn,
    /// The stop message's handler.
    stop: usize,
    /// Manager: the responses handed to C, by task number (see the module
    /// comment).
    handed: RefCell<Vec<*mut c_void>>,
}

static CMS: Cpv<CmsC> = Cpv::new();

fn state(call: &str) -> std::rc::Rc<CmsC> {
    CMS.try_get().unwrap_or_else(|| {
        converse::abort(&format!(
            "{call} on PE {} before CmsInit",
            converse::my_pe()
        ))
    })
}

/// Registers the module on the calling PE (the same order on every PE).
fn set_up(worker: CmsWorkerFn, max: usize) {
    let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
    CMS.initialize(CmsC {
        worker,
        stop,
        handed: RefCell::new(vec![std::ptr::null_mut(); max]),
    });
    cms::init(run_worker, max);
}

/// Runs the PE's C worker on a task's bytes.
fn run_worker(task: &[u8]) -> Vec<u8> {
    let worker = state("a Cms task").worker;
    // An aligned copy the worker may write.
    let mut copy = vec![0u128; task.len().div_ceil(16).max(1)];
    let buf = copy.as_mut_ptr().cast::<u8>();
    // SAFETY: `copy` holds at least `task.len()` bytes; distinct buffers.
    unsafe { std::ptr::copy_nonoverlapping(task.as_ptr(), buf, task.len()) };
    let mut response: *mut c_void = std::ptr::null_mut();
    // SAFETY: the C worker, given the task's copy and an out-pointer.
    let size = unsafe { worker(buf.cast(), std::ptr::from_mut(&mut response).cast()) };
    let size = crate::nonneg(size, "a Cms worker's response size");
    let out = if size == 0 {
        Vec::new()
    } else if response.is_null() {
        converse::abort(&format!(
            "a Cms worker on PE {} returned {size} bytes but no response",
            converse::my_pe()
        ))
    } else {
        // SAFETY: the worker's response, `size` bytes (its promise).
        unsafe { std::slice::from_raw_parts(response.cast::<u8>(), size) }.to_vec()
    };
    if !response.is_null() {
        // SAFETY: allocated with `malloc` by the worker (the module
        // comment's rule), freed once.
        unsafe { libc::free(response) };
    }
    out
}

/// A `malloc`ed copy of `bytes` (at least one byte allocated).
fn malloc_copy(bytes: &[u8]) -> *mut c_void {
    // SAFETY: a plain allocation.
    let p = unsafe { libc::malloc(bytes.len().max(1)) };
    if p.is_null() {
        converse::abort("Cms: out of memory for a response");
    }
    // SAFETY: `p` holds at least `bytes.len()` bytes; distinct buffers.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len()) };
    p
}

/// `CmsInit(worker, max)`: starts the job (from `main`: see the module
/// comment) and sets master-slave up; `max` bounds the task numbers fired
/// before the next `CmsAwaitResponses` or `CmsProcessResponses`. Returns on
/// PE 0 only; the other PEs work until `CmsExit`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmsInit(worker: Option<CmsWorkerFn>, max: c_int) {
    let Some(worker) = worker else {
        converse::abort("CmsInit: the worker function is null")
    };
    let max = crate::nonneg(max, "CmsInit (max)");
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    crate::reduce_struct::register_module();
    converse::converse_init(
        args,
        move |_args: &[String]| {
            crate::cld_weak::user_module_init();
            set_up(worker, max);
            converse::schedule_forever();
        },
        false,
        true,
    );
    set_up(worker, max);
    if converse::my_pe() != 0 {
        // The main thread of another process: a worker until the stop.
        converse::schedule_forever();
        converse::exit(0);
    }
}

/// `CmsFireTask(ref, t, size)`: fires task number `ref` (below `max`, not
/// in flight) with a copy of the `size` bytes at `t`. On PE 0.
///
/// # Safety
/// `t` points at `size` readable bytes (it may be null for 0).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmsFireTask(reference: c_int, t: *const c_void, size: c_int) {
    let s = state("CmsFireTask");
    let reference = crate::nonneg(reference, "CmsFireTask (ref)");
    let n = crate::nonneg(size, "CmsFireTask (size)");
    let task: &[u8] = if n == 0 {
        &[]
    } else {
        if t.is_null() {
            converse::abort(&format!("CmsFireTask: {n} bytes at a null pointer"));
        }
        // SAFETY: `n` readable bytes at `t` (the caller's promise).
        unsafe { std::slice::from_raw_parts(t.cast::<u8>(), n) }
    };
    cms::fire_task(reference, task);
    if let Some(h) = s.handed.borrow_mut().get_mut(reference) {
        release(h);
    }
}

/// Frees the response copy held in `slot` (the library's until the task
/// is fired again or the job ends) and empties the slot.
fn release(slot: &mut *mut c_void) {
    if !slot.is_null() {
        // SAFETY: made by `malloc_copy`, held only in this slot.
        unsafe { libc::free(*slot) };
        *slot = std::ptr::null_mut();
    }
}

/// Keeps `copy` as task `reference`'s response in its slot, freeing the
/// one it replaces; returns it.
fn keep(s: &CmsC, reference: usize, copy: *mut c_void) -> *mut c_void {
    let mut handed = s.handed.borrow_mut();
    match handed.get_mut(reference) {
        Some(slot) => {
            release(slot);
            *slot = copy;
        }
        // Not a task number the table knows: the copy must not leak.
        None => {
            // SAFETY: made by `malloc_copy` and held nowhere else.
            unsafe { libc::free(copy) };
            return std::ptr::null_mut();
        }
    }
    copy
}

/// `CmsAwaitResponses()`: runs PE 0's scheduler (it works on tasks too)
/// until every fired task has answered.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmsAwaitResponses() {
    state("CmsAwaitResponses");
    cms::await_responses();
}

/// `CmsGetResponse(ref)`: the response of task `ref`, a copy the library
/// keeps until the task is fired again (null if it has not come).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmsGetResponse(reference: c_int) -> *mut c_void {
    let s = state("CmsGetResponse");
    let Ok(reference) = usize::try_from(reference) else {
        return std::ptr::null_mut();
    };
    {
        let handed = s.handed.borrow();
        match handed.get(reference) {
            None => return std::ptr::null_mut(),
            // Asked again: the same copy.
            Some(slot) if !slot.is_null() => return *slot,
            Some(_) => {}
        }
    }
    match cms::get_response(reference) {
        Some(bytes) => keep(&s, reference, malloc_copy(&bytes)),
        None => std::ptr::null_mut(),
    }
}

/// `CmsProcessResponses(consumer)`: as `CmsAwaitResponses`, handing each
/// response (a copy the library keeps, as `CmsGetResponse`'s) and its task
/// number to `consumer` as soon as it arrives.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmsProcessResponses(consumer: Option<CmsConsumerFn>) {
    state("CmsProcessResponses");
    let Some(consumer) = consumer else {
        converse::abort("CmsProcessResponses: the consumer function is null")
    };
    cms::process_responses(move |response: Vec<u8>, reference: usize| {
        let r = c_int::try_from(reference).expect("task numbers fit a C int");
        let s = state("CmsProcessResponses");
        let copy = keep(&s, reference, malloc_copy(&response));
        // SAFETY: the C consumer, given the response (the library's, valid
        // until the task is fired again) and its number.
        unsafe { consumer(copy, r) };
    });
}

/// `CmsExit()`: on PE 0, stops every other PE and ends the job (exit code
/// 0); elsewhere it returns.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmsExit() {
    let s = state("CmsExit");
    for slot in s.handed.borrow_mut().iter_mut() {
        release(slot);
    }
    if converse::my_pe() == 0 && converse::num_pes() > 1 {
        converse::sync_broadcast_and_free(Message::new(s.stop, 0));
    }
    cms::exit();
}
