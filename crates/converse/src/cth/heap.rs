//! A migratable thread's heap: isomalloc memory that moves with the thread
//! (Charm++'s isomalloc heap of a migratable thread), reached through a
//! global allocator the program installs ([`ThreadHeap`]).
//!
//! # What goes there
//!
//! With `#[global_allocator] static A: ThreadHeap = ThreadHeap;` in the
//! program, what a migratable thread allocates inside
//! [`on_thread_heap`] (a `Box`, a `Vec`, a linked list…) comes from its own
//! heap; everything else (other threads, the runtime, the thread outside
//! such a scope) from the system allocator. When the thread is packed, its
//! heap goes with it, at the same addresses, so pointers into it stay
//! valid wherever it is unpacked.
//!
//! Only inside the scope, unlike Charm++ (where every `malloc` of the
//! thread is routed): what the runtime allocates while a thread runs (a
//! message, a queue's growth) belongs to the PE, and must not leave with
//! the thread. So keep runtime calls (sends, making threads) out of the
//! scope, and do not hand memory of the scope to code that stays behind
//! when the thread moves.
//!
//! # Layout
//!
//! A heap is a few isomalloc blocks ("chunks"; the first 64 KiB, each next
//! one twice the last) and one block per large allocation. The first
//! chunk starts with the heap's header ([`Header`]: a lock, the chunk
//! list, free lists by size class, the large blocks' list, the count of
//! live allocations). Every allocation is preceded by 16 bytes naming its
//! heap and its size class (or its large block), so a free finds its heap
//! from the pointer alone. All of it is isomalloc memory, so the header's
//! pointers are valid wherever the heap is.
//!
//! # Invariants and concurrency
//!
//! - The header's lock (a spin flag) guards the header; a free may come
//!   from any OS thread of the process (memory handed to another PE).
//! - While the allocator works, or isomalloc's state is locked
//!   (`mem::isomalloc::PauseRouting`), the calling OS thread's routing is
//!   paused, so what isomalloc's own bookkeeping allocates goes to the
//!   system, never into a heap that may leave with its thread.
//! - Packing holds the heap's lock until its pages are gone; a free that
//!   comes later, in the process the heap left, aborts saying so. (A free
//!   on another OS thread at the very moment of packing is not caught:
//!   what the thread allocates is the thread's to free.)
//! - A heap whose thread ended ("orphaned") is freed with its last
//!   allocation.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::mem::isomalloc as space;

/// The global allocator that routes a migratable thread's allocations
/// inside [`on_thread_heap`] to its heap (see the module comment); all
/// others go to [`System`].
///
/// ```ignore
/// #[global_allocator]
/// static HEAP: converse::cth::ThreadHeap = converse::cth::ThreadHeap;
/// ```
pub struct ThreadHeap;

/// Size classes of small allocations (bytes, header included).
const CLASSES: [usize; 9] = [32, 48, 64, 128, 256, 512, 1024, 2048, 4096];
/// The first chunk's size.
const FIRST_CHUNK: usize = 64 << 10;
/// Chunks a heap has at most (each twice the last: far beyond any memory).
const MAX_CHUNKS: usize = 40;
/// Bytes before every allocation: the heap's address, then the class index
/// times two (small: an even tag) or the large block's address with bit 0
/// set (odd; blocks are page-aligned).
const PREFIX: usize = 16;

/// The heap's header, at the start of its first chunk: a lock and the
/// state it guards.
#[repr(C)]
struct Header {
    lock: AtomicBool,
    state: UnsafeCell<State>,
}

/// A heap's state (under its header's lock).
#[repr(C)]
struct State {
    orphaned: bool,
    live: usize,
    chunks: [(usize, usize); MAX_CHUNKS],
    chunk_count: usize,
    /// Free space of the newest chunk.
    bump: usize,
    bump_end: usize,
    /// Heads of the free lists (a free slot's first word is the next).
    free: [usize; CLASSES.len()],
    /// Large blocks: a doubly linked list through their first two words.
    large: usize,
}

/// The calling OS thread's routing: the running migratable thread's heap
/// cell (the header's address, 0 before its first allocation) while it is
/// inside [`on_thread_heap`], and the PE and PE count for new chunks.
#[derive(Clone, Copy)]
pub(crate) struct Routing {
    pub heap: *const Cell<usize>,
    pub pe: usize,
    pub pes: usize,
}

