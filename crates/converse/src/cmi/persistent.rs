//! Persistent communication (the manual's "Converse Persistent
//! Communication Interface"): a sender and a receiver agree once on a
//! channel with buffers for messages up to a size, and the sender's
//! following messages to that PE arrive in those buffers, with no
//! allocation on the receiver.
//!
//! # What it saves, per layer
//!
//! - **Another process** (shm, tcp, MPI): the receiver's process keeps the
//!   channel's buffers (`rt::persistent`), and its reassembly receives a
//!   channel's message straight into a free one instead of allocating: the
//!   per-message allocation (and, for a large message, the fresh pages it
//!   would fault in) is gone. The message a handler gets shares that buffer
//!   until it drops it (it is a shared message: its first write copies it).
//!   A message longer than the channel's `max_bytes`, or one that finds
//!   every buffer of its channel still held ([`buffers_per_channel`]),
//!   goes the ordinary way; so does
//!   a message large enough for the shm module's large-message transfer,
//!   which allocates its own buffer.
//! - **Small messages** (at most [`MIN_CHANNEL_MESSAGE`] bytes, header
//!   included) go the ordinary way too, whatever the layer: their buffer
//!   comes from the receiving thread's own cache or its allocator's, with
//!   no atomic operation, and costs less than a channel's buffer, which is
//!   found under the channel's lock, checked free with an atomic and
//!   counted while its message lives (`persistent_oneway_8B` was 1.23–1.32×
//!   the ordinary send; docs/benchmarks.md, "persistent channels: small messages
//!   the ordinary way").
//!   Charm++ draws the same line (`PERSIST_MIN_SIZE`: persistent sends
//!   only above its eager limit).
//! - **The same process**: a message moves from sender to receiver without
//!   any copy or allocation already, so there is nothing to save: sends
//!   over a handle to a PE of this process are ordinary sends.
//!
//! # The protocol
//!
//! - [`create_persistent`] (sender side) sends `PersistentOpen` to the
//!   destination PE, whose process opens a channel and answers
//!   `PersistentOpened` with its number. Until the answer arrives the
//!   handle's sends are ordinary ones ([`PersistentHandle::is_ready`]).
//! - [`create_receiver_persistent`] (receiver side) opens the channel at
//!   once and returns a [`PersistentReq`] for the program to send to the
//!   sender, which makes a ready handle of it with
//!   [`register_receive_persistent`].
//! - [`use_persistent`] names the handles the PE's following sends use: a
//!   user send to PE `d` (`sync_send`, `sync_send_and_free` and the calls
//!   built on them) of at most `max_bytes` bytes goes on the handle for
//!   `d`, if one is named.
//! - [`PersistentHandle::destroy`] of a handle made by
//!   [`create_persistent`] sends `PersistentClose` after the handle's last
//!   message: the connection keeps order, so the channel closes only after
//!   all of its messages arrived. A receiver's channel may serve several
//!   senders (a `PersistentReq` is plain data), so it stays open until the
//!   job ends.
//!
//! # Invariants
//!
//! - A handle belongs to the PE that made it (`Rc`: it is `!Send`).
//! - A handle's channel number, once known, is that of an open channel of
//!   its destination's process until `destroy` closes it.
//!
//! # Concurrency
//!
//! PE-local (`Cell`, `RefCell`); the receiving side's shared state is
//! `rt::persistent`'s.
use std::cell::Cell;
use std::rc::{Rc, Weak};

use crate::msg::message::{MSG_HEADER_SIZE, Message};
use crate::msg::system::{self, Kind, Reader};
use crate::rt::pe::{self, Pe};
use crate::rt::persistent::{MAX_CHANNEL_BYTES, receivers};

use crate::cmi::state::Handle;
pub use crate::cmi::state::PersistentHandle;
pub(crate) use crate::cmi::state::Using;
pub use crate::rt::persistent::buffers_per_channel;

/// The longest message, header included, that a persistent handle sends
/// the ordinary way: up to this size a fresh buffer costs the receiver
/// less than a channel's (module comment, "Small messages"). Measured over
/// shm, in turns with the ordinary send (docs/benchmarks.md).
pub const MIN_CHANNEL_MESSAGE: usize = 4 << 10;

