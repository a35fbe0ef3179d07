//! What the runtime does to a message and a program does not: the header
//! flags the runtime owns, stamping the sender, sharing one buffer among
//! receivers, bundles, and receiving bytes from the network into a buffer
//! that is not zeroed first. Programs use [`Message`](crate::Message)'s own methods; the
//! runtime's layers (`converse-net`, the `converse` core) import this module.
//!
//! # Why a trait, not `#[doc(hidden)]` methods
//!
//! These operations were `pub(crate)` methods while the message type lived
//! in the core. Across a crate boundary they must be public somehow; as a
//! trait ([`MessageRaw`]) they stay out of `Message`'s inherent API (the
//! impl is hidden from `Message`'s page, so `converse::Message` documents
//! exactly what it did), a caller has to name this module to reach them
//! (an explicit opt-in a program will not stumble on through completion),
//! and the trait is sealed, so nothing else can claim to be a message.
//! `#[doc(hidden)]` inherent methods would be callable on every
//! `converse::Message` by anyone, silently.
//!
//! # Invariants
//!
//! Those of [`Message`](crate::Message); in particular the `FLAG_*` bits of
//! [`MsgHeader::flags`] are the runtime's: a user send clears them, and only
//! the runtime sets them, with the routing fields (`root`, `coll`) they give
//! a meaning to.
//!
//! # Concurrency
//!
//! None of its own: every method takes the message by value or by
//! reference, as `Message`'s own do.
use std::ptr::NonNull;

use crate::buffer::BufPtr;
use crate::message::{MSG_HEADER_SIZE, MsgError, MsgHeader};

pub use crate::message::{MessageBuf, ReadInto, ReusableBuffer, receive_into};

/// Turns off, for the rest of the process, the per-thread caches of freed
/// small message buffers: from then on every buffer comes from, and goes
/// back to, the global allocator. The runtime calls it when a migratable
/// thread's heap comes into use (`converse::cth::on_thread_heap`): a block
/// of that heap leaves with its thread, so no OS thread may keep one for
/// its next message.
pub fn disable_buffer_cache() {
    crate::cache::disable();
}

/// Header flag: the message is a bundle built by `multiple_send`; its payload
/// is a sequence of 16-byte-aligned sub-messages.
pub const FLAG_BUNDLE: u32 = 1;
/// Header flag: `handler` names a runtime-internal message kind
/// (the core's `msg::system::Kind`), not an entry of the handler table.
pub const FLAG_SYSTEM: u32 = 1 << 1;
/// Header flag: a copy of a broadcast to PEs rooted at PE `root - 1`; the PE
/// that takes it from its inbox may have to pass it on (the core's `cmi::bcast`).
pub const FLAG_BCAST: u32 = 1 << 2;
/// Header flag: a copy of a broadcast to nodes rooted at PE `root - 1`.
pub const FLAG_NODE_BCAST: u32 = 1 << 3;
/// Header flag: a copy of a multicast to group `coll` whose tree is rooted
/// at position `root - 1` of the group (`root == 0`: a request to the
/// group's creator to multicast it; see the core's `cmi::group`).
pub const FLAG_MCAST: u32 = 1 << 4;
/// Header flag: a contribution to reduction `coll` (the core's `cmi::reduce`).
pub const FLAG_REDUCE: u32 = 1 << 5;
/// Header flag, with [`FLAG_REDUCE`]: the contribution of a struct-form
/// reduction (a serialized value, not a user message).
pub const FLAG_REDUCE_STRUCT: u32 = 1 << 6;
/// Header flag: not counted by quiescence detection (its own messages).
pub const FLAG_NO_QD: u32 = 1 << 7;
/// Flags the PE that takes a message from its inbox must look at before
/// delivering it (routing and arrival-time system work).
pub const ARRIVAL_FLAGS: u32 = FLAG_BCAST | FLAG_NODE_BCAST | FLAG_MCAST | FLAG_SYSTEM;
/// Flags that make delivery take the slow path.
pub const SPECIAL_DELIVERY_FLAGS: u32 = FLAG_BUNDLE | FLAG_SYSTEM | FLAG_REDUCE | FLAG_NO_QD;

mod sealed {
    /// Only [`Message`](crate::Message) implements [`MessageRaw`](super::MessageRaw).
    pub trait Sealed {}
    impl Sealed for crate::Message {}
}

/// The runtime's operations on a [`Message`](crate::Message) (see the module comment for why
/// a trait). Implemented by `Message` only.
pub trait MessageRaw: sealed::Sealed + Sized {
    /// Marks a message the network layer just made from received bytes.
    fn mark_from_net(&mut self);