thread_local! {
    static ROUTING: Cell<Routing> = const {
        Cell::new(Routing { heap: std::ptr::null(), pe: 0, pes: 0 })
    };
}

/// Sets the calling OS thread's routing; returns what it was.
pub(crate) fn set_routing(r: Routing) -> Routing {
    ROUTING.with(|c| c.replace(r))
}

/// No routing.
pub(crate) const NO_ROUTING: Routing = Routing {
    heap: std::ptr::null(),
    pe: 0,
    pes: 0,
};

/// Runs `f` with the calling migratable thread's allocations going to its
/// heap (if the program installed [`ThreadHeap`]); see the module comment
/// for what belongs there.
///
/// # Panics
/// If the caller is no migratable thread.
pub fn on_thread_heap<R>(f: impl FnOnce() -> R) -> R {
    /// Ends the scope, on whichever PE the thread is then (it may have
    /// moved inside: nothing from before the call of `f` is held but
    /// `outer`, a plain value).
    struct Off {
        outer: bool,
    }
    impl Drop for Off {
        fn drop(&mut self) {
            end_scope(self.outer, self as *const Off as usize);
        }
    }
    let _off = Off {
        outer: begin_scope(),
    };
    f()
}

/// Starts an [`on_thread_heap`] scope; returns whether one was open
/// already. Not inlined: the thread-local accesses must not be merged
/// with those after the scope, which may run on another OS thread.
#[inline(never)]
fn begin_scope() -> bool {
    crate::rt::pe::with(|pe| {
        let me = pe.cth.current();
        assert!(
            me.is_migratable(),
            "on_thread_heap outside a migratable thread"
        );
        // Message buffers freed inside the scope are the heap's: no OS
        // thread's cache of freed buffers may keep them (see
        // `converse_msg::raw::disable_buffer_cache`).
        converse_msg::raw::disable_buffer_cache();
        let outer = me.0.heap_on.replace(true);
        set_routing(routing_of(&me.0, pe));
        outer
    })
}

/// Ends an [`on_thread_heap`] scope whose guard is at `guard` (on its
/// thread's stack), putting back the scope that was open before (`outer`).
/// When the guard is dropped by another thread's code (a suspended thread
/// whose last handle is dropped is unwound there), the running thread's
/// scope is not touched.
#[inline(never)]
fn end_scope(outer: bool, guard: usize) {
    let Some(pe) = crate::rt::pe::try_current() else {
        return;
    };
    let me = pe.cth.current();
    if !me.0.stack_holds(guard) {
        return;
    }
    me.0.heap_on.set(outer);
    set_routing(routing_of(&me.0, &pe));
}

/// The routing for `inner` (a thread about to run on `pe`): its heap if it
/// is inside [`on_thread_heap`].
pub(crate) fn routing_of(inner: &super::Inner, pe: &crate::rt::pe::Pe) -> Routing {
    if inner.heap_on.get() {
        Routing {
            heap: &inner.heap,
            pe: pe.pe,
            pes: pe.job.topo.num_pes(),
        }
    } else {
        NO_ROUTING
    }
}

/// Holds a heap's lock.
struct Locked(*mut Header);

impl Locked {
    /// # Safety
    /// `header` is a live heap's header.
    unsafe fn new(header: *mut Header) -> Locked {
        // SAFETY: the caller's promise.
        let lock = unsafe { &(*header).lock };
        while lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        Locked(header)
    }

    fn h(&mut self) -> &mut State {
        // SAFETY: locked (so ours alone), live (see `new`); the state is
        // in an `UnsafeCell`, apart from the lock others spin on.
        unsafe { &mut *(*self.0).state.get() }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: as in `h`; the heap was not freed while locked (`free_all`
        // and packing forget the guard).
        unsafe { (*self.0).lock.store(false, Ordering::Release) };
    }
}

/// A new heap on PE `pe`: its first chunk, the header at its start.
fn new_heap(pe: usize, pes: usize) -> Option<*mut Header> {
    let at = space::alloc(pe, pes, FIRST_CHUNK).ok()?;
    let header = at as *mut Header;
    let start = (at + size_of::<Header>()).next_multiple_of(16);
    // SAFETY: a fresh, zeroed, writable block of FIRST_CHUNK bytes, page
    // aligned: room for the header, which is plain data.
    unsafe {
        let mut chunks = [(0, 0); MAX_CHUNKS];
        chunks[0] = (at, FIRST_CHUNK);
        header.write(Header {
            lock: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                orphaned: false,
                live: 0,
                chunks,
                chunk_count: 1,
                bump: start,
                bump_end: at + FIRST_CHUNK,
                free: [0; CLASSES.len()],
                large: 0,
            }),
        });
    }
    Some(header)
}