impl std::fmt::Debug for PersistentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PersistentHandle(to PE {}, up to {} bytes, channel {})",
            self.0.dest_pe,
            self.0.max_bytes,
            self.0.channel.get()
        )
    }
}

impl PartialEq for PersistentHandle {
    fn eq(&self, other: &PersistentHandle) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PersistentHandle {}

/// What a receiver made with [`create_receiver_persistent`], for the sender
/// to make a handle of ([`register_receive_persistent`]): plain data, to
/// send in a message ([`PersistentReq::to_bytes`]).
#[doc(alias = "PersistentRecvHandle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistentReq {
    /// The receiving PE.
    pub pe: usize,
    /// The channel's number in the receiver's process.
    pub channel: u32,
    /// The longest message the channel takes, header included.
    pub max_bytes: usize,
}

impl PersistentReq {
    /// Length of [`PersistentReq::to_bytes`].
    pub const BYTES: usize = 20;

    /// The request as bytes, for a message payload.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..8].copy_from_slice(&(self.pe as u64).to_le_bytes());
        b[8..12].copy_from_slice(&self.channel.to_le_bytes());
        b[12..].copy_from_slice(&(self.max_bytes as u64).to_le_bytes());
        b
    }

    /// The request `to_bytes` gave, if `bytes` are one.
    pub fn from_bytes(bytes: &[u8]) -> Option<PersistentReq> {
        let b: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        Some(PersistentReq {
            pe: usize::try_from(u64::from_le_bytes(b[..8].try_into().ok()?)).ok()?,
            channel: u32::from_le_bytes(b[8..12].try_into().ok()?),
            max_bytes: usize::try_from(u64::from_le_bytes(b[12..].try_into().ok()?)).ok()?,
        })
    }
}

impl Using {
    /// The channel a user send of `len` bytes to PE `dest` takes, if
    /// [`use_persistent`] named a ready handle to another process for it.
    #[inline]
    pub fn channel_for(&self, dest: usize, len: usize) -> Option<u32> {
        if !self.on.get() {
            return None;
        }
        self.lookup(dest, len)
    }

    fn lookup(&self, dest: usize, len: usize) -> Option<u32> {
        let handles = self.handles.borrow();
        let h = handles.iter().find(|h| h.0.dest_pe == dest)?;
        let channel = h.0.channel.get();
        (h.0.remote && channel != 0 && len > MIN_CHANNEL_MESSAGE && len <= h.0.max_bytes)
            .then_some(channel)
    }

    fn track(&self, handle: &PersistentHandle) {
        let mut made = self.made.borrow_mut();
        made.retain(|w| w.strong_count() > 0);
        made.push(Rc::downgrade(&handle.0));
    }

    fn fresh_id(&self) -> u64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }
}

impl PersistentHandle {
    /// The PE the handle sends to.
    pub fn dest_pe(&self) -> usize {
        self.0.dest_pe
    }

    /// The longest message the handle carries, header included; longer
    /// ones go the ordinary way.
    pub fn max_bytes(&self) -> usize {
        self.0.max_bytes
    }

    /// True once the channel is set up and sends on this handle use it:
    /// at once for [`register_receive_persistent`]'s handles, after the
    /// destination's answer for [`create_persistent`]'s; never for a
    /// destination in this process (nothing to save there) or once
    /// destroyed.
    pub fn is_ready(&self) -> bool {
        self.0.remote && self.0.channel.get() != 0 && !self.0.destroyed.get()
    }

    /// True once [`destroy`](PersistentHandle::destroy) was called.
    pub fn is_destroyed(&self) -> bool {
        self.0.destroyed.get()
    }

    /// Ends the handle (`CmiDestroyPersistent`): later sends to its PE go
    /// the ordinary way. A channel made by [`create_persistent`] closes too
    /// (the receiver's buffers are freed once the messages holding them
    /// are); one a receiver made ([`create_receiver_persistent`]), which
    /// several senders may register, stays open until the job ends.
    /// Destroying a handle twice does nothing more.
    ///
    /// # Panics
    /// On a PE other than the handle's (it cannot be sent there: it is
    /// `!Send`), never; if the calling thread is no PE.
    #[doc(alias = "CmiDestroyPersistent")]
    pub fn destroy(&self) {
        pe::with(|pe| destroy(pe, &self.0));
    }
}

