//! Migratable threads: a suspended thread packed (`CthPup`), carried in a
//! message, and resumed on another PE, of this process or another, with
//! its stack (locals and all) at the same addresses.
//!
//! # How a thread moves
//!
//! A thread made by [`Thread::create_migratable`] runs on a stack that is
//! an isomalloc block (`mem::isomalloc`): an address range no other PE of
//! the job uses, reserved in every process. Its coroutine knows its stack
//! only by bounds (`stack::StackView`), so a suspended coroutine is five
//! plain words: the stack's bounds, the saved stack pointer, the initial
//! one, and a code address. [`Thread::pack`] takes those words and the
//! used part of the stack (from the saved stack pointer to the top), gives the block's pages back (its range stays
//! reserved for it), and returns a [`PackedThread`]. [`PackedThread::unpack`]
//! maps the block at the same address where it is called, copies the stack
//! back and makes a suspended thread of the words: awaken it and it returns
//! from its suspension there. [`migrate_self`] does all of it from inside
//! the thread: it suspends, is packed, travels in a runtime message and
//! continues on the destination PE.
//!
//! # What may live on a moving stack
//!
//! Everything on the stack moves with it, bit for bit; what it points to
//! does not. So, across a migration, a thread's locals may hold plain data,
//! pointers into its own stack and into isomalloc blocks (which it packs
//! and unpacks itself, or allocates through [`ThreadHeap`](crate::cth::ThreadHeap) inside
//! [`on_thread_heap`](crate::cth::on_thread_heap), whose
//! blocks move with the thread); not `Rc`s, references or handles of the
//! PE it leaves (a [`Thread`], a message), nor addresses of thread-locals.
//! Nor may a thread's own code keep a thread-local's address across a
//! move: the move resumes it on another OS thread, and the compiler may
//! reuse an address computed before the call (it assumes a function runs
//! on one thread). Reading a thread-local through a function that is not
//! inlined into the moving code is safe: `my_pe`, `my_node` and `my_rank`
//! are never inlined for this reason, and the runtime's frames read none
//! across the switch (`on_thread_heap`'s end goes through a function that
//! is never inlined). A program's own thread-locals, read before and after
//! a move in one function, must be read through such a function too.
//!
//! The runtime's own frames hold nothing across the switch: a thread is
//! packed only if it suspended through [`suspend`](crate::cth::suspend)
//! called by its own code (or [`migrate_self`]), at no handler or nested
//! scheduler depth, with no thread-private variables (`Ctv`) and no
//! strategy.
//!
//! # Across processes
//!
//! The stack holds return addresses and the coroutine a code address, so
//! the program's code must sit at the same address in every process, as
//! Charm++ requires too: run the job with address-space randomisation off
//! (`convrun ++no-aslr …`, `setarch -R`, or the system's
//! `kernel.randomize_va_space=0`).
//! A packed thread carries a code address of this module; unpacking in a
//! process whose code is elsewhere fails saying so, before touching
//! anything.
//!
//! A packed thread is trusted as a message between the job's own processes
//! is: its layout is checked (bounds, alignment, the block's range, the
//! coroutine's words against them), its stack contents cannot be.
//!
//! This relies on the layout of `corosensei` 0.3.4's coroutine (plain
//! words, no pointer outside its stack): the dependency is pinned to that
//! version, and a compile-time check below fails if the size changes.
use std::mem::size_of;

use super::stack::{self, StackView};
use super::{Co, Depths, Inner, IsoStack, StackOwner, State, Switch, Thread};
use crate::mem::isomalloc as space;
use crate::msg::message::Message;
use crate::msg::system::{self, Kind};
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};

/// Bytes of a suspended coroutine.
const CO_SIZE: usize = size_of::<Co>();
// Five words, so no padding: every byte of one is a byte of some word.
const _: () = assert!(CO_SIZE == 5 * size_of::<usize>());
const CO_WORDS: usize = CO_SIZE / size_of::<usize>();

/// Bytes below the saved stack pointer that packing keeps too (nothing
/// there is live: the switch saved everything above it; this is slack).
const BELOW_SP: usize = 256;

