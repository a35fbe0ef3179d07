//! The shm network module: processes on one host exchange frames through
//! rings of cells in shared memory (after Nemesis's shared-memory channel),
//! and large messages move in one copy with `process_vm_readv` (or
//! `process_vm_writev`).
//!
//! Nothing a process keeps grows with the job's size but a table of one
//! pointer per process: a VC, its rings and its mappings exist only for
//! the peers the process talks to, made on first use by either end (as
//! MPICH's VCs are), and what a poll looks at is those peers' rings, never
//! one per possible sender.
//!
//! # Segments
//!
//! Each process creates one POSIX shared-memory segment, exclusively,
//! readable and writable by its user only, named `/converse-` and 32 hex
//! digits derived one way from the job's segment id (random per job,
//! secret as the key is, apart from it) and the process's number
//! ([`segment_name`]): anyone may list the names, and one name tells
//! nothing of another, so no other user can make a process's segment
//! before it does. It begins with a header page of a fixed size: who owns it, the
//! futex words its progress thread sleeps on, and the head of its
//! *announcement list* (the rings other processes made for it). Behind the
//! header the segment grows by one ring slot each time its owner first
//! writes to a peer: the ring a process writes for a peer lives in the
//! writer's own segment. Its business card is `shm:NAME:PID:ADDR` (ADDR:
//! where the owner maps its header, for the single-copy probe); the header
//! holds PID and ADDR too, so a process that learns of a sender from an
//! announcement needs no card to answer it.
//!
//! A VC is made the first time either end needs it:
//!
//! - *Sending* (the first `isend_contig`, `istart_contig`, `post_contig` or
//!   `send_noncontig` to a peer, an LMT packet answering it, or `vc_init`,
//!   which connects at once): unless the VC exists already (the peer
//!   announced a ring first), the sender asks the layer above for the
//!   peer's card (`Upcalls::peer_card`, holding no lock: it may take a
//!   round trip to the launcher), maps the peer's header page, checks it
//!   (magic, job tag, size of the job, owner) and probes single copy; then
//!   it adds a ring slot to its own segment and pushes the ring on the
//!   peer's announcement list.
//! - *Receiving*: a poll that finds its announcement list non-empty takes
//!   it, maps each announcing writer's header page (checked the same way,
//!   unless its VC exists) and ring, and adds the ring to those it polls.
//!
//! So a process maps two pieces of each peer it talks to (the peer's
//! header page and the ring the peer writes for it; both are counted by
//! `counts::shm_segment_mapped`) and its own rings, and its polls walk the
//! list of its VCs (`ShmModule::active`, a `VcList`), whose length is the number of
//! peers it talks to. Names stay until their owner finalizes or drops its
//! module (a peer may map a ring at any time); the launcher removes those
//! of a job whose processes were killed (one name per process). Everything
//! in a segment is found by offset from its base, never by pointer: each
//! process maps it at its own address.
//!
//! Why rings live in the writer's segment rather than in segments of
//! their own (one per pair of processes): the writer makes its ring
//! alone (it grows its own file), a job still has one name per process
//! (what a killed job leaves is known without listing `/dev/shm`), and the
//! reader finds the ring by the writer's number and the slot its
//! announcement gives.
//!
//! # Layout (offsets in bytes)
//!
//! The header page:
//!
//! | at | what |
//! |---|---|
//! | 0 | magic `CVRSSHM2`, job tag (u64: derived from the job key, never the key), nodes (u32), owner node (u32), owner pid (u32) |
//! | 32 | where the owner maps its header (u64: its card's ADDR) |
//! | 40 | the owner's start time (u64: the 22nd field of its `/proc/PID/stat`, 0 if unknown): with the pid, which process the owner is (see "Lost peers") |
//! | 64 | `announced` (u64): the announcement list's first entry, 0 if empty (own cache line) |
//! | 128 | `wake` (u32 futex word, bumped by every waker), `sleeping` (u32), `ending` (u32: set once the owner ends, see "Ending") |
//!
//! Ring slot `k` (the ring for the `k`-th peer its owner wrote to) is at
//! `SLOT_ALIGN + k * RING_STRIDE`, 64 KiB-aligned so that a peer maps it
//! alone whatever the page size (up to 64 KiB):
//!
//! | at | what |
//! |---|---|
//! | 0 | `head` (u64): the consumer's index (own cache line) |
//! | 64 | `waiting` (u32): the producer waits for room (own line) |
//! | 128 | `to` (u32): the reader; `from` (u32): the writer; `next` (u64): the announcement after this ring's on the reader's list; `taken` (u32): set by the reader once it has mapped the ring |
//! | 192 | `CELLS` cells of `CELL_BYTES` |
//!
//! A cell, 64-byte aligned: a sequence word (u32), a length (u32), and up
//! to `CELL_DATA` bytes of the sender's frame stream. A cell carries any
//! part of the stream: several small frames, or a piece of a large one
//! (the cooperative copy: the sender fills cells as the receiver empties
//! them). The receiver feeds each cell's bytes to the VC's `Reassembler`
//! (the one reassembly path; a cell's length and every frame are checked,
//! since another process wrote them).
//!
//! Cell number `i` (counting from 0 since the ring was made; it lives in
//! slot `i % CELLS`) is published by writing its sequence word `i + 1`
//! (mod 2^32) last. So the receiver learns that a cell is ready, and reads
//! a small message, from the cache lines the message itself is in: a frame
//! of up to 56 bytes (an 8-byte payload) shares one line with the sequence
//! word. No producer index is published: the producer keeps its own
//! (`Vc::tail`) and a cached copy of `head`, which it reloads only when the
//! copy says the ring is full (as in FastForward and Nemesis's fastbox,
//! a message costs the two cache-line transfers of its own lines, not two
//! more for indices). A ring's memory starts zeroed (a new slot of the
//! file), so no cell of it reads as published before it is.
//!
//! A frame that fits one cell, sent while nothing waits in the VC's send
//! queue and the ring has room (a small message, the common case), goes
//! straight into its cell under the send lock (`write_alone`): no queue
//! entry, no queued-bytes accounting. Anything else joins the queue, which
//! `drain` empties into cells in order; the fast path is taken only with
//! the queue empty, so frames keep their order either way.
//!
//! # Announcements
//!
//! An announcement names a ring by its writer and slot: the u64
//! `slot << 32 | (writer + 1)` (0 ends the list). The list is a Treiber
//! stack whose links live in the rings themselves (`next`), so the
//! reader's header has the same size whatever the number of writers, and
//! taking the list costs the reader the announcements it holds, nothing
//! per possible writer.
//!
//! - *Push* (the writer, under its module's `connecting` lock, once per
//!   ring): fill in the new slot's `to` and `from`, then: load `announced`,
//!   store it in the ring's `next`, compare-and-swap `announced` from it to
//!   the new entry (SeqCst), again until the swap succeeds. Only then does
//!   the VC get its ring (`Vc::out`), so every cell of a ring is published
//!   after its announcement.
//! - *Take* (the reader, under its `discovering` lock, so that a caller of
//!   `connected_peers` that finds the list empty knows every ring announced
//!   before is mapped): swap `announced` to 0 (SeqCst), then for each entry
//!   map the ring and read its `next`, which was stored before the
//!   compare-and-swap that published the entry, which the swap reads from.
//! - No ABA: a writer pushes each of its rings once, on the one list of its
//!   reader, and rings are never removed, so an entry never comes back to
//!   a list after leaving it.
//! - Untrusted: the entry's writer must be another process of the job and
//!   its slot below the job's size; the mapped ring must say it is from
//!   that writer to this reader; a writer announcing a second ring ends
//!   the walk (a cycle). A bad entry, or a ring that cannot be mapped,
//!   ends the walk and the entries behind it are lost with it: the fault is
//!   reported (`vc_failed` of the writer; the next poll's error if the
//!   entry names no process of the job).
//!
//! # Single-copy large messages (the spec's LMT)
//!
//! A message of `LMT_MIN` bytes or more moves in the mode the module was
//! given (`lmt::Mode`, `++lmt`), through the spec's hooks: each mode is
//! an `LmtHooks` of this module (`ShmGet`, `ShmPut`; `NullHooks` for the
//! Cooperative mode), and each VC's `lmt_transfers::Transfers` keeps its
//! transfers in flight and hands their packets to the hooks:
//!
//! - **Get** (the default): an `LmtRts` frame whose body is the cookie
//!   (address, length, id) of the sender's buffer, which the sender keeps.
//!   The receiver allocates the message and reads it with
//!   `process_vm_readv` straight into it (`lmt_start_recv`), then answers
//!   `LmtDone(id)`, and the sender drops its buffer (`lmt_done_send`).
//! - **Put**: an `LmtRts` with the length and id only. The receiver
//!   allocates the message (zeroed: until the sender says it wrote every
//!   byte, nothing of another process's is trusted to be there) and answers
//!   `LmtCts` with its address; the sender writes it with
//!   `process_vm_writev` (`lmt_start_send`), drops its buffer and sends
//!   `LmtDone(id)`, on which the receiver hands the message up
//!   (`lmt_done_recv`). The messages the sender
//!   posts to that process after the RTS wait in the VC's `behind` queue
//!   until the CTS has come and the DONE is queued, so the receiver gets
//!   nothing from it between the RTS and the DONE but LMT packets, and the
//!   message keeps its place. LMT packets themselves (a CTS, a Get's DONE)
//!   never wait there: two processes each waiting for the other's CTS
//!   would wait forever.
//! - **Cooperative**: an `LmtRts` with the length and id, an `LmtCts` back
//!   once the receiver takes the transfer, then the message itself as an
//!   `LmtData` frame through the cells, which both processes copy through
//!   (the sender filling while the receiver empties them into the
//!   message's buffer); no DONE. This needs no single copy. As in the Put
//!   mode, what the sender posts after the RTS waits in `behind` until the
//!   data is queued, so the message keeps its place.
//!
//! A receiver answers an RTS over its own ring to the sender, made then if
//! it has none (from the sender's header: no card needed). When a VC is
//! made, it probes the peer's header with `process_vm_readv`; where the
//! system forbids it (ptrace restrictions), large messages go through the
//! cells as plain frames in the Get and Put modes.
//!
//! # Ending
//!
//! A reader that has no VC to a ring's writer yet opens the writer's
//! segment by name when it takes the announcement; once it has mapped the
//! ring it sets the ring's `taken`, and from then on the ring's cells live
//! as long as the reader's mapping, whatever becomes of the name. So
//! `finalize` (a normal end, after every peer's goodbye; an abnormal one,
//! first thing, before the `Abort` notices are written) sets its header's
//! `ending`, then waits until each ring this process announced is taken,
//! at most `READERS_GRACE`, before it removes the name: an aborting
//! process's last words, in a ring its reader had not taken yet, are not
//! lost with it. It does not wait for a reader that will not take: one
//! that is gone, or ending itself (its `ending` set), or one that
//! announced a ring to this process (it holds this segment open already).
//! A notice written after the name went needs none: it goes into a ring
//! taken already, or to a peer that holds the segment open.
//!
//! # Lost peers
//!
//! Nothing in shared memory tells a process that a peer was killed: its
//! rings stay as they were. A launcher that ends the job when a process
//! dies (convrun, Hydra) covers it; one that does not (Slurm's `srun`
//! without `--kill-on-bad-exit`) would leave the others waiting. So the
//! progress thread calls `check_peers` every `PEER_CHECK`: for each VC,
//! `kill(pid, 0)`, and a peer that is gone while its header's `ending` is
//! still 0 (a normal end, and an abnormal one, set it first) fails its VC
//! once, naming the pid. The cost is the VCs the process has, not the
//! job's size. A VC is looked after only if the pid in the peer's header
//! is the peer's here: the process with that pid started when the header
//! says (a peer in another pid namespace is not; its pid means nothing
//! here, and a wrong one would end the job when some other process
//! exits). What is not covered: a pid reused after the peer died (the
//! check then finds a process and waits on), and a dead peer that its
//! parent does not reap (a zombie answers `kill`).
//!
//! # Concurrency protocol
//!
//! - A ring has one producer process; inside it, the VC's `send` lock makes
//!   one thread the producer at a time. One consumer: the reader's thread
//!   holding the VC's `recv` lock. A cell's sequence word is stored
//!   (Release) after its length and bytes, and loaded by the consumer
//!   with Acquire; `head` is stored (Release) once the cell's bytes are
//!   copied out, and loaded by the producer with Acquire.
//! - VCs are made, and rings added and announced, under the module's
//!   `connecting` lock, so two threads sending first to one peer end with
//!   one VC and one ring; a VC is set in its `OnceLock` (and then listed in
//!   `active`) once, and its rings (`out`, `inb`) once each. `peer_card` is
//!   called before that lock is taken. Lock order: `discovering`, then
//!   `connecting`; a VC's `recv`, then `connecting` (an LMT answer making
//!   the ring back). Nothing holding `connecting` takes another lock.
//! - `active` is appended to under `connecting` and read without a lock: a
//!   VC's entry is stored before the length that covers it is (Release),
//!   and readers load the length with Acquire. An entry points at the VC
//!   in `vcs`, boxed, set once and never taken out: it stays valid as long
//!   as the module.
//! - Sleeping: the owner's progress thread sets `sleeping`, fences, looks
//!   at its announcement list and its rings once more, then waits on the
//!   futex word `wake` if it has not changed. A producer, after publishing
//!   a cell, fences and, if `sleeping` is set, bumps `wake` and wakes it.
//!   The fences order "publish, then look at `sleeping`" against "set
//!   `sleeping`, then look for data" (as in `csd::idle`), so no wake-up is
//!   lost; a ring's announcement comes before its first cell, so a sleeper
//!   that has not taken it yet either sees it or is woken by that cell.
//!   Another thread may have taken the list and not yet added its rings
//!   to `active` (a window in which a cell published before the sleeper
//!   set `sleeping` is in neither place): the sleeper does not sleep while
//!   `discovering` is held, and once it is free `active` holds the rings.
//! - A producer that finds the ring full sets the ring's `waiting`, fences
//!   and looks at `head` again; a consumer that freed cells fences (once
//!   per batch) and, if it sees `waiting`, clears it and wakes the
//!   producer's process the same way.
//!
//! # The ring's protocol and its model
//!
//! The ring's part of the above (a cell's slot and sequence word, room
//! and `head`, publishing and consuming a cell, `waiting`, and the
//! `sleeping`/`wake` words with the sleep and the wake decision) is one
//! piece of code, the submodule `ring` (`shm_ring.rs`): the provided
//! methods of its traits `RingMemory` and `Bell`, written against an
//! atomics family (`sync::Atomics`). This module implements the traits
//! over its mappings with std's atomics and the futex (`Ring`,
//! `HeaderBell`); every method is inlined, so the ring's hot path is the
//! loads, stores and fences it was. A loom model (`shm_ring_loom.rs`,
//! `RUSTFLAGS="--cfg loom" cargo test --release -p converse-net --lib --
//! loom`, run by CI's side lane) implements them over a heap-allocated
//! ring of 2 cells with loom's atomics, loom cells for the bytes and a
//! loom mutex and condition variable for the futex, and runs the same
//! methods with a producer and a consumer thread, checking: wrap-around
//! (more messages than cells, across the sequence words' wrap at 2^32:
//! every message arrives once, in order, intact, and no byte of a cell is
//! read while it may be written); the full ring (the producer finds no
//! room, sets `waiting` and its process sleeps; the consumer frees a cell
//! and wakes it); and the sleeping reader (it finds the ring empty, sets
//! `sleeping` and sleeps; the writer publishes and wakes it): no lost
//! wake-up on either side. Not modelled: the announcement list, the send
//! queue and locks above the ring, the `woken`/`resume` flags and the
//! futex's time-out; the model explores every interleaving with at most 3
//! preemptions (wrap-around, where both threads spin) or 5 (the two
//! sleeping models), about 3 s in all.
use crate::lmt::{Cookie, Mode, Packet};
use crate::lmt_transfers::{
    FROM_SENDER, LmtHooks, LmtVc, NullHooks, Progress, RecvTransfer, SendTransfer, Side, Transfers,
    send_cts, send_done, send_rts,
};
use crate::process::{process_alive, process_start_time};
use crate::sync::{StdAtomics, lock};
use ring::{Bell, RingMemory};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rustix::fs::Mode as FileMode;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm::OFlags;
use rustix::thread::futex;