fn destroy(pe: &Pe, h: &Handle) {
    if h.destroyed.replace(true) {
        return;
    }
    let using = &pe.send.persistent;
    using
        .handles
        .borrow_mut()
        .retain(|x| !std::ptr::eq(&*x.0, h));
    using.on.set(!using.handles.borrow().is_empty());
    let channel = h.channel.get();
    if channel != 0 && h.closes {
        close(pe, h.dest_pe, channel);
    }
}

/// Tells PE `dest` to close `channel` (after everything sent to it before:
/// one connection, in order). Only channels to other processes are ever
/// opened by a sender, so this is always a message.
fn close(pe: &Pe, dest: usize, channel: u32) {
    let msg = system::message(Kind::PersistentClose, &[u64::from(channel)], &[]);
    pe.send_runtime(dest, msg);
}

/// Creates a persistent channel to PE `dest_pe` for messages of up to
/// `max_bytes` bytes, header included (`CmiCreatePersistent`). The
/// destination's process sets up its end and answers; the handle's sends
/// use the channel from then on ([`PersistentHandle::is_ready`]), ordinary
/// sends before.
///
/// # Panics
/// Aborts the job if `dest_pe` is no PE of the job.
#[doc(alias = "CmiCreatePersistent")]
pub fn create_persistent(dest_pe: usize, max_bytes: usize) -> PersistentHandle {
    pe::with(|pe| {
        pe.check_pe(dest_pe, "create_persistent to");
        let max_bytes = checked_max(pe, max_bytes, "create_persistent");
        let using = &pe.send.persistent;
        let remote = pe.job.local_pe(dest_pe).is_none();
        let handle = PersistentHandle(Rc::new(Handle {
            id: using.fresh_id(),
            dest_pe,
            max_bytes,
            remote,
            channel: Cell::new(0),
            closes: true,
            destroyed: Cell::new(false),
        }));
        using.track(&handle);
        if remote {
            let open = system::message(Kind::PersistentOpen, &[handle.0.id, max_bytes as u64], &[]);
            pe.send_runtime(dest_pe, open);
        }
        handle
    })
}

/// Opens a persistent channel to the calling PE for messages of up to
/// `max_bytes` bytes, header included, and returns the request the sender
/// makes its handle of ([`register_receive_persistent`];
/// `CmiCreateReceiverPersistent`).
#[doc(alias = "CmiCreateReceiverPersistent")]
pub fn create_receiver_persistent(max_bytes: usize) -> PersistentReq {
    pe::with(|pe| {
        let max_bytes = checked_max(pe, max_bytes, "create_receiver_persistent");
        let channel = receivers().open(pe.pe, max_bytes, job_key(pe));
        PersistentReq {
            pe: pe.pe,
            channel,
            max_bytes,
        }
    })
}

/// The sender's handle for a receiver's request
/// (`CmiRegisterReceivePersistent`): ready at once.
///
/// # Panics
/// Aborts the job if the request names no PE of the job.
#[doc(alias = "CmiRegisterReceivePersistent")]
pub fn register_receive_persistent(req: PersistentReq) -> PersistentHandle {
    pe::with(|pe| {
        pe.check_pe(req.pe, "register_receive_persistent for");
        let using = &pe.send.persistent;
        let handle = PersistentHandle(Rc::new(Handle {
            id: using.fresh_id(),
            dest_pe: req.pe,
            max_bytes: req.max_bytes.max(MSG_HEADER_SIZE),
            remote: pe.job.local_pe(req.pe).is_none(),
            channel: Cell::new(req.channel),
            closes: false,
            destroyed: Cell::new(false),
        }));
        using.track(&handle);
        handle
    })
}

/// Makes the calling PE's following sends use `handles`
/// (`CmiUsePersistentHandle`): a user send to PE `d` of at most the
/// handle's `max_bytes`, and longer than [`MIN_CHANNEL_MESSAGE`], goes on
/// the handle for `d` among them (one handle
/// for point-to-point sends, one per PE for a multicast's). An empty slice
/// ends that: sends go the ordinary way again.
///
/// # Panics
/// If a handle was destroyed.
#[doc(alias = "CmiUsePersistentHandle")]
pub fn use_persistent(handles: &[PersistentHandle]) {
    if let Some(h) = handles.iter().find(|h| h.is_destroyed()) {
        panic!("use_persistent: {h:?} was destroyed");
    }
    pe::with(|pe| {
        let using = &pe.send.persistent;
        *using.handles.borrow_mut() = handles.to_vec();
        using.on.set(!handles.is_empty());
    })
}