/// First bytes of a packed thread.
const MAGIC: &[u8; 8] = b"CTHMIG01";

/// Words after the magic: code address, block, length, first packed byte,
/// yielder, stack size, coroutine bytes.
const HEADER_WORDS: usize = 7;
const HEADER: usize = MAGIC.len() + HEADER_WORDS * 8;

/// Why a thread could not be packed or unpacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateError(pub String);

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MigrateError {}

/// A suspended migratable thread, packed to move ([`Thread::pack`]): bytes
/// to carry in a message, made a thread again by
/// [`unpack`](PackedThread::unpack) on any PE of the job.
#[derive(Clone, PartialEq, Eq)]
pub struct PackedThread {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for PackedThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedThread({} bytes)", self.bytes.len())
    }
}

/// The fields of a packed thread, checked.
struct Parsed<'a> {
    block: usize,
    len: usize,
    from: usize,
    yielder: usize,
    stack_size: usize,
    co: [u8; CO_SIZE],
    stack: &'a [u8],
    /// The heap's header (0: none), whether the thread was inside
    /// `on_thread_heap`, and the heap's blocks.
    heap: usize,
    heap_on: bool,
    heap_blocks: Vec<(usize, &'a [u8])>,
}

/// An address of this program's code, the same in two processes exactly
/// when their code is at the same place.
fn code_marker() -> u64 {
    code_marker as fn() -> u64 as usize as u64
}

impl PackedThread {
    /// The packed bytes, to carry in a message.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A packed thread from bytes [`as_bytes`](PackedThread::as_bytes)
    /// gave, checked as [`unpack`](PackedThread::unpack) will (the code
    /// address included).
    pub fn from_bytes(bytes: &[u8]) -> Result<PackedThread, MigrateError> {
        parse(bytes)?;
        Ok(PackedThread {
            bytes: bytes.to_vec(),
        })
    }

    /// Length of the packed bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a packed thread holds at least its header.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Makes the thread again on the calling PE (the unpacking half of
    /// `CthPup`): its stack back at its address, suspended where it was
    /// packed. [`awaken`](Thread::awaken) it to let it go on.
    #[doc(alias = "CthPup")]
    pub fn unpack(self) -> Result<Thread, MigrateError> {
        pe::with(|pe| unpack(pe, &self.bytes))
    }
}

fn bad(why: impl Into<String>) -> MigrateError {
    MigrateError(why.into())
}