// The ring's protocol, over this module's memory and under the loom model.
#[path = "shm_ring.rs"]
mod ring;

use super::frame::{FrameBody, FrameHeader, FrameKind, Reassembler};
use super::netmod::{NetError, NetModule, OutFrame, PollDir, SendData, SendRequest, Upcalls};
use converse_msg::Message;
use converse_msg::raw::MessageRaw as _;

const MAGIC: &[u8; 8] = b"CVRSSHM2";
/// The header page's size (the segment's, before it holds a ring).
const HEADER: usize = 4096;
/// Bytes of one cell, and of its data (after the sequence and length
/// words).
pub(crate) const CELL_BYTES: usize = 16 << 10;
const CELL_HEADER: usize = 8;
pub(crate) const CELL_DATA: usize = CELL_BYTES - CELL_HEADER;
/// Cells per ring (a power of two).
pub(crate) const CELLS: usize = 64;
/// `head`, `waiting`, and `to`/`from`/`next`: a cache line each.
const RING_META: usize = 192;
const RING: usize = RING_META + CELLS * CELL_BYTES;
/// Ring slots begin at multiples of this: `mmap` takes page-aligned
/// offsets, and this is the largest page size the module supports.
const SLOT_ALIGN: usize = 64 << 10;
/// From one ring slot to the next.
const RING_STRIDE: usize = RING.next_multiple_of(SLOT_ALIGN);
/// Messages from this size on go by single copy (when the system allows).
/// Smaller ones stream through the cells: up to about a ring's worth (1
/// MiB), the two pipelined copies of the cooperative path measured
/// 10-17× faster one way and 2-3× in a stream than `process_vm_readv`
/// (2026-11-23, 2-core EPYC host; at 4 MiB the single copy was faster).
pub(crate) const LMT_MIN: usize = (1 << 20) + (64 << 10);

// The header page (see the layout).
/// Magic, job tag, nodes, owner: what a peer checks.
const HEADER_CHECKED: usize = 24;
const OFF_PID: usize = 24;
const OFF_ADDR: usize = 32;
const OFF_START: usize = 40;
/// The fields written once by the owner, before its card is published.
const HEADER_FIELDS: usize = 48;
const OFF_ANNOUNCED: usize = 64;
const OFF_WAKE: usize = 128;
const OFF_SLEEPING: usize = 132;
const OFF_ENDING: usize = 136;

// A ring slot (see the layout).
const RING_WAITING: usize = 64;
const RING_TO: usize = 128;
const RING_FROM: usize = 132;
const RING_NEXT: usize = 136;
const RING_TAKEN: usize = 144;

/// The name of process `node`'s segment in the job whose segment id is
/// `id` (random per job, apart from its key, and secret as the key is):
/// derived from both one way (`launch_wire::auth::shm_segment_name`), as
/// names are listable by anyone. Seeing one process's name tells nothing
/// of another's, so nobody outside the job can make a process's segment
/// before it does.
pub fn segment_name(id: u64, node: usize) -> String {
    launch_wire::auth::shm_segment_name(id, node as u64)
}

/// Where ring slot `slot` begins in its writer's segment (`None`: beyond
/// any file).
fn slot_offset(slot: usize) -> Option<u64> {
    (slot as u64)
        .checked_mul(RING_STRIDE as u64)?
        .checked_add(SLOT_ALIGN as u64)
}

/// How long `finalize` waits for readers to map the rings announced to
/// them (see "Ending"): they map one within a poll or a wake-up, so this
/// bounds only a reader that is stuck or ending too.
const READERS_GRACE: Duration = Duration::from_millis(500);

/// How often the progress thread looks whether the peers this process has
/// VCs with still run (`NetModule::check_peers`): a dead peer is named
/// within about this long (one `kill(pid, 0)` per VC each time).
const PEER_CHECK: Duration = Duration::from_millis(200);

/// The announcement of ring slot `slot` of process `writer` (never 0).
fn announcement(writer: usize, slot: usize) -> u64 {
    (slot as u64) << 32 | (writer as u64 + 1)
}

/// The header fields a process writes into its segment (see the layout).
fn header_fields(
    job_tag: u64,
    nodes: usize,
    owner: usize,
    pid: u32,
    addr: u64,
    start: u64,
) -> [u8; HEADER_FIELDS] {
    let mut f = [0u8; HEADER_FIELDS];
    f[..8].copy_from_slice(MAGIC);
    f[8..16].copy_from_slice(&job_tag.to_le_bytes());
    f[16..20].copy_from_slice(&(nodes as u32).to_le_bytes());
    f[20..24].copy_from_slice(&(owner as u32).to_le_bytes());
    f[OFF_PID..OFF_PID + 4].copy_from_slice(&pid.to_le_bytes());
    f[OFF_ADDR..OFF_ADDR + 8].copy_from_slice(&addr.to_le_bytes());
    f[OFF_START..OFF_START + 8].copy_from_slice(&start.to_le_bytes());
    f
}

