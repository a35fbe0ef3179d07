//! The shm network module: processes on one host exchange frames through
//! rings of cells in shared memory (after Nemesis's shared-memory channel),
//! and large messages move in one copy with `process_vm_readv` (or
//! `process_vm_writev`).
//!
//! # Segments
//!
//! Each process creates one POSIX shared-memory segment,
//! `/converse-<id>-<node>` (the job's segment id, random and apart from its
//! key: anyone may list the names), readable by its user only, holding a
//! header and one ring of cells per
//! possible sender. Its business card is `shm:NAME:PID:ADDR` (ADDR: where
//! the segment is mapped in the owner, for the single-copy probe). At
//! start-up every process maps every other's segment (`vc_init`) and counts
//! itself in the owner's `attached`; once all have, the owner unlinks the
//! name ([`ShmModule::accept_peers`]), so nothing is left in `/dev/shm`
//! whatever happens to the job later. Until then the launcher removes
//! leftovers of a job that failed early. Everything in a segment is found
//! by offset from its base, never by pointer: each process maps it at its
//! own address.
//!
//! # Layout (offsets in bytes)
//!
//! | at | what |
//! |---|---|
//! | 0 | magic `CVRSSHM1`, job tag (u64: derived from the job key, never the key), nodes (u32), owner node (u32), owner pid (u32) |
//! | 64 | `attached` (u32): peers that mapped the segment |
//! | 128 | `wake` (u32 futex word, bumped by every waker), `sleeping` (u32) |
//! | 4096 + r * RING | the ring written by process `r` |
//!
//! A ring: `head` (the consumer's index, own cache line), `waiting` (the
//! producer waits for room, own line), then `CELLS` cells of
//! `CELL_BYTES`, 64-byte aligned: a sequence word (u32), a length (u32),
//! and up to `CELL_DATA` bytes of the sender's frame stream. A cell
//! carries any part of the stream: several small frames, or a piece of a
//! large one (the cooperative copy: the sender fills cells as the receiver
//! empties them). The receiver feeds each cell's bytes to the VC's
//! `Reassembler` (the one reassembly path; a cell's length and every frame
//! are checked, since another process wrote them).
//!
//! Cell number `i` (counting from 0 since the job began; it lives in slot
//! `i % CELLS`) is published by writing its sequence word `i + 1` (mod
//! 2^32) last. So the receiver learns that a cell is ready, and reads a
//! small message, from the cache lines the message itself is in: a frame
//! of up to 56 bytes (an 8-byte payload) shares one line with the sequence
//! word. No producer index is published: the producer keeps its own
//! (`Vc::tail`) and a cached copy of `head`, which it reloads only when the
//! copy says the ring is full (as in FastForward and Nemesis's fastbox,
//! a message costs the two cache-line transfers of its own lines, not two
//! more for indices).
//!
//! A frame that fits one cell, sent while nothing waits in the VC's send
//! queue and the ring has room (a small message, the common case), goes
//! straight into its cell under the send lock (`write_alone`): no queue
//! entry, no queued-bytes accounting. Anything else joins the queue, which
//! `drain` empties into cells in order; the fast path is taken only with
//! the queue empty, so frames keep their order either way.
//!
//! # Single-copy large messages (the spec's LMT)
//!
//! A message of `LMT_MIN` bytes or more moves in the mode the module was
//! given (`lmt::Mode`, `++lmt`):
//!
//! - **Get** (the default): an `LmtRts` frame whose body is the cookie
//!   (address, length, id) of the sender's buffer, which the sender keeps.
//!   The receiver allocates the message and reads it with
//!   `process_vm_readv` straight into it, then answers `LmtDone(id)`, and
//!   the sender drops its buffer.
//! - **Put**: an `LmtRts` with the length and id only. The receiver
//!   allocates the message (zeroed: until the sender says it wrote every
//!   byte, nothing of another process's is trusted to be there) and answers
//!   `LmtCts` with its address; the sender writes it with
//!   `process_vm_writev`, drops its buffer and sends `LmtDone(id)`, on
//!   which the receiver hands the message up. The messages the sender
//!   posts to that process after the RTS wait in the VC's `behind` queue
//!   until the CTS has come and the DONE is queued, so the receiver gets
//!   nothing from it between the RTS and the DONE but LMT packets, and the
//!   message keeps its place. LMT packets themselves (a CTS, a Get's DONE)
//!   never wait there: two processes each waiting for the other's CTS
//!   would wait forever.
//! - **Cooperative**: through the cells, as any other frame.
//!
//! At start-up each VC probes the peer's segment header with
//! `process_vm_readv`; where the system forbids it (ptrace restrictions),
//! large messages go through the cells whatever the mode.
//!
//! # Concurrency protocol
//!
//! - A ring has one producer process; inside it, the VC's `send` lock makes
//!   one thread the producer at a time. One consumer: the owner's thread
//!   holding the VC's `recv` lock. A cell's sequence word is stored
//!   (Release) after its length and bytes, and loaded by the consumer
//!   with Acquire; `head` is stored (Release) once the cell's bytes are
//!   copied out, and loaded by the producer with Acquire.
//! - Sleeping: the owner's progress thread sets `sleeping`, fences, looks
//!   at its rings once more, then waits on the futex word `wake` if it has
//!   not changed. A producer, after publishing a cell, fences and, if
//!   `sleeping` is set, bumps `wake` and wakes it. The fences order
//!   "publish, then look at `sleeping`" against "set `sleeping`, then look
//!   for data" (as in `csd::idle`), so no wake-up is lost.
//! - A producer that finds the ring full sets the ring's `waiting`, fences
//!   and looks at `head` again; a consumer that freed cells fences (once
//!   per batch) and, if it sees `waiting`, clears it and wakes the
//!   producer's process the same way.
use crate::lmt::{COOKIE_LEN, Cookie, Mode, Packet, mode_of, transfer_id};
use crate::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rustix::fs::Mode as FileMode;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm::OFlags;
use rustix::thread::futex;

