//! The MPI network module (feature `mpi`): frames between the processes
//! of a job started by an MPI launcher travel as MPI messages over
//! `MPI_COMM_WORLD`, through the system's MPI library (the `mpi` crate's
//! bindings). Also the few job-wide MPI calls start-up needs ([`init`],
//! [`broadcast`], [`allgather_word`], [`any`], [`allgather`],
//! [`finalize`], [`abort`]).
//!
//! # The byte stream as MPI messages
//!
//! Each process's frames to a peer form a byte stream, as over tcp, cut
//! into MPI messages: a frame of up to [`EAGER_MAX`] bytes (header and
//! body) goes as one message, a larger one as its 16-byte header, then its
//! body (and a request's further data, each piece one more message). A
//! message that begins with a header has the tag `TAG_START`, one that
//! continues a body `TAG_BODY`.
//!
//! The receiver keeps two receives of `TAG_START` from any process posted
//! (`MPI_Irecv` into buffers of [`EAGER_MAX`] bytes; MPI matches them in
//! the order posted), so that taking a small frame costs one `MPI_Test`
//! and posting its buffer again waits until the frame has been handed up; its bytes go through the sender's
//! reassembler (`frame`), as tcp's do. While a peer's frame body is
//! incomplete, the receiver matches that peer's `TAG_BODY` messages
//! (`MPI_Improbe`, then `MPI_Mrecv` straight into the message buffer: no
//! copy). MPI keeps one sender's messages of one tag in order; a
//! `TAG_START` message from a peer whose body is still incomplete is kept
//! aside until the body is in, so each peer's stream is read in order.
//! `vc_terminate` ends a process's stream with a `TAG_START` message of no
//! bytes (no frame is that short), its close: the VC is terminated once
//! this side's sends and close are done and the peer's close came, as a
//! tcp connection is once both directions are shut; a close that comes
//! before this side terminates fails the VC, as tcp's end of stream does.
//! A
//! large body thus moves by MPI's own large-message protocol (MPICH's
//! rendezvous: the Nemesis spec's plain-rendezvous LMT, or whatever the
//! library's transport does for a large send).
//!
//! # Sends
//!
//! A small frame is packed (header and body) into a buffer the VC keeps
//! for the next one, and tested once as it starts: MPI usually takes a
//! small message at once, and such a frame then needs no flight. A large
//! one goes as its header, then its body straight from the message's
//! buffer (send-and-free: the module owns it until MPI is done). Sent
//! frames keep their buffers until MPI completes them, so the module's
//! flow-control window ([`SEND_WINDOW`]) is smaller than the default: a
//! stream's copies then cycle through memory the caches hold.
//!
//! ## Sends from the caller's memory
//!
//! A copying send of a large message (`sync_send`, through
//! [`NetModule::send_noncontig`]: the module [`gathers`](NetModule::gathers))
//! whose last piece is at least [`BORROWED_MIN`] lends that piece to MPI
//! instead of copying it: the header and the short pieces before it go
//! packed as the frame's start, the last piece as its body, and the call
//! returns once MPI is done with it. While it waits the sender moves the
//! module's sends and receives, whether or not the layer above has room:
//! the peer it waits for may itself wait in such a send for this process
//! to take its own, and a pause on both sides would never end. The
//! progress thread keeps out of the waiting sender's way meanwhile. A
//! frame that cannot go so (frames queued before it, a long lead, a
//! continuation) is packed whole and queued, as the default does.
//!
//! # Lost peers
//!
//! An MPI library may not tell the others when a rank's process dies
//! (killed under Slurm's `srun` without `--kill-on-bad-exit`, MPICH's
//! ranks waited for ever). The ranks on this process's host, with their
//! pids and start times gathered at start-up ([`LocalPeer`]), are looked
//! at every [`PEER_CHECK`] by the progress thread (`kill(pid, 0)` each):
//! one gone before its close came fails its VC, naming its pid, and the
//! job ends naming the process. Ranks on other hosts are not watched
//! here.
//!
//! # Threads
//!
//! MPI is initialized with `MPI_THREAD_SERIALIZED`, and every MPI call of
//! the process is made holding `MPI_LOCK`: any thread may call (a PE
//! sending, an idle PE polling, the progress thread), one at a time. An
//! idle PE polls without waiting ([`NetModule::try_progress`] skips when
//! another thread holds the module); the progress thread, when no PE
//! polls, probes with a backoff: it spins briefly, then sleeps from 1 µs
//! doubling to [`BUSY_NAP`] between probes while traffic is recent
//! ([`RECENT`]), then on to [`MAX_NAP`], so a parked job costs a small
//! fraction of a core and a message that arrives after a long idle period
//! waits at most that long before it is seen.
//!
//! # Invariants
//!
//! - Frames to a peer are started (`MPI_Isend`) in the order sent; a frame
//!   whose request has an `OnDataAvail` continuation holds the frames
//!   after it back until the continuation says complete, so its further
//!   data follows it on the stream.
//! - The buffer of a started send lives in the module until `MPI_Test`
//!   says the send is complete.
//! - Nothing from a peer is trusted: its stream goes through the
//!   reassembler, which checks every header; a fault fails that VC naming
//!   the peer.
//!
//! # Concurrency
//!
//! Locks, always taken in this order: the receive side (the reassemblers),
//! the send side (`State`: every VC's queue and sends in flight), then
//! `MPI_LOCK`. Upcalls run with the receive side locked only, so one may
//! send.
use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use mpi::ffi;

use crate::frame::{FRAME_HEADER_SIZE, FrameBody, FrameHeader, Reassembler};
use crate::netmod::{NetError, NetModule, OutFrame, PollDir, SendData, SendRequest, Upcalls};
use crate::sync::lock;

/// Every MPI call of the process is made holding this (see "Threads").
static MPI_LOCK: Mutex<()> = Mutex::new(());

/// True once MPI is finalized or aborting: no MPI call may follow.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// The largest frame sent as one MPI message; a larger one goes as its
/// header, then its body.
pub const EAGER_MAX: usize = 16 << 10;

/// The smallest last piece a copying send of a large message
/// ([`NetModule::send_noncontig`]) lends MPI instead of copying: the send
/// then waits for the peer to take it, which costs less than a copy only
/// for large pieces. Measured on two cores (MPICH 4.0 over UCX, the
/// `mpi_bw_*` streams): lent, 1 MiB messages went at 5.5-6.7 GB/s against
/// 2.7-3.2 copied; 64 KiB ones at 2.1-3.2 against 2.5-3.4.
pub const BORROWED_MIN: usize = 256 << 10;

/// The module's [`NetModule::send_window`]: its sends keep their buffers
/// until the peer has taken them, so a window of the default 8 MiB cycles
/// a stream's copies through more memory than the caches hold. Measured
/// (64 KiB and 1 MiB streams, copied): 2.2-3.3 GB/s with 8 MiB, 4.2-6.2
/// with 1 MiB, 3.3-5.5 with 2 MiB.
pub const SEND_WINDOW: usize = 1 << 20;