/// A mapping of a segment (or of one ring slot of it), unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through
// atomics or through the ring protocol of the module comment.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from `offset` (a multiple of the page
    /// size).
    fn map(fd: &OwnedFd, offset: u64, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file we hold; nothing else in
        // this process refers to the range it returns.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    /// The `u32` atomic at `off` (4-aligned, inside the mapping).
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (checked); the page is mapped for the
        // mapping's life, which bounds the reference's.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The `u64` atomic at `off` (8-aligned, inside the mapping).
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: as in `u32_at`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// A header page's fields written by its owner (see the layout).
    fn header_fields(&self) -> [u8; HEADER_FIELDS] {
        assert!(HEADER_FIELDS <= self.len);
        let mut f = [0u8; HEADER_FIELDS];
        // SAFETY: in bounds (checked); written by the owner before it
        // published its card or announced a ring, and never again (a peer
        // that writes them anyway only fails its own checks).
        unsafe { std::ptr::copy_nonoverlapping(self.base, f.as_mut_ptr(), HEADER_FIELDS) };
        f
    }

    /// This mapping of one ring slot, as a ring.
    fn ring(&self) -> Ring<'_> {
        assert!(RING <= self.len);
        Ring { map: self }
    }

    /// This mapping of a header page: the words its owner sleeps on.
    fn bell(&self) -> HeaderBell<'_> {
        HeaderBell { map: self }
    }

    /// Wakes the owner of this header page if its progress thread sleeps
    /// (see the concurrency protocol).
    #[inline]
    fn wake_owner(&self) {
        self.bell().ring();
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `map` and nothing refers to it
        // once the mapping is dropped (references borrow the mapping).
        let _ = unsafe { rustix::mm::munmap(self.base.cast::<c_void>(), self.len) };
    }
}

/// A header page's wake-up words (see the layout): its owner's futex.
struct HeaderBell<'a> {
    map: &'a Mapping,
}

impl Bell for HeaderBell<'_> {
    type A = StdAtomics;
    #[inline]
    fn word(&self) -> &AtomicU32 {
        self.map.u32_at(OFF_WAKE)
    }
    #[inline]
    fn sleeping(&self) -> &AtomicU32 {
        self.map.u32_at(OFF_SLEEPING)
    }
    fn wait(&self, seen: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|t| rustix::time::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: t.subsec_nanos() as _,
        });
        let _ = futex::wait(self.word(), futex::Flags::empty(), seen, ts.as_ref());
    }
    #[inline]
    fn wake_one(&self) {
        let _ = futex::wake(self.word(), futex::Flags::empty(), 1);
    }
}

/// One ring (see the layout): a mapping of its slot. Its protocol is
/// [`RingMemory`]'s.
struct Ring<'a> {
    map: &'a Mapping,
}

impl Ring<'_> {
    /// The reader, written by the writer before it announces the ring.
    fn to(&self) -> &AtomicU32 {
        self.map.u32_at(RING_TO)
    }
    /// The writer, written with `to`.
    fn from(&self) -> &AtomicU32 {
        self.map.u32_at(RING_FROM)
    }
    /// The announcement after this ring's on the reader's list.
    fn next(&self) -> &AtomicU64 {
        self.map.u64_at(RING_NEXT)
    }
    /// Non-zero once the reader has mapped the ring: from then on its
    /// cells outlive the writer's segment name (see "Ending").
    fn taken(&self) -> &AtomicU32 {
        self.map.u32_at(RING_TAKEN)
    }
    /// Where slot `slot`'s cell begins.
    #[inline]
    fn cell_offset(slot: usize) -> usize {
        RING_META + slot * CELL_BYTES
    }
}

impl RingMemory for Ring<'_> {
    type A = StdAtomics;
    const CELLS: usize = CELLS;
    #[inline]
    fn head(&self) -> &AtomicU64 {
        self.map.u64_at(0)
    }
    #[inline]
    fn waiting(&self) -> &AtomicU32 {
        self.map.u32_at(RING_WAITING)
    }
    #[inline]
    fn seq(&self, slot: usize) -> &AtomicU32 {
        self.map.u32_at(Self::cell_offset(slot))
    }
    #[inline]
    fn len(&self, slot: usize) -> &AtomicU32 {
        self.map.u32_at(Self::cell_offset(slot) + 4)
    }
    #[inline]
    fn with_data_mut<R>(&self, slot: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        // (Free after inlining: `slot` is an index modulo `CELLS`.)
        assert!(slot < CELLS);
        // SAFETY: `slot < CELLS` (checked), so the cell's `CELL_BYTES` are
        // within `RING`, which the mapping holds (checked by
        // `Mapping::ring`).
        f(unsafe { self.map.base.add(Self::cell_offset(slot) + CELL_HEADER) })
    }
    #[inline]
    fn with_data<R>(&self, slot: usize, f: impl FnOnce(*const u8) -> R) -> R {
        self.with_data_mut(slot, |data| f(data as *const u8))
    }
}

type Pending = OutFrame;

#[derive(Default)]
struct SendSide {
    /// The consumer's `head` as last loaded (never ahead of the real one).
    head_seen: u64,
    queue: VecDeque<Pending>,
    /// The transfer (Put, Cooperative) whose RTS is queued or written and
    /// whose data is not on its way yet (its CTS has not come): what is
    /// posted meanwhile waits in `behind`.
    put_wait: Option<u64>,
    /// Frames posted while such a transfer waits for its CTS, in order; a
    /// further held RTS among them carries its id.
    behind: VecDeque<(Option<u64>, Pending)>,
    terminate: bool,
    closed: bool,
    failed: bool,
}

/// A virtual connection to one peer process, made on first use by either
/// end (see the module comment).
struct Vc {
    peer: usize,
    pid: i32,
    /// The peer's header page: the futex words that wake it, its
    /// announcement list.
    header: Mapping,
    /// The peer's segment, open from the VC's making on: the ring the
    /// peer announces later is mapped from it, not by name (the peer may
    /// have removed the name by then: it ends once it has this process's
    /// `Bye`, which may go before the ring of the peer's own `Bye` is
    /// taken).
    segment: OwnedFd,
    /// The ring this process writes for the peer (a slot of its own
    /// segment), once it has sent or connected to it. Set once, after the
    /// ring is announced.
    out: OnceLock<Mapping>,
    /// The ring the peer writes for this process (a slot of the peer's
    /// segment), once its announcement was taken. Set once.
    inb: OnceLock<Mapping>,
    send: Mutex<SendSide>,
    /// The reassembler, and the buffer a cell is copied into.
    recv: Mutex<(Reassembler, Vec<u8>)>,
    /// The large-message transfers in flight with the peer
    /// (`lmt_transfers`): the messages lent to it are counted in the
    /// backlog, and the VC terminates only once they are back.
    lmt: Transfers,
    queued: AtomicUsize,
    /// Bytes in the send side's `behind` queue.
    held: AtomicUsize,
    /// A Put transfer from the peer is in flight (read on every frame: a
    /// plain flag, written with the `recv` lock held).
    receiving_put: AtomicBool,
    /// The number of the next cell this process publishes in its ring to
    /// the peer (written under `send`; read without it to see whether the
    /// ring has room).
    tail: AtomicU64,
    /// Large messages may be read from this peer in one copy.
    single_copy: bool,
    terminated: AtomicBool,
    /// `pid` is the peer's here (its start time is the one in the peer's
    /// header): only then is the peer looked after (`check_peers_with`).
    watched: bool,
    /// The peer was found gone without ending, and said so once
    /// (`check_peers_with`).
    gone: AtomicBool,
    /// The peer's card: the one the VC was made from, or, for a VC made
    /// from the peer's announcement, the one the peer publishes (made
    /// from its header). A terminated VC is used again only for the same.
    card: String,
}

/// The VCs a module has made, in the order made: what its polls walk.
/// Appended to (one thread at a time) and never shrunk; read without a
/// lock (see the concurrency protocol). Its memory is the number of
/// entries, in chunks of doubling size; an entry points at a VC of the
/// module's table (`ShmModule::vcs`), so a walk costs no look-up there.
struct VcList {
    chunks: [OnceLock<Box<[AtomicPtr<Vc>]>>; VC_LIST_CHUNKS],
    len: AtomicUsize,
}

/// Entries of a [`VcList`]'s first chunk; each further chunk holds twice
/// the one before.
const VC_LIST_FIRST: usize = 16;
/// Chunks enough for any process number (`u32`).
const VC_LIST_CHUNKS: usize = 29;

impl VcList {
    fn new() -> VcList {
        VcList {
            chunks: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// The chunk entry `i` is in, and its place there.
    fn place(i: usize) -> (usize, usize) {
        let q = i / VC_LIST_FIRST + 1;
        let chunk = (usize::BITS - 1 - q.leading_zeros()) as usize;
        (chunk, i - VC_LIST_FIRST * ((1 << chunk) - 1))
    }

    /// Appends `vc`. Callers append one at a time (`connecting`).
    ///
    /// # Safety
    /// `vc` must stay where it is, alive, for as long as the list lives.
    unsafe fn push(&self, vc: &Vc) {
        let i = self.len.load(Ordering::Relaxed);
        let (chunk, at) = Self::place(i);
        let entries = self.chunks[chunk].get_or_init(|| {
            (0..VC_LIST_FIRST << chunk)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect()
        });
        entries[at].store(std::ptr::from_ref(vc).cast_mut(), Ordering::Relaxed);
        // Publishes the entry (and the VC, made before).
        self.len.store(i + 1, Ordering::Release);
    }

    /// How many VCs are listed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Calls `f` on the VCs listed when called, in order, until it returns
    /// true; returns whether it did.
    #[inline]
    fn any(&self, mut f: impl FnMut(&Vc) -> bool) -> bool {
        let n = self.len.load(Ordering::Acquire);
        let mut start = 0;
        for chunk in &self.chunks {
            if start >= n {
                break;
            }
            let entries = chunk.get().expect("a chunk below the length is made");
            for entry in &entries[..(n - start).min(entries.len())] {
                // SAFETY: entries below `len` were stored before it
                // (Release, loaded above with Acquire) by `push`, whose
                // caller keeps the VC alive and in place while the list
                // lives, which the borrow of `self` covers.
                if f(unsafe { &*entry.load(Ordering::Relaxed) }) {
                    return true;
                }
            }
            start += entries.len();
        }
        false
    }

    /// Calls `f` on the VCs listed when called, in order.
    #[inline]
    fn for_each(&self, mut f: impl FnMut(&Vc)) {
        self.any(|vc| {
            f(vc);
            false
        });
    }
}

/// How [`ShmModule::take_announcements`] deals with another thread taking
/// the list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taking {
    /// Leaves the list to it (an idle PE's poll never waits).
    IfFree,
    /// Waits for it if the list is not empty (the progress thread).
    Blocking,
    /// Waits for it whatever the list holds, so that on return every ring
    /// announced before the call is mapped (`connected_peers`).
    All,
}

/// This process's segment, under the module's `connecting` lock: its file
/// (which grows by a ring slot for each peer written to) and its slots.
struct OwnSegment {
    fd: OwnedFd,
    rings: usize,
}

/// The shm network module of one process.
pub struct ShmModule {
    me: usize,
    nodes: usize,
    /// The job's tag, in every segment's header: a segment of another job
    /// (or a stale one) is refused.
    job_tag: u64,
    /// The id naming the job's segments.
    segment_id: u64,
    name: String,
    /// This process's header page.
    own: Mapping,
    /// Making VCs and rings, one at a time (see the concurrency protocol).
    connecting: Mutex<OwnSegment>,
    unlinked: AtomicBool,
    /// The VC to each process, made on first use: a pointer each, the one
    /// thing here as large as the job.
    vcs: Box<[OnceLock<Box<Vc>>]>,
    /// The VCs made (see [`VcList`]).
    active: VcList,
    /// Taking the announcement list, one thread at a time.
    discovering: Mutex<()>,
    /// A fault of the announcement list that names no process of the job:
    /// the next poll's error.
    fault: Mutex<Option<NetError>>,
    /// `fault` is set (what a poll looks at).
    faulted: AtomicBool,
    /// Mappings of other processes' segments this module made (header
    /// pages and rings; `counts::shm_segments_mapped` counts the process's).
    peer_mappings: AtomicUsize,
    upcalls: OnceLock<Arc<dyn Upcalls>>,
    max_payload: usize,
    /// Large messages read from a peer in one copy (a statistic: tests
    /// check which path a message took).
    lmt_reads: AtomicU64,
    /// Large messages written into a peer in one copy (Put mode).
    lmt_writes: AtomicU64,
    /// How large messages move.
    lmt_mode: Mode,
    resume: AtomicBool,
    /// `wake` was called and no wait has seen it yet.
    woken: AtomicBool,
    /// Serializes waits on the futex (one progress thread).
    poll: Mutex<()>,
}

/// A VC as its large-message hooks see it: the spec's packet macros
/// (`lmt_transfers::LmtVc`) on this module's rings.
struct ShmVc<'a> {
    module: &'a ShmModule,
    vc: &'a Vc,
}

