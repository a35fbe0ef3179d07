//! A per-thread cache of freed small message buffers, by size.
//!
//! # Why
//!
//! A message-driven round allocates and frees a few small messages per
//! hop: a broadcast-and-reduce round on 2 PEs four of each. Through the
//! global allocator (glibc's `malloc`, whose thread cache is the fast
//! path) each pair cost about 150 instructions (callgrind: 41 in
//! `malloc`, 95 in `free`, the rest in the wrappers). A list per size,
//! kept by the thread, makes the pair a few loads and stores.
//!
//! # Invariants
//!
//! - Class `c` (1 ≤ `c` ≤ [`CACHED_CHUNKS`]) holds only blocks of the
//!   layout of a buffer of `c` chunks (`buffer::layout(c)`), each owned
//!   by the cache alone: no handle points at it.
//! - A cached block's first word (its head's reference count, when in
//!   use) holds the next block of its class, or null; the rest of the
//!   block is unspecified.
//! - A class holds at most [`PER_CLASS`] blocks, so a thread keeps at most
//!   `PER_CLASS` × (2 + 3 + … + (`CACHED_CHUNKS` + 1)) × 16 bytes (22 KiB);
//!   a free beyond that goes to the global allocator. When
//!   one thread frees what another allocates (a producer and a consumer),
//!   the consumer's classes fill and stay full, and the producer's stay
//!   empty: neither grows, and each free and allocation then costs what
//!   it did without the cache, plus the look.
//! - When the thread ends, its cache's destructor returns every block; a
//!   buffer freed or allocated after that (in another thread-local's
//!   destructor) goes straight to the global allocator.
//! - Off for good once [`disable`] is called: the runtime calls it when a
//!   migratable thread's heap (`converse::cth::ThreadHeap`) comes into use.
//!   A block of such a heap leaves with its thread, so no OS thread's cache
//!   may keep one (nor hand one to the runtime); the allocator's own `free`
//!   sends it home. Blocks kept before that are system memory; they stay
//!   until their thread ends.
//! - The thread-local is reached only in functions that are never inlined
//!   ([`take_here`], [`keep_here`]): a migratable user-level thread resumes
//!   on another OS thread after a move, and inlined into its code, the
//!   address of the thread-local computed before the move could be reused
//!   after it (see `converse::cth::migrate`).
//!
//! # Concurrency
//!
//! None for the lists: each thread has its own cache, and a block moves between threads
//! only inside a message (which already carries the happens-before of its
//! hand-over). A buffer allocated on one thread and freed on another lands
//! in the freeing thread's cache; blocks are plain global-allocator blocks,
//! so either thread may return it. The on-off switch is one process-wide
//! atomic flag: [`disable`] stores it (`Relaxed`) before the thread heap's
//! first allocation, and a block of that heap reaches another OS thread
//! only through a hand-over that orders that store before its free there.
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::buffer::layout;

/// The largest buffer, in chunks, the cache keeps: 8 chunks is a 128-byte
/// message (a 32-byte header and 96 bytes of payload), past every control
/// message and the 8-byte to 64-byte user messages of fine-grained codes.
pub(crate) const CACHED_CHUNKS: usize = 8;

/// How many blocks each class keeps at most.
pub(crate) const PER_CLASS: usize = 32;

/// One class: a singly linked list through the blocks' first words.
struct Class {
    first: Cell<*mut u8>,
    len: Cell<usize>,
}

struct Cache {
    classes: [Class; CACHED_CHUNKS],
}

/// Whether the cache is on (see [`disable`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the caches of every thread off for the rest of the process.
pub(crate) fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

impl Drop for Cache {
    fn drop(&mut self) {
        for (i, class) in self.classes.iter().enumerate() {
            let layout = layout(i + 1);
            let mut block = class.first.replace(ptr::null_mut());
            class.len.set(0);
            while !block.is_null() {
                // SAFETY: a cached block (the invariants): its first word
                // is the next one, and the cache alone owns it, with the
                // layout of its class.
                unsafe {
                    let next = block.cast::<*mut u8>().read();
                    std::alloc::dealloc(block, layout);
                    block = next;
                }
            }
        }
    }
}

thread_local! {
    static CACHE: Cache = const {
        Cache {
            classes: [const {
                Class {
                    first: Cell::new(ptr::null_mut()),
                    len: Cell::new(0),
                }
            }; CACHED_CHUNKS],
        }
    };
}

/// Whether buffers of `chunks` chunks are cached (the cache is on and
/// the size is one of its classes).
#[inline]
fn cached(chunks: usize) -> bool {
    (1..=CACHED_CHUNKS).contains(&chunks) && ENABLED.load(Ordering::Relaxed)
}