/// Destroys every persistent handle the calling PE made and has not
/// destroyed (`CmiDestroyAllPersistent`).
#[doc(alias = "CmiDestroyAllPersistent")]
pub fn destroy_all_persistent() {
    pe::with(|pe| {
        let made = std::mem::take(&mut *pe.send.persistent.made.borrow_mut());
        for h in made.iter().filter_map(Weak::upgrade) {
            destroy(pe, &h);
        }
    })
}

/// `max_bytes` of a channel `what` makes on `pe`: at least a header, and
/// aborts the job if longer than any message that crosses processes.
fn checked_max(pe: &Pe, max_bytes: usize, what: &str) -> usize {
    if max_bytes > MAX_CHANNEL_BYTES {
        crate::proc::exit::abort(&format!(
            "{what} on PE {}: a channel for messages of {max_bytes} bytes; the longest that crosses processes is {MAX_CHANNEL_BYTES}",
            pe.pe
        ));
    }
    max_bytes.max(MSG_HEADER_SIZE)
}

/// The job's identity, for channels opened by an in-process job.
fn job_key(pe: &Pe) -> usize {
    std::sync::Arc::as_ptr(&pe.job) as *const () as usize
}

/// Registers the persistent channels' messages on `pe`.
pub(crate) fn init_pe(pe: &Pe) {
    let d = &pe.dispatch;
    d.on(Kind::PersistentOpen, |pe, _, msg| on_open(pe, &msg));
    d.on(Kind::PersistentOpened, |pe, _, msg| on_opened(pe, &msg));
    d.on(Kind::PersistentClose, |pe, _, msg| on_close(pe, &msg));
}

/// The end of the calling PE's channels of an in-process job (the network's
/// channels stay open to the end of the process: frames may still come).
pub(crate) fn end_pe(pe: &Pe) {
    if pe.job.net.is_none() {
        receivers().close_all_of(job_key(pe), pe.pe);
    }
}

/// A sender asks for a channel to this PE.
fn on_open(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "persistent channel request");
    let (id, max_bytes) = (r.word(), r.word());
    let max_bytes = usize::try_from(max_bytes)
        .ok()
        .filter(|&n| n <= MAX_CHANNEL_BYTES)
        .unwrap_or_else(|| r.malformed(&format!("a channel for messages of {max_bytes} bytes")));
    let channel = receivers().open(pe.pe, max_bytes, job_key(pe));
    let answer = system::message(Kind::PersistentOpened, &[id, u64::from(channel)], &[]);
    pe.send_runtime(msg.src_pe(), answer);
}

/// The destination's answer to one of this PE's `create_persistent`s.
fn on_opened(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "persistent channel answer");
    let (id, channel) = (r.word(), r.word());
    let channel = u32::try_from(channel)
        .ok()
        .filter(|&c| c != 0)
        .unwrap_or_else(|| r.malformed(&format!("channel number {channel}")));
    let from = msg.src_pe();
    let handle = pe
        .send
        .persistent
        .made
        .borrow()
        .iter()
        .filter_map(Weak::upgrade)
        .find(|h| h.id == id);
    match handle {
        Some(h) if h.dest_pe != from => r.malformed(&format!(
            "PE {from} answers for a channel to PE {}",
            h.dest_pe
        )),
        Some(h) if !h.destroyed.get() => h.channel.set(channel),
        // Destroyed (or dropped) before the answer came: close it again.
        _ => close(pe, from, channel),
    }
}

/// The sender ended a channel to this PE (one it made: see `closes`).
fn on_close(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "persistent channel close");
    let channel = r.word();
    let closed = u32::try_from(channel).is_ok_and(|c| receivers().close(c, pe.pe));
    if !closed {
        r.malformed(&format!(
            "it closes channel {channel}, which is no open channel to PE {}",
            pe.pe
        ));
    }
}