/// Checks `bytes` as a packed thread of this program.
fn parse(bytes: &[u8]) -> Result<Parsed<'_>, MigrateError> {
    if bytes.len() < HEADER + CO_SIZE || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad(format!("{} bytes are no packed thread", bytes.len())));
    }
    let word = |i: usize| {
        let at = MAGIC.len() + i * 8;
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let us = |i: usize| usize::try_from(word(i)).map_err(|_| bad("a word out of range"));
    if word(0) != code_marker() {
        return Err(bad(format!(
            "the thread was packed by a process whose code is at another address (its {:#x}, this one's {:#x}): \
             run the job with address-space randomisation off (`convrun ++no-aslr ...`, or under \
             `setarch -R`), so that every process has its code where the others do",
            word(0),
            code_marker()
        )));
    }
    let (block, len, from, yielder) = (us(1)?, us(2)?, us(3)?, us(4)?);
    let (stack_size, co_len) = (us(5)?, us(6)?);
    let page = stack::page_size();
    let end = block
        .checked_add(len)
        .ok_or_else(|| bad("stack bounds overflow"))?;
    let rest = &bytes[HEADER + CO_SIZE..];
    let stack_len = end.saturating_sub(from);
    if from > end || rest.len() < stack_len {
        return Err(bad("a malformed packed thread: its stack is cut short"));
    }
    let (stack, mut tail) = rest.split_at(stack_len);
    fn take_word(tail: &mut &[u8]) -> Result<usize, MigrateError> {
        let (w, more) = tail
            .split_at_checked(8)
            .ok_or_else(|| bad("a packed thread cut short"))?;
        *tail = more;
        usize::try_from(u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .map_err(|_| bad("a word out of range"))
    }
    let heap = take_word(&mut tail)?;
    let heap_on = take_word(&mut tail)? != 0;
    let count = take_word(&mut tail)?;
    let mut heap_blocks = Vec::new();
    for _ in 0..count {
        let (at, n) = (take_word(&mut tail)?, take_word(&mut tail)?);
        let ok = at % page == 0
            && n % page == 0
            && n > 0
            && space::in_region(at)
            && at.checked_add(n).is_some_and(|e| space::in_region(e - 1));
        let (b, more) = tail.split_at_checked(n).filter(|_| ok).ok_or_else(|| {
            bad(format!(
                "a malformed heap block of {n} bytes at {at:#x} in a packed thread"
            ))
        })?;
        tail = more;
        heap_blocks.push((at, b));
    }
    if !tail.is_empty()
        || (heap != 0) != (count > 0)
        || heap_blocks.first().is_some_and(|b| b.0 != heap)
    {
        return Err(bad("a malformed packed thread: its heap does not add up"));
    }
    let sane = co_len == CO_SIZE
        && block % page == 0
        && len % page == 0
        && len > page
        && space::in_region(block)
        && space::in_region(end - 1)
        && (block + page..end).contains(&from)
        && (from..end).contains(&yielder)
        && stack.len() == end - from
        && stack_size <= len;
    if !sane {
        return Err(bad(format!(
            "a malformed packed thread: stack {block:#x}+{len}, packed from {from:#x}, {} stack bytes",
            stack.len()
        )));
    }
    let co: [u8; CO_SIZE] = bytes[HEADER..HEADER + CO_SIZE].try_into().expect("sized");
    let words: Vec<usize> = co
        .chunks_exact(size_of::<usize>())
        .map(|c| usize::from_le_bytes(c.try_into().expect("a word")))
        .collect();
    // Every word of a suspended coroutine is non-zero (bounds, stack
    // pointers, a function), its bounds are the block's, and its saved
    // stack pointer lies in the packed part.
    let ours = words.iter().all(|&w| w != 0)
        && words.windows(2).any(|w| w == [end, block])
        && words.iter().any(|w| (from..end).contains(w));
    if words.len() != CO_WORDS || !ours {
        return Err(bad(
            "a malformed packed thread: its coroutine does not match its stack",
        ));
    }
    Ok(Parsed {
        block,
        len,
        from,
        yielder,
        stack_size,
        co,
        stack,
        heap,
        heap_on,
        heap_blocks,
    })
}

/// A new migratable thread's stack on `pe`: an isomalloc block of `size`
/// bytes and a guard page below.
pub(super) fn iso_stack(pe: &Pe, size: usize) -> (StackView, StackOwner, (usize, usize)) {
    let page = stack::page_size();
    let len = size.div_ceil(page) * page + page;
    let block = space::alloc(pe.pe, pe.job.topo.num_pes(), len).unwrap_or_else(|e| {
        abort(&format!(
            "cannot allocate the {len}-byte stack of a migratable thread on PE {}: {e}",
            pe.pe
        ))
    });
    // SAFETY: the lowest page of the block just allocated; nothing uses it.
    if let Err(e) = unsafe { space::protect(block, page, false) } {
        abort(&format!(
            "a migratable thread's guard page on PE {}: {e}",
            pe.pe
        ));
    }
    stack::prepare_overflow_report();
    let view = StackView {
        base: block + len,
        limit: block,
    };
    (
        view,
        StackOwner::Iso(IsoStack { block, len }),
        (block, block + page),
    )
}

impl Thread {
    /// Packs this suspended migratable thread to move it (the packing half
    /// of `CthPup`): its coroutine and the used part of its stack. The
    /// stack's pages leave this process (its address range stays reserved
    /// for it); this handle is spent ([`is_finished`](Thread::is_finished)
    /// stays false; awakening it aborts). Unpack the result on any PE of
    /// the job ([`PackedThread::unpack`]).
    ///
    /// Refused, with the reason, unless the thread was made by
    /// [`create_migratable`](Thread::create_migratable) and is suspended
    /// through its own call of [`suspend`](crate::cth::suspend), not queued,
    /// outside any handler, with no thread-private variables and no
    /// strategy (see the module comment).
    #[doc(alias = "CthPup")]
    pub fn pack(&self) -> Result<PackedThread, MigrateError> {
        pe::with(|pe| pack(pe, self))
    }

    /// The length [`pack`](Thread::pack) would give this thread's packed
    /// form now, without packing it (the sizing pass of `CthPup`): the
    /// thread stays here, untouched. Refused for the same reasons as
    /// `pack`.
    pub fn packed_len(&self) -> Result<usize, MigrateError> {
        pe::with(|pe| packed_len(pe, self))
    }
}

/// Refuses, with the reason, a thread that cannot be packed now (see
/// [`Thread::pack`]); else its stack block's address and length.
fn packable(pe: &Pe, t: &Thread) -> Result<(usize, usize), MigrateError> {
    let inner = &t.0;
    let refuse = |why: &str| Err(bad(format!("cannot pack {}: {why}", t.describe())));
    if inner.native || !inner.migratable {
        return refuse("it is not a migratable thread (make it with Thread::create_migratable)");
    }
    if inner.pe != pe.pe {
        return refuse(&format!("it lives on PE {}, not this one", inner.pe));
    }
    match inner.state.get() {
        State::Suspended => {}
        State::Moved => return refuse("it was packed already"),
        State::Finished => return refuse("it has finished"),
        State::New | State::Running => return refuse("it is not suspended"),
    }
    if inner.queued.get() || inner.free_pending.get() {
        return refuse("it is awakened (in the scheduler queue) or freed");
    }
    if !inner.clean.get() {
        return refuse(
            "it is suspended inside the runtime (a wait, a yield, a transfer), not by its own suspend()",
        );
    }
    if inner.depths.get() != Depths::default() {
        return refuse("it suspended inside a handler or a nested scheduler");
    }
    if inner.locals.borrow().iter().any(Option::is_some) {
        return refuse("it has thread-private variables (Ctv), which hold this process's memory");
    }
    if inner.strategy.borrow().is_some() {
        return refuse("it has a scheduling strategy (set_strategy)");
    }
    let Some(StackOwner::Iso(IsoStack { block, len })) = *inner.stack.borrow() else {
        return refuse("its stack is not an isomalloc block");
    };
    Ok((block, len))
}

/// The first stack byte packing keeps of a suspended coroutine whose raw
/// words are `raw`, on the stack `block..block + len`: a little below its
/// saved stack pointer (the lowest of its words inside the stack).
fn first_kept(raw: &[u8; CO_SIZE], block: usize, len: usize) -> usize {
    let page = stack::page_size();
    let end = block + len;
    let saved_sp = raw
        .chunks_exact(size_of::<usize>())
        .map(|c| usize::from_le_bytes(c.try_into().expect("a word")))
        .filter(|w| (block + page..end).contains(w))
        .min()
        .expect("a suspended coroutine's stack pointer lies in its stack");
    (saved_sp.saturating_sub(BELOW_SP) & !15).max(block + page)
}

fn packed_len(pe: &Pe, t: &Thread) -> Result<usize, MigrateError> {
    let (block, len) = packable(pe, t)?;
    let inner = &t.0;
    let raw: [u8; CO_SIZE] = {
        let co = inner.co.borrow();
        let co = co.as_ref().expect("a suspended thread has its coroutine");
        // SAFETY: `Co` is five plain words (checked at compile time), no
        // padding; the copy reads them and leaves the coroutine alone.
        unsafe { std::mem::transmute_copy::<Co, [u8; CO_SIZE]>(co) }
    };
    let from = first_kept(&raw, block, len);
    let heap = inner.heap.get();
    let heap_blocks = if heap == 0 {
        Vec::new()
    } else {
        // SAFETY: the thread's own heap, the thread suspended.
        unsafe { super::heap::block_lens(heap) }
    };
    Ok(HEADER
        + CO_SIZE
        + (block + len - from)
        + 3 * 8
        + heap_blocks.iter().map(|l| 16 + l).sum::<usize>())
}

fn pack(pe: &Pe, t: &Thread) -> Result<PackedThread, MigrateError> {
    let (block, len) = packable(pe, t)?;
    let inner = &t.0;
    let co = inner
        .co
        .borrow_mut()
        .take()
        .expect("a suspended thread has its coroutine");
    let end = block + len;
    // SAFETY: `Co` is five words (checked at compile time), so it has no
    // padding; a suspended coroutine whose stack is a `StackView` holds
    // nothing but those words (see the module comment). Transmuting moves
    // it out without dropping it: its stack is not unwound, it travels.
    let raw: [u8; CO_SIZE] = unsafe { std::mem::transmute::<Co, [u8; CO_SIZE]>(co) };
    // What lies below the saved stack pointer is dead (a little is kept).
    let from = first_kept(&raw, block, len);
    let mut bytes = Vec::with_capacity(HEADER + CO_SIZE + (end - from));
    bytes.extend_from_slice(MAGIC);
    for w in [
        code_marker(),
        block as u64,
        len as u64,
        from as u64,
        inner.yielder.get() as usize as u64,
        inner.stack_size as u64,
        CO_SIZE as u64,
    ] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    bytes.extend_from_slice(&raw);
    // SAFETY: `from..end` lies in the block's usable part (above the guard
    // page), mapped readable and writable; the thread is suspended, so
    // nothing writes it meanwhile.
    bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(from as *const u8, end - from) });
    // The heap: its header, whether the thread is inside its scope, and
    // its blocks (which leave this process).
    let heap = inner.heap.replace(0);
    let heap_blocks = if heap == 0 {
        Vec::new()
    } else {
        // SAFETY: the thread's own heap, the thread suspended.
        unsafe { super::heap::pack(heap) }
            .unwrap_or_else(|e| abort(&format!("packing the heap of {}: {e}", t.describe())))
    };
    for w in [heap, usize::from(inner.heap_on.get()), heap_blocks.len()] {
        bytes.extend_from_slice(&(w as u64).to_le_bytes());
    }
    for block in heap_blocks {
        bytes.extend_from_slice(&block.addr.to_le_bytes());
        bytes.extend_from_slice(&(block.bytes.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&block.bytes);
    }
    // The block leaves this process; the owner must not free it.
    std::mem::forget(inner.stack.borrow_mut().take());
    // SAFETY: nothing refers into the stack any more: the coroutine was
    // taken apart above, and the thread is marked moved below.
    if let Err(e) = unsafe { space::release_unread(block) } {
        abort(&format!("packing {}: {e}", t.describe()));
    }
    inner.state.set(State::Moved);
    pe.cth.untrack(inner.slot.replace(super::NO_SLOT));
    Ok(PackedThread { bytes })
}