impl LmtVc for ShmVc<'_> {
    fn peer(&self) -> usize {
        self.vc.peer
    }

    fn send_packet(&self, base: FrameHeader, packet: Packet) -> Result<(), NetError> {
        let header = packet.header_from(base);
        match packet {
            // An RTS keeps its place among the messages (behind a transfer
            // that waits for its CTS); the other packets never wait. A
            // Put's or a Cooperative transfer's RTS holds what comes after
            // it until its data is on its way.
            Packet::Rts(cookie) => {
                let hold = matches!(self.module.lmt_mode, Mode::Put | Mode::Cooperative);
                self.module
                    .queue_rts(self.vc, header, packet.encode(), hold.then_some(cookie.id))
            }
            _ => self.module.send_packet(self.vc, header, packet.encode()),
        }
    }

    fn send_data(&self, t: &mut SendTransfer) -> Result<(), NetError> {
        let msg = t
            .msg
            .take()
            .ok_or_else(|| NetError::peer(self.vc.peer, "shm: a transfer's data sent twice"))?;
        let header = FrameHeader {
            kind: FrameKind::LmtData,
            flags: FROM_SENDER,
            len: msg.len() as u32,
            src: t.header.src,
            tag: t.id as u32,
        };
        // Ahead of what waits behind the transfer, which then goes.
        self.module.send_frame_now(
            self.vc,
            Pending::frame(header, SendData::Message(msg), None),
        )?;
        self.module.release_behind(self.vc, t.id);
        Ok(())
    }
}

/// A protocol fault of the peer in a large-message transfer.
fn lmt_fault(vc: &ShmVc<'_>, what: String) -> String {
    format!("malformed data from process {}: {what}", vc.vc.peer)
}

/// shm's Get mode (see "Single-copy large messages"): the RTS lends the
/// sender's buffer, the receiver reads it and answers DONE.
struct ShmGet;

impl<'a> LmtHooks<ShmVc<'a>> for ShmGet {
    fn initiate_lmt(&self, vc: &ShmVc<'a>, t: &SendTransfer) -> Result<(), String> {
        let addr = t.msg.as_ref().map_or(0, |m| m.as_bytes().as_ptr() as u64);
        send_rts(vc, t, t.cookie(addr))
    }

    fn start_recv(
        &self,
        vc: &ShmVc<'a>,
        t: &mut RecvTransfer,
        s: Cookie,
    ) -> Result<Progress, String> {
        let (peer, pid) = (vc.vc.peer, vc.vc.pid);
        let len = t.header.len as usize;
        // SAFETY: `read_remote_raw` returns `Ok` only once it has written
        // all `len` bytes at `to`.
        let msg = unsafe {
            Message::filled_by(len, |to, len| {
                ShmModule::read_remote_raw(pid, s.addr, to, len)
            })
        }
        .map_err(|e| format!("cannot read a large message from process {peer} (pid {pid}): {e}"))?;
        vc.module.lmt_reads.fetch_add(1, Ordering::Relaxed);
        t.msg = Some(msg);
        send_done(vc, t.header, t.id, false)?;
        Ok(Progress::Done)
    }

    fn start_send(
        &self,
        vc: &ShmVc<'a>,
        t: &mut SendTransfer,
        _: Cookie,
    ) -> Result<Progress, String> {
        Err(lmt_fault(
            vc,
            format!(
                "clear to send transfer {}, which the Get mode never asks for",
                t.id
            ),
        ))
    }

    fn handle_cookie(&self, vc: &ShmVc<'a>, _: Side<'_>, _: Cookie) -> Result<Progress, String> {
        Err(lmt_fault(
            vc,
            "a cookie change, which shm's transfers never send".into(),
        ))
    }

    fn done_send(&self, _: &ShmVc<'a>, _: &mut SendTransfer) -> Result<Progress, String> {
        // Read: the lent buffer comes back.
        Ok(Progress::Done)
    }

    fn done_recv(&self, vc: &ShmVc<'a>, t: &mut RecvTransfer) -> Result<Progress, String> {
        Err(lmt_fault(
            vc,
            format!(
                "done with transfer {} from its sender, which the Get mode never says",
                t.id
            ),
        ))
    }
}

/// shm's Put mode (see "Single-copy large messages"): the RTS asks for a
/// buffer, the CTS gives the receiver's, the sender writes it and says
/// DONE.
struct ShmPut;

impl<'a> LmtHooks<ShmVc<'a>> for ShmPut {
    fn initiate_lmt(&self, vc: &ShmVc<'a>, t: &SendTransfer) -> Result<(), String> {
        // The receiver's buffer is the one that counts; the sender's
        // address is not shown.
        send_rts(vc, t, t.cookie(0))
    }

    fn start_recv(
        &self,
        vc: &ShmVc<'a>,
        t: &mut RecvTransfer,
        _: Cookie,
    ) -> Result<Progress, String> {
        if vc.vc.receiving_put.load(Ordering::Relaxed) {
            return Err(lmt_fault(
                vc,
                format!("Put transfer {} before the one in flight was done", t.id),
            ));
        }
        let len = t.header.len as usize;
        // Zeroed (calloc: fresh pages cost no pass): the bytes are the
        // peer's to write, and a peer that says DONE without writing them
        // must not show this process's old heap. The peer writes the
        // buffer (`process_vm_writev`) while the transfer holds it,
        // untouched here until the DONE: a message's bytes never move,
        // whoever holds it.
        let msg = Message::alloc(len);
        let addr = msg.as_bytes().as_ptr() as u64;
        t.msg = Some(msg);
        vc.vc.receiving_put.store(true, Ordering::Relaxed);
        send_cts(
            vc,
            t,
            Cookie {
                addr,
                len: len as u64,
                id: t.id,
            },
        )?;
        Ok(Progress::Pending)
    }

    fn start_send(
        &self,
        vc: &ShmVc<'a>,
        t: &mut SendTransfer,
        r: Cookie,
    ) -> Result<Progress, String> {
        let (peer, pid, id) = (vc.vc.peer, vc.vc.pid, t.id);
        if lock(&vc.vc.send).put_wait != Some(id) {
            return Err(lmt_fault(
                vc,
                format!("clear to send transfer {id}, which waits for none"),
            ));
        }
        if r.len != t.len as u64 {
            return Err(lmt_fault(
                vc,
                format!(
                    "clear to send transfer {id} into {} bytes, for a message of {}",
                    r.len, t.len
                ),
            ));
        }
        let msg = t
            .msg
            .take()
            .ok_or_else(|| lmt_fault(vc, format!("clear to send transfer {id} twice")))?;
        ShmModule::write_remote(pid, r.addr, msg.as_bytes()).map_err(|e| {
            format!("cannot write a large message into process {peer} (pid {pid}): {e}")
        })?;
        vc.module.lmt_writes.fetch_add(1, Ordering::Relaxed);
        drop(msg);
        send_done(vc, t.header, id, true)?;
        vc.module.release_behind(vc.vc, id);
        Ok(Progress::Done)
    }

    fn handle_cookie(&self, vc: &ShmVc<'a>, _: Side<'_>, _: Cookie) -> Result<Progress, String> {
        Err(lmt_fault(
            vc,
            "a cookie change, which shm's transfers never send".into(),
        ))
    }

    fn done_send(&self, vc: &ShmVc<'a>, t: &mut SendTransfer) -> Result<Progress, String> {
        Err(lmt_fault(
            vc,
            format!(
                "done with transfer {} from its receiver, which the Put mode never says",
                t.id
            ),
        ))
    }

    fn done_recv(&self, vc: &ShmVc<'a>, _: &mut RecvTransfer) -> Result<Progress, String> {
        // Written: the message goes up.
        vc.vc.receiving_put.store(false, Ordering::Relaxed);
        Ok(Progress::Done)
    }
}

fn err(e: impl std::fmt::Display) -> NetError {
    NetError::local(format!("shm: {e}"))
}

