//! Message buffers and the sends: `CmiAlloc`, `CmiFree`, `CmiSize`,
//! `CmiReference`, the point-to-point sends and the broadcasts.
//!
//! # Invariants
//!
//! - A buffer C holds is a core message buffer given to C
//!   (`converse_msg::raw`): `CmiAlloc` makes one of at least a header's
//!   size, zeroed, its header's size field the size asked for; a handler
//!   gets one from the core. Its size is the header's size field, which
//!   the runtime keeps true on every message it delivers (`msg_len`).
//! - Copying sends (`CmiSyncSend`, `CmiSyncBroadcast`, …) read `size`
//!   bytes from any memory (a message on the caller's stack, its header
//!   only partly written): the runtime writes every header field it owns
//!   in its copy. `AndFree` sends take the buffer itself, which must come
//!   from `CmiAlloc` or a handler.
//! - A size shorter than a header, or longer than the buffer it names,
//!   ends the job with the call, the size and the PE named.
//!
//! # Concurrency
//!
//! None of its own: buffers are counted atomically (`CmiReference` and
//! `CmiFree` may be called on any PE); sends are the core's.
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use converse::{CommHandle, MSG_HEADER_SIZE, Message};
use converse_msg::raw::{self, MessageRaw};

use crate::nonneg;

/// The non-null message pointer `msg`, or the job ends naming `call`.
#[inline]
fn non_null(msg: *mut c_void, call: &str) -> NonNull<u8> {
    match NonNull::new(msg.cast::<u8>()) {
        Some(p) => p,
        None => null_message(call),
    }
}

#[cold]
#[inline(never)]
fn null_message(call: &str) -> ! {
    converse::abort(&format!("{call}: the message pointer is null"))
}

/// A copy of the `size` bytes at `msg` as a message (what a copying send
/// sends).
///
/// # Safety
/// `msg` points at `size` readable bytes.
pub(crate) unsafe fn copy_of(size: c_int, msg: *mut c_void, call: &str) -> Message {
    let size = message_size(size, call);
    let src = non_null(msg, call);
    // SAFETY: `fill` writes all `size` bytes: a copy of the `size`
    // readable bytes at `src` (the caller's promise) into the new buffer,
    // which is not `src`. The copy is not zeroed first.
    let copied = unsafe {
        Message::filled_by(size, |dst, n| {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n);
            Ok::<(), std::convert::Infallible>(())
        })
    };
    match copied {
        Ok(copy) => copy,
    }
}

/// `size` as a message's size, or the job ends naming `call`.
#[inline]
fn message_size(size: c_int, call: &str) -> usize {
    match usize::try_from(size) {
        Ok(n) if n >= MSG_HEADER_SIZE => n,
        _ => short_message(size, call),
    }
}

#[cold]
#[inline(never)]
fn short_message(size: c_int, call: &str) -> ! {
    converse::abort(&format!(
        "{call}: a message of {size} bytes is shorter than its {MSG_HEADER_SIZE}-byte header"
    ))
}

/// The buffer at `msg` as a message of `size` bytes (what an `AndFree`
/// send takes).
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[inline]
pub(crate) unsafe fn take(size: c_int, msg: *mut c_void, call: &str) -> Message {
    let size = message_size(size, call);
    // SAFETY: a buffer given to C (the caller's promise).
    match unsafe { Message::from_c_ptr(non_null(msg, call), size) } {
        Ok(m) => m,
        Err(capacity) => too_long(size, capacity, call),
    }
}

#[cold]
#[inline(never)]
fn too_long(size: usize, capacity: usize, call: &str) -> ! {
    converse::abort(&format!(
        "{call}: a message of {size} bytes in a buffer of {capacity} (CmiAlloc'd smaller than the size sent)"
    ))
}

