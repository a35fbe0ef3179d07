//! The storage under a message: one heap allocation, a 16-byte head (a
//! reference count and the buffer's size in chunks) followed by the
//! chunks that hold the message's bytes.
//!
//! # Why not `Box<[Chunk]>` and `Arc<[Chunk]>`
//!
//! A message handle made of a boxed or counted slice is a fat pointer plus
//! its window, 40 bytes: too big to travel in registers, so every move of
//! a message (into a queue, out of it, into a handler) was a copy through
//! memory, and those copies stalled on store forwarding (written as 8-byte
//! stores, read back as 16-byte loads). A thin pointer to this head keeps
//! [`Message`](crate::Message) at 16 bytes, two registers. And since every
//! buffer has the count already, making an owned message shared (a
//! broadcast) writes one tag bit instead of copying it into an `Arc`.
//!
//! # Invariants
//!
//! - A buffer is `Layout { size: 16 * (chunks + 1), align: 16 }`; its head
//!   says `chunks`, which never changes, and the size C knows it by
//!   (`c_len`, for the C ABI's `CmiSize`), which only its one holder
//!   writes.
//! - `refs` counts the handles that share the buffer. An owned message's
//!   buffer has `refs == 1` and one owner, which never touches the count;
//!   a buffer is freed when its last reference goes.
//! - A shared buffer's bytes are not written (the handles copy on write);
//!   a buffer with `refs == 1` held through a counted reference may be
//!   written by that holder (a `ReusableBuffer` receiving).
//!
//! # Concurrency
//!
//! The count is atomic, with `Arc`'s orderings: increments `Relaxed` (a
//! holder already has access), the decrement `Release` and, by the one
//! that frees, an `Acquire` fence, so every holder's reads happen before
//! the memory goes; the uniqueness test loads `Acquire` for the same reason
//! before its holder writes.
use std::alloc::Layout;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering, fence};

use crate::cache;
use crate::message::Chunk;

/// The head of a buffer.
#[repr(C, align(16))]
pub(crate) struct Head {
    refs: AtomicUsize,
    /// The buffer's size in chunks (a message's size is a `u32`, so its
    /// chunks are too).
    chunks: u32,
    /// The size C knows the buffer by (`CmiSize`): what `CmiAlloc` was
    /// asked for, or the length of the message given to a C handler; 0
    /// for a buffer C never saw. Written only by the buffer's one holder.
    c_len: u32,
}

const _: () = assert!(std::mem::size_of::<Head>() == 16 && std::mem::align_of::<Head>() == 16);

/// A pointer to a buffer's head. It owns nothing by itself: the message
/// or reusable buffer holding it says whether it owns the buffer outright
/// or holds one counted reference.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BufPtr(NonNull<Head>);

/// The layout of a buffer of `chunks` chunks.
///
/// # Panics
/// If it would exceed `isize::MAX` bytes (never for a message: its size is
/// a `u32`).
#[inline]
pub(crate) fn layout(chunks: usize) -> Layout {
    chunks
        .checked_add(1)
        .and_then(|n| n.checked_mul(std::mem::size_of::<Chunk>()))
        .and_then(|size| Layout::from_size_align(size, 16).ok())
        .expect("message buffer size overflows")
}

/// Buffers up to this size (head included) are zeroed by
/// [`BufPtr::alloc_zeroed`] itself.
const SMALL_ZEROED: usize = 64 << 10;