impl ShmModule {
    /// `net_module_init`: creates this process's segment (its header page:
    /// rings are added as peers are written to).
    pub fn init(
        me: usize,
        nodes: usize,
        job_tag: u64,
        segment_id: u64,
        max_payload: usize,
    ) -> Result<ShmModule, NetError> {
        crate::limits::raise_descriptor_limit(nodes);
        if nodes > u32::MAX as usize {
            return Err(err(format!(
                "a job of {nodes} processes: at most {} share memory",
                u32::MAX
            )));
        }
        // SAFETY: sysconf with an integer argument only.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page <= 0 || !SLOT_ALIGN.is_multiple_of(page as usize) {
            return Err(err(format!(
                "pages of {page} bytes: ring slots are aligned to {SLOT_ALIGN} bytes, which must be whole pages"
            )));
        }
        let name = segment_name(segment_id, me);
        let fd = rustix::shm::open(
            name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR,
            FileMode::RUSR | FileMode::WUSR,
        )
        .map_err(|e| err(format!("cannot create {name}: {e}")))?;
        let made = rustix::fs::ftruncate(&fd, HEADER as u64)
            .map_err(|e| err(format!("cannot size {name}: {e}")))
            .and_then(|()| {
                Mapping::map(&fd, 0, HEADER).map_err(|e| err(format!("cannot map {name}: {e}")))
            });
        let own = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = rustix::shm::unlink(name.as_str());
                return Err(e);
            }
        };
        let fields = header_fields(
            job_tag,
            nodes,
            me,
            std::process::id(),
            own.base as u64,
            process_start_time(None).unwrap_or(0),
        );
        // SAFETY: the header's first bytes, in bounds; no other process
        // reads them before our card is published.
        unsafe { std::ptr::copy_nonoverlapping(fields.as_ptr(), own.base, fields.len()) };
        // Let peers read our memory (large messages): needed where Yama's
        // ptrace restrictions are on; harmless elsewhere.
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
        }
        Ok(ShmModule {
            me,
            nodes,
            job_tag,
            segment_id,
            name,
            own,
            connecting: Mutex::new(OwnSegment { fd, rings: 0 }),
            unlinked: AtomicBool::new(false),
            vcs: (0..nodes).map(|_| OnceLock::new()).collect(),
            active: VcList::new(),
            discovering: Mutex::new(()),
            fault: Mutex::new(None),
            faulted: AtomicBool::new(false),
            peer_mappings: AtomicUsize::new(0),
            upcalls: OnceLock::new(),
            max_payload,
            lmt_reads: AtomicU64::new(0),
            lmt_writes: AtomicU64::new(0),
            lmt_mode: Mode::Get,
            resume: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            poll: Mutex::new(()),
        })
    }

    /// The module, moving large messages in `mode` (Get unless told).
    pub fn with_lmt_mode(mut self, mode: Mode) -> ShmModule {
        self.lmt_mode = mode;
        self
    }

    /// Sets who hears about frames and connection events.
    pub fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        let _ = self.upcalls.set(upcalls);
    }

    fn upcalls(&self) -> &dyn Upcalls {
        &**self.upcalls.get().expect("shm: upcalls set before use")
    }

    /// The layer above's message buffers, for a new VC's reassembly.
    fn message_buffers(&self) -> Option<Arc<dyn crate::frame::MessageBuffers>> {
        self.upcalls.get().and_then(|u| u.message_buffers())
    }

    /// Start-up's wait for the peers of `peers`: there is nothing to wait
    /// for (a peer maps this process's segment whenever it first needs to,
    /// and the name stays until this module ends), so it returns at once.
    pub fn accept_peers(&self, _peers: &[usize], _deadline: Instant) -> Result<(), NetError> {
        Ok(())
    }

    /// Removes the segment's name (the memory stays until every mapping is
    /// gone). From then on no peer can make a VC with this process: for
    /// `finalize` and drop.
    pub fn unlink(&self) {
        if !self.unlinked.swap(true, Ordering::AcqRel) {
            let _ = rustix::shm::unlink(self.name.as_str());
        }
    }

    /// Waits, at most `grace`, until every ring this process announced
    /// was mapped by its reader, unless the reader will not take it (see
    /// "Ending").
    fn wait_for_readers(&self, grace: Duration) {
        let until = Instant::now() + grace;
        loop {
            let untaken = self.active.any(|vc| {
                // A reader that announced a ring here holds this segment
                // open (its VC's): it needs no name.
                vc.inb.get().is_none()
                    && vc
                        .out
                        .get()
                        .is_some_and(|map| map.ring().taken().load(Ordering::Acquire) == 0)
                    && vc.header.u32_at(OFF_ENDING).load(Ordering::Acquire) == 0
                    && process_alive(vc.pid)
            });
            if !untaken || Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Fails, once, the VC of each peer that `alive` says is gone while
    /// its header says it had not ended (see "Lost peers"). The process is
    /// looked at before its `ending`: a peer that ended normally set it
    /// before it exited.
    fn check_peers_with(&self, alive: impl Fn(i32) -> bool) {
        let mut lost = Vec::new();
        self.active.for_each(|vc| {
            if !vc.watched
                || vc.terminated.load(Ordering::Acquire)
                || vc.gone.load(Ordering::Relaxed)
                || alive(vc.pid)
                || vc.header.u32_at(OFF_ENDING).load(Ordering::Acquire) != 0
            {
                return;
            }
            if !vc.gone.swap(true, Ordering::AcqRel) {
                lost.push((vc.peer, vc.pid));
            }
        });
        // Reported outside the walk: the layer above may end the process.
        for (peer, pid) in lost {
            self.upcalls().vc_failed(
                peer,
                format!("its process (pid {pid}) is gone without ending: killed, or it crashed"),
            );
        }
    }

    /// The VC to `peer`, if one was made.
    fn vc(&self, peer: usize) -> Result<&Vc, NetError> {
        self.vcs
            .get(peer)
            .and_then(|v| v.get())
            .map(|vc| &**vc)
            .ok_or_else(|| NetError::peer(peer, "shm: no connection to this process"))
    }

    /// Fails unless `peer` is another process of the job.
    fn check_peer(&self, peer: usize) -> Result<(), NetError> {
        if peer >= self.nodes || peer == self.me {
            return Err(NetError::peer(
                peer,
                format!("shm: no such peer in a job of {} processes", self.nodes),
            ));
        }
        Ok(())
    }

    /// The VC to `peer` with its ring to the peer, made now if need be
    /// (a first send; see the module comment). Holds no lock while it asks
    /// the layer above for the peer's card. A terminated VC is returned as
    /// it is (its sends are refused).
    fn vc_to(&self, peer: usize) -> Result<&Vc, NetError> {
        if let Some(vc) = self.vcs.get(peer).and_then(|v| v.get()) {
            if vc.out.get().is_none() && !vc.terminated.load(Ordering::Acquire) {
                self.connect_out(vc)?;
            }
            return Ok(vc);
        }
        self.check_peer(peer)?;
        let card = self
            .upcalls()
            .peer_card(peer, "shm:")
            .map_err(|e| NetError::peer(peer, format!("shm: no card to connect by: {}", e.what)))?;
        self.connect(peer, &card, false)
    }

    /// Parses `card`, process `peer`'s: its segment's name (checked: this
    /// job's segment of that process), pid and header address.
    fn parse_card(&self, peer: usize, card: &str) -> Result<(i32, u64), NetError> {
        let bad = || NetError::peer(peer, format!("shm: `{card}` is no shm business card"));
        let mut parts = card.strip_prefix("shm:").ok_or_else(bad)?.split(':');
        let (Some(name), Some(pid), Some(addr), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let pid: i32 = pid.parse().map_err(|_| bad())?;
        let addr: u64 = addr.parse().map_err(|_| bad())?;
        if name != segment_name(self.segment_id, peer) {
            return Err(NetError::peer(
                peer,
                format!(
                    "shm: card names segment {name}, expected that of process {peer} of this job"
                ),
            ));
        }
        Ok((pid, addr))
    }

    /// Makes the VC to `peer` from its `card` if there is none, then the
    /// VC's ring to the peer (`vc_init`, `connect_to_root`, a first send).
    /// `twice_fails`: a VC that has its ring already is an error
    /// (connected twice) rather than the answer.
    fn connect(&self, peer: usize, card: &str, twice_fails: bool) -> Result<&Vc, NetError> {
        self.check_peer(peer)?;
        let (pid, addr) = self.parse_card(peer, card)?;
        let mut own = lock(&self.connecting);
        let vc = match self.vcs[peer].get() {
            Some(vc) if vc.card != card => {
                return Err(NetError::peer(
                    peer,
                    format!("shm: card `{card}` is not the one VC {peer} was made from"),
                ));
            }
            Some(vc) => &**vc,
            None => {
                let (fd, name) = self
                    .open_segment(peer)
                    .map_err(|e| NetError::peer(peer, e))?;
                let header = self
                    .map_header(peer, &fd, &name)
                    .map_err(|e| NetError::peer(peer, e))?;
                self.add_vc(peer, header, fd, pid, addr, card.to_string())
            }
        };
        if vc.out.get().is_some() {
            return if twice_fails {
                Err(NetError::peer(peer, "shm: connected twice"))
            } else {
                Ok(vc)
            };
        }
        self.add_ring(&mut own, vc)?;
        Ok(vc)
    }

    /// Makes `vc`'s ring to its peer if it has none (a VC made from the
    /// peer's announcement: its header says all that is needed).
    fn connect_out(&self, vc: &Vc) -> Result<(), NetError> {
        if vc.out.get().is_some() {
            return Ok(());
        }
        let mut own = lock(&self.connecting);
        if vc.out.get().is_none() {
            self.add_ring(&mut own, vc)?;
        }
        Ok(())
    }

    /// Opens process `peer`'s segment: the file and its name.
    fn open_segment(&self, peer: usize) -> Result<(OwnedFd, String), String> {
        let name = segment_name(self.segment_id, peer);
        let fd = rustix::shm::open(name.as_str(), OFlags::RDWR, FileMode::empty())
            .map_err(|e| format!("shm: cannot open {name}: {e}"))?;
        Ok((fd, name))
    }

    /// Bytes in the segment `fd` (`name`).
    fn segment_size(fd: &OwnedFd, name: &str) -> Result<u64, String> {
        let size = rustix::fs::fstat(fd)
            .map_err(|e| format!("shm: cannot look at {name}: {e}"))?
            .st_size;
        Ok(size.max(0) as u64)
    }

    /// Maps the header page of `peer`'s segment `fd` (`name`), checked to
    /// be that process's of this job (see the layout).
    fn map_header(&self, peer: usize, fd: &OwnedFd, name: &str) -> Result<Mapping, String> {
        let size = Self::segment_size(fd, name)?;
        if size < HEADER as u64 {
            return Err(format!(
                "shm: segment {name} has {size} bytes, fewer than its header's {HEADER}"
            ));
        }
        let header =
            Mapping::map(fd, 0, HEADER).map_err(|e| format!("shm: cannot map {name}: {e}"))?;
        let want = header_fields(self.job_tag, self.nodes, peer, 0, 0, 0);
        if header.header_fields()[..HEADER_CHECKED] != want[..HEADER_CHECKED] {
            return Err(format!(
                "shm: segment {name} is not process {peer}'s of this job"
            ));
        }
        self.peer_mapped();
        Ok(header)
    }

    /// Counts a mapping of another process's segment.
    fn peer_mapped(&self) {
        self.peer_mappings.fetch_add(1, Ordering::Relaxed);
        crate::counts::shm_segment_mapped();
    }

    /// Sets and lists `peer`'s VC, made from its checked header page (under
    /// `connecting`, with no VC to `peer` yet).
    fn add_vc(
        &self,
        peer: usize,
        header: Mapping,
        segment: OwnedFd,
        pid: i32,
        addr: u64,
        card: String,
    ) -> &Vc {
        // The single-copy probe: read the owner's magic from its memory.
        let mut probe = [0u8; 8];
        let single_copy = Self::read_remote(pid, addr, &mut probe).is_ok() && &probe == MAGIC;
        // Its pid names it here only if the process with that pid started
        // when the peer says it did (another pid namespace, or a header
        // without the time: not looked after).
        let start = header.u64_at(OFF_START).load(Ordering::Relaxed);
        let watched = start != 0 && process_start_time(Some(pid)) == Some(start);
        let vc = Vc {
            peer,
            pid,
            header,
            segment,
            out: OnceLock::new(),
            inb: OnceLock::new(),
            send: Mutex::new(SendSide::default()),
            recv: Mutex::new((
                Reassembler::new(peer, self.max_payload).with_buffers(self.message_buffers()),
                Vec::with_capacity(CELL_DATA),
            )),
            lmt: Transfers::new(peer, self.max_payload),
            queued: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            receiving_put: AtomicBool::new(false),
            tail: AtomicU64::new(0),
            single_copy,
            terminated: AtomicBool::new(false),
            watched,
            gone: AtomicBool::new(false),
            card,
        };
        let set = self.vcs[peer].set(Box::new(vc)).is_ok();
        let vc = self.vcs[peer].get().expect("the VC was just set");
        if set {
            // SAFETY: the VC is boxed in `vcs`, set once and never taken
            // out, so it stays in place until the module drops, with
            // `active`.
            unsafe { self.active.push(vc) };
        }
        vc
    }

    /// Adds a ring slot for `vc`'s peer to this process's segment,
    /// announces it on the peer's list, then gives it to the VC (see
    /// "Announcements"; under `connecting`).
    fn add_ring(&self, own: &mut OwnSegment, vc: &Vc) -> Result<(), NetError> {
        let peer = vc.peer;
        let fail = |e: &dyn std::fmt::Display| {
            NetError::peer(
                peer,
                format!(
                    "shm: cannot add a ring for this process to {}: {e}",
                    self.name
                ),
            )
        };
        let slot = own.rings;
        let at = slot_offset(slot).ok_or_else(|| fail(&"beyond any file"))?;
        rustix::fs::ftruncate(&own.fd, at + RING as u64).map_err(|e| fail(&e))?;
        let map = Mapping::map(&own.fd, at, RING).map_err(|e| fail(&e))?;
        own.rings += 1;
        let ring = map.ring();
        ring.to().store(peer as u32, Ordering::Relaxed);
        ring.from().store(self.me as u32, Ordering::Relaxed);
        let list = vc.header.u64_at(OFF_ANNOUNCED);
        let entry = announcement(self.me, slot);
        let mut first = list.load(Ordering::Acquire);
        loop {
            ring.next().store(first, Ordering::Relaxed);
            // Release (SeqCst): the reader that takes the entry sees the
            // ring's `to`, `from` and `next`.
            match list.compare_exchange(first, entry, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => first = now,
            }
        }
        // Only now can a sender publish a cell in it: after the
        // announcement (see the concurrency protocol).
        let _ = vc.out.set(map);
        Ok(())
    }

    /// Takes this process's announcement list and maps the rings on it
    /// (see "Announcements"), waiting or not for another thread taking it
    /// as `how` says. A fault is reported as the module comment says.
    #[inline]
    fn take_announcements(&self, how: Taking) {
        let list = self.own.u64_at(OFF_ANNOUNCED);
        // A plain load first: an idle PE calls this in its spin loop.
        if how != Taking::All && list.load(Ordering::Relaxed) == 0 {
            return;
        }
        let taking = if how == Taking::IfFree {
            match self.discovering.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        } else {
            lock(&self.discovering)
        };
        let mut entry = list.swap(0, Ordering::SeqCst);
        while entry != 0 {
            let writer = (entry as u32 as usize).wrapping_sub(1);
            let slot = (entry >> 32) as usize;
            if writer >= self.nodes || writer == self.me || slot >= self.nodes {
                *lock(&self.fault) = Some(err(format!(
                    "malformed announcement {entry:#x} in process {}'s segment: no ring of another process of this job of {} (announcements behind it are lost)",
                    self.me, self.nodes
                )));
                self.faulted.store(true, Ordering::Release);
                // The progress thread reports it.
                self.wake();
                return;
            }
            match self.map_ring_from(writer, slot) {
                Ok(next) => entry = next,
                Err(why) => {
                    // Reported holding no lock: the layer above may end
                    // the process, telling its peers on the way.
                    drop(taking);
                    self.upcalls().vc_failed(
                        writer,
                        format!("{why} (announcements behind its ring's are lost)"),
                    );
                    return;
                }
            }
        }
        drop(taking);
        // An announcement pushed while this thread held `discovering` may
        // have woken a thread that found the lock taken and went back to
        // waiting (`IfFree`): looked at again now the lock is free, so no
        // announcement waits for a wake-up that already came.
        if list.load(Ordering::Acquire) != 0 {
            self.take_announcements(how);
        }
    }

    /// Maps ring slot `slot` of `writer`'s segment, announced to this
    /// process, as the incoming ring of the VC to `writer` (made from the
    /// writer's header if there is none). Returns the ring's `next`.
    fn map_ring_from(&self, writer: usize, slot: usize) -> Result<u64, String> {
        let _own = lock(&self.connecting);
        let existing = self.vcs[writer].get().map(|vc| &**vc);
        if existing.is_some_and(|vc| vc.inb.get().is_some()) {
            return Err(format!(
                "malformed data from process {writer}: a second ring announced for this process"
            ));
        }
        let name = segment_name(self.segment_id, writer);
        let vc = match existing {
            Some(vc) => vc,
            None => {
                let (fd, _) = self.open_segment(writer)?;
                let header = self.map_header(writer, &fd, &name)?;
                let fields = header.header_fields();
                let word = |at: usize, n: usize| {
                    let mut b = [0u8; 8];
                    b[..n].copy_from_slice(&fields[at..at + n]);
                    u64::from_le_bytes(b)
                };
                let (pid, addr) = (word(OFF_PID, 4) as u32 as i32, word(OFF_ADDR, 8));
                // The card the writer publishes (`business_card`).
                let card = format!("shm:{name}:{pid}:{addr}");
                self.add_vc(writer, header, fd, pid, addr, card)
            }
        };
        let fd = &vc.segment;
        let at = slot_offset(slot).ok_or("beyond any file")?;
        let size = Self::segment_size(fd, &name)?;
        if size < at + RING as u64 {
            return Err(format!(
                "malformed data from process {writer}: ring {slot} announced, but segment {name} has {size} bytes"
            ));
        }
        let map = Mapping::map(fd, at, RING)
            .map_err(|e| format!("shm: cannot map ring {slot} of {name}: {e}"))?;
        let ring = map.ring();
        let (to, from) = (
            ring.to().load(Ordering::Relaxed),
            ring.from().load(Ordering::Relaxed),
        );
        if (to as usize, from as usize) != (self.me, writer) {
            return Err(format!(
                "malformed data from process {writer}: ring {slot} of {name}, announced to this process, is from process {from} to process {to}"
            ));
        }
        let next = ring.next().load(Ordering::Relaxed);
        // The writer may remove its segment's name now (see "Ending").
        ring.taken().store(1, Ordering::Release);
        self.peer_mapped();
        let _ = vc.inb.set(map);
        Ok(next)
    }

    /// Reads `into.len()` bytes at `addr` in process `pid` into `into`.
    fn read_remote(pid: i32, addr: u64, into: &mut [u8]) -> std::io::Result<()> {
        Self::read_remote_raw(pid, addr, into.as_mut_ptr(), into.len())
    }

    /// Reads `len` bytes at `addr` in process `pid` to `to`, which must be
    /// valid for `len` bytes of writes. All of them, or an error.
    fn read_remote_raw(pid: i32, addr: u64, to: *mut u8, len: usize) -> std::io::Result<()> {
        let mut done = 0;
        while done < len {
            let local = libc::iovec {
                // SAFETY: `done < len`: inside the caller's buffer.
                iov_base: unsafe { to.add(done) }.cast(),
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (addr as usize + done) as *mut c_void,
                iov_len: len - done,
            };
            // SAFETY: `local` covers memory the caller gave us for writing;
            // the kernel checks `remote` against the other process's
            // mappings.
            let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Writes `from` at `addr` in process `pid`. All of it, or an error.
    fn write_remote(pid: i32, addr: u64, from: &[u8]) -> std::io::Result<()> {
        // SAFETY: a slice is valid for reads of its length.
        unsafe { Self::write_remote_raw(pid, addr, from.as_ptr(), from.len()) }
    }

    /// Writes the `len` bytes at `from` at `addr` in process `pid`.
    ///
    /// # Safety
    /// `from` must be valid for reads of `len` bytes.
    unsafe fn write_remote_raw(
        pid: i32,
        addr: u64,
        from: *const u8,
        len: usize,
    ) -> std::io::Result<()> {
        let mut done = 0;
        while done < len {
            let local = libc::iovec {
                // SAFETY: `done < len`: inside the caller's range.
                iov_base: unsafe { from.add(done) } as *mut c_void,
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: (addr as usize + done) as *mut c_void,
                iov_len: len - done,
            };
            // SAFETY: `local` covers memory we only read; the kernel checks
            // `remote` against the other process's mappings (what lands
            // there is that process's business: it asked for these bytes
            // at that address).
            let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Queues `p` on `vc` and writes what the ring takes. A frame posted
    /// (`now` false) onto an empty queue is written at once too: the peer
    /// may be waiting for it, and a burst still packs cells once the ring
    /// is full or the queue has grown. Returns true if the queue is empty
    /// after.
    fn send_pending(&self, vc: &Vc, p: Pending, now: bool) -> Result<bool, NetError> {
        let mut side = lock(&vc.send);
        if side.failed || side.closed || side.terminate {
            return Err(NetError::peer(vc.peer, "shm: send on a closed connection"));
        }
        if side.put_wait.is_some() {
            vc.held.fetch_add(p.total(), Ordering::Relaxed);
            side.behind.push_back((None, p));
            return Ok(false);
        }
        let p = if side.queue.is_empty() && p.req.is_none() {
            match self.write_alone(vc, &mut side, p) {
                Ok(()) => return Ok(true),
                Err(p) => p,
            }
        } else {
            p
        };
        self.queue_and_drain(vc, &mut side, p, now)
    }

    /// The fast path of a send: with nothing queued before it, a frame of
    /// one cell or less (a small message) goes straight into the peer's
    /// ring if it has room, without passing through the queue. Gives the
    /// frame back otherwise.
    #[inline]
    fn write_alone(&self, vc: &Vc, side: &mut SendSide, p: Pending) -> Result<(), Pending> {
        let (hdr, data) = p.rest();
        let len = hdr.len() + data.len();
        if len > CELL_DATA {
            return Err(p);
        }
        let Some(out) = vc.out.get() else {
            return Err(p);
        };
        let ring = out.ring();
        let tail = vc.tail.load(Ordering::Relaxed);
        if !Self::room_for(&ring, side, tail) {
            return Err(p);
        }
        ring.fill(tail, |cell| {
            // SAFETY: the cell is ours until its sequence word is published
            // (the consumer is `CELLS` or fewer behind, checked above); the
            // header and the data together are at most `CELL_DATA` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(hdr.as_ptr(), cell, hdr.len());
                converse_msg::copy::copy_nonoverlapping(
                    data.as_ptr(),
                    cell.add(hdr.len()),
                    data.len(),
                );
            }
        });
        Self::publish(vc, &ring, tail, len);
        vc.header.wake_owner();
        Ok(())
    }

    /// Publishes cell number `tail`, filled with `len` bytes, and moves
    /// the VC's tail past it.
    #[inline]
    fn publish(vc: &Vc, ring: &Ring<'_>, tail: u64, len: usize) {
        ring.publish(tail, len);
        vc.tail.store(tail + 1, Ordering::Relaxed);
    }

    /// [`RingMemory::has_room`], marking the send side failed if the
    /// peer broke the protocol (then there is no room).
    #[inline]
    fn room_for(ring: &Ring<'_>, side: &mut SendSide, tail: u64) -> bool {
        match ring.has_room(&mut side.head_seen, tail) {
            Some(room) => room,
            None => {
                side.failed = true;
                false
            }
        }
    }

    /// Queues `p` behind what waits on `vc` and writes what the ring takes
    /// (now, or once enough is queued to fill a cell, unless `now`).
    /// Returns whether the queue is empty afterwards.
    fn queue_and_drain(
        &self,
        vc: &Vc,
        side: &mut SendSide,
        p: Pending,
        now: bool,
    ) -> Result<bool, NetError> {
        let queued = vc.queued.fetch_add(p.total(), Ordering::Relaxed) + p.total();
        side.queue.push_back(p);
        if !now && side.queue.len() > 1 && queued < CELL_DATA && side.queue.len() < 64 {
            return Ok(false);
        }
        self.drain(vc, side);
        Ok(side.queue.is_empty())
    }

    /// Fills free cells of the peer's ring from the queue, packing small
    /// frames together. Returns whether anything was written.
    fn drain(&self, vc: &Vc, side: &mut SendSide) -> bool {
        let mut moved = false;
        // Nothing is queued on a VC without its ring (a send makes it
        // first), so there is nothing to write then.
        if let Some(out) = vc.out.get() {
            moved = self.fill_cells(vc, out, side);
        }
        if side.queue.is_empty() && side.put_wait.is_none() && side.terminate && !side.closed {
            side.closed = true;
        }
        moved
    }

    /// [`drain`](Self::drain)'s writing, into the ring `out`.
    fn fill_cells(&self, vc: &Vc, out: &Mapping, side: &mut SendSide) -> bool {
        let ring = out.ring();
        let mut moved = false;
        let mut tail = vc.tail.load(Ordering::Relaxed);
        while !side.queue.is_empty() {
            if !Self::room_for(&ring, side, tail) {
                break;
            }
            let (filled, sent) = ring.fill(tail, |cell| {
                let mut filled = 0;
                let mut sent = 0;
                while filled < CELL_DATA {
                    let Some(front) = side.queue.front_mut() else {
                        break;
                    };
                    let bytes = match front.rest() {
                        ([], data) => data,
                        (hdr, _) => hdr,
                    };
                    let n = bytes.len().min(CELL_DATA - filled);
                    // SAFETY: the cell is ours until its sequence word is
                    // published (the consumer is `CELLS` or fewer behind,
                    // checked above); `filled + n <= CELL_DATA`.
                    unsafe {
                        converse_msg::copy::copy_nonoverlapping(bytes.as_ptr(), cell.add(filled), n)
                    };
                    filled += n;
                    sent += n;
                    front.written += n;
                    if front.written == front.total() {
                        let done = side.queue.pop_front().expect("front");
                        if let Some(more) = done.complete() {
                            vc.queued.fetch_add(more.total(), Ordering::Relaxed);
                            side.queue.push_front(more);
                        }
                    }
                }
                (filled, sent)
            });
            Self::publish(vc, &ring, tail, filled);
            tail += 1;
            vc.queued.fetch_sub(sent, Ordering::Relaxed);
            moved = true;
        }
        if moved {
            vc.header.wake_owner();
        }
        moved
    }

    /// Queues an LMT packet (its frame `header` and `body`) on `vc` ahead
    /// of whatever waits behind a transfer (see the module comment) and
    /// writes what the ring takes.
    fn send_packet(&self, vc: &Vc, header: FrameHeader, body: Vec<u8>) -> Result<(), NetError> {
        self.send_frame_now(vc, Pending::frame(header, SendData::Bytes(body), None))
    }

    /// Queues `p` (an LMT packet, or a transfer's data) on `vc` ahead of
    /// whatever waits behind a transfer, and writes what the ring takes.
    fn send_frame_now(&self, vc: &Vc, p: Pending) -> Result<(), NetError> {
        // A VC made from the peer's announcement may have no ring back yet.
        self.connect_out(vc)?;
        let mut side = lock(&vc.send);
        if side.failed {
            return Err(NetError::peer(vc.peer, "shm: send on a failed connection"));
        }
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
        self.drain(vc, &mut side);
        Ok(())
    }

    /// Queues the RTS of a transfer (frame `header`, `body`) behind what
    /// waits for an earlier Put's CTS if any; the RTS of Put transfer
    /// `put` holds what is posted after it until its CTS has come (see the
    /// module comment).
    fn queue_rts(
        &self,
        vc: &Vc,
        header: FrameHeader,
        body: Vec<u8>,
        put: Option<u64>,
    ) -> Result<(), NetError> {
        let p = Pending::frame(header, SendData::Bytes(body), None);
        let mut side = lock(&vc.send);
        if side.failed || side.closed || side.terminate {
            return Err(NetError::peer(vc.peer, "shm: send on a closed connection"));
        }
        if side.put_wait.is_some() {
            // Behind the waiting transfer; its RTS goes when that is done.
            vc.held.fetch_add(p.total(), Ordering::Relaxed);
            side.behind.push_back((put, p));
            return Ok(());
        }
        side.put_wait = put;
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
        self.drain(vc, &mut side);
        Ok(())
    }

    /// Transfer `id` (Put, Cooperative) is written and its DONE queued, or
    /// its data queued: what waited behind it goes (up to the next held
    /// RTS).
    fn release_behind(&self, vc: &Vc, id: u64) {
        let mut side = lock(&vc.send);
        if side.put_wait != Some(id) {
            return;
        }
        side.put_wait = None;
        while let Some((put, p)) = side.behind.pop_front() {
            vc.held.fetch_sub(p.total(), Ordering::Relaxed);
            vc.queued.fetch_add(p.total(), Ordering::Relaxed);
            side.queue.push_back(p);
            if put.is_some() {
                side.put_wait = put;
                break;
            }
        }
        self.drain(vc, &mut side);
    }

    /// Lends `msg` (frame header `header`) to the peer of `vc` as a
    /// large-message transfer in the module's mode; true if bytes wait to
    /// be written.
    fn post_lmt(&self, vc: &Vc, header: FrameHeader, msg: Message) -> Result<bool, NetError> {
        {
            let side = lock(&vc.send);
            if side.failed || side.closed || side.terminate {
                return Err(NetError::peer(vc.peer, "shm: send on a closed connection"));
            }
        }
        // A VC made from the peer's announcement may have no ring back yet.
        self.connect_out(vc)?;
        let view = ShmVc { module: self, vc };
        vc.lmt.send(&view, self.hooks(), header, msg)?;
        let side = lock(&vc.send);
        Ok(!side.queue.is_empty() || side.put_wait.is_some())
    }

    /// The LMT hooks of this module's VCs, by its mode (the spec's function
    /// pointers, the same for every VC here).
    fn hooks<'a>(&self) -> &'a (dyn LmtHooks<ShmVc<'a>> + 'a) {
        match self.lmt_mode {
            Mode::Get => &ShmGet,
            Mode::Put => &ShmPut,
            Mode::Cooperative => &NullHooks,
        }
    }

    fn flush(&self, vc: &Vc) -> bool {
        let mut side = lock(&vc.send);
        let moved = self.drain(vc, &mut side);
        let closed = side.closed;
        drop(side);
        if closed {
            self.check_terminated(vc);
        }
        moved
    }

    /// Reports `vc_terminated` once the queue has drained and every large
    /// message lent to the peer is back (before that the peer may still
    /// read it from this process's memory).
    fn check_terminated(&self, vc: &Vc) {
        let closed = lock(&vc.send).closed;
        if closed && vc.lmt.lent_bytes() == 0 && !vc.terminated.swap(true, Ordering::AcqRel) {
            self.upcalls().vc_terminated(vc.peer);
        }
    }

    /// Reads the cells `peer` wrote into this process's segment.
    fn receive(
        &self,
        vc: &Vc,
        inb: &Mapping,
        mut reasm: MutexGuard<'_, (Reassembler, Vec<u8>)>,
    ) -> bool {
        let ring = inb.ring();
        let mut moved = false;
        let mut failed = None;
        // Frames in stream order, the large-message packets included (they
        // stand for messages and keep their place).
        let mut dispatch = |h: FrameHeader, body: FrameBody| match h.kind {
            FrameKind::LmtRts
            | FrameKind::LmtCts
            | FrameKind::LmtCookie
            | FrameKind::LmtDone
            | FrameKind::LmtData => self.on_lmt(vc, h, body),
            // Between a Put's RTS and its DONE the sender holds its other
            // frames back (see the module comment).
            _ if vc.receiving_put.load(Ordering::Relaxed) => self.upcalls().vc_failed(
                vc.peer,
                format!(
                    "malformed data from process {}: a {:?} frame in the middle of a Put transfer",
                    vc.peer, h.kind
                ),
            ),
            _ => self.upcalls().arrived(vc.peer, h, body),
        };
        loop {
            if !self.upcalls().room() {
                break;
            }
            let head = ring.consumer_head();
            if !ring.is_ready(head) {
                break;
            }
            let len = ring.cell_len(head) as usize;
            if len > CELL_DATA {
                ring.consumed(head);
                failed = Some(format!(
                    "malformed data from process {}: a cell of {len} bytes (at most {CELL_DATA})",
                    vc.peer
                ));
                moved = true;
                break;
            }
            // The part of a large frame's body in this cell goes straight
            // into the frame's buffer (the recv-active fast path). The rest
            // is copied out first: the bytes are the peer's, and a peer that
            // broke the protocol must not change them while they are parsed.
            //
            let direct = ring.read(head, |cell| {
                // SAFETY: (both copies) the cell is ours until `head` moves
                // past it (its sequence word was published with Release
                // after its bytes and loaded here with Acquire, and the
                // producer writes a cell only once `head` has passed it);
                // `len` is within the cell (checked), so `cell` is readable
                // for `len` bytes. A body's bytes are read once each and
                // never parsed here.
                unsafe { reasm.0.body_copy_from(cell, len, &mut dispatch) }
            });
            let rest = len - direct;
            let mut bytes = std::mem::take(&mut reasm.1);
            bytes.clear();
            bytes.reserve(rest);
            ring.read(head, |cell| {
                // SAFETY: as above for the cell (`direct + rest == len`);
                // `bytes` has room for `rest` (reserved) and they are
                // initialized by the copy.
                unsafe {
                    converse_msg::copy::copy_nonoverlapping(
                        cell.add(direct),
                        bytes.as_mut_ptr(),
                        rest,
                    );
                    bytes.set_len(rest);
                }
            });
            // The bytes are ours now: the producer may reuse the cell.
            ring.consumed(head);
            moved = true;
            let result = reasm.0.handle(&bytes, &mut dispatch);
            reasm.1 = bytes;
            if let Err(e) = result {
                failed = Some(e.to_string());
                break;
            }
        }
        drop(reasm);
        // Pairs with the producer's fence in `has_room`: either it sees the
        // new `head` or this sees its `waiting`.
        if moved && ring.freed() {
            vc.header.wake_owner();
        }
        if let Some(why) = failed {
            self.upcalls().vc_failed(vc.peer, why);
        }
        moved
    }

    /// A large-message transfer's frame (see the module comment): to the
    /// VC's transfers and their hooks; a message they complete goes up.
    fn on_lmt(&self, vc: &Vc, h: FrameHeader, body: FrameBody) {
        let view = ShmVc { module: self, vc };
        match vc.lmt.on_frame(&view, self.hooks(), h, body) {
            Ok(Some((header, msg))) => self.upcalls().message(vc.peer, header, msg),
            Ok(None) => {}
            Err(why) => self.upcalls().vc_failed(vc.peer, why),
        }
        if matches!(h.kind, FrameKind::LmtCts | FrameKind::LmtDone) {
            // A lent message may be back: the VC may be done terminating.
            self.check_terminated(vc);
        }
    }

    /// True if some VC has bytes queued and room in the peer's ring (a
    /// cell freed after the sender last looked: its wake-up may have come
    /// before this process said it sleeps).
    fn can_send_more(&self) -> bool {
        self.active.any(|vc| {
            vc.queued.load(Ordering::Relaxed) > 0
                && vc
                    .out
                    .get()
                    .is_some_and(|out| out.ring().room_now(vc.tail.load(Ordering::Relaxed)))
        })
    }

    /// True if a ring was announced to this process and not taken yet, or
    /// some ring it reads has cells to read.
    fn has_incoming(&self) -> bool {
        self.own.u64_at(OFF_ANNOUNCED).load(Ordering::SeqCst) != 0
            // Another thread may have taken the list and be mapping its
            // rings (`connected_peers`, a worker's `try_progress`): until
            // it lets go of `discovering`, a cell already published in
            // such a ring is seen neither in the list nor in `active`,
            // and its writer, which published it before this thread said
            // it sleeps, wakes no one. Not sleeping then: the next
            // `progress(true)` waits for that thread, then reads the ring.
            || self.discovering_busy()
            || self.active.any(|vc| {
                vc.inb.get().is_some_and(|inb| {
                    let ring = inb.ring();
                    ring.is_ready(ring.consumer_head())
                })
            })
    }

    /// True while another thread holds `discovering` (taking the
    /// announcement list). A successful `try_lock` acquires what the last
    /// holder published (the rings it added to `active`).
    fn discovering_busy(&self) -> bool {
        matches!(
            self.discovering.try_lock(),
            Err(std::sync::TryLockError::WouldBlock)
        )
    }

    #[inline]
    fn progress(&self, blocking_locks: bool) -> bool {
        self.progress_dir(blocking_locks, PollDir::InFirst)
    }

    /// [`ShmModule::progress`], in direction `dir`: `InFirst` receives
    /// before it sends on each VC; `OutFirst` sends what every VC has
    /// queued before it receives anything (`net_module_poll`'s
    /// `in_or_out`). First takes the rings announced since the last call
    /// (waiting for another thread taking them if `blocking_locks`).
    #[inline]
    fn progress_dir(&self, blocking_locks: bool, dir: PollDir) -> bool {
        self.take_announcements(if blocking_locks {
            Taking::Blocking
        } else {
            Taking::IfFree
        });
        let mut moved = false;
        if dir == PollDir::OutFirst {
            self.active.for_each(|vc| moved |= self.drain_vc(vc));
        }
        // Plain loads first: an idle PE calls this in its spin loop, and
        // most calls find nothing.
        let resume =
            self.resume.load(Ordering::Relaxed) && self.resume.swap(false, Ordering::AcqRel);
        self.active.for_each(|vc| {
            if let Some(inb) = vc.inb.get() {
                let ring = inb.ring();
                let has_cells = ring.is_ready(ring.consumer_head());
                let guard = if !has_cells {
                    None
                } else if blocking_locks || resume {
                    Some(lock(&vc.recv))
                } else {
                    vc.recv.try_lock().ok()
                };
                if let Some(g) = guard {
                    moved |= self.receive(vc, inb, g);
                }
            }
            moved |= self.drain_vc(vc);
        });
        moved
    }

    /// `poll`'s work: progress, or, if there is none, a sleep on the futex
    /// word until something happens or `timeout` passes, then progress.
    fn progress_or_wait(&self, dir: PollDir, timeout: Option<Duration>) -> bool {
        if self.progress_dir(true, dir) {
            return true;
        }
        // Sleep on the futex word unless something arrived meanwhile.
        self.own.bell().sleep_unless(
            || {
                self.has_incoming()
                    || self.can_send_more()
                    || self.resume.load(Ordering::Acquire)
                    || self.woken.swap(false, Ordering::AcqRel)
            },
            timeout,
        );
        self.progress(true)
    }

    /// Sends what `vc` has queued, as far as the ring takes it, unless
    /// another thread is sending on it.
    #[inline]
    fn drain_vc(&self, vc: &Vc) -> bool {
        let mut moved = false;
        if vc.queued.load(Ordering::Relaxed) > 0
            && let Ok(mut side) = vc.send.try_lock()
        {
            moved = self.drain(vc, &mut side);
            let closed = side.closed;
            drop(side);
            if closed {
                self.check_terminated(vc);
            }
        }
        moved
    }
}

impl NetModule for ShmModule {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn business_card(&self) -> String {
        format!(
            "shm:{}:{}:{}",
            self.name,
            std::process::id(),
            self.own.base as usize
        )
    }

    fn connect_to_root(&self, peer: usize, card: &str) -> Result<(), NetError> {
        self.connect(peer, card, true).map(|_| ())
    }

    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError> {
        // A terminated VC is used again (the spec's "may be used for
        // communication again later"): its rings stay mapped and in step,
        // so it only opens its sending side again.
        if let Some(vc) = self.vcs.get(peer).and_then(|v| v.get())
            && vc.terminated.load(Ordering::Acquire)
        {
            if vc.card != card {
                return Err(NetError::peer(
                    peer,
                    format!("shm: card `{card}` is not the one VC {peer} was made from"),
                ));
            }
            let mut side = lock(&vc.send);
            side.terminate = false;
            side.closed = false;
            vc.terminated.store(false, Ordering::Release);
            return Ok(());
        }
        // Connects now (start-up's eager connection): a VC made from the
        // peer's announcement gets its ring back.
        self.connect(peer, card, true).map(|_| ())
    }

    fn connected_peers(&self) -> Vec<usize> {
        // Rings announced before this call count: take them first.
        self.take_announcements(Taking::All);
        let mut peers = Vec::new();
        self.active.for_each(|vc| {
            if vc.out.get().is_some() || vc.inb.get().is_some() {
                peers.push(vc.peer);
            }
        });
        peers.sort_unstable();
        peers
    }

    fn vc_destroy(&self, peer: usize) {
        // Its transfers are forgotten (a terminated VC has none in flight:
        // it terminates once every lent message is back). Its mappings go
        // with the module: a ring stays mapped while the module lives (see
        // "Ending"), and another thread may be reading it.
        if let Ok(vc) = self.vc(peer) {
            vc.lmt.abandon();
        }
    }

    fn vc_terminate(&self, peer: usize) {
        let Ok(vc) = self.vc(peer) else { return };
        lock(&vc.send).terminate = true;
        self.flush(vc);
    }

    fn ordering(&self) -> bool {
        true
    }

    fn isend_contig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        data: SendData,
    ) -> Result<(), NetError> {
        let p = Pending::frame(header, data, Some(req));
        self.send_pending(self.vc_to(peer)?, p, true).map(|_| ())
    }

    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError> {
        let req = SendRequest::new();
        let p = Pending::frame(header, data, Some(req.clone()));
        let sent = self.send_pending(self.vc_to(peer)?, p, true)?;
        Ok((!sent).then_some(req))
    }

    fn post_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<bool, NetError> {
        let vc = self.vc_to(peer)?;
        if let (FrameKind::Message, SendData::Message(msg)) = (header.kind, &data) {
            let handshake = vc.single_copy || self.lmt_mode == Mode::Cooperative;
            if handshake && msg.len() >= LMT_MIN {
                // Lend the buffer until the peer has read it (Get), it has
                // been written into the peer (Put), or the peer said clear
                // to send and it went into the cells (Cooperative).
                let SendData::Message(msg) = data else {
                    unreachable!()
                };
                return self.post_lmt(vc, header, msg);
            }
        }
        let p = Pending::frame(header, data, None);
        self.send_pending(vc, p, false).map(|empty| !empty)
    }

    fn flush_all(&self) -> bool {
        let mut moved = false;
        self.active.for_each(|vc| {
            if vc.queued.load(Ordering::Relaxed) > 0 {
                moved |= self.flush(vc);
            }
        });
        moved
    }

    fn copies_peer_memory(&self, peer: usize) -> bool {
        // Asked before the first message to the peer, maybe: connects.
        self.vc_to(peer).is_ok_and(|vc| vc.single_copy)
    }

    unsafe fn write_peer_memory(
        &self,
        peer: usize,
        addr: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), NetError> {
        let vc = self.vc_to(peer)?;
        // SAFETY: the caller's promise for `src`.
        unsafe { Self::write_remote_raw(vc.pid, addr, src, len) }.map_err(|e| {
            NetError::peer(
                peer,
                format!(
                    "shm: cannot write {len} bytes at {addr:#x} into process {peer} (pid {}): {e}",
                    vc.pid
                ),
            )
        })
    }

    unsafe fn read_peer_memory(
        &self,
        peer: usize,
        addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), NetError> {
        let vc = self.vc_to(peer)?;
        Self::read_remote_raw(vc.pid, addr, dst, len).map_err(|e| {
            NetError::peer(
                peer,
                format!(
                    "shm: cannot read {len} bytes at {addr:#x} of process {peer} (pid {}): {e}",
                    vc.pid
                ),
            )
        })
    }

    fn has_queued(&self) -> bool {
        self.active.any(|vc| vc.queued.load(Ordering::Relaxed) > 0)
    }

    fn backlog(&self, peer: usize) -> usize {
        self.vcs.get(peer).and_then(|v| v.get()).map_or(0, |vc| {
            vc.queued.load(Ordering::Relaxed)
                + vc.held.load(Ordering::Relaxed)
                + vc.lmt.lent_bytes()
        })
    }

    fn resume_receiving(&self) {
        self.resume.store(true, Ordering::Release);
        self.wake();
    }

    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError> {
        let _one = lock(&self.poll);
        let moved = self.progress_or_wait(dir, timeout);
        if self.faulted.load(Ordering::Acquire) {
            self.faulted.store(false, Ordering::Relaxed);
            if let Some(fault) = lock(&self.fault).take() {
                return Err(fault);
            }
        }
        Ok(moved)
    }

    fn try_progress(&self) -> bool {
        self.progress(false)
    }

    fn wake(&self) {
        // Kept until the next wait looks, like an eventfd's count: a wake
        // that comes before the wait is not lost.
        self.woken.store(true, Ordering::Release);
        self.own.bell().wake_now();
    }

    fn peer_check_period(&self) -> Option<Duration> {
        Some(PEER_CHECK)
    }

    fn check_peers(&self) {
        self.check_peers_with(process_alive);
    }

    fn finalize(&self) {
        self.own.u32_at(OFF_ENDING).store(1, Ordering::Release);
        self.wait_for_readers(READERS_GRACE);
        self.unlink();
    }
}

impl Drop for ShmModule {
    fn drop(&mut self) {
        // A module dropped without `finalize` (start-up failed, a test)
        // leaves no name behind either.
        self.unlink();
    }
}

#[cfg(test)]
#[path = "shm_tests.rs"]
mod tests;