/// How often the progress thread looks whether the watched ranks on this
/// host still run (see "Lost peers").
pub const PEER_CHECK: Duration = Duration::from_millis(200);

/// The longest sleep of the progress thread between probes while nothing
/// arrives.
pub const MAX_NAP: Duration = Duration::from_millis(1);

/// The longest sleep between probes while traffic is recent (within
/// [`RECENT`]): a job that pauses between messages (a PE computing, a large
/// message being copied) is still answered within this.
pub const BUSY_NAP: Duration = Duration::from_micros(20);

/// How long after the last traffic the naps stay at most [`BUSY_NAP`].
pub const RECENT: Duration = Duration::from_millis(20);

/// The tag of a message that begins with a frame header (a whole small
/// frame, or a large frame's header).
const TAG_START: c_int = 7;
/// The tag of a message that continues a frame's body.
const TAG_BODY: c_int = 8;

/// Most messages received in one progress pass (others wait for the next).
const RECEIVES_PER_PASS: usize = 64;

/// An MPI handle (request or matched message), moved between threads:
/// used only under `MPI_LOCK`.
struct Handle<T>(T);
// SAFETY: MPI handles are process-wide values, not tied to the thread that
// made them; with MPI_THREAD_SERIALIZED any thread may use one, as long as
// no two threads call MPI at once, which MPI_LOCK ensures.
unsafe impl<T> Send for Handle<T> {}

fn world() -> ffi::MPI_Comm {
    // SAFETY: reading an immutable constant of the MPI bindings.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// `MPI_REQUEST_NULL`: no request (it tests complete).
fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an immutable constant of the MPI bindings.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// A status for MPI to fill.
fn new_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is plain data (integers); all zeros is a value.
    unsafe { std::mem::zeroed() }
}

fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: reading an immutable constant of the MPI bindings.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// Fails unless an MPI call returned `MPI_SUCCESS`.
fn check(rc: c_int, what: &str) -> Result<(), NetError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(NetError::local(format!("mpi: {what} failed (error {rc})")))
    }
}

/// Initializes MPI (`MPI_Init_thread`, serialized threads) and returns
/// this process's rank and the job's size. Called once, by start-up, on
/// the thread that starts the process.
pub fn init() -> Result<(usize, usize), NetError> {
    let _mpi = lock(&MPI_LOCK);
    let mut flag: c_int = 0;
    // SAFETY: MPI_Initialized writes the flag; allowed before MPI_Init.
    let rc = unsafe { ffi::MPI_Initialized(&mut flag) };
    check(rc, "MPI_Initialized")?;
    if flag != 0 {
        return Err(NetError::local("mpi: MPI is initialized already"));
    }
    let mut provided: c_int = 0;
    // SAFETY: null argc/argv are allowed by MPI-2 and later; `provided`
    // is written.
    let rc = unsafe {
        ffi::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            ffi::RSMPI_THREAD_SERIALIZED,
            &mut provided,
        )
    };
    check(rc, "MPI_Init_thread")?;
    // SAFETY: reading an immutable constant of the MPI bindings.
    if provided < unsafe { ffi::RSMPI_THREAD_SERIALIZED } {
        return Err(NetError::local(format!(
            "mpi: the MPI library gives thread level {provided}, below MPI_THREAD_SERIALIZED"
        )));
    }
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    // SAFETY: MPI is initialized; both calls write one int.
    unsafe {
        check(ffi::MPI_Comm_rank(world(), &mut rank), "MPI_Comm_rank")?;
        check(ffi::MPI_Comm_size(world(), &mut size), "MPI_Comm_size")?;
    }
    Ok((rank as usize, size as usize))
}

/// Every process's `bytes`, in rank order (the lengths gathered as words,
/// then `MPI_Allgatherv`). Collective: every process calls it.
pub fn allgather(bytes: &[u8]) -> Result<Vec<Vec<u8>>, NetError> {
    let _mpi = lock(&MPI_LOCK);
    // Every length goes out, checked after the gather: every process sees
    // the same lengths, so all of them give up together, or none does
    // (a process leaving a collective early would hang the others).
    let mut lens = Vec::new();
    let mut displs = Vec::new();
    let mut total: usize = 0;
    for l in gather_words(&[bytes.len() as u64])? {
        let l = c_int::try_from(l)
            .map_err(|_| NetError::local("mpi: a length beyond 2 GiB gathered"))?;
        lens.push(l);
        displs.push(total as c_int);
        total += l as usize;
    }
    if total > c_int::MAX as usize {
        return Err(NetError::local("mpi: more than 2 GiB to gather"));
    }
    // Among the lengths checked just above.
    let mine = bytes.len() as c_int;
    let mut all = vec![0u8; total];
    // SAFETY: `bytes` is sent; `all` holds the sum of `lens` bytes at
    // `displs`, as computed just above.
    let rc = unsafe {
        ffi::MPI_Allgatherv(
            bytes.as_ptr().cast(),
            mine,
            bytes_type(),
            all.as_mut_ptr().cast(),
            lens.as_ptr(),
            displs.as_ptr(),
            bytes_type(),
            world(),
        )
    };
    check(rc, "MPI_Allgatherv")?;
    Ok(lens
        .iter()
        .zip(&displs)
        .map(|(&l, &d)| all[d as usize..d as usize + l as usize].to_vec())
        .collect())
}

/// Gives every process rank `root`'s `bytes` (`MPI_Bcast`; each process
/// passes a buffer of the same length). Collective.
pub fn broadcast(bytes: &mut [u8], root: usize) -> Result<(), NetError> {
    let _mpi = lock(&MPI_LOCK);
    let len = c_int::try_from(bytes.len())
        .map_err(|_| NetError::local("mpi: more than 2 GiB to broadcast"))?;
    // SAFETY: MPI is initialized; `bytes` holds `len` bytes, read at the
    // root and written elsewhere.
    let rc = unsafe {
        ffi::MPI_Bcast(
            bytes.as_mut_ptr().cast(),
            len,
            bytes_type(),
            root as c_int,
            world(),
        )
    };
    check(rc, "MPI_Bcast")
}

/// True on every process if `mine` is true on any (`MPI_Allreduce` with
/// `MPI_MAX`). Collective.
pub fn any(mine: bool) -> Result<bool, NetError> {
    let _mpi = lock(&MPI_LOCK);
    let (mine, mut all): (i32, i32) = (mine.into(), 0);
    // SAFETY: MPI is initialized; one int sent, one written.
    let rc = unsafe {
        ffi::MPI_Allreduce(
            (&mine as *const i32).cast(),
            (&mut all as *mut i32).cast(),
            1,
            ffi::RSMPI_INT32_T,
            ffi::RSMPI_MAX,
            world(),
        )
    };
    check(rc, "MPI_Allreduce")?;
    Ok(all != 0)
}

/// Every process's `mine`, in rank order: one `MPI_Allgather` of a
/// fixed-size word (no lengths to gather first). Collective.
pub fn allgather_word(mine: u64) -> Result<Vec<u64>, NetError> {
    let _mpi = lock(&MPI_LOCK);
    gather_words(&[mine])
}

