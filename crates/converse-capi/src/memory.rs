//! Isomalloc, quiescence detection and `CmiRegisterHandlerEx` from C.
//!
//! - Isomalloc (the manual's): `CmiIsomalloc`, `CmiIsomallocFree`,
//!   `CmiIsomallocLength`, `CmiIsomallocInRange`, over the core's
//!   [`converse::isomalloc`]. A failure the C calls have no way to return
//!   (no address space left, freeing what is no block) ends the job with
//!   the core's reason and the call named.
//! - Quiescence detection (Charm++'s C API; the manual documents only the
//!   `CcdQUIESCENCE` condition): `CmiStartQD(fn, arg)` calls `fn(arg,
//!   wall_time)` (a `CcdVoidFn`, or `fn(arg)` for a `CcdCondFn`, the header
//!   choosing by type) on the calling PE, as a handler, once the job is
//!   quiescent; `CQdCreate`, `CQdProcess`, `CQdGetCreated` and
//!   `CQdGetProcessed` count on the calling PE, over the core's
//!   [`converse::qd_create`] and friends.
//! - `CmiRegisterHandlerEx(h, userPtr)` and `CmiNumberHandlerEx`: handlers
//!   called as `h(msg, userPtr)`.
//!
//! # Invariants
//!
//! - A `CQdState` is the calling PE's token (`CmiCQdState_`, what the
//!   header makes `CpvAccess(cQdState)` read): the PE number plus one as a
//!   pointer value, never dereferenced. A state that is not the calling
//!   PE's ends the job naming the call: Charm++'s counts are per PE too.
//! - The core's counts only grow; a negative `CQdCreate(s, -n)` (Charm++
//!   uses one to take back a creation) counts `n` processed instead, and a
//!   negative `CQdProcess` `n` created. The balance detection compares,
//!   created minus processed, is then Charm++'s; `CQdGetCreated` and
//!   `CQdGetProcessed` report the core's counts.
//! - An `Ex` handler is identified, for the handler-table check, by its
//!   function as `CmiRegisterHandler` identifies one (`handlers::identity`),
//!   marked as taking a user pointer; the pointer is per PE and not
//!   compared. `CmiHandlerToFunction` does not return `Ex` handlers.
//!
//! # Not here
//!
//! `CmiIsomallocPup`: Charm++ packs a block by copying it (the block stays
//! live unless the `pup_er` is deleting, which no C `pup_er` is), while the
//! core moves a block out of its process when it packs it
//! (`isomalloc_pack`), and unpacking where it was not sent away from is
//! refused. The manual also says pupping single blocks is no longer
//! supported. `CQdRegisterCallback`: Charm++ only registers a
//! `CcdQUIESCENCE` callback there, which `CcdCallOnCondition` does (and the
//! core starts a detection for it).
//!
//! # Concurrency
//!
//! None of its own: isomalloc's state is the core's (locked per process);
//! QD counts and handlers are the calling PE's.
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use converse::Message;
use converse::isomalloc;
use converse_msg::raw::MessageRaw;

use crate::conds::{CcdCondFn, CcdVoidFn};
use crate::handlers::CmiHandler;
use crate::nonneg;

// ---- isomalloc ---------------------------------------------------------------

/// `CmiIsomalloc(size)`: `size` bytes (rounded up to whole pages), zeroed,
/// at an address no other PE of the job uses.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiIsomalloc(size: c_int) -> *mut c_void {
    let n = nonneg(size, "CmiIsomalloc");
    match isomalloc::isomalloc(n) {
        Ok(block) => block.as_ptr().cast(),
        Err(e) => converse::abort(&format!("CmiIsomalloc({n}): {e}")),
    }
}

/// `CmiIsomallocFree(block)`: frees a block `CmiIsomalloc` gave (null does
/// nothing); anything else, or a block freed already, ends the job.
///
/// # Safety
/// Nothing uses the block after: its pages go.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiIsomallocFree(block: *mut c_void) {
    let Some(at) = NonNull::new(block.cast::<u8>()) else {
        return;
    };
    // SAFETY: the caller's promise.
    if let Err(e) = unsafe { isomalloc::isomalloc_free(at) } {
        converse::abort(&format!("CmiIsomallocFree({block:p}): {e}"));
    }
}

/// `CmiIsomallocLength(block)`: the block's length in bytes (whole pages);
/// an address that is not a block living in this process ends the job.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiIsomallocLength(block: *mut c_void) -> c_int {
    match isomalloc::isomalloc_length(block.cast_const().cast()) {
        Some(len) => c_int::try_from(len).unwrap_or_else(|_| {
            converse::abort(&format!(
                "CmiIsomallocLength({block:p}): {len} bytes do not fit a C int"
            ))
        }),
        None => converse::abort(&format!(
            "CmiIsomallocLength({block:p}): no isomalloc block starts there in this process"
        )),
    }
}

/// `CmiIsomallocInRange(address)`: 1 if `address` may have come from
/// isomalloc (it lies in the job's isomalloc range), else 0.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiIsomallocInRange(address: *mut c_void) -> c_int {
    c_int::from(isomalloc::isomalloc_in_range(address.cast_const().cast()))
}