impl BufPtr {
    /// A new buffer of `chunks` chunks, zeroed, with one reference.
    ///
    /// A small one is allocated and then zeroed here rather than through
    /// `alloc_zeroed`: that is glibc's `calloc`, which (before glibc 2.41)
    /// skips the thread's cache of freed blocks and takes the arena's
    /// slow path every time, while a plain allocation reuses a block this
    /// thread freed. (Measured: `calloc`, `_int_malloc` and `_int_free`
    /// were 11% of a broadcast-and-reduce round's samples.) A large one
    /// still comes from `calloc`, which may skip zeroing fresh pages.
    #[inline]
    pub fn alloc_zeroed(chunks: usize) -> BufPtr {
        let layout = layout(chunks);
        if let Some(raw) = cache::take(chunks) {
            // SAFETY: a block of this layout, ours: its chunks after the
            // head are `chunks * 16` bytes we may write.
            unsafe {
                raw.add(size_of::<Head>())
                    .write_bytes(0, chunks * size_of::<Chunk>())
            };
            return BufPtr::init(raw, layout, chunks);
        }
        if layout.size() <= SMALL_ZEROED {
            // SAFETY: the layout has a non-zero size (the head); on
            // success the whole block is ours to write.
            let raw = unsafe { std::alloc::alloc(layout) };
            // Opaque to the optimizer, which would otherwise fuse the
            // allocation and the zeroing back into `calloc`.
            let raw = std::hint::black_box(raw);
            if !raw.is_null() {
                // SAFETY: `raw` is valid for `layout.size()` bytes.
                unsafe { raw.write_bytes(0, layout.size()) };
            }
            return BufPtr::init(raw, layout, chunks);
        }
        // SAFETY: the layout has a non-zero size (the head).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        BufPtr::init(raw, layout, chunks)
    }

    /// A new buffer of `chunks` chunks whose bytes are not initialized,
    /// with one reference.
    #[inline]
    pub fn alloc_uninit(chunks: usize) -> BufPtr {
        let layout = layout(chunks);
        if let Some(raw) = cache::take(chunks) {
            return BufPtr::init(raw, layout, chunks);
        }
        // SAFETY: the layout has a non-zero size (the head).
        let raw = unsafe { std::alloc::alloc(layout) };
        BufPtr::init(raw, layout, chunks)
    }