fn unpack(pe: &Pe, bytes: &[u8]) -> Result<Thread, MigrateError> {
    let p = parse(bytes)?;
    let pes = pe.job.topo.num_pes();
    let home_is_here = |at: usize| {
        let home = space::home_pe(at, pes);
        home < pes && (home == pe.pe || pe.job.local_pe(home).is_some())
    };
    space::adopt_unfilled(p.block, p.len, pes, home_is_here(p.block))
        .map_err(|e| bad(format!("unpacking a thread: {e}")))?;
    for &(at, b) in &p.heap_blocks {
        let block = space::PackedBlock {
            addr: at as u64,
            bytes: b.to_vec(),
        };
        space::adopt(&block, pes, home_is_here(at))
            .map_err(|e| bad(format!("unpacking a thread's heap: {e}")))?;
    }
    let page = stack::page_size();
    // SAFETY: the block was just mapped here, readable and writable, `len`
    // bytes; `from..block+len` lies in it (checked by `parse`).
    unsafe {
        std::ptr::copy_nonoverlapping(p.stack.as_ptr(), p.from as *mut u8, p.stack.len());
    }
    // SAFETY: the block's lowest page, ours.
    if let Err(e) = unsafe { space::protect(p.block, page, false) } {
        abort(&format!(
            "a migrated thread's guard page on PE {}: {e}",
            pe.pe
        ));
    }
    // An overflow of it here is reported as any thread's.
    stack::prepare_overflow_report();
    // SAFETY: the bytes of a `Co` packed by this program (same code
    // address, so the same build), checked against the stack they belong
    // to (`parse`); every word is non-zero, so the coroutine's non-null
    // fields are valid. Its stack is back at its address.
    let co: Co = unsafe { std::mem::transmute::<[u8; CO_SIZE], Co>(p.co) };
    let owner = StackOwner::Iso(IsoStack {
        block: p.block,
        len: p.len,
    });
    let inner = Inner::new(
        pe.cth.fresh_id(),
        pe.pe,
        Some((co, owner)),
        (p.block, p.block + page),
        p.stack_size,
        true,
    );
    inner.state.set(State::Suspended);
    inner.yielder.set(p.yielder as *const _);
    inner.clean.set(true);
    if p.heap != 0 {
        // SAFETY: the heap's blocks were adopted above; its header is the
        // first one's start (checked by `parse`).
        unsafe { super::heap::unpacked(p.heap) };
    }
    inner.heap.set(p.heap);
    inner.heap_on.set(p.heap_on);
    let thread = Thread(std::rc::Rc::new(inner));
    pe.cth.track(&thread, true);
    Ok(thread)
}