use super::frame::{FrameBody, FrameHeader, FrameKind, Reassembler};
use super::netmod::{NetError, NetModule, OutFrame, PollDir, SendData, SendRequest, Upcalls};
use converse_msg::Message;
use converse_msg::raw::MessageRaw as _;

const MAGIC: &[u8; 8] = b"CVRSSHM1";
const HEADER: usize = 4096;
/// Bytes of one cell, and of its data (after the sequence and length
/// words).
pub(crate) const CELL_BYTES: usize = 16 << 10;
const CELL_HEADER: usize = 8;
pub(crate) const CELL_DATA: usize = CELL_BYTES - CELL_HEADER;
/// Cells per ring (a power of two).
pub(crate) const CELLS: usize = 64;
/// `head` and `waiting`, a cache line each.
const RING_META: usize = 128;
const RING: usize = RING_META + CELLS * CELL_BYTES;
/// Messages from this size on go by single copy (when the system allows).
/// Smaller ones stream through the cells: up to about a ring's worth (1
/// MiB), the two pipelined copies of the cooperative path measured
/// 10-17× faster one way and 2-3× in a stream than `process_vm_readv`
/// (2026-11-23, 2-core EPYC host; at 4 MiB the single copy was faster).
pub(crate) const LMT_MIN: usize = (1 << 20) + (64 << 10);

const OFF_ATTACHED: usize = 64;
const OFF_WAKE: usize = 128;
const OFF_SLEEPING: usize = 132;

fn segment_len(nodes: usize) -> usize {
    HEADER + nodes * RING
}

/// The name of process `node`'s segment in the job whose segment id is
/// `id` (random and apart from the job's key: names are listable by
/// anyone).
pub fn segment_name(id: u64, node: usize) -> String {
    format!("/converse-{id:016x}-{node}")
}

/// A mapping of a segment, unmapped on drop.
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
    fn map(fd: &OwnedFd, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file we hold; nothing else in
        // this process refers to the range it returns.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    /// The `u32` atomic at `off` (4-aligned, inside the mapping).
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (checked); the page is mapped for the
        // mapping's life, which bounds the reference's.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The `u64` atomic at `off` (8-aligned, inside the mapping).
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: as in `u32_at`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn ring(&self, writer: usize) -> Ring<'_> {
        let at = HEADER + writer * RING;
        assert!(at + RING <= self.len);
        Ring { map: self, at }
    }

    fn wake_owner(&self) {
        fence(Ordering::SeqCst);
        if self.u32_at(OFF_SLEEPING).load(Ordering::SeqCst) != 0 {
            let word = self.u32_at(OFF_WAKE);
            word.fetch_add(1, Ordering::SeqCst);
            let _ = futex::wake(word, futex::Flags::empty(), 1);
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `map` and nothing refers to it
        // once the mapping is dropped (references borrow the mapping).
        let _ = unsafe { rustix::mm::munmap(self.base.cast::<c_void>(), self.len) };
    }
}

/// One ring of a segment (see the layout).
struct Ring<'a> {
    map: &'a Mapping,
    at: usize,
}

impl Ring<'_> {
    fn head(&self) -> &AtomicU64 {
        self.map.u64_at(self.at)
    }
    fn waiting(&self) -> &AtomicU32 {
        self.map.u32_at(self.at + 64)
    }
    /// The cell for index `i`: its sequence word, length word and data.
    fn cell(&self, i: u64) -> Cell<'_> {
        let off = self.at + RING_META + (i as usize % CELLS) * CELL_BYTES;
        Cell {
            seq: self.map.u32_at(off),
            len: self.map.u32_at(off + 4),
            // SAFETY: `off + CELL_BYTES` is inside the ring (layout).
            data: unsafe { self.map.base.add(off + CELL_HEADER) },
        }
    }

    /// True if cell `i` is published (its sequence word says so).
    fn is_ready(&self, i: u64) -> bool {
        self.cell(i).seq.load(Ordering::Acquire) == seq_of(i)
    }
}

/// The sequence word that publishes cell number `i`.
fn seq_of(i: u64) -> u32 {
    (i as u32).wrapping_add(1)
}

/// One cell of a ring (see the layout).
struct Cell<'a> {
    seq: &'a AtomicU32,
    len: &'a AtomicU32,
    data: *mut u8,
}

type Pending = OutFrame;