    #[inline]
    fn init(raw: *mut u8, layout: Layout, chunks: usize) -> BufPtr {
        let Some(head) = NonNull::new(raw.cast::<Head>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: a fresh allocation of at least a head, aligned for it.
        unsafe {
            head.as_ptr().write(Head {
                refs: AtomicUsize::new(1),
                // `layout(chunks)` succeeded, and every caller sizes a
                // message, whose length is a `u32`.
                chunks: chunks as u32,
                c_len: 0,
            })
        };
        BufPtr(head)
    }

    /// The pointer with its low bits replaced by `tag` (they are zero in
    /// the head's address: it is 16-aligned).
    #[inline]
    pub fn tagged(self, tag: usize) -> NonNull<Head> {
        debug_assert!(tag < 16);
        self.0.map_addr(|a| a | tag)
    }

    /// The buffer whose head `tagged` points at, ignoring its low four bits.
    #[inline]
    pub fn untag(tagged: NonNull<Head>) -> BufPtr {
        // SAFETY: clearing the tag bits of a pointer whose untagged address
        // is a non-null allocation leaves that non-zero address.
        BufPtr(tagged.map_addr(|a| unsafe { std::num::NonZeroUsize::new_unchecked(a.get() & !15) }))
    }

    /// The buffer's size in chunks.
    ///
    /// # Safety
    /// The buffer must be live.
    #[inline]
    pub unsafe fn chunks(self) -> usize {
        // SAFETY: live (the caller's promise); `chunks` is never written after
        // `init`.
        unsafe { (*self.0.as_ptr()).chunks as usize }
    }

    /// The size C knows the buffer by (see [`Head`]'s `c_len`).
    ///
    /// # Safety
    /// The buffer must be live.
    #[inline]
    pub unsafe fn c_len(self) -> usize {
        // SAFETY: live (the caller's promise); only the one holder writes it.
        unsafe { (*self.0.as_ptr()).c_len as usize }
    }

    /// Sets the size C knows the buffer by.
    ///
    /// # Safety
    /// The buffer must be live and the caller its only holder.
    #[inline]
    pub unsafe fn set_c_len(self, len: usize) {
        debug_assert!(len <= u32::MAX as usize);
        // SAFETY: live, and nobody else reads or writes it (the caller's
        // promise).
        unsafe { (*self.0.as_ptr()).c_len = len as u32 }
    }

    /// The first chunk, right after the head.
    #[inline]
    pub fn data(self) -> *mut Chunk {
        self.data_nonnull().as_ptr()
    }

    /// [`BufPtr::data`], non-null as its type says (a reference made from
    /// it needs no null test where an `Option` of one is built).
    #[inline]
    pub fn data_nonnull(self) -> NonNull<Chunk> {
        // SAFETY: the head is one chunk long and a buffer is allocated
        // whole, so one chunk past the head's start is in the allocation
        // (or one past its end): an in-bounds offset.
        unsafe { self.0.cast::<Chunk>().add(1) }
    }

    /// The buffer whose first chunk is at `data` (what [`BufPtr::data`]
    /// returned): the C ABI's message pointers are data pointers.
    ///
    /// # Safety
    /// `data` must be the first chunk of a live buffer.
    #[inline]
    pub unsafe fn from_data(data: NonNull<u8>) -> BufPtr {
        // SAFETY: the head is the one chunk before the data (the caller's
        // promise that this is a buffer's data), inside the same allocation.
        BufPtr(unsafe { data.cast::<Head>().sub(1) })
    }

    /// The first chunk as uninitialized bytes.
    #[inline]
    pub fn data_uninit(self) -> *mut MaybeUninit<u8> {
        self.data().cast()
    }

    /// Adds a reference.
    ///
    /// # Safety
    /// The caller holds a reference to the live buffer.
    #[inline]
    pub unsafe fn acquire(self) {
        // SAFETY: live (the caller's promise).
        let old = unsafe { &(*self.0.as_ptr()).refs }.fetch_add(1, Ordering::Relaxed);
        // As `Arc`: a count this high means references were leaked en masse;
        // wrapping would free a buffer still in use.
        if old > isize::MAX as usize {
            std::process::abort();
        }
    }

    /// Drops a reference; frees the buffer if it was the last.
    ///
    /// # Safety
    /// The caller holds a reference to the live buffer and gives it up: it
    /// must not use the buffer afterwards.
    #[inline]
    pub unsafe fn release(self) {
        // SAFETY: live (the caller's promise).
        if unsafe { &(*self.0.as_ptr()).refs }.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other holder's use happened before its decrement (Release),
        // which this fence orders before the free.
        fence(Ordering::Acquire);
        // SAFETY: that was the last reference.
        unsafe { self.free() }
    }

    /// True if the caller's reference is the only one: it may write the
    /// bytes, and nobody else can see them.
    ///
    /// # Safety
    /// The caller holds a reference to the live buffer.
    #[inline]
    pub unsafe fn is_unique(self) -> bool {
        // Acquire: the other holders' reads, before their Release decrements,
        // happen before whatever the caller writes next.
        // SAFETY: live (the caller's promise).
        unsafe { &(*self.0.as_ptr()).refs }.load(Ordering::Acquire) == 1
    }

    /// Frees the buffer at once, whatever its count.
    ///
    /// # Safety
    /// The caller owns the buffer outright (or holds its last reference),
    /// and nothing uses it afterwards.
    #[inline]
    pub unsafe fn free(self) {
        // SAFETY: allocated by the global allocator (or taken from the
        // cache, which holds only such blocks) with `layout(chunks)`
        // (`chunks` unchanged since `init`); the caller's promise that
        // nothing else uses it, so the cache or the allocator may own it.
        unsafe {
            let chunks = self.chunks();
            let block = self.0.as_ptr().cast::<u8>();
            if !cache::keep(block, chunks) {
                std::alloc::dealloc(block, layout(chunks));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_references_free_once() {
        let b = BufPtr::alloc_zeroed(3);
        // SAFETY: the buffer is live until the last release below.
        unsafe {
            assert_eq!(b.chunks(), 3);
            assert!(b.is_unique());
            b.acquire();
            assert!(!b.is_unique());
            b.release();
            assert!(b.is_unique());
            b.release();
        }
    }

    #[test]
    fn tags_round_trip() {
        let b = BufPtr::alloc_uninit(0);
        for tag in 0..16 {
            assert_eq!(BufPtr::untag(b.tagged(tag)), b);
        }
        assert_eq!(b.data() as usize % 16, 0);
        // SAFETY: owned outright, not used again.
        unsafe { b.free() };
    }
}