/// Every process's `mine`, rank after rank (`mine.len()` words each, the
/// same number on every process): one `MPI_Allgather`. Collective.
pub fn allgather_words(mine: &[u64]) -> Result<Vec<u64>, NetError> {
    let _mpi = lock(&MPI_LOCK);
    gather_words(mine)
}

/// [`allgather_words`]'s work, for a caller holding `MPI_LOCK`.
fn gather_words(mine: &[u64]) -> Result<Vec<u64>, NetError> {
    let mut size: c_int = 0;
    // SAFETY: MPI is initialized; writes one int.
    let rc = unsafe { ffi::MPI_Comm_size(world(), &mut size) };
    check(rc, "MPI_Comm_size")?;
    let each = c_int::try_from(mine.len())
        .map_err(|_| NetError::local("mpi: too many words to gather"))?;
    let mut all = vec![0u64; size as usize * mine.len()];
    // SAFETY: `each` u64s sent, `each` from each of `size` ranks received
    // into `all`, which holds that many.
    let rc = unsafe {
        ffi::MPI_Allgather(
            mine.as_ptr().cast(),
            each,
            ffi::RSMPI_UINT64_T,
            all.as_mut_ptr().cast(),
            each,
            ffi::RSMPI_UINT64_T,
            world(),
        )
    };
    check(rc, "MPI_Allgather")?;
    Ok(all)
}

/// This process as a peer on its host sees it: its pid and its start
/// time (see [`LocalPeer`]); 0 for a start time that cannot be read.
pub fn own_process() -> (u32, u64) {
    (
        std::process::id(),
        crate::process::process_start_time(None).unwrap_or(0),
    )
}

/// A rank on this process's host, as it said at start-up
/// ([`own_process`]): watched while the job runs (see "Lost peers").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPeer {
    /// Its rank.
    pub rank: usize,
    /// Its pid.
    pub pid: u32,
    /// Its start time, in clock ticks since the host booted.
    pub start: u64,
}

/// The business card of rank `rank`'s MPI module: the rank itself, so a
/// job over MPI alone needs no exchange of cards.
pub fn card_of_rank(rank: usize) -> String {
    format!("mpi:{rank}")
}

/// Ends MPI in this process (`MPI_Finalize`), once; every process of the
/// job calls it at its normal end. No MPI call may follow.
pub fn finalize() {
    let _mpi = lock(&MPI_LOCK);
    if !CLOSED.swap(true, Ordering::AcqRel) {
        // SAFETY: MPI is initialized and not finalized (CLOSED was false).
        unsafe {
            ffi::MPI_Finalize();
        }
    }
}

/// Ends the whole job with `code` (`MPI_Abort`). Waits at most a second
/// for another thread's MPI call to end; goes ahead without the lock
/// after that (the process is ending either way).
pub fn abort(code: i32) {
    let until = Instant::now() + Duration::from_secs(1);
    let guard = loop {
        match MPI_LOCK.try_lock() {
            Ok(g) => break Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => break None,
        }
    };
    if !CLOSED.swap(true, Ordering::AcqRel) {
        // SAFETY: MPI is initialized and not finalized; MPI_Abort does not
        // return on MPICH (it ends the process), and if it does the
        // caller exits next.
        unsafe {
            ffi::MPI_Abort(world(), code);
        }
    }
    drop(guard);
}

/// A frame being sent: its MPI sends, and what they read from.
struct InFlight {
    /// Its sends (one or two; an unused slot is `MPI_REQUEST_NULL`, which
    /// tests complete).
    requests: [Handle<ffi::MPI_Request>; 2],
    /// Header and body packed into one message (a small frame), or the
    /// header of a large one: bytes an MPI send reads, on the heap.
    packed: Option<Vec<u8>>,
    /// The frame, whose header and data a large frame's sends read from.
    frame: OutFrame,
    bytes: usize,
}