#[derive(Default)]
struct SendSide {
    /// The consumer's `head` as last loaded (never ahead of the real one).
    head_seen: u64,
    queue: VecDeque<Pending>,
    /// The Put transfer whose RTS is queued or written and whose CTS has
    /// not come: what is posted meanwhile waits in `behind`.
    put_wait: Option<u64>,
    /// Frames posted while a Put transfer waits for its CTS, in order; a
    /// further Put's RTS among them carries its id.
    behind: VecDeque<(Option<u64>, Pending)>,
    terminate: bool,
    closed: bool,
    failed: bool,
}

/// A virtual connection to one peer process.
struct Vc {
    peer: usize,
    pid: i32,
    /// The peer's segment: we write into its ring for us.
    theirs: Mapping,
    send: Mutex<SendSide>,
    /// The reassembler, and the buffer a cell is copied into.
    recv: Mutex<(Reassembler, Vec<u8>)>,
    /// Bytes of large messages lent to the peer and not yet read (counted
    /// in the backlog; the VC terminates only once they are back).
    lent_bytes: AtomicUsize,
    queued: AtomicUsize,
    /// Bytes in the send side's `behind` queue.
    held: AtomicUsize,
    /// The Put transfer this process is receiving from the peer: its id,
    /// the frame header of the message, and the message the peer writes
    /// (taken only with the `recv` lock held).
    put_in: Mutex<Option<(u64, FrameHeader, Message)>>,
    /// `put_in` is set (read on every frame: a plain flag, written with
    /// the `recv` lock held).
    receiving_put: AtomicBool,
    /// The number of the next cell this process publishes in the peer's
    /// ring (written under `send`; read without it to see whether the
    /// ring has room).
    tail: AtomicU64,
    /// Large messages may be read from this peer in one copy.
    single_copy: bool,
    terminated: AtomicBool,
    /// The card the VC was made from (a terminated VC is used again only
    /// for the same one).
    card: String,
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
    own: Mapping,
    unlinked: AtomicBool,
    vcs: Box<[OnceLock<Vc>]>,
    upcalls: OnceLock<Arc<dyn Upcalls>>,
    max_payload: usize,
    /// Large messages lent to a peer until its `LmtDone`, by id.
    lent: Mutex<HashMap<u64, Message>>,
    next_lmt: AtomicU64,
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

fn err(e: impl std::fmt::Display) -> NetError {
    NetError::local(format!("shm: {e}"))
}

/// Takes transfer `id`'s message out of `lent`, releasing the lock at once.
fn take_lent(lent: &Mutex<HashMap<u64, Message>>, id: u64) -> Option<Message> {
    lock(lent).remove(&id)
}

impl ShmModule {
    /// `net_module_init`: creates this process's segment.
    pub fn init(
        me: usize,
        nodes: usize,
        job_tag: u64,
        segment_id: u64,
        max_payload: usize,
    ) -> Result<ShmModule, NetError> {
        let name = segment_name(segment_id, me);
        let fd = rustix::shm::open(
            name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR,
            FileMode::RUSR | FileMode::WUSR,
        )
        .map_err(|e| err(format!("cannot create {name}: {e}")))?;
        let len = segment_len(nodes);
        let made = rustix::fs::ftruncate(&fd, len as u64)
            .map_err(|e| err(format!("cannot size {name}: {e}")))
            .and_then(|()| {
                Mapping::map(&fd, len).map_err(|e| err(format!("cannot map {name}: {e}")))
            });
        let own = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = rustix::shm::unlink(name.as_str());
                return Err(e);
            }
        };
        // SAFETY: the header's first 28 bytes, in bounds; no other process
        // reads them before our card is published.
        unsafe {
            std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), own.base, 8);
            std::ptr::copy_nonoverlapping(job_tag.to_le_bytes().as_ptr(), own.base.add(8), 8);
            std::ptr::copy_nonoverlapping(
                (nodes as u32).to_le_bytes().as_ptr(),
                own.base.add(16),
                4,
            );
            std::ptr::copy_nonoverlapping((me as u32).to_le_bytes().as_ptr(), own.base.add(20), 4);
            std::ptr::copy_nonoverlapping(
                std::process::id().to_le_bytes().as_ptr(),
                own.base.add(24),
                4,
            );
        }
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
            unlinked: AtomicBool::new(false),
            vcs: (0..nodes).map(|_| OnceLock::new()).collect(),
            upcalls: OnceLock::new(),
            max_payload,
            lent: Mutex::new(HashMap::new()),
            next_lmt: AtomicU64::new(1),
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

    /// Waits until every process of `peers` (those whose VC this module
    /// carries) has mapped this one's segment, then removes its name. Fails
    /// naming the count missing after `deadline`.
    pub fn accept_peers(&self, peers: &[usize], deadline: Instant) -> Result<(), NetError> {
        let attached = self.own.u32_at(OFF_ATTACHED);
        while (attached.load(Ordering::Acquire) as usize) < peers.len() {
            if Instant::now() >= deadline {
                let absent: Vec<String> = peers
                    .iter()
                    .filter(|&&p| self.vcs[p].get().is_none())
                    .map(|p| p.to_string())
                    .collect();
                self.unlink();
                return Err(err(format!(
                    "process {} waited in vain for the other processes to map its segment ({} of {} did; this one has not reached process(es) {})",
                    self.me,
                    attached.load(Ordering::Acquire),
                    peers.len(),
                    if absent.is_empty() {
                        "none".into()
                    } else {
                        absent.join(", ")
                    }
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.unlink();
        Ok(())
    }

    /// Removes the segment's name (the memory stays until every mapping is
    /// gone).
    pub fn unlink(&self) {
        if !self.unlinked.swap(true, Ordering::AcqRel) {
            let _ = rustix::shm::unlink(self.name.as_str());
        }
    }

    fn vc(&self, peer: usize) -> Result<&Vc, NetError> {
        self.vcs
            .get(peer)
            .and_then(|v| v.get())
            .ok_or_else(|| NetError::peer(peer, "shm: no connection to this process"))
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
        let ring = vc.theirs.ring(self.me);
        let tail = vc.tail.load(Ordering::Relaxed);
        if !Self::room_for(&ring, side, tail) {
            return Err(p);
        }
        let cell = ring.cell(tail);
        // SAFETY: the cell is ours until its sequence word is published
        // (the consumer is `CELLS` or fewer behind, checked above); the
        // header and the data together are at most `CELL_DATA` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), cell.data, hdr.len());
            std::ptr::copy_nonoverlapping(data.as_ptr(), cell.data.add(hdr.len()), data.len());
        }
        Self::publish(vc, &cell, tail, len);
        vc.theirs.wake_owner();
        Ok(())
    }

    /// Publishes cell number `tail`, filled with `len` bytes, and moves
    /// the VC's tail past it.
    #[inline]
    fn publish(vc: &Vc, cell: &Cell<'_>, tail: u64, len: usize) {
        cell.len.store(len as u32, Ordering::Relaxed);
        cell.seq.store(seq_of(tail), Ordering::Release);
        vc.tail.store(tail + 1, Ordering::Relaxed);
    }

    /// [`has_room`](Self::has_room), marking the send side failed if the
    /// peer broke the protocol (then there is no room).
    #[inline]
    fn room_for(ring: &Ring<'_>, side: &mut SendSide, tail: u64) -> bool {
        match Self::has_room(ring, side, tail) {
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

    /// Whether the peer's ring has a free cell for cell number `tail`,
    /// reloading the consumer's `head` only when the cached one says full.
    /// `None`: the peer broke the protocol (its `head` is past `tail`).
    fn has_room(ring: &Ring<'_>, side: &mut SendSide, tail: u64) -> Option<bool> {
        if tail.wrapping_sub(side.head_seen) < CELLS as u64 {
            return Some(true);
        }
        // `head` is the peer's to write: never trusted to be sane.
        let used = |head: u64| tail.wrapping_sub(head);
        let head = ring.head().load(Ordering::Acquire);
        if used(head) > CELLS as u64 {
            return None;
        }
        side.head_seen = head;
        if used(head) < CELLS as u64 {
            return Some(true);
        }
        // Full: ask to be woken when a cell frees, then look again (the
        // consumer may have freed one before seeing the flag).
        ring.waiting().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let head = ring.head().load(Ordering::Acquire);
        if used(head) > CELLS as u64 {
            return None;
        }
        side.head_seen = head;
        if used(head) == CELLS as u64 {
            return Some(false);
        }
        ring.waiting().store(0, Ordering::Relaxed);
        Some(true)
    }

    /// Fills free cells of the peer's ring from the queue, packing small
    /// frames together. Returns whether anything was written.
    fn drain(&self, vc: &Vc, side: &mut SendSide) -> bool {
        let ring = vc.theirs.ring(self.me);
        let mut moved = false;
        let mut tail = vc.tail.load(Ordering::Relaxed);
        while !side.queue.is_empty() {
            if !Self::room_for(&ring, side, tail) {
                break;
            }
            let cell = ring.cell(tail);
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
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), cell.data.add(filled), n) };
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
            Self::publish(vc, &cell, tail, filled);
            tail += 1;
            vc.queued.fetch_sub(sent, Ordering::Relaxed);
            moved = true;
        }
        if moved {
            vc.theirs.wake_owner();
        }
        if side.queue.is_empty() && side.put_wait.is_none() && side.terminate && !side.closed {
            side.closed = true;
        }
        moved
    }

    /// Queues an LMT packet on `vc` ahead of whatever waits behind a Put
    /// transfer (see the module comment) and writes what the ring takes.
    fn send_packet(&self, vc: &Vc, packet: Packet) -> Result<(), NetError> {
        let mut side = lock(&vc.send);
        if side.failed {
            return Err(NetError::peer(vc.peer, "shm: send on a failed connection"));
        }
        let p = Pending::frame(
            packet.header(self.me),
            SendData::Bytes(packet.encode()),
            None,
        );
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
        self.drain(vc, &mut side);
        Ok(())
    }

    /// Lends `msg` to the peer of `vc` as transfer `id` and queues its RTS,
    /// behind what waits for an earlier Put's CTS if any (Put mode).
    fn post_lmt(
        &self,
        vc: &Vc,
        id: u64,
        header: FrameHeader,
        msg: Message,
    ) -> Result<bool, NetError> {
        let rts = Packet::Rts(Cookie {
            // Get: where the receiver reads. Put: the receiver's buffer is
            // the one that counts; the sender's address is not shown.
            addr: match mode_of(id) {
                Mode::Put => 0,
                _ => msg.as_bytes().as_ptr() as u64,
            },
            len: msg.len() as u64,
            id,
        });
        let rts_header = FrameHeader {
            len: COOKIE_LEN as u32,
            kind: FrameKind::LmtRts,
            ..header
        };
        let p = Pending::frame(rts_header, SendData::Bytes(rts.encode()), None);
        let mut side = lock(&vc.send);
        if side.failed || side.closed || side.terminate {
            return Err(NetError::peer(vc.peer, "shm: send on a closed connection"));
        }
        vc.lent_bytes.fetch_add(msg.len(), Ordering::AcqRel);
        lock(&self.lent).insert(id, msg);
        if side.put_wait.is_some() {
            // Behind the waiting transfer; its RTS goes when that is done.
            vc.held.fetch_add(p.total(), Ordering::Relaxed);
            side.behind
                .push_back(((mode_of(id) == Mode::Put).then_some(id), p));
            return Ok(true);
        }
        if mode_of(id) == Mode::Put {
            side.put_wait = Some(id);
        }
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
        self.drain(vc, &mut side);
        Ok(!side.queue.is_empty() || side.put_wait.is_some())
    }

    /// The CTS of Put transfer `cookie.id` came: writes the lent message
    /// into the peer's buffer, queues the DONE and lets what waited behind
    /// the transfer go (up to the next Put's RTS).
    fn on_cts(&self, vc: &Vc, cookie: Cookie) -> Result<(), String> {
        let peer = vc.peer;
        let Cookie { addr, len, id } = cookie;
        if lock(&vc.send).put_wait != Some(id) {
            return Err(format!(
                "malformed data from process {peer}: clear to send transfer {id}, which waits for none"
            ));
        }
        let msg = lock(&self.lent).remove(&id).ok_or_else(|| {
            format!("malformed data from process {peer}: clear to send transfer {id}, which was never lent")
        })?;
        if msg.len() as u64 != len {
            return Err(format!(
                "malformed data from process {peer}: clear to send transfer {id} into {len} bytes, for a message of {}",
                msg.len()
            ));
        }
        Self::write_remote(vc.pid, addr, msg.as_bytes()).map_err(|e| {
            format!(
                "cannot write a large message into process {peer} (pid {}): {e}",
                vc.pid
            )
        })?;
        self.lmt_writes.fetch_add(1, Ordering::Relaxed);
        vc.lent_bytes.fetch_sub(msg.len(), Ordering::AcqRel);
        drop(msg);
        let done = Packet::Done { id };
        let mut side = lock(&vc.send);
        let p = Pending::frame(done.header(self.me), SendData::Bytes(done.encode()), None);
        vc.queued.fetch_add(p.total(), Ordering::Relaxed);
        side.queue.push_back(p);
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
        let closed = side.closed;
        drop(side);
        if closed {
            self.check_terminated(vc);
        }
        Ok(())
    }

    /// The RTS of Put transfer `id` of `len` bytes came: allocates the
    /// message and answers with its address.
    fn on_put_rts(&self, vc: &Vc, h: FrameHeader, len: usize, id: u64) -> Result<(), String> {
        let peer = vc.peer;
        let mut put_in = lock(&vc.put_in);
        if let Some((earlier, ..)) = &*put_in {
            return Err(format!(
                "malformed data from process {peer}: Put transfer {id} before transfer {earlier} was done"
            ));
        }
        // Zeroed (calloc: fresh pages cost no pass): the bytes are the
        // peer's to write, and a peer that says DONE without writing them
        // must not show this process's old heap.
        let msg = Message::alloc(len);
        // The peer writes the buffer (`process_vm_writev`) while it sits in
        // `put_in`, untouched here until the DONE: a message's bytes never
        // move, whoever holds it.
        let addr = msg.as_bytes().as_ptr() as u64;
        let msg_header = FrameHeader {
            kind: FrameKind::Message,
            len: len as u32,
            ..h
        };
        *put_in = Some((id, msg_header, msg));
        vc.receiving_put.store(true, Ordering::Relaxed);
        drop(put_in);
        let cts = Packet::Cts(Cookie {
            addr,
            len: len as u64,
            id,
        });
        self.send_packet(vc, cts).map_err(|e| e.to_string())
    }

    /// The DONE of Put transfer `id`: the message is full.
    fn on_put_done(&self, vc: &Vc, id: u64) -> Result<(), String> {
        let peer = vc.peer;
        let mut put_in = lock(&vc.put_in);
        match put_in.take() {
            Some((want, header, msg)) if want == id => {
                vc.receiving_put.store(false, Ordering::Relaxed);
                drop(put_in);
                self.upcalls().message(peer, header, msg);
                Ok(())
            }
            other => {
                *put_in = other;
                Err(format!(
                    "malformed data from process {peer}: done with Put transfer {id}, which this process is not receiving"
                ))
            }
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
        if closed
            && vc.lent_bytes.load(Ordering::Acquire) == 0
            && !vc.terminated.swap(true, Ordering::AcqRel)
        {
            self.upcalls().vc_terminated(vc.peer);
        }
    }

    /// Reads the cells `peer` wrote into this process's segment.
    fn receive(&self, vc: &Vc, mut reasm: MutexGuard<'_, (Reassembler, Vec<u8>)>) -> bool {
        let ring = self.own.ring(vc.peer);
        let mut moved = false;
        let mut failed = None;
        // Frames in stream order, the large-message packets included (they
        // stand for messages and keep their place).
        let mut dispatch = |h: FrameHeader, body: FrameBody| match h.kind {
            FrameKind::LmtRts | FrameKind::LmtCts | FrameKind::LmtCookie | FrameKind::LmtDone => {
                self.on_lmt(vc, h, body.as_slice())
            }
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
            let head = ring.head().load(Ordering::Relaxed);
            if !ring.is_ready(head) {
                break;
            }
            let cell = ring.cell(head);
            let len = cell.len.load(Ordering::Relaxed) as usize;
            if len > CELL_DATA {
                ring.head().store(head + 1, Ordering::Release);
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
            // SAFETY: (both copies) the cell is ours until `head` moves past
            // it (its sequence word was published with Release after its
            // bytes and loaded here with Acquire, and the producer writes a
            // cell only once `head` has passed it); `len` is within the cell
            // (checked), so `data` is readable for `len` bytes. A body's
            // bytes are read once each and never parsed here.
            let direct = unsafe {
                reasm
                    .0
                    .body_copy_from(cell.data as *const u8, len, &mut dispatch)
            };
            let rest = len - direct;
            let mut bytes = std::mem::take(&mut reasm.1);
            bytes.clear();
            bytes.reserve(rest);
            // SAFETY: as above for the cell (`direct + rest == len`);
            // `bytes` has room for `rest` (reserved) and they are
            // initialized by the copy.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    cell.data.add(direct) as *const u8,
                    bytes.as_mut_ptr(),
                    rest,
                );
                bytes.set_len(rest);
            }
            // The bytes are ours now: the producer may reuse the cell.
            ring.head().store(head + 1, Ordering::Release);
            moved = true;
            let result = reasm.0.handle(&bytes, &mut dispatch);
            reasm.1 = bytes;
            if let Err(e) = result {
                failed = Some(e.to_string());
                break;
            }
        }
        drop(reasm);
        if moved {
            // Pairs with the producer's fence in `has_room`: either it sees
            // the new `head` or this sees its `waiting`.
            fence(Ordering::SeqCst);
            if ring.waiting().load(Ordering::Relaxed) != 0
                && ring.waiting().swap(0, Ordering::SeqCst) != 0
            {
                vc.theirs.wake_owner();
            }
        }
        if let Some(why) = failed {
            self.upcalls().vc_failed(vc.peer, why);
        }
        moved
    }

    /// The single-copy transfer's packets (see the module comment).
    fn on_lmt(&self, vc: &Vc, h: FrameHeader, body: &[u8]) {
        let peer = vc.peer;
        let packet = match Packet::parse(h.kind, body, peer, self.max_payload) {
            Ok(p) => p,
            Err(why) => return self.upcalls().vc_failed(peer, why),
        };
        let outcome = match packet {
            Packet::Rts(Cookie { len, .. }) if (len as usize) < converse_msg::MSG_HEADER_SIZE => {
                Err(format!(
                    "malformed data from process {peer}: a large message of {len} bytes"
                ))
            }
            Packet::Rts(Cookie { len, id, .. }) if mode_of(id) == Mode::Put => {
                self.on_put_rts(vc, h, len as usize, id)
            }
            Packet::Cts(cookie) => self.on_cts(vc, cookie),
            Packet::Done { id } if mode_of(id) == Mode::Put => self.on_put_done(vc, id),
            Packet::Rts(Cookie { addr, len, id }) => {
                let len = len as usize;
                // SAFETY: `read_remote_raw` returns `Ok` only once it has
                // written all `len` bytes at `to`.
                unsafe {
                    Message::filled_by(len, |to, len| Self::read_remote_raw(vc.pid, addr, to, len))
                }
                .map_err(|e| {
                    format!(
                        "cannot read a large message from process {peer} (pid {}): {e}",
                        vc.pid
                    )
                })
                .and_then(|msg| {
                    self.lmt_reads.fetch_add(1, Ordering::Relaxed);
                    self.send_packet(vc, Packet::Done { id })
                        .map_err(|e| e.to_string())?;
                    let msg_header = FrameHeader {
                        kind: FrameKind::Message,
                        len: len as u32,
                        ..h
                    };
                    self.upcalls().message(peer, msg_header, msg);
                    Ok(())
                })
            }
            // The lent map's lock is released before `check_terminated`
            // takes the send side's: `post_lmt` takes them the other way
            // round (a `match` on the locked call would hold both).
            Packet::Done { id } => match take_lent(&self.lent, id) {
                Some(msg) => {
                    vc.lent_bytes.fetch_sub(msg.len(), Ordering::AcqRel);
                    drop(msg);
                    self.check_terminated(vc);
                    Ok(())
                }
                None => Err(format!(
                    "malformed data from process {peer}: done with large message {id}, which was never lent"
                )),
            },
            // No mode of this module changes a cookie during a transfer
            // (each moves its bytes in one system call).
            Packet::Cookie(_) => Err(format!(
                "malformed data from process {peer}: a cookie change, which shm's transfers never send"
            )),
        };
        if let Err(why) = outcome {
            self.upcalls().vc_failed(peer, why);
        }
    }

    /// True if some VC has bytes queued and room in the peer's ring (a
    /// cell freed after the sender last looked: its wake-up may have come
    /// before this process said it sleeps).
    fn can_send_more(&self) -> bool {
        self.vcs.iter().filter_map(|v| v.get()).any(|vc| {
            vc.queued.load(Ordering::Relaxed) > 0 && {
                let ring = vc.theirs.ring(self.me);
                vc.tail
                    .load(Ordering::Relaxed)
                    .wrapping_sub(ring.head().load(Ordering::Acquire))
                    < CELLS as u64
            }
        })
    }

    /// True if some ring of this process's segment has cells to read.
    fn has_incoming(&self) -> bool {
        self.vcs.iter().filter_map(|v| v.get()).any(|vc| {
            let ring = self.own.ring(vc.peer);
            ring.is_ready(ring.head().load(Ordering::Relaxed))
        })
    }

    #[inline]
    fn progress(&self, blocking_locks: bool) -> bool {
        self.progress_dir(blocking_locks, PollDir::InFirst)
    }

    /// [`ShmModule::progress`], in direction `dir`: `InFirst` receives
    /// before it sends on each VC; `OutFirst` sends what every VC has
    /// queued before it receives anything (`net_module_poll`'s
    /// `in_or_out`).
    #[inline]
    fn progress_dir(&self, blocking_locks: bool, dir: PollDir) -> bool {
        let mut moved = false;
        if dir == PollDir::OutFirst {
            for vc in self.vcs.iter().filter_map(|v| v.get()) {
                moved |= self.drain_vc(vc);
            }
        }
        // Plain loads first: an idle PE calls this in its spin loop, and
        // most calls find nothing.
        let resume =
            self.resume.load(Ordering::Relaxed) && self.resume.swap(false, Ordering::AcqRel);
        for vc in self.vcs.iter().filter_map(|v| v.get()) {
            let ring = self.own.ring(vc.peer);
            let has_cells = ring.is_ready(ring.head().load(Ordering::Relaxed));
            let guard = if !has_cells {
                None
            } else if blocking_locks || resume {
                Some(lock(&vc.recv))
            } else {
                vc.recv.try_lock().ok()
            };
            if let Some(g) = guard {
                moved |= self.receive(vc, g);
            }
            moved |= self.drain_vc(vc);
        }
        moved
    }

    /// Sends what `vc` has queued, as far as the ring takes it, unless
    /// another thread is sending on it.
    #[inline]
    fn drain_vc(&self, vc: &Vc) -> bool {
        let mut moved = false;
        if vc.queued.load(Ordering::Relaxed) > 0 {
            if let Ok(mut side) = vc.send.try_lock() {
                moved = self.drain(vc, &mut side);
                let closed = side.closed;
                drop(side);
                if closed {
                    self.check_terminated(vc);
                }
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
        if peer >= self.nodes || peer == self.me {
            return Err(NetError::peer(
                peer,
                format!("shm: no such peer in a job of {} processes", self.nodes),
            ));
        }
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
        let fd = rustix::shm::open(name, OFlags::RDWR, FileMode::empty())
            .map_err(|e| NetError::peer(peer, format!("shm: cannot open {name}: {e}")))?;
        crate::counts::shm_segment_mapped();
        let len = segment_len(self.nodes);
        let size = rustix::fs::fstat(&fd)
            .map_err(|e| NetError::peer(peer, format!("shm: {e}")))?
            .st_size;
        if size as usize != len {
            return Err(NetError::peer(
                peer,
                format!("shm: segment {name} has {size} bytes, expected {len}"),
            ));
        }
        let theirs = Mapping::map(&fd, len)
            .map_err(|e| NetError::peer(peer, format!("shm: cannot map {name}: {e}")))?;
        let mut head = [0u8; 28];
        // SAFETY: the first 28 bytes of the header, written by the owner
        // before it published its card.
        unsafe { std::ptr::copy_nonoverlapping(theirs.base, head.as_mut_ptr(), 28) };
        let ok = &head[..8] == MAGIC
            && head[8..16] == self.job_tag.to_le_bytes()
            && head[16..20] == (self.nodes as u32).to_le_bytes()
            && head[20..24] == (peer as u32).to_le_bytes();
        if !ok {
            return Err(NetError::peer(
                peer,
                format!("shm: segment {name} is not process {peer}'s of this job"),
            ));
        }
        // The single-copy probe: read the owner's magic from its memory.
        let mut probe = [0u8; 8];
        let single_copy = Self::read_remote(pid, addr, &mut probe).is_ok() && &probe == MAGIC;
        if self.vcs[peer].get().is_some() {
            return Err(NetError::peer(peer, "shm: connected twice"));
        }
        let vc = Vc {
            peer,
            pid,
            theirs,
            send: Mutex::new(SendSide::default()),
            recv: Mutex::new((
                Reassembler::new(peer, self.max_payload).with_buffers(self.message_buffers()),
                Vec::with_capacity(CELL_DATA),
            )),
            lent_bytes: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            put_in: Mutex::new(None),
            receiving_put: AtomicBool::new(false),
            tail: AtomicU64::new(0),
            single_copy,
            terminated: AtomicBool::new(false),
            card: card.to_string(),
        };
        self.vcs[peer]
            .set(vc)
            .map_err(|_| NetError::peer(peer, "shm: connected twice"))?;
        // Counted once the VC is in place (a second connect fails above).
        if let Some(vc) = self.vcs[peer].get() {
            vc.theirs
                .u32_at(OFF_ATTACHED)
                .fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError> {
        // A terminated VC is used again (the spec's "may be used for
        // communication again later"): its rings stay mapped and in
        // step (the segment's name is gone once every process mapped it,
        // so it could not be mapped again), so it only opens its sending
        // side again.
        if let Some(vc) = self.vcs.get(peer).and_then(|v| v.get()) {
            if vc.terminated.load(Ordering::Acquire) {
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
        }
        self.connect_to_root(peer, card)
    }

    fn vc_destroy(&self, _peer: usize) {
        // The mapping goes with the module; nothing else to undo.
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
        self.send_pending(self.vc(peer)?, p, true).map(|_| ())
    }

    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError> {
        let req = SendRequest::new();
        let p = Pending::frame(header, data, Some(req.clone()));
        let sent = self.send_pending(self.vc(peer)?, p, true)?;
        Ok((!sent).then_some(req))
    }

    fn post_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<bool, NetError> {
        let vc = self.vc(peer)?;
        if let (FrameKind::Message, SendData::Message(msg)) = (header.kind, &data) {
            if vc.single_copy && msg.len() >= LMT_MIN && self.lmt_mode != Mode::Cooperative {
                // Lend the buffer until the peer has read it (Get) or it
                // has been written into the peer (Put).
                let n = self.next_lmt.fetch_add(1, Ordering::Relaxed);
                let SendData::Message(msg) = data else {
                    unreachable!()
                };
                return self.post_lmt(vc, transfer_id(n, self.lmt_mode), header, msg);
            }
        }
        let p = Pending::frame(header, data, None);
        self.send_pending(vc, p, false).map(|empty| !empty)
    }

    fn flush_all(&self) -> bool {
        let mut moved = false;
        for vc in self.vcs.iter().filter_map(|v| v.get()) {
            if vc.queued.load(Ordering::Relaxed) > 0 {
                moved |= self.flush(vc);
            }
        }
        moved
    }

    fn copies_peer_memory(&self, peer: usize) -> bool {
        self.vc(peer).is_ok_and(|vc| vc.single_copy)
    }

    unsafe fn write_peer_memory(
        &self,
        peer: usize,
        addr: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), NetError> {
        let vc = self.vc(peer)?;
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
        let vc = self.vc(peer)?;
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
        self.vcs
            .iter()
            .filter_map(|v| v.get())
            .any(|vc| vc.queued.load(Ordering::Relaxed) > 0)
    }

    fn backlog(&self, peer: usize) -> usize {
        self.vcs.get(peer).and_then(|v| v.get()).map_or(0, |vc| {
            vc.queued.load(Ordering::Relaxed)
                + vc.held.load(Ordering::Relaxed)
                + vc.lent_bytes.load(Ordering::Relaxed)
        })
    }

    fn resume_receiving(&self) {
        self.resume.store(true, Ordering::Release);
        self.wake();
    }

    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError> {
        let _one = lock(&self.poll);
        if self.progress_dir(true, dir) {
            return Ok(true);
        }
        // Sleep on the futex word unless something arrived meanwhile.
        let word = self.own.u32_at(OFF_WAKE);
        let sleeping = self.own.u32_at(OFF_SLEEPING);
        let seen = word.load(Ordering::SeqCst);
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.has_incoming()
            || self.can_send_more()
            || self.resume.load(Ordering::Acquire)
            || self.woken.swap(false, Ordering::AcqRel)
        {
            sleeping.store(0, Ordering::Relaxed);
            return Ok(self.progress(true));
        }
        let ts = timeout.map(|t| rustix::time::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: t.subsec_nanos() as _,
        });
        let _ = futex::wait(word, futex::Flags::empty(), seen, ts.as_ref());
        sleeping.store(0, Ordering::Relaxed);
        Ok(self.progress(true))
    }

    fn try_progress(&self) -> bool {
        self.progress(false)
    }

    fn wake(&self) {
        // Kept until the next wait looks, like an eventfd's count: a wake
        // that comes before the wait is not lost.
        self.woken.store(true, Ordering::Release);
        let word = self.own.u32_at(OFF_WAKE);
        word.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(word, futex::Flags::empty(), 1);
    }

    fn finalize(&self) {
        self.unlink();
    }
}

#[cfg(test)]
#[path = "shm_tests.rs"]
mod tests;
