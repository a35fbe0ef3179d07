//! Priorities from C: the `CQS_QUEUEING_*` strategies with their
//! `(priobits, prioptr)` pair, as every C call that places work in a queue
//! takes them (`CsdEnqueueGeneral`, `CthAwakenPrio`, `CqsEnqueueGeneral`,
//! …), turned into the core's [`Queueing`].
//!
//! # Invariants
//!
//! - The strategies' numbers are Charm++'s (`converse.h` defines them).
//! - `prioptr` is read only for the strategies that have a priority: one
//!   `int` for `IFIFO`/`ILIFO`, one 64-bit integer for `LFIFO`/`LLIFO`,
//!   `ceil(priobits / 32)` unsigned words, most significant first, for
//!   `BFIFO`/`BLIFO`. A null `prioptr` where one is needed, or an unknown
//!   strategy, ends the job naming the call.
use std::ffi::{c_int, c_uint};

use converse::{BitPrio, Queueing};

/// `CQS_QUEUEING_FIFO`.
pub const CQS_QUEUEING_FIFO: c_int = 2;
/// `CQS_QUEUEING_LIFO`.
pub const CQS_QUEUEING_LIFO: c_int = 3;
/// `CQS_QUEUEING_IFIFO`.
pub const CQS_QUEUEING_IFIFO: c_int = 4;
/// `CQS_QUEUEING_ILIFO`.
pub const CQS_QUEUEING_ILIFO: c_int = 5;
/// `CQS_QUEUEING_BFIFO`.
pub const CQS_QUEUEING_BFIFO: c_int = 6;
/// `CQS_QUEUEING_BLIFO`.
pub const CQS_QUEUEING_BLIFO: c_int = 7;
/// `CQS_QUEUEING_LFIFO`.
pub const CQS_QUEUEING_LFIFO: c_int = 8;
/// `CQS_QUEUEING_LLIFO`.
pub const CQS_QUEUEING_LLIFO: c_int = 9;

/// The placement C asked for with `strategy`, `priobits` and `prioptr`;
/// `call` names the C function in the job's error message if they are
/// wrong.
///
/// # Safety
/// `prioptr` is null or points at what `strategy` reads (see the module
/// comment).
pub unsafe fn queueing_from_c(
    strategy: c_int,
    priobits: c_int,
    prioptr: *const c_uint,
    call: &str,
) -> Queueing {
    let needs_prio = |what: &str| {
        if prioptr.is_null() {
            converse::abort(&format!("{call}: strategy {strategy} needs {what}, but prioptr is null"));
        }
    };
    match strategy {
        CQS_QUEUEING_FIFO => Queueing::Fifo,
        CQS_QUEUEING_LIFO => Queueing::Lifo,
        CQS_QUEUEING_IFIFO | CQS_QUEUEING_ILIFO => {
            needs_prio("an int priority");
            // SAFETY: one int at `prioptr` (the caller's promise).
            let p = unsafe { prioptr.cast::<c_int>().read_unaligned() };
            if strategy == CQS_QUEUEING_IFIFO {
                Queueing::IFifo(p)
            } else {
                Queueing::ILifo(p)
            }
        }
        CQS_QUEUEING_LFIFO | CQS_QUEUEING_LLIFO => {
            needs_prio("a 64-bit priority");
            // SAFETY: one 64-bit integer at `prioptr` (the caller's promise).
            let p = unsafe { prioptr.cast::<i64>().read_unaligned() };
            if strategy == CQS_QUEUEING_LFIFO {
                Queueing::LFifo(p)
            } else {
                Queueing::LLifo(p)
            }
        }
        CQS_QUEUEING_BFIFO | CQS_QUEUEING_BLIFO => {
            let bits = u32::try_from(priobits).unwrap_or_else(|_| {
                converse::abort(&format!("{call}: priobits {priobits} is negative"))
            });
            let n = bits.div_ceil(32) as usize;
            let words: &[u32] = if n == 0 {
                &[]
            } else {
                needs_prio("a bit-vector priority");
                // SAFETY: `ceil(priobits / 32)` words at `prioptr` (the
                // caller's promise).
                unsafe { std::slice::from_raw_parts(prioptr, n) }
            };
            let prio = BitPrio::new(bits, words).unwrap_or_else(|e| converse::abort(&format!("{call}: {e}")));
            if strategy == CQS_QUEUEING_BFIFO {
                Queueing::BFifo(prio)
            } else {
                Queueing::BLifo(prio)
            }
        }
        other => converse::abort(&format!(
            "{call}: {other} is no queueing strategy (CQS_QUEUEING_FIFO .. CQS_QUEUEING_LLIFO, 2..9)"
        )),
    }
}