/// Allocates `layout` from the heap at `header`.
///
/// # Safety
/// `header` is a live heap's header; routing is off on this OS thread.
unsafe fn heap_alloc(header: *mut Header, layout: Layout, pe: usize, pes: usize) -> *mut u8 {
    // SAFETY: the caller's promise.
    let mut g = unsafe { Locked::new(header) };
    let need = layout.size() + PREFIX;
    let small = layout.align() <= 16 && need <= CLASSES[CLASSES.len() - 1];
    let slot = if small {
        let class = CLASSES.iter().position(|&c| c >= need).expect("fits");
        let h = g.h();
        let slot = if h.free[class] != 0 {
            let slot = h.free[class];
            // SAFETY: a free slot of this heap; its first word is the next.
            h.free[class] = unsafe { *(slot as *const usize) };
            slot
        } else {
            if h.bump + CLASSES[class] > h.bump_end && !grow(h, CLASSES[class], pe, pes) {
                return std::ptr::null_mut();
            }
            let slot = h.bump;
            h.bump += CLASSES[class];
            slot
        };
        // SAFETY: a slot of CLASSES[class] >= PREFIX bytes of this heap.
        unsafe { write_prefix(slot + PREFIX, header as usize, class << 1) };
        slot + PREFIX
    } else {
        // Its own block: links, then the prefix, then the data, aligned.
        let align = layout.align().max(16);
        let Some(len) = (32 + PREFIX + align).checked_add(layout.size()) else {
            return std::ptr::null_mut();
        };
        let Ok(block) = space::alloc(pe, pes, len) else {
            return std::ptr::null_mut();
        };
        let data = (block + 32 + PREFIX).next_multiple_of(align);
        let h = g.h();
        // SAFETY: a fresh block of `len` bytes: links at its start, the
        // prefix just before `data`, all inside it.
        unsafe {
            let links = block as *mut [usize; 2];
            *links = [0, h.large];
            if h.large != 0 {
                (*(h.large as *mut [usize; 2]))[0] = block;
            }
            write_prefix(data, header as usize, block | 1);
        }
        h.large = block;
        data
    };
    g.h().live += 1;
    slot as *mut u8
}

/// Writes the prefix of the allocation at `data`.
///
/// # Safety
/// The 16 bytes before `data` are the heap's, writable.
unsafe fn write_prefix(data: usize, header: usize, tag: usize) {
    // SAFETY: the caller's promise.
    unsafe { *((data - PREFIX) as *mut [usize; 2]) = [header, tag] };
}

/// A new chunk with room for `need` bytes; false if none can be had.
fn grow(h: &mut State, need: usize, pe: usize, pes: usize) -> bool {
    if h.chunk_count == MAX_CHUNKS {
        return false;
    }
    let last = h.chunks[h.chunk_count - 1].1;
    let len = (last * 2).max(need);
    let Ok(at) = space::alloc(pe, pes, len) else {
        return false;
    };
    h.chunks[h.chunk_count] = (at, len);
    h.chunk_count += 1;
    h.bump = at;
    h.bump_end = at + len;
    true
}