    /// Takes the network mark: true once, for a message made from received
    /// bytes (they still count against the process's receive budget until
    /// its PE takes it). A mark on the handle, not in the buffer: copies and
    /// forwards never carry it.
    fn take_net_mark(&mut self) -> bool;

    /// Records the sending PE (the runtime does this on every send).
    fn set_src_pe(&mut self, pe: usize);

    /// A message of `len` bytes whose bytes `fill` writes, without zeroing
    /// them first (a large message received straight into its buffer).
    /// `fill` gets the buffer's start and `len`; its error is returned.
    ///
    /// # Safety
    /// `fill` must have written all `len` bytes when it returns `Ok`: the
    /// message's bytes are read as initialized from then on.
    ///
    /// # Panics
    /// If `len` is shorter than a header or longer than the largest message.
    unsafe fn filled_by<E>(
        len: usize,
        fill: impl FnOnce(*mut u8, usize) -> Result<(), E>,
    ) -> Result<Self, E>;

    /// A copy of this message in a new shared buffer, with `header` in place
    /// of its own (what a copying broadcast sends): one copy, however many
    /// receivers then share it.
    fn to_shared_with_header(&self, header: &MsgHeader) -> Self;

    /// Turns the message into a shared one, so that clones share its buffer
    /// instead of copying it (used for broadcasts). Costs a tag bit: every
    /// buffer has its reference count already.
    fn into_shared(self) -> Self;

    /// Builds one message whose payload holds copies of `parts`, each starting
    /// on a 16-byte boundary (the `multiple_send` bundle format), with
    /// [`FLAG_BUNDLE`] set.
    fn bundle(handler: usize, parts: &[&[u8]]) -> Self;

    /// Makes the header's size field the message's real length (the runtime
    /// owns that field; a sender may have overwritten it). Writes only when
    /// they differ, so forwarding a message does not dirty its bytes.
    fn fix_total_size(&mut self);

    /// Makes the message ready to leave as a user message (what every user
    /// send does): `pe` recorded as its sender, the header's size field
    /// true and the runtime's flags clear (a handler that passes on a
    /// broadcast copy sends a plain message). Writes the bytes only when
    /// they differ.
    fn stamp_user(&mut self, pe: usize);

    /// The sub-messages of a bundle, in order, each copied into a buffer of
    /// its own (a window into the bundle would not fit `Message`'s two
    /// words). Errors if the bundle's bytes do not parse as a sequence of
    /// messages.
    fn unbundle(self) -> Result<Vec<Self>, MsgError>;

    /// Gives the message to C as the address of its first header byte (what
    /// a C handler receives, and what `CmiAlloc` returns), with its
    /// header's size field true. The buffer is then the C side's, writable
    /// and exclusive: a shared buffer that others still hold is copied
    /// first. [`MessageRaw::from_c_ptr`] or [`c_free`] takes it back.
    fn into_c_ptr(self) -> NonNull<u8>;

    /// Takes back, as a message of `len` bytes, a buffer given to C (by
    /// [`MessageRaw::into_c_ptr`] or [`c_alloc`]). The handle owns the
    /// buffer outright if C holds no other reference to it
    /// (`CmiReference`), else it holds one counted reference (and copies
    /// before writing).
    ///
    /// # Errors
    /// The buffer's capacity, if `len` is shorter than a header or longer
    /// than the buffer; the caller keeps its reference then.
    ///
    /// # Safety
    /// `ptr` must be such an address, of a live buffer whose reference the
    /// caller gives up (when this returns `Ok`).
    unsafe fn from_c_ptr(ptr: NonNull<u8>, len: usize) -> Result<Self, usize>;
}

/// A zeroed buffer of at least `size` bytes (and at least a header's), as
/// C's `CmiAlloc(size)` returns it: the address of its first byte,
/// 16-aligned, its header's size field `size` and [`c_len`] `size`. `None` if `size` exceeds the
/// largest message.
pub fn c_alloc(size: usize) -> Option<NonNull<u8>> {
    if size > crate::MAX_MESSAGE_SIZE {
        return None;
    }
    let buf = BufPtr::alloc_zeroed(size.max(MSG_HEADER_SIZE).div_ceil(CHUNK_BYTES));
    // SAFETY: the buffer is new and ours alone.
    unsafe { buf.set_c_len(size) };
    let data = NonNull::new(buf.data().cast::<u8>()).expect("a buffer's data is not null");
    let header = data.cast::<MsgHeader>();
    // SAFETY: the buffer is new, ours, and at least a header long; the data
    // is 16-aligned, as a header needs.
    unsafe { (*header.as_ptr()).total_size = size as u32 };
    Some(data)
}