/// The length of the message in the buffer at `ptr`: the size C knows it
/// by (`CmiSize`), at least a header's.
///
/// # Safety
/// `ptr` is a buffer given to C.
pub(crate) unsafe fn msg_len(ptr: NonNull<u8>) -> usize {
    // SAFETY: a live buffer (the caller's promise).
    unsafe { raw::c_len(ptr) }.max(MSG_HEADER_SIZE)
}

/// The buffer at `msg` as a message of its `CmiSize` (at least a header).
///
/// # Safety
/// As [`take`].
pub(crate) unsafe fn take_whole(msg: *mut c_void, call: &str) -> Message {
    let ptr = non_null(msg, call);
    // SAFETY: as above; `msg_len` fits the buffer and holds a header.
    match unsafe { Message::from_c_ptr(ptr, msg_len(ptr)) } {
        Ok(m) => m,
        Err(capacity) => too_long(capacity, capacity, call),
    }
}

/// `CmiAlloc(size)`: a zeroed, 16-aligned buffer of `size` bytes (any
/// size: one shorter than a header is plain memory).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiAlloc(size: c_int) -> *mut c_void {
    let n = nonneg(size, "CmiAlloc");
    raw::c_alloc(n)
        .unwrap_or_else(|| {
            converse::abort(&format!("CmiAlloc({n}): larger than the largest message"))
        })
        .as_ptr()
        .cast()
}

/// `CmiFree(msg)`: drops a reference; the last frees the buffer.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler, and is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiFree(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { raw::c_free(non_null(msg, "CmiFree")) }
}

/// `CmiReference(msg)`: one more `CmiFree` is then needed to free it.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler and is live.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReference(msg: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { raw::c_reference(non_null(msg, "CmiReference")) }
}

/// `CmiInitMsgHeader(msg, size)`: readies the header of a message the
/// program made itself (on its stack, say) for a send. Charm++ marks its
/// zero-copy fields there; here the fields the runtime owns and reads
/// from a header (`root`, `flags`, `coll`) are cleared, so the header
/// reads as a plain user message's. The handler, the info slot and the
/// size field are left alone; a size shorter than a header touches
/// nothing, as in Charm++. A send rewrites these fields anyway: calling
/// it is never needed here, and always harmless.
///
/// # Safety
/// `msg` points at `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiInitMsgHeader(msg: *mut c_void, size: c_int) {
    if usize::try_from(size).is_ok_and(|s| s >= MSG_HEADER_SIZE) {
        let header = non_null(msg, "CmiInitMsgHeader").cast::<converse::MsgHeader>();
        // SAFETY: a header's worth of writable bytes (the caller's
        // promise); written field by field, unaligned-safe.
        unsafe {
            let h = header.as_ptr();
            std::ptr::addr_of_mut!((*h).root).write_unaligned(0);
            std::ptr::addr_of_mut!((*h).flags).write_unaligned(0);
            std::ptr::addr_of_mut!((*h).coll).write_unaligned(0);
        }
    }
}

/// `CmiSize(msg)`: the size the buffer was allocated with, or the size of
/// the message a handler received (kept beside the buffer: the header is
/// the program's to write).
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler and is live.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSize(msg: *mut c_void) -> c_int {
    // SAFETY: the caller's promise.
    let len = unsafe { raw::c_len(non_null(msg, "CmiSize")) };
    c_int::try_from(len).unwrap_or(c_int::MAX)
}

/// `CmiSyncSend(pe, size, msg)`: sends a copy of `size` bytes at `msg`.
///
/// # Safety
/// `msg` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncSend(pe: c_int, size: c_int, msg: *mut c_void) {
    let dest = nonneg(pe, "CmiSyncSend");
    // SAFETY: the caller's promise.
    converse::sync_send_and_free(dest, unsafe { copy_of(size, msg, "CmiSyncSend") });
}