/// Frees the allocation at `ptr` (in the isomalloc range: a heap's).
///
/// # Safety
/// `ptr` was returned by [`heap_alloc`] and not freed since.
unsafe fn heap_free(ptr: *mut u8) {
    let data = ptr as usize;
    // Its heap's pages may have left with the thread: then say so rather
    // than fault on them.
    if !space::is_live(data - PREFIX) {
        crate::proc::exit::abort(&format!(
            "memory at {data:#x}, from a migratable thread's heap, was freed in process {} after the heap \
             left it with its thread (what a thread allocates in on_thread_heap moves with it: free it \
             in the thread)",
            std::process::id()
        ));
    }
    // SAFETY: the prefix written by `heap_alloc`, in a live block.
    let [header, tag] = unsafe { *((data - PREFIX) as *const [usize; 2]) };
    let header = header as *mut Header;
    // SAFETY: the heap the allocation came from, live while it has live
    // allocations (and in this process: checked above).
    let mut g = unsafe { Locked::new(header) };
    let h = g.h();
    if tag & 1 == 1 {
        let block = tag & !1;
        // SAFETY: a large block of this heap: unlink it, then free it.
        unsafe {
            let [prev, next] = *(block as *const [usize; 2]);
            if prev == 0 {
                h.large = next;
            } else {
                (*(prev as *mut [usize; 2]))[1] = next;
            }
            if next != 0 {
                (*(next as *mut [usize; 2]))[0] = prev;
            }
        }
        let _ = space::free(block);
    } else {
        let slot = data - PREFIX;
        let class = tag >> 1;
        // SAFETY: the slot is this heap's and free now: its first word
        // links it.
        unsafe { *(slot as *mut usize) = h.free[class] };
        h.free[class] = slot;
    }
    h.live -= 1;
    if h.orphaned && h.live == 0 {
        std::mem::forget(g);
        // SAFETY: nothing of the heap is in use: its thread ended and its
        // last allocation is gone.
        unsafe { free_all(header) };
    }
}

/// Frees every block of the heap at `header`, the header's own included.
///
/// # Safety
/// Nothing may use the heap after.
unsafe fn free_all(header: *mut Header) {
    // SAFETY: the caller's promise: the header is readable until its own
    // chunk (chunk 0) goes, last.
    let (chunks, count, mut large) = unsafe {
        let h = &*(*header).state.get();
        (h.chunks, h.chunk_count, h.large)
    };
    while large != 0 {
        // SAFETY: a large block of the heap; its second word links the next.
        let next = unsafe { (*(large as *const [usize; 2]))[1] };
        let _ = space::free(large);
        large = next;
    }
    for &(at, _) in chunks[..count].iter().rev() {
        let _ = space::free(at);
    }
}

/// Packs every block of the heap at `header` (chunks, then large blocks)
/// and takes them out of this process, holding the heap's lock throughout
/// (a free from another OS thread waits, and then finds the heap gone: see
/// `dealloc`). The packed header shows the lock held: [`unpacked`] opens
/// it where the heap arrives.
///
/// # Safety
/// `header` is a live heap's header, its thread suspended.
pub(crate) unsafe fn pack(header: usize) -> Result<Vec<space::PackedBlock>, space::IsoError> {
    // SAFETY: the caller's promise.
    let mut g = unsafe { Locked::new(header as *mut Header) };
    let blocks = blocks_of(g.h());
    // The lock stays taken: the pages go with the thread.
    std::mem::forget(g);
    blocks
        .into_iter()
        // SAFETY: blocks of the heap, which nothing else touches while its
        // lock is held; they leave with the thread.
        .map(|at| unsafe { space::release(at) })
        .collect()
}

/// The heap's blocks: its chunks, then its large blocks. The caller holds
/// the heap's lock.
fn blocks_of(h: &State) -> Vec<usize> {
    let mut blocks: Vec<usize> = h.chunks[..h.chunk_count].iter().map(|c| c.0).collect();
    let mut large = h.large;
    while large != 0 {
        blocks.push(large);
        // SAFETY: a large block of the heap (its second word links the
        // next), which the lock keeps everyone else off.
        large = unsafe { (*(large as *const [usize; 2]))[1] };
    }
    blocks
}

/// The lengths of the blocks [`pack`] would take of the heap at `header`,
/// in its order, without taking them.
///
/// # Safety
/// `header` is the header of a live heap whose thread is suspended.
pub(crate) unsafe fn block_lens(header: usize) -> Vec<usize> {
    // SAFETY: the caller's promise.
    let mut g = unsafe { Locked::new(header as *mut Header) };
    let blocks = blocks_of(g.h());
    drop(g);
    blocks
        .into_iter()
        .map(|at| space::length(at).expect("a heap block lives in this process"))
        .collect()
}

