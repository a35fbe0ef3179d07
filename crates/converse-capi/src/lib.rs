//! The C ABI of converse-rs: the functions `converse.h` (in this
//! crate's `include/`) declares, over the Rust core's public API, so
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
//! By the header that declares them:
//!
//! - `converse.h`: [`start`] (ConverseInit/ConverseExit, printing,
//!   aborting, a C `exit()` during the job), [`pe`] (who am I, timers),
//!   [`topology`] (physical nodes, cores, CPU affinity; also
//!   `cputopology.h`), [`args`] (`CmiGetArg*`, the program's flags),
//!   [`handlers`], [`msgs`] (buffers, sends, broadcasts), [`collectives`]
//!   (node sends, vector and multiple sends, groups, list sends, message
//!   reductions, spanning trees), [`node`] (node barrier, `Csv`),
//!   [`sched`] (the scheduler loop, `CsdEnqueue`);
//! - `converse-rs/sched.h` and `queueing.h`: [`queueing`] (priorities from
//!   C, `CsdEnqueueGeneral`, the node queue, the `Cqs` library);
//! - `converse-rs/threads.h`: [`threads`] (Cth, Ctv), [`conds`] (Ccd);
//! - `conv-random.h`: [`random`] (Crn);
//! - `converse-rs/memory.h` and `pup_c.h`: [`pup`], [`reduce_struct`],
//!   [`memory`];
//! - `converse-rs/onesided.h`: [`rdma`], [`persistent`];
//! - `conv-ccs.h`, `ccs-client.h` and `ccs-auth.h`: [`ccs`], [`ccs_client`];
//! - the extensions library (`converse-ext`): `converse-rs/ext.h` (tag
//!   matching [`ext_cmm`], futures [`ext_futures`]), `cms.h` ([`ext_cms`]),
//!   `cldb.h` ([`ext_cld`]), `cpthreads.h` ([`ext_cpthreads`]),
//!   `conv-cpath.h` ([`ext_cpath`]), `conv-cpm.h` ([`cpm`], with the `cpm`
//!   scanner);
//! - `gamma.h`: [`gamma`] (the GAMMA active-port API, over
//!   `converse-gamma`).
//!
//! Node locks (`CmiNodeLock`) are `pthread` mutexes in `converse.h` itself;
//! `Cpv` variables are thread-locals there (every PE is a thread).
//!
//! # Safety
//!
//! The C side's pointers are trusted as C Converse trusts them: a message
//! pointer given to `CmiFree` or an `AndFree` send must come from
//! `CmiAlloc` or a handler, once. What the runtime can check it does: a
//! size shorter than a header or longer than the buffer, a PE out of
//! range, an unknown handler: each ends the job with a message naming the
//! PE and the cause.
pub mod args;
pub mod ccs;
pub mod ccs_client;
mod cld_weak;
pub mod collectives;
pub mod conds;
pub mod cpm;
pub mod ext_cld;
pub mod ext_cmm;
pub mod ext_cms;
pub mod ext_cpath;
pub mod ext_cpthreads;
pub mod ext_futures;
pub mod gamma;
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
pub mod topology;

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