// ---- quiescence detection -----------------------------------------------------

/// `CmiStartQD(fn, arg)` with a `CcdVoidFn`: `fn(arg, CmiWallTimer())`
/// runs on this PE, as a handler, once the job is quiescent.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiStartQD(f: Option<CcdVoidFn>, arg: *mut c_void) {
    let Some(f) = f else {
        converse::abort("CmiStartQD: the callback is null")
    };
    converse::start_quiescence_detection(move || f(arg, converse::wall_timer()));
}

/// `CmiStartQD(fn, arg)` with a `CcdCondFn` (`fn(arg)`): the header's
/// choice for that type.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiStartQDCond_(f: Option<CcdCondFn>, arg: *mut c_void) {
    let Some(f) = f else {
        converse::abort("CmiStartQD: the callback is null")
    };
    converse::start_quiescence_detection(move || f(arg));
}

/// What a `CQdState` points at, as C declares it (`struct ConvQdState`):
/// nothing, the pointer is a token.
#[repr(C)]
pub struct ConvQdState {
    _opaque: [u8; 0],
}

/// A `CQdState`: the calling PE's token (see the module comment).
pub type CQdState = *mut ConvQdState;

/// The calling PE's `CQdState` (what `CpvAccess(cQdState)` reads).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCQdState_() -> CQdState {
    std::ptr::without_provenance_mut(converse::my_pe() + 1)
}

/// Ends the job unless `state` is the calling PE's.
fn check_state(state: CQdState, call: &str) {
    let mine = CmiCQdState_();
    if state != mine {
        converse::abort(&format!(
            "{call}: {state:p} is not PE {}'s CQdState (pass CpvAccess(cQdState) on the PE that counts)",
            converse::my_pe()
        ));
    }
}

fn count(n: i64, up: fn(usize), down: fn(usize)) {
    let abs = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    if n >= 0 { up(abs) } else { down(abs) }
}

/// `CQdCreate(state, n)`: counts `n` messages created on this PE (work
/// the runtime does not see; detection waits until as many are
/// processed).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CQdCreate(state: CQdState, n: i64) {
    check_state(state, "CQdCreate");
    count(n, converse::qd_create, converse::qd_process);
}

/// `CQdProcess(state, n)`: counts `n` messages processed on this PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CQdProcess(state: CQdState, n: i64) {
    check_state(state, "CQdProcess");
    count(n, converse::qd_process, converse::qd_create);
}

/// `CQdGetCreated(state)`: messages created on this PE so far.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CQdGetCreated(state: CQdState) -> i64 {
    check_state(state, "CQdGetCreated");
    i64::try_from(converse::qd_created()).unwrap_or(i64::MAX)
}

/// `CQdGetProcessed(state)`: messages processed on this PE so far.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CQdGetProcessed(state: CQdState) -> i64 {
    check_state(state, "CQdGetProcessed");
    i64::try_from(converse::qd_processed()).unwrap_or(i64::MAX)
}

// ---- handlers with a user pointer ---------------------------------------------

/// A handler with a user pointer: `void f(void *msg, void *userPtr)`
/// (`CmiHandlerEx`).
pub type CmiHandlerEx = extern "C-unwind" fn(*mut c_void, *mut c_void);

/// The closure that stands for `f` with `user` in the core's table.
fn call_ex(f: CmiHandlerEx, user: *mut c_void) -> impl Fn(Message) + 'static {
    move |msg: Message| f(msg.into_c_ptr().as_ptr().cast(), user)
}

/// `f`'s identity for the handler-table check (see the module comment).
fn identity_ex(f: CmiHandlerEx) -> String {
    // SAFETY: both are function pointers of one size; the result is only
    // looked up by its address (`dladdr`), never called.
    let plain = unsafe { std::mem::transmute::<CmiHandlerEx, CmiHandler>(f) };
    format!("{} with a user pointer", crate::handlers::identity(plain))
}

fn non_null_ex(f: Option<CmiHandlerEx>, call: &str) -> CmiHandlerEx {
    f.unwrap_or_else(|| converse::abort(&format!("{call}: the handler is null")))
}

/// `CmiRegisterHandlerEx(h, userPtr)`: as `CmiRegisterHandler`, for a
/// handler called as `h(msg, userPtr)`. Register it in the same order on
/// every PE (each PE may pass its own `userPtr`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRegisterHandlerEx(h: Option<CmiHandlerEx>, user: *mut c_void) -> c_int {
    let f = non_null_ex(h, "CmiRegisterHandlerEx");
    let index = converse::register_handler_named(call_ex(f, user), &identity_ex(f));
    c_int::try_from(index).expect("handler indices are below MAX_HANDLER_INDEX")
}

/// `CmiNumberHandlerEx(n, h, userPtr)`: installs `h` with `userPtr` at
/// index `n` on the calling PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumberHandlerEx(n: c_int, h: Option<CmiHandlerEx>, user: *mut c_void) {
    let f = non_null_ex(h, "CmiNumberHandlerEx");
    converse::number_handler(nonneg(n, "CmiNumberHandlerEx"), call_ex(f, user));
}