/// The heap at `header` arrived with its thread (its blocks adopted here):
/// opens the lock it left with.
///
/// # Safety
/// `header` is the header of a heap just unpacked here.
pub(crate) unsafe fn unpacked(header: usize) {
    // SAFETY: the caller's promise.
    unsafe {
        (*(header as *const Header))
            .lock
            .store(false, Ordering::Release)
    };
}

/// The thread of the heap at `header` ended: free it now if nothing of it
/// is in use, else with its last allocation.
///
/// # Safety
/// `header` is a live heap's header, its thread finished.
pub(crate) unsafe fn orphan(header: usize) {
    let header = header as *mut Header;
    // SAFETY: the caller's promise.
    let mut g = unsafe { Locked::new(header) };
    let h = g.h();
    h.orphaned = true;
    if h.live == 0 {
        std::mem::forget(g);
        // SAFETY: no allocation of it lives, and its thread is gone.
        unsafe { free_all(header) };
    }
}

// SAFETY: allocations come from `System` or from a heap whose memory is
// isomalloc memory of this process, valid until freed; a heap's state is
// under its lock; routing is off while a heap is worked on, so isomalloc's
// own allocations go to `System` instead of recursing.
unsafe impl GlobalAlloc for ThreadHeap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let r = ROUTING.with(Cell::get);
        if r.heap.is_null() || space::routing_paused() {
            // SAFETY: forwarded as is.
            return unsafe { System.alloc(layout) };
        }
        let _paused = space::PauseRouting::new();
        // SAFETY: `r.heap` is the running thread's heap cell (its `Inner`
        // lives while it runs, see `routing_of`).
        let cell = unsafe { &*r.heap };
        let mut header = cell.get();
        if header == 0 {
            header = new_heap(r.pe, r.pes).map_or(0, |h| h as usize);
            cell.set(header);
        }
        if header == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: the thread's live heap; routing is paused.
            unsafe { heap_alloc(header as *mut Header, layout, r.pe, r.pes) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !space::in_region(ptr as usize) {
            // SAFETY: forwarded as is: not ours, so the system's.
            return unsafe { System.dealloc(ptr, layout) };
        }
        let _paused = space::PauseRouting::new();
        // SAFETY: a pointer of the isomalloc range that the global
        // allocator returned: one of a heap's allocations (checked to be
        // still in this process by `heap_free`).
        unsafe { heap_free(ptr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_reuse_freed_slots_and_an_orphaned_heap_goes_with_its_last() {
        let header = new_heap(0, 1).expect("a heap") as usize;
        let h = header as *mut Header;
        let small = Layout::from_size_align(40, 8).unwrap();
        let large = Layout::from_size_align(100_000, 64).unwrap();
        // SAFETY: a live heap, used by this test alone.
        unsafe {
            let a = heap_alloc(h, small, 0, 1);
            let b = heap_alloc(h, small, 0, 1);
            let big = heap_alloc(h, large, 0, 1);
            assert!(!a.is_null() && !b.is_null() && !big.is_null());
            assert_eq!(big as usize % 64, 0);
            assert!(space::in_region(a as usize) && space::in_region(big as usize));
            std::ptr::write_bytes(big, 7, 100_000);
            assert_eq!((*(*h).state.get()).chunk_count, 1);
            assert_ne!((*(*h).state.get()).large, 0, "a large block");
            heap_free(a);
            // The freed slot is taken again.
            assert_eq!(heap_alloc(h, small, 0, 1), a);
            // Many more: new chunks.
            let many: Vec<*mut u8> = (0..10_000).map(|_| heap_alloc(h, small, 0, 1)).collect();
            assert!((*(*h).state.get()).chunk_count > 1, "more chunks");
            for p in many {
                heap_free(p);
            }
            // Every size class, odd and even, comes back to its own list.
            for size in [1, 20, 40, 100, 200, 400, 1000, 2000, 4000] {
                let l = Layout::from_size_align(size, 8).unwrap();
                let p = heap_alloc(h, l, 0, 1);
                heap_free(p);
                assert_eq!(heap_alloc(h, l, 0, 1), p, "{size} bytes");
                heap_free(p);
            }
            heap_free(big);
            heap_free(b);
            orphan(header);
            // One still live: the heap is still there.
            assert!(space::length(header).is_some());
            heap_free(a);
            assert!(
                space::length(header).is_none(),
                "freed with its last allocation"
            );
        }
    }
}