/// `CmiSyncSendAndFree(pe, size, msg)`: sends the buffer itself.
///
/// # Safety
/// `msg` comes from `CmiAlloc` or a handler; the caller gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncSendAndFree(pe: c_int, size: c_int, msg: *mut c_void) {
    let dest = nonneg(pe, "CmiSyncSendAndFree");
    // SAFETY: the caller's promise.
    converse::sync_send_and_free(dest, unsafe { take(size, msg, "CmiSyncSendAndFree") });
}

/// `CmiAsyncSend(pe, size, msg)`: as `CmiSyncSend`. Returns a null handle:
/// the send copied `msg` before returning, so it may be reused at once (the
/// manual's "if the returned communication handle is 0").
///
/// # Safety
/// As [`CmiSyncSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncSend(
    pe: c_int,
    size: c_int,
    msg: *mut c_void,
) -> *mut c_void {
    let dest = nonneg(pe, "CmiAsyncSend");
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncSend") };
    done(converse::async_send(dest, &copy))
}

/// The C handle of an async send that the core reports done: null (every
/// async send copies its buffer before it returns; see
/// `converse::CommHandle`). One the core did not finish would be boxed.
pub(crate) fn done(handle: CommHandle) -> *mut c_void {
    if handle.is_sent() {
        std::ptr::null_mut()
    } else {
        Box::into_raw(Box::new(handle)).cast()
    }
}

/// `CmiAsyncMsgSent(handle)`: nonzero once the buffer may be reused (at
/// once for a null handle).
///
/// # Safety
/// `handle` is null or comes from an async send and was not released.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncMsgSent(handle: *mut c_void) -> c_int {
    if handle.is_null() {
        return 1;
    }
    // SAFETY: a live boxed handle (the caller's promise).
    let h = unsafe { &*handle.cast::<CommHandle>() };
    c_int::from(h.is_sent())
}

/// `CmiReleaseCommHandle(handle)` (nothing to do for a null handle).
///
/// # Safety
/// As [`CmiAsyncMsgSent`]; the handle is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiReleaseCommHandle(handle: *mut c_void) {
    if !handle.is_null() {
        // SAFETY: made by `Box::into_raw` in `done` (the caller's promise),
        // released once.
        drop(unsafe { Box::from_raw(handle.cast::<CommHandle>()) });
    }
}

/// `CmiSyncBroadcast(size, msg)`: a copy to every PE but the caller.
///
/// # Safety
/// As [`CmiSyncSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncBroadcast(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_broadcast_and_free(unsafe { copy_of(size, msg, "CmiSyncBroadcast") });
}

/// `CmiSyncBroadcastAndFree(size, msg)`.
///
/// # Safety
/// As [`CmiSyncSendAndFree`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncBroadcastAndFree(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_broadcast_and_free(unsafe { take(size, msg, "CmiSyncBroadcastAndFree") });
}

/// `CmiSyncBroadcastAll(size, msg)`: a copy to every PE, the caller too.
///
/// # Safety
/// As [`CmiSyncSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncBroadcastAll(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_broadcast_all_and_free(unsafe { copy_of(size, msg, "CmiSyncBroadcastAll") });
}

/// `CmiSyncBroadcastAllAndFree(size, msg)`.
///
/// # Safety
/// As [`CmiSyncSendAndFree`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiSyncBroadcastAllAndFree(size: c_int, msg: *mut c_void) {
    // SAFETY: the caller's promise.
    converse::sync_broadcast_all_and_free(unsafe { take(size, msg, "CmiSyncBroadcastAllAndFree") });
}

/// `CmiAsyncBroadcast(size, msg)`.
///
/// # Safety
/// As [`CmiSyncSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncBroadcast(size: c_int, msg: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncBroadcast") };
    done(converse::async_broadcast(&copy))
}

/// `CmiAsyncBroadcastAll(size, msg)`.
///
/// # Safety
/// As [`CmiSyncSend`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAsyncBroadcastAll(size: c_int, msg: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's promise.
    let copy = unsafe { copy_of(size, msg, "CmiAsyncBroadcastAll") };
    done(converse::async_broadcast_all(&copy))
}