/// Moves the calling migratable thread to PE `dest_pe` and goes on there:
/// it suspends, is packed, travels in a runtime message, and is unpacked
/// and awakened on `dest_pe`, where this call returns. See the module
/// comment for what its stack may hold across the move.
///
/// # Panics
/// Aborts the job if the caller is no migratable thread or `dest_pe` no
/// PE, and (on the destination) if the thread cannot be unpacked there.
pub fn migrate_self(dest_pe: usize) {
    let yielder = pe::with(|pe| {
        pe.check_pe(dest_pe, "migrate_self to");
        let me = pe.cth.current();
        if me.0.native || !me.0.migratable {
            abort(&format!(
                "migrate_self from {}, which is not a migratable thread (make it with Thread::create_migratable)",
                me.describe()
            ));
        }
        me.0.clean.set(true);
        me.0.migrate_to.set(Some(dest_pe));
        me.0.yielder.get()
    });
    super::suspend_coroutine(yielder, Switch::Suspend);
}

/// The trampoline's half of [`migrate_self`]: `t` just suspended to move
/// to `dest`.
pub(crate) fn send_to(pe: &Pe, t: &Thread, dest: usize) {
    // Tests (debug builds) check the sizing against every real packing.
    #[cfg(debug_assertions)]
    let sized = packed_len(pe, t).ok();
    match pack(pe, t) {
        Ok(packed) => {
            #[cfg(debug_assertions)]
            debug_assert_eq!(sized, Some(packed.bytes.len()), "packed_len and pack agree");
            let msg = system::message(Kind::ThreadMigrate, &[], &packed.bytes);
            pe.send_runtime(dest, msg);
        }
        Err(e) => abort(&format!("migrate_self to PE {dest}: {e}")),
    }
}

/// Registers the migrating threads' message on `pe`.
pub(crate) fn init_pe(pe: &Pe) {
    pe.dispatch
        .on(Kind::ThreadMigrate, |pe, _, msg| on_arrival(pe, &msg));
}

/// A thread moved here: unpack it and let it go on.
fn on_arrival(pe: &Pe, msg: &Message) {
    match unpack(pe, msg.payload()) {
        Ok(thread) => thread.awaken(),
        Err(e) => abort(&format!(
            "a thread migrating from PE {} cannot go on on PE {}: {e}",
            msg.src_pe(),
            pe.pe
        )),
    }
}