impl InFlight {
    /// Tests its sends not known complete (a completed one is freed and
    /// set to `MPI_REQUEST_NULL`); call holding `MPI_LOCK`, MPI open.
    fn test(&mut self) {
        for r in &mut self.requests {
            if r.0 == null_request() {
                continue;
            }
            let mut flag: c_int = 0;
            // SAFETY: a request of a started send; MPI_Test frees it once
            // complete (setting it to MPI_REQUEST_NULL).
            unsafe { ffi::MPI_Test(&mut r.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        }
    }

    /// True once all its sends completed (as of the last test).
    fn completed(&self) -> bool {
        self.requests.iter().all(|r| r.0 == null_request())
    }
}

/// The send side of the VC to one peer.
#[derive(Default)]
struct Vc {
    /// Frames not started yet.
    queue: VecDeque<OutFrame>,
    /// Started frames, oldest first.
    inflight: VecDeque<InFlight>,
    /// The newest started frame has a continuation: start nothing after
    /// it until it completes.
    held: bool,
    /// Bytes accepted and not yet sent.
    backlog: usize,
    terminating: bool,
    /// This side's close (a `TAG_START` message of no bytes, after every
    /// frame) is started.
    close_sent: bool,
    terminated_told: bool,
    /// Counted in `MpiModule::busy` (see [`Vc::needs_progress`]).
    counted_busy: bool,
    /// Packing buffers of completed small frames, for the next ones.
    spare: Vec<Vec<u8>>,
}

impl Vc {
    /// True while the VC has sends to start or test, or a termination to
    /// report.
    fn needs_progress(&self) -> bool {
        !self.inflight.is_empty()
            || !self.queue.is_empty()
            || (self.terminating && !self.terminated_told)
    }
}

/// The MPI network module of one process.
pub struct MpiModule {
    me: usize,
    nodes: usize,
    send: Mutex<Vec<Vc>>,
    recv: Mutex<Recv>,
    upcalls: OnceLock<Arc<dyn Upcalls>>,
    /// Receiving paused: the layer above had no room.
    paused: AtomicBool,
    woken: AtomicBool,
    /// The thread waiting in [`NetModule::poll`], to wake.
    poller: Mutex<Option<Thread>>,
    /// When the progress thread last saw something move.
    last_moved: Mutex<Instant>,
    /// VCs that need progress ([`Vc::needs_progress`]), kept under the
    /// send lock: a poll that finds none skips the send side unlocked.
    busy: AtomicUsize,
    /// Per peer: its close came (after all its frames).
    peer_closed: Box<[AtomicBool]>,
    /// Senders waiting in [`MpiModule::wait_for`]: they progress the
    /// module, so the progress thread keeps out of their way.
    borrowed_waits: AtomicUsize,
    /// The ranks on this host whose processes are watched (see "Lost
    /// peers"), each with whether it was found gone.
    local: OnceLock<Vec<(LocalPeer, AtomicBool)>>,
}

impl MpiModule {
    /// The module of process `me` of `nodes` (MPI initialized: [`init`]).
    pub fn new(me: usize, nodes: usize, max_payload: usize) -> MpiModule {
        MpiModule {
            me,
            nodes,
            send: Mutex::new((0..nodes).map(|_| Vc::default()).collect()),
            recv: Mutex::new(Recv {
                reasm: (0..nodes)
                    .map(|p| Reassembler::new(p, max_payload))
                    .collect(),
                aside: (0..nodes).map(|_| VecDeque::new()).collect(),
                in_body: Vec::new(),
                posted: VecDeque::new(),
                spare: Vec::new(),
                frames: Vec::new(),
            }),
            upcalls: OnceLock::new(),
            paused: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            poller: Mutex::new(None),
            last_moved: Mutex::new(Instant::now()),
            busy: AtomicUsize::new(0),
            peer_closed: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            borrowed_waits: AtomicUsize::new(0),
            local: OnceLock::new(),
        }
    }

    /// Watches the processes of `peers` (ranks on this host) while the job
    /// runs: those whose pid names the same process here (its start time
    /// matches), other ranks of this job. Once, before the progress thread
    /// starts.
    pub fn watch_local_peers(&self, peers: &[LocalPeer]) {
        let watched = peers
            .iter()
            .filter(|p| p.rank < self.nodes && p.rank != self.me && p.start != 0)
            .filter(|p| {
                i32::try_from(p.pid)
                    .is_ok_and(|pid| crate::process::process_start_time(Some(pid)) == Some(p.start))
            })
            .map(|&p| (p, AtomicBool::new(false)))
            .collect();
        let _ = self.local.set(watched);
    }

    /// Fails, once, the VC of each watched rank whose process `alive`
    /// says is gone, unless its close came first (it ended normally).
    fn check_local_with(&self, alive: impl Fn(i32) -> bool) {
        let Some(local) = self.local.get() else {
            return;
        };
        for (peer, gone) in local {
            let pid = peer.pid as i32;
            if gone.load(Ordering::Relaxed)
                || self.peer_closed[peer.rank].load(Ordering::Acquire)
                || alive(pid)
                || gone.swap(true, Ordering::AcqRel)
            {
                continue;
            }
            self.upcalls().vc_failed(
                peer.rank,
                format!("its process (pid {pid}) is gone without ending: killed, or it crashed"),
            );
        }
    }

    /// Who hears about frames and VC events; before any traffic.
    pub fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        let buffers = upcalls.message_buffers();
        for reasm in &mut lock(&self.recv).reasm {
            reasm.set_buffers(buffers.clone());
        }
        let _ = self.upcalls.set(upcalls);
    }

    fn upcalls(&self) -> &dyn Upcalls {
        &**self.upcalls.get().expect("mpi: upcalls set before use")
    }

    fn check_peer(&self, peer: usize) -> Result<(), NetError> {
        if peer >= self.nodes || peer == self.me {
            return Err(NetError::local(format!(
                "mpi: no VC to process {peer} (job of {} processes, this is {})",
                self.nodes, self.me
            )));
        }
        Ok(())
    }

    /// Brings `busy` up to date with `vc` (call with the send lock held,
    /// after changing the VC).
    fn recount(&self, vc: &mut Vc) {
        let busy = vc.needs_progress();
        if busy != vc.counted_busy {
            vc.counted_busy = busy;
            if busy {
                self.busy.fetch_add(1, Ordering::AcqRel);
            } else {
                self.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Queues `frame` for `peer` and starts what may start.
    fn enqueue(&self, peer: usize, frame: OutFrame) -> Result<(), NetError> {
        self.check_peer(peer)?;
        let done = {
            let mut vcs = lock(&self.send);
            let vc = &mut vcs[peer];
            if vc.terminating {
                return Err(NetError::peer(peer, "mpi: send on a closed connection"));
            }
            vc.backlog += frame.total();
            vc.queue.push_back(frame);
            // Earlier sends first: a frame that completes as it starts
            // completes at once only behind none.
            let mut done = test_inflight(vc);
            let started = start_queued(peer, vc, &mut done);
            self.recount(vc);
            started?;
            done
        };
        self.complete(peer, done)
    }

    /// Runs the completions of `done` (frames whose sends all finished),
    /// outside the locks; a continuation's further data goes next.
    fn complete(&self, peer: usize, done: Vec<OutFrame>) -> Result<(), NetError> {
        let mut done = VecDeque::from(done);
        while let Some(frame) = done.pop_front() {
            // The frame that holds the VC is the one with a continuation
            // (the newest started); others complete without touching it.
            let held_by_it = frame
                .req
                .as_ref()
                .is_some_and(SendRequest::has_continuation);
            let more = frame.complete();
            if !held_by_it {
                continue;
            }
            let mut vcs = lock(&self.send);
            let vc = &mut vcs[peer];
            if let Some(more) = more {
                vc.backlog += more.total();
                vc.queue.push_front(more);
            }
            vc.held = false;
            let mut now_done = Vec::new();
            let started = start_queued(peer, vc, &mut now_done);
            self.recount(vc);
            started?;
            done.extend(now_done);
        }
        Ok(())
    }

    /// Tests every VC's sends; runs completions; reports drained
    /// terminating VCs. True if any send completed.
    fn progress_sends(&self) -> Result<bool, NetError> {
        let mut moved = false;
        if self.busy.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        for peer in (0..self.nodes).filter(|&p| p != self.me) {
            let (done, drained) = {
                let mut vcs = lock(&self.send);
                let vc = &mut vcs[peer];
                if !vc.needs_progress() {
                    continue;
                }
                let inflight = vc.inflight.len();
                let mut done = test_inflight(vc);
                moved |= vc.inflight.len() < inflight;
                let mut started = start_queued(peer, vc, &mut done);
                if vc.terminating && !vc.close_sent && vc.queue.is_empty() && !vc.held {
                    match start_close(peer) {
                        Ok(flight) => {
                            vc.inflight.push_back(flight);
                            vc.close_sent = true;
                        }
                        Err(e) => started = Err(e),
                    }
                }
                let drained = vc.terminating
                    && vc.close_sent
                    && !vc.terminated_told
                    && vc.inflight.is_empty()
                    && self.peer_closed[peer].load(Ordering::Acquire);
                if drained {
                    vc.terminated_told = true;
                }
                self.recount(vc);
                started?;
                (done, drained)
            };
            self.complete(peer, done)?;
            if drained {
                self.upcalls().vc_terminated(peer);
            }
        }
        Ok(moved)
    }

    /// Receives what has arrived (up to a pass's worth). `wait_for_recv`:
    /// take the receive side even if another thread has it. `mind_room`:
    /// stop (pause) when the layer above has no room; a sender waiting in
    /// [`MpiModule::send_borrowed`] receives regardless (see "Sends from
    /// the caller's memory").
    fn progress_recv(&self, wait_for_recv: bool, mind_room: bool) -> bool {
        let mut guard = if wait_for_recv {
            lock(&self.recv)
        } else {
            match self.recv.try_lock() {
                Ok(rx) => rx,
                Err(_) => return false,
            }
        };
        let rx = &mut *guard;
        rx.post_receives();
        let mut moved = false;
        let mut frames = std::mem::take(&mut rx.frames);
        for _ in 0..RECEIVES_PER_PASS {
            if mind_room && !self.upcalls().room() {
                self.paused.store(true, Ordering::Release);
                break;
            }
            let mut progressed = false;
            // Bodies first: they come before their senders' later frames.
            let mut i = 0;
            while i < rx.in_body.len() {
                let peer = rx.in_body[i];
                let Some((count, message)) = probe_body(peer) else {
                    i += 1;
                    continue;
                };
                progressed = true;
                let result = receive_body_message(&mut rx.reasm[peer], message, count, &mut frames);

                self.deliver(peer, &mut frames, result);
                if !rx.reasm[peer].in_body() {
                    rx.in_body.swap_remove(i);
                    // What came meanwhile, in order, until a body is
                    // incomplete again.
                    while !rx.reasm[peer].in_body() {
                        let Some(bytes) = rx.aside[peer].pop_front() else {
                            break;
                        };
                        self.take_start(&mut rx.reasm[peer], peer, &bytes, &mut frames);
                    }
                    if rx.reasm[peer].in_body() {
                        rx.in_body.push(peer);
                    }
                } else {
                    i += 1;
                }
            }
            if rx.posted.is_empty() {
                rx.post_receives();
            }
            let got = rx.posted.front_mut().and_then(Posted::test);
            // A PE's poll that took a whole frame hands it up at once: its
            // handler, and the answer it sends, do not wait for another
            // test that finds nothing (about 50 ns of MPI progress).
            let mut handed_up = false;
            if let Some((peer, count)) = got {
                progressed = true;
                let buf = rx.posted.pop_front().expect("tested").take_buf();
                let bytes = &buf[..count.min(buf.len())];
                if peer >= self.nodes || peer == self.me {
                    eprintln!(
                        "converse: process {}: an MPI message from rank {peer}, which is no peer",
                        self.me
                    );
                } else if rx.reasm[peer].in_body() || !rx.aside[peer].is_empty() {
                    rx.aside[peer].push_back(bytes.to_vec());
                } else {
                    self.take_start(&mut rx.reasm[peer], peer, bytes, &mut frames);
                    if !rx.reasm[peer].in_body() {
                        handed_up = !wait_for_recv;
                    } else if !rx.in_body.contains(&peer) {
                        rx.in_body.push(peer);
                    }
                }
                // Posted again at the next pass (or once the others are
                // used): not between this frame and its handler.
                rx.spare.push(buf);
            }
            if !progressed {
                break;
            }
            moved = true;
            if handed_up {
                break;
            }
        }
        rx.frames = frames;
        moved
    }

    /// Takes a `TAG_START` message from `peer`, in its stream's order: a
    /// frame start for its reassembler, or (no bytes) the peer's close.
    fn take_start(
        &self,
        reasm: &mut Reassembler,
        peer: usize,
        bytes: &[u8],
        frames: &mut Vec<(FrameHeader, FrameBody)>,
    ) {
        if bytes.is_empty() {
            return self.on_close(peer);
        }
        let result = reasm.handle(bytes, |h, b| frames.push((h, b)));
        self.deliver(peer, frames, result);
    }

    /// `peer` closed its side: everything it sent came before. Expected
    /// once this process terminates the VC too (the layer above's exit
    /// protocol); otherwise the VC failed, as a tcp connection closed by
    /// its peer does.
    fn on_close(&self, peer: usize) {
        self.peer_closed[peer].store(true, Ordering::Release);
        let terminating = lock(&self.send)[peer].terminating;
        if !terminating {
            self.upcalls()
                .vc_failed(peer, "connection closed by the peer".into());
        }
    }

    /// Hands `frames` (all from `peer`) to the layer above, then reports
    /// `result`'s fault, if any.
    fn deliver(
        &self,
        peer: usize,
        frames: &mut Vec<(FrameHeader, FrameBody)>,
        result: Result<(), crate::frame::FrameError>,
    ) {
        for (h, b) in frames.drain(..) {
            self.upcalls().arrived(peer, h, b);
        }
        if let Err(e) = result {
            self.upcalls().vc_failed(peer, e.to_string());
        }
    }

    /// Sends and receives, in the order `dir` says (`net_module_poll`'s
    /// `in_or_out`).
    fn progress(&self, wait_for_recv: bool, dir: PollDir) -> Result<bool, NetError> {
        if CLOSED.load(Ordering::Acquire) {
            return Ok(false);
        }
        let receive =
            || !self.paused.load(Ordering::Acquire) && self.progress_recv(wait_for_recv, true);
        Ok(match dir {
            PollDir::OutFirst => {
                let sent = self.progress_sends()?;
                receive() || sent
            }
            PollDir::InFirst => {
                let received = receive();
                self.progress_sends()? || received
            }
        })
    }
}

impl MpiModule {
    /// [`NetModule::send_noncontig`] from the caller's memory (see "Sends
    /// from the caller's memory"): the header and every piece but the last
    /// go packed in the frame's start message, the last piece as one body
    /// message read straight from `iov`; returns once MPI is done with it.
    /// A frame that cannot go so (frames queued before it, its packed part
    /// past [`EAGER_MAX`], a piece past 2 GiB) is packed whole and queued.
    fn send_borrowed(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        iov: &[&[u8]],
    ) -> Result<(), NetError> {
        self.check_peer(peer)?;
        let Some((last, lead)) = iov.split_last() else {
            return self.enqueue(
                peer,
                OutFrame::frame(header, SendData::Bytes(Vec::new()), Some(req)),
            );
        };
        let packed_len = FRAME_HEADER_SIZE + lead.iter().map(|p| p.len()).sum::<usize>();
        let borrowable = packed_len <= EAGER_MAX
            && last.len() >= BORROWED_MIN
            && last.len() <= c_int::MAX as usize
            && !req.has_continuation();
        let done = {
            let mut vcs = lock(&self.send);
            let vc = &mut vcs[peer];
            if vc.terminating {
                return Err(NetError::peer(peer, "mpi: send on a closed connection"));
            }
            if !borrowable || vc.held || !vc.queue.is_empty() {
                drop(vcs);
                return self.isend_contig(peer, req, header, SendData::Bytes(iov.concat()));
            }
            let mut done = test_inflight(vc);
            let mut packed = vc.spare.pop().unwrap_or_default();
            packed.reserve(packed_len);
            packed.extend_from_slice(&header.encode());
            for piece in lead {
                packed.extend_from_slice(piece);
            }
            let bytes = packed.len() + last.len();
            let mut flight = InFlight {
                requests: [Handle(null_request()), Handle(null_request())],
                packed: None,
                bytes,
                frame: OutFrame {
                    header: None,
                    data: SendData::Bytes(Vec::new()),
                    written: 0,
                    req: Some(req.clone()),
                },
            };
            {
                let _mpi = lock(&MPI_LOCK);
                if CLOSED.load(Ordering::Acquire) {
                    return Err(NetError::peer(peer, "mpi: MPI is finalized"));
                }
                flight.requests[0] = isend(peer, TAG_START, &packed)?;
                let body = isend(peer, TAG_BODY, last);
                flight.packed = Some(packed);
                match body {
                    Ok(r) => flight.requests[1] = r,
                    Err(e) => {
                        // Nothing reads `last`; the start message's buffer
                        // stays with its flight until MPI is done with it.
                        drop(_mpi);
                        vc.backlog += bytes;
                        vc.inflight.push_back(flight);
                        self.recount(vc);
                        return Err(e);
                    }
                }
                flight.test();
            }
            vc.backlog += bytes;
            if vc.inflight.is_empty() && flight.completed() {
                vc.backlog -= bytes;
                if let Some(packed) = flight.packed.take() {
                    recycle(&mut vc.spare, packed);
                }
                done.push(flight.frame);
            } else {
                vc.inflight.push_back(flight);
            }
            self.recount(vc);
            done
        };
        // Whatever completing earlier frames says, MPI may still read
        // `last`: wait first.
        let completed = self.complete(peer, done);
        self.wait_for(&req);
        completed
    }

    /// Waits until `req` (a send reading the caller's memory) completes, or
    /// MPI is closed (nothing reads memory any more), moving sends and
    /// receiving meanwhile, room or not: the peer this send waits for may
    /// be waiting for this process to take its sends.
    fn wait_for(&self, req: &SendRequest) {
        let _waiting = WaitCount::new(&self.borrowed_waits);
        let mut polls = 0u32;
        while !req.is_complete() && !CLOSED.load(Ordering::Acquire) {
            // A failed VC is reported to the layer above (which ends the
            // job); the send's memory stays in MPI's hands until then.
            let sent = self.progress_sends().unwrap_or(false);
            let received = self.progress_recv(false, false);
            if sent || received {
                polls = 0;
                continue;
            }
            polls = polls.saturating_add(1);
            if polls < 1024 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// One waiter counted while it lives.
struct WaitCount<'a>(&'a AtomicUsize);

impl<'a> WaitCount<'a> {
    fn new(count: &'a AtomicUsize) -> WaitCount<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        WaitCount(count)
    }
}

impl Drop for WaitCount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts the queued frames of `vc` (to `peer`) that may start. A frame
/// whose sends completed as they started (a small one MPI took at once)
/// and that has a request goes to `done`, when no frame before it is in
/// flight (completions stay in order).
fn start_queued(peer: usize, vc: &mut Vc, done: &mut Vec<OutFrame>) -> Result<(), NetError> {
    while !vc.held {
        let Some(frame) = vc.queue.pop_front() else {
            break;
        };
        let held = frame
            .req
            .as_ref()
            .is_some_and(SendRequest::has_continuation);
        let mut flight = start(peer, frame, &mut vc.spare)?;
        if vc.inflight.is_empty() && flight.completed() {
            vc.backlog -= flight.bytes;
            if let Some(packed) = flight.packed.take() {
                recycle(&mut vc.spare, packed);
            }
            if flight.frame.req.is_some() {
                done.push(flight.frame);
            }
        } else {
            vc.inflight.push_back(flight);
        }
        vc.held = held;
    }
    Ok(())
}

/// Packing buffers kept per VC for the next small frames.
const SPARE_PACKED: usize = 8;

/// Keeps `packed` (an emptied packing buffer) for the next small frame.
fn recycle(spare: &mut Vec<Vec<u8>>, mut packed: Vec<u8>) {
    if spare.len() < SPARE_PACKED && packed.capacity() <= EAGER_MAX {
        packed.clear();
        spare.push(packed);
    }
}

/// Starts the MPI sends of `frame` to `peer`; a small frame is packed into
/// a buffer of `spare`'s, or a new one. The sends are tested once at once:
/// MPI often takes a small message as it starts
/// ([`InFlight::completed`]).
fn start(peer: usize, frame: OutFrame, spare: &mut Vec<Vec<u8>>) -> Result<InFlight, NetError> {
    let bytes = frame.total();
    let (hdr, data) = frame.rest();
    let null = || Handle(null_request());
    let mut flight = InFlight {
        requests: [null(), null()],
        packed: None,
        bytes,
        frame: OutFrame {
            header: None,
            data: SendData::Bytes(Vec::new()),
            written: 0,
            req: None,
        },
    };
    let _mpi = lock(&MPI_LOCK);
    if CLOSED.load(Ordering::Acquire) {
        return Err(NetError::peer(peer, "mpi: MPI is finalized"));
    }
    if !hdr.is_empty() && bytes <= EAGER_MAX {
        let mut packed = spare.pop().unwrap_or_default();
        packed.reserve(bytes);
        packed.extend_from_slice(hdr);
        packed.extend_from_slice(data);
        flight.requests[0] = isend(peer, TAG_START, &packed)?;
        flight.packed = Some(packed);
    } else {
        if !hdr.is_empty() {
            // The header is inline in the frame, which moves: its bytes go
            // from a buffer of their own.
            let header = hdr.to_vec();
            flight.requests[0] = isend(peer, TAG_START, &header)?;
            flight.packed = Some(header);
        }
        if data.len() > c_int::MAX as usize {
            return Err(NetError::peer(peer, "mpi: a piece above 2 GiB"));
        }
        if !data.is_empty() {
            flight.requests[1] = isend(peer, TAG_BODY, data)?;
        }
    }
    // The data sends read from `frame`'s data buffer, which stays where
    // it is (heap memory) when the frame moves into the flight.
    flight.frame = frame;
    flight.test();
    Ok(flight)
}

/// Starts this process's close to `peer`: a `TAG_START` message of no
/// bytes, which no frame can be (a frame has a header).
fn start_close(peer: usize) -> Result<InFlight, NetError> {
    let _mpi = lock(&MPI_LOCK);
    if CLOSED.load(Ordering::Acquire) {
        return Err(NetError::peer(peer, "mpi: MPI is finalized"));
    }
    let null = Handle(null_request());
    Ok(InFlight {
        requests: [isend(peer, TAG_START, &[])?, null],
        packed: None,
        frame: OutFrame {
            header: None,
            data: SendData::Bytes(Vec::new()),
            written: 0,
            req: None,
        },
        bytes: 0,
    })
}

/// `MPI_Isend` of `buf` to `peer`; the caller keeps `buf` alive and in
/// place until the request completes, and holds MPI_LOCK.
fn isend(peer: usize, tag: c_int, buf: &[u8]) -> Result<Handle<ffi::MPI_Request>, NetError> {
    let mut req = null_request();
    // SAFETY: `buf` stays valid and unmoved until the request completes
    // (the caller's promise); MPI writes `req`.
    let rc = unsafe {
        ffi::MPI_Isend(
            buf.as_ptr() as *const c_void,
            buf.len() as c_int,
            bytes_type(),
            peer as c_int,
            tag,
            world(),
            &mut req,
        )
    };
    check(rc, "MPI_Isend").map_err(|e| NetError::peer(peer, e.to_string()))?;
    Ok(Handle(req))
}

/// Tests the sends in flight of `vc`, oldest first; returns the frames
/// whose sends all completed and that have a request to complete (in
/// order; a frame without one needs nothing more).
fn test_inflight(vc: &mut Vc) -> Vec<OutFrame> {
    let mut done = Vec::new();
    if vc.inflight.is_empty() {
        return done;
    }
    let _mpi = lock(&MPI_LOCK);
    if CLOSED.load(Ordering::Acquire) {
        return done;
    }
    while let Some(front) = vc.inflight.front_mut() {
        front.test();
        if !front.completed() {
            break;
        }
        let mut flight = vc.inflight.pop_front().expect("the front");
        vc.backlog -= flight.bytes;
        if let Some(packed) = flight.packed.take() {
            recycle(&mut vc.spare, packed);
        }
        if flight.frame.req.is_some() {
            done.push(flight.frame);
        }
    }
    done
}

/// The next body message from `peer`, matched: (its size, the handle to
/// receive it with).
fn probe_body(peer: usize) -> Option<(usize, Handle<ffi::MPI_Message>)> {
    let _mpi = lock(&MPI_LOCK);
    if CLOSED.load(Ordering::Acquire) {
        return None;
    }
    let mut flag: c_int = 0;
    // SAFETY: reading an immutable constant of the MPI bindings.
    let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
    let mut status = new_status();
    // SAFETY: MPI is initialized; the call writes the flag, the message
    // handle and the status.
    unsafe {
        ffi::MPI_Improbe(
            peer as c_int,
            TAG_BODY,
            world(),
            &mut flag,
            &mut message,
            &mut status,
        );
    }
    if flag == 0 {
        return None;
    }
    let mut count: c_int = 0;
    // SAFETY: `status` is the matched message's.
    unsafe { ffi::MPI_Get_count(&status, bytes_type(), &mut count) };
    Some((count.max(0) as usize, Handle(message)))
}

/// The posted receive of frame starts: its request and its buffer. Dropped
/// before it completes, it cancels the receive, so MPI never writes to a
/// freed buffer.
struct Posted {
    request: Handle<ffi::MPI_Request>,
    buf: Box<[u8]>,
    /// The receive completed (the request is freed).
    done: bool,
}

impl Posted {
    /// Posts a receive of `TAG_START` from any process into `buf`.
    fn post(buf: Box<[u8]>) -> Option<Posted> {
        let _mpi = lock(&MPI_LOCK);
        if CLOSED.load(Ordering::Acquire) {
            return None;
        }
        let mut req = null_request();
        // SAFETY: `buf` (heap memory, moved into the `Posted` with the
        // request) stays in place until the receive completes or is
        // cancelled (`Posted::cancel`).
        unsafe {
            ffi::MPI_Irecv(
                buf.as_ptr() as *mut c_void,
                buf.len() as c_int,
                bytes_type(),
                ffi::RSMPI_ANY_SOURCE,
                TAG_START,
                world(),
                &mut req,
            );
        }
        Some(Posted {
            request: Handle(req),
            buf,
            done: false,
        })
    }

    /// If the receive completed: (the sender, the bytes received).
    fn test(&mut self) -> Option<(usize, usize)> {
        let _mpi = lock(&MPI_LOCK);
        if CLOSED.load(Ordering::Acquire) {
            return None;
        }
        let mut flag: c_int = 0;
        let mut status = new_status();
        // SAFETY: the posted request; MPI_Test frees it when complete.
        unsafe { ffi::MPI_Test(&mut self.request.0, &mut flag, &mut status) };
        if flag == 0 {
            return None;
        }
        self.done = true;
        let mut count: c_int = 0;
        // SAFETY: `status` is the completed receive's.
        unsafe { ffi::MPI_Get_count(&status, bytes_type(), &mut count) };
        Some((status.MPI_SOURCE as usize, count.max(0) as usize))
    }

    /// The buffer, once the receive completed, for the next one.
    fn take_buf(&mut self) -> Box<[u8]> {
        debug_assert!(self.done);
        std::mem::take(&mut self.buf)
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let _mpi = lock(&MPI_LOCK);
        if CLOSED.load(Ordering::Acquire) {
            // MPI is finalized or aborting: it writes nothing any more.
            return;
        }
        // SAFETY: the posted, incomplete request: cancelled, then waited
        // for, which frees it; `buf` outlives both calls.
        unsafe {
            ffi::MPI_Cancel(&mut self.request.0);
            ffi::MPI_Wait(&mut self.request.0, ffi::RSMPI_STATUS_IGNORE);
        }
    }
}

/// The receive side: each peer's reassembler, the posted receive of
/// frame starts, and frame starts kept aside while their sender's body is
/// incomplete.
struct Recv {
    reasm: Vec<Reassembler>,
    /// Per peer, frame starts that came while its body was incomplete.
    aside: Vec<VecDeque<Vec<u8>>>,
    /// The peers whose body is incomplete.
    in_body: Vec<usize>,
    /// The posted receives of frame starts, in the order posted (the
    /// order MPI matches them in).
    posted: VecDeque<Posted>,
    /// Buffers of completed receives, to post again.
    spare: Vec<Box<[u8]>>,
    /// Frames taken and not yet handed up (empty between passes; kept for
    /// its allocation).
    frames: Vec<(FrameHeader, FrameBody)>,
}

impl Recv {
    /// Posts receives until [`POSTED_RECEIVES`] are posted.
    fn post_receives(&mut self) {
        while self.posted.len() < POSTED_RECEIVES {
            let buf = self
                .spare
                .pop()
                .unwrap_or_else(|| vec![0u8; POSTED_LEN].into_boxed_slice());
            match Posted::post(buf) {
                Some(p) => self.posted.push_back(p),
                None => break,
            }
        }
    }
}

/// Receives of frame starts kept posted: with two, the one after a
/// completed receive is already posted, so posting that buffer again waits
/// until after the frame has been handed up.
const POSTED_RECEIVES: usize = 2;

/// Receives matched `message` of `count` bytes into `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `count` bytes.
unsafe fn receive_into(message: Handle<ffi::MPI_Message>, dst: *mut u8, count: usize) {
    let mut m = message.0;
    let _mpi = lock(&MPI_LOCK);
    // SAFETY: the caller's promise for `dst`; `m` is a matched message of
    // `count` bytes, received once.
    unsafe {
        ffi::MPI_Mrecv(
            dst.cast(),
            count as c_int,
            bytes_type(),
            &mut m,
            ffi::RSMPI_STATUS_IGNORE,
        );
    }
}

/// Receives matched `message` of `count` bytes into a new buffer.
fn receive_vec(message: Handle<ffi::MPI_Message>, count: usize) -> Vec<u8> {
    let mut v = vec![0u8; count];
    // SAFETY: `v` holds `count` bytes.
    unsafe { receive_into(message, v.as_mut_ptr(), count) };
    v
}

/// Bytes of the posted receive's buffer.
const POSTED_LEN: usize = EAGER_MAX;

/// Receives matched body `message` of `count` bytes into `reasm`'s frame
/// body (straight into the message buffer when it fits, else through the
/// reassembler's copy), its completed frames added to `frames`.
fn receive_body_message(
    reasm: &mut Reassembler,
    message: Handle<ffi::MPI_Message>,
    count: usize,
    frames: &mut Vec<(FrameHeader, FrameBody)>,
) -> Result<(), crate::frame::FrameError> {
    let mut message = Some(message);
    let direct = reasm.receive_body(
        &mut |space| {
            if count > space.len() {
                return Err(());
            }
            let m = message.take().expect("one receive per message");
            // SAFETY: `space` has room for `count` bytes; MPI writes
            // exactly `count` (the matched message's size).
            unsafe { receive_into(m, space.as_mut_ptr().cast(), count) };
            // SAFETY: MPI initialized the first `count` bytes.
            Ok(unsafe { std::slice::from_raw_parts_mut(space.as_mut_ptr().cast(), count) })
        },
        |h, b| frames.push((h, b)),
    );
    match direct {
        Some(Ok(_)) => Ok(()),
        Some(Err(())) | None => {
            let m = message.take().expect("not received yet");
            let bytes = receive_vec(m, count);
            reasm.handle(&bytes, |h, b| frames.push((h, b)))
        }
    }
}

impl NetModule for MpiModule {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn business_card(&self) -> String {
        card_of_rank(self.me)
    }

    fn connect_to_root(&self, peer: usize, card: &str) -> Result<(), NetError> {
        self.vc_init(peer, card)
    }

    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError> {
        self.check_peer(peer)?;
        // Ranks are process numbers: a card names its own.
        match card
            .strip_prefix("mpi:")
            .and_then(|r| r.parse::<usize>().ok())
        {
            Some(rank) if rank == peer => {}
            _ => {
                return Err(NetError::peer(
                    peer,
                    format!("mpi: process {peer}'s card `{card}` is not `mpi:{peer}`"),
                ));
            }
        }
        // A terminated VC is used again (the spec's "may be used for
        // communication again later"): MPI has no connection to make, so
        // the VC goes back to its state after its first `vc_init`.
        let mut vcs = lock(&self.send);
        let vc = &mut vcs[peer];
        if vc.terminating {
            if !vc.terminated_told {
                return Err(NetError::peer(
                    peer,
                    "mpi: the VC is still terminating (its sends have not drained)",
                ));
            }
            vc.terminating = false;
            vc.close_sent = false;
            vc.terminated_told = false;
            self.peer_closed[peer].store(false, Ordering::Release);
            self.recount(vc);
        }
        Ok(())
    }

    fn connected_peers(&self) -> Vec<usize> {
        // MPI connects every pair itself.
        (0..self.nodes).filter(|&p| p != self.me).collect()
    }

    fn vc_destroy(&self, peer: usize) {
        if peer < self.nodes {
            let mut vcs = lock(&self.send);
            let vc = &mut vcs[peer];
            *vc = Vc {
                counted_busy: vc.counted_busy,
                ..Vc::default()
            };
            self.recount(vc);
        }
    }

    fn vc_terminate(&self, peer: usize) {
        if peer < self.nodes {
            let mut vcs = lock(&self.send);
            vcs[peer].terminating = true;
            self.recount(&mut vcs[peer]);
            drop(vcs);
            self.wake();
        }
    }

    fn ordering(&self) -> bool {
        true
    }

    fn send_noncontig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        iov: &[&[u8]],
    ) -> Result<(), NetError> {
        crate::netmod::check_iov_len(self.name(), peer, &header, iov)?;
        self.send_borrowed(peer, req, header, iov)
    }

    fn gathers(&self) -> bool {
        true
    }

    fn isend_contig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        data: SendData,
    ) -> Result<(), NetError> {
        self.enqueue(peer, OutFrame::frame(header, data, Some(req)))
    }

    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError> {
        let req = SendRequest::new();
        self.enqueue(peer, OutFrame::frame(header, data, Some(req.clone())))?;
        Ok((!req.is_complete()).then_some(req))
    }

    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        *lock(&self.poller) = Some(std::thread::current());
        let mut nap = Duration::from_micros(1);
        let mut spins = 0u32;
        let last_moved = *lock(&self.last_moved);
        loop {
            if self.borrowed_waits.load(Ordering::Acquire) > 0 {
                // A sender is progressing the module: stay out of its way.
                if self.woken.swap(false, Ordering::AcqRel) {
                    return Ok(false);
                }
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(false);
                }
                let left = deadline.map_or(MAX_NAP, |d| d.saturating_duration_since(now));
                std::thread::park_timeout(MAX_NAP.min(left));
                continue;
            }
            if self.progress(true, dir)? {
                *lock(&self.last_moved) = Instant::now();
                return Ok(true);
            }
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(false);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(false);
            }
            // Spin a little (an answer often comes within microseconds),
            // then nap longer and longer, up to MAX_NAP.
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let left = deadline.map_or(nap, |d| d.saturating_duration_since(now));
            std::thread::park_timeout(nap.min(left));
            let cap = if now.duration_since(last_moved) < RECENT {
                BUSY_NAP
            } else {
                MAX_NAP
            };
            nap = (nap * 2).min(cap);
        }
    }

    fn try_progress(&self) -> bool {
        self.progress(false, PollDir::InFirst).unwrap_or(false)
    }

    fn post_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<bool, NetError> {
        // MPI sends start at once; nothing waits for a flush.
        self.enqueue(peer, OutFrame::frame(header, data, None))?;
        Ok(false)
    }

    fn flush_all(&self) -> bool {
        self.progress_sends().unwrap_or(false)
    }

    fn has_queued(&self) -> bool {
        lock(&self.send)
            .iter()
            .any(|vc| !vc.queue.is_empty() || !vc.inflight.is_empty())
    }

    fn backlog(&self, peer: usize) -> usize {
        lock(&self.send).get(peer).map_or(0, |vc| vc.backlog)
    }

    fn send_window(&self) -> usize {
        SEND_WINDOW
    }

    fn peer_check_period(&self) -> Option<Duration> {
        self.local
            .get()
            .is_some_and(|l| !l.is_empty())
            .then_some(PEER_CHECK)
    }

    fn check_peers(&self) {
        self.check_local_with(crate::process::process_alive);
    }

    fn resume_receiving(&self) {
        self.paused.store(false, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        if let Some(t) = lock(&self.poller).as_ref() {
            t.unpark();
        }
    }

    fn finalize(&self) {
        // The posted receive must not outlive the module. MPI itself ends
        // with the process's bootstrap ([`finalize`]): start-up used it
        // too.
        lock(&self.recv).posted.clear();
    }
}

const _: () = assert!(FRAME_HEADER_SIZE <= EAGER_MAX);
