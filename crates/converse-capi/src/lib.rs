//! The C ABI of converse-rs: the functions `converse.h` (in the
//! repository's `include/`) declares, over the Rust core's public API, so
//! that Converse programs written in C or C++ build unchanged with
//! `convcc` (this crate's binary) and run with the core's checks: named
//! faults, the handler-table check, secure CCS.
//!
//! # What C sees
//!
//! - A message is the address of its first header byte, 16-aligned: what
//!   `CmiAlloc` returns and what a handler receives. Its first
//!   `CmiMsgHeaderSizeBytes` (32) bytes are the core's `MsgHeader`, whose
//!   layout `converse.h` repeats (`CmiMsgHeaderBasic`; a test checks the
//!   two agree). A handler owns the message it receives, exclusive and
//!   writable (a broadcast copy that other PEs share is copied first), and
//!   frees it with `CmiFree` or passes it on with an `AndFree` send.
//! - Handlers are `void f(void *msg)`, registered by function: the
//!   handler-table check tells C functions apart by their image and offset
//!   in it (the same in every process of one program, whatever address
//!   randomisation does), named by symbol where the image exports one.
//! - Every function is `extern "C-unwind"`: a PE leaves its code by
//!   unwinding (`ConverseExit`, a fault the core reports by panicking), and
//!   that unwinding crosses the C frames between the PE's start and the
//!   call. `convcc` compiles C with unwind tables for it.
//!
//! # Modules
//!
//! [`start`] (ConverseInit/ConverseExit, printing and aborting), [`pe`]
//! (who am I, timers), [`handlers`], [`msgs`] (buffers and sends),
//! [`sched`] (the scheduler and its queue).
//!
//! # Safety
//!
//! The C side's pointers are trusted as C Converse trusts them: a message
//! pointer given to `CmiFree` or an `AndFree` send must come from
//! `CmiAlloc` or a handler, once. What the runtime can check it does: a
//! size shorter than a header or longer than the buffer, a PE out of
//! range, an unknown handler: each ends the job with a message naming the
//! PE and the cause.
pub mod ccs;
pub mod ccs_client;
pub mod collectives;
pub mod conds;
pub mod handlers;
pub mod memory;
pub mod msgs;
pub mod node;
pub mod pe;
pub mod persistent;
pub mod pup;
pub mod queueing;
pub mod random;
pub mod rdma;
pub mod reduce_struct;
pub mod sched;
pub mod start;
pub mod threads;

/// The C string at `s`, or `""` for a null pointer; invalid UTF-8 is
/// replaced, not refused (it only ever reaches a message).
///
/// # Safety
/// `s` is null or a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(s: *const std::ffi::c_char) -> std::borrow::Cow<'a, str> {
    if s.is_null() {
        return "".into();
    }
    // SAFETY: NUL-terminated (the caller's promise).
    unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy()
}

/// A C `int` argument used as a count or index: negative ones are the
/// caller's error, reported with `what` and the value.
#[inline]
pub(crate) fn nonneg(v: std::ffi::c_int, what: &str) -> usize {
    match usize::try_from(v) {
        Ok(n) => n,
        Err(_) => negative(v, what),
    }
}

#[cold]
#[inline(never)]
fn negative(v: std::ffi::c_int, what: &str) -> ! {
    converse::abort(&format!("{what}: {v} is negative"))
}