/// A cached block for a buffer of `chunks` chunks, if this thread has one:
/// the caller owns it, with `buffer::layout(chunks)`, its bytes
/// unspecified.
#[inline]
pub(crate) fn take(chunks: usize) -> Option<*mut u8> {
    if !cached(chunks) {
        return None;
    }
    take_here(chunks)
}

/// [`take`], from this OS thread's cache. Never inlined (see the module
/// comment).
#[inline(never)]
fn take_here(chunks: usize) -> Option<*mut u8> {
    CACHE
        .try_with(|cache| {
            let class = &cache.classes[chunks - 1];
            let block = class.first.get();
            if block.is_null() {
                return None;
            }
            // SAFETY: a cached block: its first word is the next one.
            class.first.set(unsafe { block.cast::<*mut u8>().read() });
            class.len.set(class.len.get() - 1);
            Some(block)
        })
        .ok()
        .flatten()
}

/// Keeps `block`, a buffer of `chunks` chunks nothing uses any more, for
/// this thread's next allocation of that size. Returns false (the caller
/// frees it) if the class is full, the size is not cached, or the thread's
/// cache is gone.
///
/// # Safety
/// `block` was allocated with `buffer::layout(chunks)` by the global
/// allocator and the caller owns it: nothing uses it afterwards.
#[inline]
pub(crate) unsafe fn keep(block: *mut u8, chunks: usize) -> bool {
    if !cached(chunks) {
        return false;
    }
    // SAFETY: the caller's promise.
    unsafe { keep_here(block, chunks) }
}

/// [`keep`], in this OS thread's cache. Never inlined (see the module
/// comment).
///
/// # Safety
/// As [`keep`], and `chunks` is one of the cache's classes.
#[inline(never)]
unsafe fn keep_here(block: *mut u8, chunks: usize) -> bool {
    CACHE
        .try_with(|cache| {
            let class = &cache.classes[chunks - 1];
            let len = class.len.get();
            if len == PER_CLASS {
                return false;
            }
            // SAFETY: the caller's block, at least 16 bytes and 16-aligned:
            // its first word may hold the link.
            unsafe { block.cast::<*mut u8>().write(class.first.get()) };
            class.first.set(block);
            class.len.set(len + 1);
            true
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(chunks: usize) -> *mut u8 {
        // SAFETY: a non-zero size.
        let block = unsafe { std::alloc::alloc(layout(chunks)) };
        assert!(!block.is_null());
        block
    }

    #[test]
    fn a_kept_block_is_taken_again_by_size() {
        // In a thread of its own: its cache starts empty.
        std::thread::spawn(|| {
            let a = fresh(3);
            // SAFETY: a fresh block of 3 chunks' layout, owned here.
            assert!(unsafe { keep(a, 3) });
            assert_eq!(take(2), None);
            assert_eq!(take(3), Some(a));
            assert_eq!(take(3), None);
            // SAFETY: taken back: owned here again.
            unsafe { std::alloc::dealloc(a, layout(3)) };
        })
        .join()
        .unwrap();
    }

    #[test]
    fn sizes_outside_the_classes_are_not_kept() {
        assert_eq!(take(0), None);
        assert_eq!(take(CACHED_CHUNKS + 1), None);
        let big = fresh(CACHED_CHUNKS + 1);
        // SAFETY: owned here; refused, so still owned here.
        unsafe {
            assert!(!keep(big, CACHED_CHUNKS + 1));
            std::alloc::dealloc(big, layout(CACHED_CHUNKS + 1));
        }
    }

    #[test]
    fn a_full_class_refuses_and_the_thread_end_frees_the_rest() {
        // In a thread of its own, so its cache's destructor runs (and
        // miri checks that it frees every kept block).
        std::thread::spawn(|| {
            let blocks: Vec<*mut u8> = (0..=PER_CLASS).map(|_| fresh(1)).collect();
            for &b in &blocks[..PER_CLASS] {
                // SAFETY: fresh blocks of 1 chunk's layout, owned here.
                assert!(unsafe { keep(b, 1) });
            }
            let last = blocks[PER_CLASS];
            // SAFETY: as above; refused, so still owned here.
            unsafe {
                assert!(!keep(last, 1));
                std::alloc::dealloc(last, layout(1));
            }
            // Last kept, first taken.
            assert_eq!(take(1), Some(blocks[PER_CLASS - 1]));
            // SAFETY: taken back.
            unsafe { std::alloc::dealloc(blocks[PER_CLASS - 1], layout(1)) };
        })
        .join()
        .unwrap();
    }
}