/// The size C knows the buffer at `ptr` by (`CmiSize`): what [`c_alloc`]
/// was asked for, or the length of the message [`MessageRaw::into_c_ptr`]
/// gave to C. Kept beside the buffer, not in its header, which is C's to
/// write.
///
/// # Safety
/// As [`c_reference`].
pub unsafe fn c_len(ptr: NonNull<u8>) -> usize {
    // SAFETY: a live buffer's data (the caller's promise).
    unsafe { BufPtr::from_data(ptr).c_len() }
}

/// Drops C's reference to the buffer at `ptr` (`CmiFree`); frees it if it
/// was the last.
///
/// # Safety
/// `ptr` must come from [`c_alloc`] or [`MessageRaw::into_c_ptr`], with a
/// reference the caller gives up.
pub unsafe fn c_free(ptr: NonNull<u8>) {
    // SAFETY: a live buffer's data (the caller's promise), and its
    // reference: an owned buffer's count is 1, so releasing it frees it.
    unsafe { BufPtr::from_data(ptr).release() }
}

/// Adds a reference to the buffer at `ptr` (`CmiReference`): it then takes
/// one more [`c_free`] to free it.
///
/// # Safety
/// As [`c_free`], except that the caller keeps its reference.
pub unsafe fn c_reference(ptr: NonNull<u8>) {
    // SAFETY: as above.
    unsafe { BufPtr::from_data(ptr).acquire() }
}

/// The number of bytes the buffer at `ptr` holds (its capacity: the size
/// it was allocated for, rounded up to 16).
///
/// # Safety
/// As [`c_reference`].
pub unsafe fn c_capacity(ptr: NonNull<u8>) -> usize {
    // SAFETY: as above.
    unsafe { BufPtr::from_data(ptr).chunks() * CHUNK_BYTES }
}

/// Bytes in a buffer chunk (the unit buffers are allocated in).
const CHUNK_BYTES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::Message;

    #[test]
    fn a_c_buffer_goes_round_trip_through_a_message() {
        // CmiAlloc of less than a header: plain memory, still a buffer.
        let small = c_alloc(4).unwrap();
        // SAFETY: from `c_alloc`, live until freed below.
        unsafe {
            assert_eq!(small.as_ptr().addr() % 16, 0);
            assert_eq!(c_capacity(small), MSG_HEADER_SIZE);
            assert_eq!((*small.cast::<MsgHeader>().as_ptr()).total_size, 4);
            assert_eq!(c_len(small), 4);
            // The header is C's to write: the size stays beside it.
            small.cast::<u32>().add(2).write(99);
            assert_eq!(c_len(small), 4);
            c_free(small);
        }
        let p = c_alloc(40).unwrap();
        // SAFETY: from `c_alloc`; each step below gives up or keeps its
        // reference as the functions say.
        unsafe {
            p.as_ptr().add(MSG_HEADER_SIZE).write(7);
            let mut m = Message::from_c_ptr(p, 40).unwrap();
            assert!(!m.is_shared());
            assert_eq!(m.len(), 40);
            assert_eq!(m.payload()[0], 7);
            m.set_handler(3);
            let q = m.into_c_ptr();
            assert_eq!(q, p, "an owned message goes back as the same buffer");
            assert_eq!(c_len(q), 40);
            assert_eq!((*q.cast::<MsgHeader>().as_ptr()).handler, 3);
            // CmiReference: two holders; a message made from one shares.
            c_reference(q);
            let shared = Message::from_c_ptr(q, 40).unwrap();
            assert!(shared.is_shared());
            // Given to C again while C still holds the buffer: a copy.
            let r = shared.into_c_ptr();
            assert_ne!(r, q);
            assert_eq!(*r.as_ptr().add(MSG_HEADER_SIZE), 7);
            c_free(r);
            c_free(q);
        }
        assert!(c_alloc(usize::MAX).is_none());
    }

    #[test]
    fn a_c_pointer_longer_than_its_buffer_is_refused() {
        let p = c_alloc(40).unwrap();
        // SAFETY: from `c_alloc`; refused, so still ours, and freed below.
        unsafe {
            assert_eq!(Message::from_c_ptr(p, 64).err(), Some(48));
            assert_eq!(Message::from_c_ptr(p, 16).err(), Some(48));
            c_free(p);
        }
    }

    #[test]
    fn flags_are_distinct_bits() {
        let all = [
            FLAG_BUNDLE,
            FLAG_SYSTEM,
            FLAG_BCAST,
            FLAG_NODE_BCAST,
            FLAG_MCAST,
            FLAG_REDUCE,
            FLAG_REDUCE_STRUCT,
            FLAG_NO_QD,
        ];
        let or = all.iter().fold(0, |acc, f| acc | f);
        assert_eq!(or.count_ones() as usize, all.len());
        assert!(all.iter().all(|f| f.count_ones() == 1));
    }
}
