//! Converse messages: one contiguous, reference-counted buffer holding a fixed
//! header followed by the payload.
//!
//! # Layout
//!
//! ```text
//! | head (16 bytes) | MsgHeader (32 bytes, #[repr(C)]) | payload (len - 32 bytes) |
//! ^ the Message     ^ 16-byte aligned                  ^ 16-byte aligned
//!   points here
//! ```
//!
//! The bytes are 16-byte, 16-aligned chunks, so the header and the payload
//! are always 16-byte aligned; they follow a 16-byte head (a reference
//! count and the buffer's size, see [`crate::buffer`]). A [`Message`] is
//! 16 bytes, two registers: a pointer to its buffer (with two tag bits in
//! its low bits: shared, from the network), its length and its sender. The
//! buffer is either owned outright (the common case: reading and writing
//! cost no atomic operation) or shared (counted: broadcast copies, messages
//! received into a reusable buffer).
//!
//! # Invariants
//!
//! - `len >= MSG_HEADER_SIZE`.
//! - The header's `total_size` equals `len` whenever the runtime hands a message
//!   to a handler or a netmod ([`Message::from_bytes`] checks it for bytes that
//!   come from outside).
//! - The message's bytes are the buffer's first `len` bytes, and the buffer
//!   holds at least `len.div_ceil(16)` chunks (more when it was a reusable
//!   buffer's).
//! - Several messages may share one buffer: a broadcast shares one buffer
//!   among the receiving PEs. Shared bytes are never written: every mutable
//!   accessor first copies a shared message into a buffer of its own
//!   (copy-on-write), unless its count says it is the last holder, which
//!   then writes in place. So no owner can observe another's writes and no
//!   buffer is freed while a message in it lives.
//! - The sub-messages of a `multiple_send` bundle (`converse::cmi`) are
//!   copies, each in a buffer of its own: a handler gets a buffer it may
//!   write, and a message stays one pointer (a window into a larger buffer
//!   would need an offset, and the handle would no longer fit two
//!   registers).
//!
//! # Ownership (the Converse rules)
//!
//! A handler owns the message it receives: dropping it frees it (the Rust
//! spelling of `CmiFree`), sending it with an `*_and_free` call moves it on.
//! Plain sends take `&Message` and behave as if they copied.
//!
//! # Concurrency
//!
//! A `Message` is `Send` and `Sync`: it moves between PEs. The only shared
//! state is a shared buffer's count, which is atomic; the bytes of a shared
//! buffer are read-only.
//!
//! What only the runtime does to a message (stamping the sender, sharing,
//! bundling, receiving into an unzeroed buffer) is the [`MessageRaw`]
//! trait's, implemented here because it needs the private fields (see
//! [`crate::raw`] for why a trait).
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use bytemuck::{Pod, Zeroable};

use crate::buffer::{BufPtr, Head};
use crate::raw::{FLAG_BUNDLE, MessageRaw};

/// The unit of message storage: 16 bytes, 16-byte aligned.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(16))]
pub(crate) struct Chunk([u8; 16]);

const CHUNK: usize = std::mem::size_of::<Chunk>();

/// The fixed header at the start of every message.
///
/// Its layout is part of the future C ABI: C code sees it as the first
/// [`MSG_HEADER_SIZE`] bytes of the buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct MsgHeader {
    /// Index of the handler that runs when the message is delivered.
    pub handler: u32,
    /// Extra slot for layers above (Cld keeps the real handler here).
    pub info: u32,
    /// Header plus payload, in bytes. Set by the runtime (on allocation and
    /// on every send); a value written here by a program is replaced.
    pub total_size: u32,
    /// PE that sent the message: written by network layers when a message
    /// leaves its process. In-process sends keep the sender beside the buffer
    /// instead (see [`Message::src_pe`]), so that forwarding a message does not
    /// write to its bytes.
    pub src_pe: u32,
    /// Destination PE, or node for node sends: written by network layers.
    pub dest: u32,
    /// Routing of collective operations, set by the runtime: the root PE
    /// plus one of a broadcast, the root's position plus one in a multicast
    /// group, the PE-list digest of a reduction contribution; 0 otherwise.
    pub root: u32,
    /// Runtime flags (see the `FLAG_*` constants of [`crate::raw`]). Owned by
    /// the runtime: user sends clear them.
    pub flags: u32,
    /// Collective operation the message belongs to, set by the runtime: the
    /// multicast group or the reduction key. In a user message, the
    /// sender's number for it when the job records a trace (`+trace`), 0
    /// or stale otherwise.
    pub coll: u32,
}

/// Size of the message header in bytes: the payload starts this far into a
/// message. Equal on every platform.
#[doc(alias = "CmiMsgHeaderSizeBytes")]
pub const MSG_HEADER_SIZE: usize = std::mem::size_of::<MsgHeader>();

const _: () = assert!(MSG_HEADER_SIZE == 32 && MSG_HEADER_SIZE.is_multiple_of(CHUNK));

/// Largest message the runtime accepts (the header's size field is 32 bits).
pub const MAX_MESSAGE_SIZE: usize = u32::MAX as usize - CHUNK;

/// Why bytes could not be taken as a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsgError {
    /// Fewer bytes than a header.
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The header's `total_size` disagrees with the number of bytes.
    SizeMismatch {
        /// The header's `total_size`.
        header: u32,
        /// Bytes given.
        actual: usize,
    },
    /// Larger than [`MAX_MESSAGE_SIZE`].
    TooLarge {
        /// Bytes given.
        len: usize,
    },
}

impl fmt::Display for MsgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgError::TooShort { len } => write!(
                f,
                "message of {len} bytes is shorter than the {MSG_HEADER_SIZE}-byte header"
            ),
            MsgError::SizeMismatch { header, actual } => write!(
                f,
                "message header says {header} bytes but {actual} bytes were given"
            ),
            MsgError::TooLarge { len } => write!(
                f,
                "message of {len} bytes exceeds the largest message size {MAX_MESSAGE_SIZE}"
            ),
        }
    }
}

impl std::error::Error for MsgError {}

/// An owned Converse message: header plus payload in one buffer.
///
/// Dropping a `Message` frees it (`CmiFree`). Cloning copies an owned message
/// and shares a shared one (the first write to a shared message copies it).
///
/// A handler receives its message by value and owns it, so there is no
/// `CmiGrabBuffer`: in C the scheduler frees the buffer when the handler
/// returns unless the handler grabs it; here a handler that wants to keep
/// the message stores it (or forwards it with a `*_and_free` send), and one
/// that does not simply lets it drop.
#[doc(alias = "CmiGrabBuffer")]
pub struct Message {
    /// The buffer's head, with [`SHARED`] and [`FROM_NET`] in its low bits.
    tagged: NonNull<Head>,
    /// Header plus payload, in bytes (low half), and the PE that sent it
    /// (high half; 0 until sent). One field, not two: a struct of two
    /// scalars is passed and returned in two registers, and setting the
    /// sender writes the same 8 bytes a later copy reads (two 4-byte
    /// fields, written apart and copied as one 16-byte load, stalled every
    /// send on store forwarding).
    meta: u64,
}

/// A message's `meta`: its length and its sender.
#[inline]
fn meta(len: u32, src: u32) -> u64 {
    u64::from(len) | (u64::from(src) << 32)
}

/// Tag: the message holds one counted reference to a shared buffer (else
/// it owns its buffer outright).
const SHARED: usize = 1;
/// Tag: this handle was made by the network layer from received bytes and
/// not yet taken by its PE: the bytes still count against the process's
/// receive budget (the core's `rt::network`). A mark on the handle, not in
/// the buffer: copies and forwards never carry it.
const FROM_NET: usize = 2;

const _: () = assert!(std::mem::size_of::<Message>() == 16);
const _: () = assert!(std::mem::size_of::<Option<Message>>() == 16);

// SAFETY: a message owns its buffer outright, or holds a counted reference
// to a shared one whose bytes nobody writes and whose count is atomic: it
// may move to, and be read from, any thread, as a `Box<[u8]>` or an
// `Arc<[u8]>` may.
unsafe impl Send for Message {}
// SAFETY: as above; `&Message` only reads the bytes, or clones (an atomic
// increment, or a copy).
unsafe impl Sync for Message {}

impl Drop for Message {
    #[inline]
    fn drop(&mut self) {
        let buf = self.buf();
        // SAFETY: the message holds the buffer (outright or by one
        // reference) and is going away.
        unsafe {
            if self.is_shared() {
                buf.release();
            } else {
                buf.free();
            }
        }
    }
}

impl Clone for Message {
    /// Copies an owned message; shares a shared one. The network mark stays
    /// with the original handle.
    #[inline]
    fn clone(&self) -> Message {
        if self.is_shared() {
            // SAFETY: we hold a reference to the live buffer.
            unsafe { self.buf().acquire() };
            Message {
                tagged: self.buf().tagged(SHARED),
                meta: self.meta,
            }
        } else {
            self.to_owned_copy()
        }
    }
}

#[inline]
fn chunks_for(bytes: usize) -> usize {
    bytes.div_ceil(CHUNK)
}

/// What receives straight into a buffer (a `read`): it gets the space as
/// uninitialized memory and returns the part of it that it filled, from its
/// start (`rustix::io::read`'s first result), or an error.
pub type ReadInto<'r, E> =
    &'r mut dyn for<'a> FnMut(&'a mut [MaybeUninit<u8>]) -> Result<&'a mut [u8], E>;

/// Runs `read` on `space`; returns how many bytes it filled, which are then
/// initialized (it returned them as a `&mut [u8]`).
///
/// # Panics
/// If `read` returns a slice that is not the start of `space`.
pub fn receive_into<E>(space: &mut [MaybeUninit<u8>], read: ReadInto<'_, E>) -> Result<usize, E> {
    let (start, len) = (space.as_ptr().cast::<u8>(), space.len());
    let filled = read(space)?;
    assert!(
        std::ptr::eq(filled.as_ptr(), start) && filled.len() <= len,
        "receive: the filled part is not the start of the space"
    );
    Ok(filled.len())
}

/// A message being received from outside, written front to back (by the
/// network's reassembly) without zeroing its buffer first. Bytes `0..init`
/// are initialized; it becomes a [`Message`] once all are.
pub struct MessageBuf {
    /// Its buffer, held alone: a new one, or a [`ReusableBuffer`]'s that no
    /// message used any more (its bytes initialized already, with an
    /// earlier message's; this holds its only reference while the bytes
    /// are written).
    buf: BufPtr,
    /// The buffer is a reusable buffer's (a counted reference), not a new
    /// one owned outright.
    reused: bool,
    len: usize,
    /// Bytes from the start known to be initialized.
    init: usize,
}

// SAFETY: the `MessageBuf` holds its buffer alone (a new one, or the only
// reference to a reusable one, checked when it was made): moving it to
// another thread moves that ownership with it, as for a `Box`.
unsafe impl Send for MessageBuf {}

impl Drop for MessageBuf {
    fn drop(&mut self) {
        // SAFETY: held alone (see the type); not used again.
        unsafe {
            if self.reused {
                self.buf.release();
            } else {
                self.buf.free();
            }
        }
    }
}

impl MessageBuf {
    /// A buffer for a message of `len` bytes.
    ///
    /// # Panics
    /// If `len` is shorter than a header or longer than the largest message.
    #[inline]
    pub fn new(len: usize) -> MessageBuf {
        assert!(
            (MSG_HEADER_SIZE..=MAX_MESSAGE_SIZE).contains(&len),
            "MessageBuf::new({len})"
        );
        let n = chunks_for(len);
        let buf = BufPtr::alloc_uninit(n);
        // The last chunk's bytes past `len` are never written: zero them,
        // so that every chunk is initialized once `len` bytes are.
        // SAFETY: chunk `n - 1` is in the new buffer, which is ours.
        unsafe { buf.data().add(n - 1).write(Chunk([0; CHUNK])) };
        MessageBuf {
            buf,
            reused: false,
            len,
            init: 0,
        }
    }

    /// The buffer's first byte, writable (as `MaybeUninit`: a fresh
    /// buffer's bytes are not initialized yet).
    #[inline]
    fn start(&mut self) -> *mut MaybeUninit<u8> {
        // Ours alone while receiving (a new buffer, or one
        // `ReusableBuffer::receive` checked unique and gave its reference to).
        self.buf.data_uninit()
    }

    /// The length of the message it receives.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a message has at least its header.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes `bytes` at `at`, which must be at most the initialized
    /// length (the buffer is written front to back).
    ///
    /// # Panics
    /// If `at` is past the initialized bytes or the bytes do not fit.
    #[cfg(test)]
    pub fn write_at(&mut self, at: usize, bytes: &[u8]) {
        // SAFETY: a slice is valid for reads of its length.
        unsafe { self.write_raw_at(at, bytes.as_ptr(), bytes.len()) }
    }

    /// Writes the `n` bytes at `src` at `at`, which must be at most the
    /// initialized length (the buffer is written front to back; the tests'
    /// `write_at` takes a slice instead).
    ///
    /// # Safety
    /// `src` must be valid for reads of `n` bytes (it may be memory that
    /// another process writes: each byte is read once, by this copy).
    ///
    /// # Panics
    /// If `at` is past the initialized bytes or the bytes do not fit.
    #[inline]
    pub unsafe fn write_raw_at(&mut self, at: usize, src: *const u8, n: usize) {
        assert!(
            at <= self.init && n <= self.len - at,
            "MessageBuf::write_at"
        );
        let start = self.start();
        // SAFETY: `at + n <= len <= chunks * CHUNK` bytes of the buffer
        // (checked); `MaybeUninit` memory may be written freely; `src` is
        // readable for `n` bytes (the caller's promise) and cannot overlap
        // a buffer we own uniquely.
        unsafe {
            crate::copy::copy_nonoverlapping(src, start.cast::<u8>().add(at), n);
        }
        self.init = self.init.max(at + n);
    }

    /// Receives bytes `at..` straight into the message (a `read` into it),
    /// without zeroing them first: `read` gets bytes `at..len` as
    /// uninitialized memory and returns the part it filled, which must
    /// start where the space it got starts (as `rustix::io::read`'s first
    /// result does). Returns how many bytes it filled. Bytes after those
    /// count as unwritten again, whatever `read` did to them.
    ///
    /// # Panics
    /// If `at` is past the initialized bytes, or `read` returns a slice
    /// that is not the start of its space.
    #[inline]
    pub fn receive_at<E>(&mut self, at: usize, read: ReadInto<'_, E>) -> Result<usize, E> {
        assert!(at <= self.init, "MessageBuf::receive_at");
        let start = self.start();
        // SAFETY: bytes `at..len` lie in the buffer (`at <= init <= len`),
        // which is ours alone (borrowed mutably); any byte is a valid
        // `MaybeUninit<u8>`.
        let space = unsafe { std::slice::from_raw_parts_mut(start.add(at), self.len - at) };
        // `read` returned a `&mut [u8]` over bytes `at..at + n` of our
        // buffer: they are initialized. Later ones may not be (`read` had
        // them as `MaybeUninit`), so `init` ends here.
        let n = receive_into(space, read)?;
        self.init = at + n;
        Ok(n)
    }

    /// The whole message.
    ///
    /// # Panics
    /// If some of its bytes were never written.
    #[inline]
    pub fn finish(self) -> Message {
        self.finish_reusable().0
    }

    /// The whole message and, if it was received into a
    /// [`ReusableBuffer`], that buffer again (for its owner to keep: it can
    /// take the next message once this one is gone).
    ///
    /// # Panics
    /// If some of its bytes were never written.
    #[inline]
    pub fn finish_reusable(self) -> (Message, Option<ReusableBuffer>) {
        assert_eq!(
            self.init, self.len,
            "MessageBuf::finish before the last byte"
        );
        // Bytes `0..len` are initialized (checked), and the rest of the last
        // chunk too (zeroed in `new`, or a reused buffer's earlier bytes):
        // the message's chunks all hold valid values (plain bytes).
        let this = std::mem::ManuallyDrop::new(self);
        let (tag, reusable) = if this.reused {
            // The message and the reusable buffer share it.
            // SAFETY: we hold the buffer's only reference.
            unsafe { this.buf.acquire() };
            (SHARED, Some(ReusableBuffer(this.buf)))
        } else {
            (0, None)
        };
        let msg = Message {
            tagged: this.buf.tagged(tag),
            meta: meta(this.len as u32, 0),
        };
        (msg, reusable)
    }
}

/// A message buffer received into again and again (a persistent channel's
/// pre-agreed buffer): [`ReusableBuffer::receive`] writes the next message
/// into it, with no allocation, once no message made from it lives.
///
/// A message received into it shares the buffer with it (it is a shared
/// message: [`Message::is_shared`] is true, and its first write copies it,
/// as for a broadcast copy), so the buffer is busy exactly while that
/// message, or a clone of it, lives.
pub struct ReusableBuffer(BufPtr);

// SAFETY: it holds one counted reference to a buffer, whose bytes it writes
// only while that reference is the only one (`receive`): as `Arc<[u8]>`.
unsafe impl Send for ReusableBuffer {}
// SAFETY: as above; `&ReusableBuffer` only reads its capacity or clones.
unsafe impl Sync for ReusableBuffer {}

impl Clone for ReusableBuffer {
    fn clone(&self) -> ReusableBuffer {
        // SAFETY: we hold a reference to the live buffer.
        unsafe { self.0.acquire() };
        ReusableBuffer(self.0)
    }
}

impl Drop for ReusableBuffer {
    fn drop(&mut self) {
        // SAFETY: we hold a reference and give it up.
        unsafe { self.0.release() }
    }
}

impl ReusableBuffer {
    /// A zeroed buffer for messages of up to `capacity` bytes (header
    /// included).
    ///
    /// # Panics
    /// If `capacity` is shorter than a header or longer than the largest
    /// message.
    pub fn new(capacity: usize) -> ReusableBuffer {
        assert!(
            (MSG_HEADER_SIZE..=MAX_MESSAGE_SIZE).contains(&capacity),
            "ReusableBuffer::new({capacity})"
        );
        ReusableBuffer(BufPtr::alloc_zeroed(chunks_for(capacity)))
    }

    /// The longest message it takes, in bytes.
    pub fn capacity(&self) -> usize {
        // SAFETY: we hold a reference to the live buffer.
        unsafe { self.0.chunks() * CHUNK }
    }

    /// True if no message made from it lives: the next
    /// [`receive`](ReusableBuffer::receive) succeeds.
    pub fn is_free(&mut self) -> bool {
        // SAFETY: we hold a reference to the live buffer.
        unsafe { self.0.is_unique() }
    }

    /// A [`MessageBuf`] of `len` bytes in this buffer, if no message made
    /// from it lives and `len` fits; otherwise the buffer back.
    pub fn receive(mut self, len: usize) -> Result<MessageBuf, ReusableBuffer> {
        if len < MSG_HEADER_SIZE || len > self.capacity() {
            return Err(self);
        }
        // Ours alone: no message made from it lives, so nothing else reads
        // it while it is written.
        if !self.is_free() {
            return Err(self);
        }
        // Our reference moves into the `MessageBuf`.
        let this = std::mem::ManuallyDrop::new(self);
        Ok(MessageBuf {
            buf: this.0,
            reused: true,
            len,
            init: 0,
        })
    }
}

impl Message {
    /// Allocates a zeroed message with room for `payload_len` payload bytes,
    /// its header's size field set and its handler set to `handler`.
    ///
    /// # Panics
    /// If the message would exceed [`MAX_MESSAGE_SIZE`].
    #[inline]
    pub fn new(handler: usize, payload_len: usize) -> Message {
        let size = MSG_HEADER_SIZE.checked_add(payload_len).unwrap_or_else(|| {
            panic!("Message::new: a payload of {payload_len} bytes exceeds the largest message {MAX_MESSAGE_SIZE}")
        });
        let mut msg = Message::alloc(size);
        msg.set_handler(handler);
        msg
    }

    /// Allocates a zeroed message of `size` bytes *including* the header, as
    /// `CmiAlloc(size)` does; the payload is `size - MSG_HEADER_SIZE` bytes.
    ///
    /// # Panics
    /// If `size < MSG_HEADER_SIZE` or `size > MAX_MESSAGE_SIZE`.
    #[doc(alias = "CmiAlloc")]
    #[inline]
    pub fn alloc(size: usize) -> Message {
        assert!(
            size >= MSG_HEADER_SIZE,
            "Message::alloc({size}): a message holds at least its {MSG_HEADER_SIZE}-byte header"
        );
        assert!(
            size <= MAX_MESSAGE_SIZE,
            "Message::alloc({size}): larger than the largest message {MAX_MESSAGE_SIZE}"
        );
        let mut msg = Message {
            tagged: BufPtr::alloc_zeroed(chunks_for(size)).tagged(0),
            meta: meta(size as u32, 0),
        };
        msg.header_mut().total_size = size as u32;
        msg
    }

    /// A new message for `handler` whose payload is a copy of `payload`.
    /// Its bytes are written once: the payload is copied into a buffer not
    /// zeroed first (only the header and the last chunk's tail are), which
    /// for 4 MiB saves a pass as long as the copy (`Message::new` and a
    /// copy into it zero the payload, then overwrite it).
    ///
    /// # Panics
    /// If the message would be larger than [`MAX_MESSAGE_SIZE`].
    #[inline]
    pub fn from_payload(handler: usize, payload: &[u8]) -> Message {
        let size = MSG_HEADER_SIZE
            .checked_add(payload.len())
            .filter(|&size| size <= MAX_MESSAGE_SIZE)
            .unwrap_or_else(|| {
                panic!(
                    "Message::from_payload: a payload of {} bytes exceeds the largest message {MAX_MESSAGE_SIZE}",
                    payload.len()
                )
            });
        let n = chunks_for(size);
        let buf = BufPtr::alloc_uninit(n);
        // SAFETY: the new buffer holds `n >= 2` chunks, ours alone. The last
        // chunk is zeroed first, then the header's chunks (a zeroed header),
        // then the payload copied after the header (`size <= n * CHUNK`,
        // from another allocation): every chunk is initialized.
        unsafe {
            buf.data().add(n - 1).write(Chunk([0; CHUNK]));
            buf.data().cast::<MsgHeader>().write(MsgHeader::zeroed());
            crate::copy::copy_nonoverlapping(
                payload.as_ptr(),
                buf.data().cast::<u8>().add(MSG_HEADER_SIZE),
                payload.len(),
            );
        }
        let mut msg = Message {
            tagged: buf.tagged(0),
            meta: meta(size as u32, 0),
        };
        msg.header_mut().total_size = size as u32;
        msg.set_handler(handler);
        msg
    }

    /// Takes `bytes` (header and payload, as produced by [`Message::as_bytes`]
    /// or a C sender) as a message, checking that they hold a whole header and
    /// that the header's size field matches. Never trusts the bytes further.
    pub fn from_bytes(bytes: &[u8]) -> Result<Message, MsgError> {
        if bytes.len() < MSG_HEADER_SIZE {
            return Err(MsgError::TooShort { len: bytes.len() });
        }
        if bytes.len() > MAX_MESSAGE_SIZE {
            return Err(MsgError::TooLarge { len: bytes.len() });
        }
        let header: MsgHeader = bytemuck::pod_read_unaligned(&bytes[..MSG_HEADER_SIZE]);
        if header.total_size as usize != bytes.len() {
            return Err(MsgError::SizeMismatch {
                header: header.total_size,
                actual: bytes.len(),
            });
        }
        Ok(Message::copy_of(bytes, 0))
    }

    /// Frees the message. The same as dropping it; here so that readers of the
    /// manual find `CmiFree`.
    #[doc(alias = "CmiFree")]
    #[inline]
    pub fn free(self) {}

    /// Header plus payload, in bytes.
    #[allow(clippy::len_without_is_empty)] // never empty: the header is always there
    #[inline]
    pub fn len(&self) -> usize {
        self.len32() as usize
    }

    /// [`Message::len`] as its field holds it.
    #[inline]
    fn len32(&self) -> u32 {
        self.meta as u32
    }

    /// The sender as its field holds it.
    #[inline]
    fn src32(&self) -> u32 {
        (self.meta >> 32) as u32
    }

    /// Payload length in bytes.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.len() - MSG_HEADER_SIZE
    }

    /// The message's buffer, without the tags.
    #[inline]
    fn buf(&self) -> BufPtr {
        BufPtr::untag(self.tagged)
    }

    /// A new owned message holding a copy of `bytes` (a whole message,
    /// `bytes.len() >= MSG_HEADER_SIZE`) sent by `src`: one copy, no zeroing
    /// first but for the last chunk's tail.
    #[inline]
    fn copy_of(bytes: &[u8], src: u32) -> Message {
        // A whole message: the chunk count below is at least 2 (and the
        // length fits the `u32` field).
        assert!((MSG_HEADER_SIZE..=MAX_MESSAGE_SIZE).contains(&bytes.len()));
        let n = chunks_for(bytes.len());
        let buf = BufPtr::alloc_uninit(n);
        // SAFETY: the new buffer holds `n` chunks, ours alone; the last one
        // is zeroed first, then `bytes` (at most `n * CHUNK` long, from
        // another allocation) written from the start, so every chunk is
        // initialized.
        unsafe {
            buf.data().add(n - 1).write(Chunk([0; CHUNK]));
            crate::copy::copy_nonoverlapping(bytes.as_ptr(), buf.data().cast::<u8>(), bytes.len());
        }
        Message {
            tagged: buf.tagged(0),
            meta: meta(bytes.len() as u32, src),
        }
    }

    /// The whole message, header first.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the buffer holds at least `len` initialized bytes (the
        // type's invariants) and lives as long as `self`; shared bytes are
        // never written, owned ones only through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.buf().data().cast::<u8>(), self.len()) }
    }

    /// The whole message, header first, for writing. Copies the message first
    /// if its buffer is shared.
    #[inline]
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        if self.is_shared() {
            // SAFETY: we hold a reference to the live buffer.
            if unsafe { self.buf().is_unique() } {
                // The last reference (say, the last PE's copy of a
                // broadcast): ours alone, no copy needed. The Acquire load of
                // the count orders the other holders' reads before our writes.
                self.tagged = self.tagged.map_addr(|a| {
                    std::num::NonZeroUsize::new(a.get() & !SHARED).expect("a non-null address")
                });
            } else {
                self.unshare();
            }
        }
        // SAFETY: as in `as_bytes`; the buffer is now ours outright, and
        // borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.buf().data().cast::<u8>(), self.len()) }
    }

    /// Copy-on-write: the message moves to a buffer of its own.
    #[cold]
    #[inline(never)]
    fn unshare(&mut self) {
        let own = Message::copy_of(self.as_bytes(), self.src32());
        // Keeps the network mark, if any: it is this handle's.
        let from_net = self.tagged.addr().get() & FROM_NET;
        let old = std::mem::replace(self, own);
        self.tagged = self.buf().tagged(from_net);
        drop(old);
    }

    /// The header.
    #[inline]
    pub fn header(&self) -> &MsgHeader {
        // SAFETY: the buffer always holds the header (its first 32 bytes,
        // initialized) and lives as long as `self`; its chunks are 16-aligned
        // plain bytes, so they are a valid `MsgHeader` (32 bytes, align 4).
        // Every send and delivery reads the header: this keeps it one load.
        unsafe { &*self.buf().data().cast::<MsgHeader>() }
    }

    /// The header for writing if this handle owns its buffer outright;
    /// `None` for a shared buffer (nothing is copied). One test, no slice:
    /// for writes on every message (the trace's flow numbers).
    #[inline]
    pub fn owned_header_mut(&mut self) -> Option<&mut MsgHeader> {
        if self.is_shared() {
            return None;
        }
        // SAFETY: as in `header`; the buffer is ours outright (not shared)
        // and borrowed mutably through `self`.
        Some(unsafe { self.buf().data_nonnull().cast::<MsgHeader>().as_mut() })
    }

    /// The header, for writing (copies a shared buffer first).
    #[inline]
    pub fn header_mut(&mut self) -> &mut MsgHeader {
        bytemuck::from_bytes_mut(&mut self.as_bytes_mut()[..MSG_HEADER_SIZE])
    }

    /// The payload (16-byte aligned).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.as_bytes()[MSG_HEADER_SIZE..]
    }

    /// The payload for writing (16-byte aligned; copies a shared buffer first).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.as_bytes_mut()[MSG_HEADER_SIZE..]
    }

    /// The handler index stored in the header.
    #[doc(alias = "CmiGetHandler")]
    #[inline]
    pub fn handler(&self) -> usize {
        self.header().handler as usize
    }

    /// Stores handler index `handler` in the header.
    ///
    /// # Panics
    /// If `handler` does not fit the header's 32-bit field.
    #[doc(alias = "CmiSetHandler")]
    #[inline]
    pub fn set_handler(&mut self, handler: usize) {
        self.header_mut().handler = u32::try_from(handler).expect("handler index exceeds u32");
    }

    /// The extra info slot of the header (Cld keeps the real handler here).
    #[doc(alias = "CmiGetInfo")]
    #[inline]
    pub fn info(&self) -> u32 {
        self.header().info
    }

    /// Sets the extra info slot of the header.
    #[doc(alias = "CmiSetInfo")]
    #[inline]
    pub fn set_info(&mut self, info: u32) {
        self.header_mut().info = info;
    }

    /// The PE that sent this message (0 before it is sent).
    #[inline]
    pub fn src_pe(&self) -> usize {
        self.src32() as usize
    }

    /// The writing part of [`MessageRaw::stamp_user`]: size field true,
    /// runtime flags clear, and with them the collective field (a group or
    /// reduction key, which a user message's reader would take for a
    /// trace's flow number).
    #[cold]
    #[inline(never)]
    fn restamp_header(&mut self) {
        let len = self.len32();
        let header = self.header_mut();
        header.total_size = len;
        if header.flags != 0 {
            header.flags = 0;
            header.coll = 0;
        }
    }

    /// A copy of this message in a buffer of its own (what a plain send
    /// sends). Copies the bytes once, without zeroing first.
    #[inline]
    pub fn to_owned_copy(&self) -> Message {
        Message::copy_of(self.as_bytes(), self.src32())
    }

    /// True when this message's buffer is shared (read-only until written).
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.tagged.addr().get() & SHARED != 0
    }

    /// A copy of the sub-message that starts `offset` bytes into the
    /// payload of this bundle, in a buffer of its own.
    ///
    /// Returns an error if the bytes there do not hold a valid message.
    fn sub_message(&self, offset: usize) -> Result<Message, MsgError> {
        debug_assert_eq!(offset % CHUNK, 0);
        let payload = self.payload();
        let rest = payload.get(offset..).unwrap_or(&[]);
        if rest.len() < MSG_HEADER_SIZE {
            return Err(MsgError::TooShort { len: rest.len() });
        }
        let header: MsgHeader = bytemuck::pod_read_unaligned(&rest[..MSG_HEADER_SIZE]);
        let size = header.total_size as usize;
        if size < MSG_HEADER_SIZE {
            return Err(MsgError::TooShort { len: size });
        }
        if size > rest.len() {
            return Err(MsgError::SizeMismatch {
                header: header.total_size,
                actual: rest.len(),
            });
        }
        Ok(Message::copy_of(&rest[..size], self.src32()))
    }
}

// Hidden from the documentation: `Message`'s page (and `converse::Message`'s,
// which re-exports it) shows the user's API only; the trait's own page says
// what implements it.
#[doc(hidden)]
/// A copy of `msg`, whose buffer other handles share, in a buffer of its
/// own (the rare path of `into_c_ptr`).
#[cold]
#[inline(never)]
fn unshared(msg: Message) -> Message {
    msg.to_owned_copy()
}

impl MessageRaw for Message {
    #[inline]
    fn mark_from_net(&mut self) {
        self.tagged = self.tagged.map_addr(|a| a | FROM_NET);
    }

    #[inline]
    fn take_net_mark(&mut self) -> bool {
        let marked = self.tagged.addr().get() & FROM_NET != 0;
        if marked {
            let shared = self.tagged.addr().get() & SHARED;
            self.tagged = self.buf().tagged(shared);
        }
        marked
    }

    #[inline]
    fn set_src_pe(&mut self, pe: usize) {
        self.meta = meta(self.len32(), pe as u32);
    }

    unsafe fn filled_by<E>(
        len: usize,
        fill: impl FnOnce(*mut u8, usize) -> Result<(), E>,
    ) -> Result<Message, E> {
        let mut buf = MessageBuf::new(len);
        fill(buf.start().cast::<u8>(), len)?;
        // `fill` wrote bytes `0..len` (the caller's promise): what `finish`
        // relies on to take the buffer as initialized.
        buf.init = len;
        Ok(buf.finish())
    }

    fn to_shared_with_header(&self, header: &MsgHeader) -> Message {
        let mut copy = Message::copy_of(self.as_bytes(), self.src32());
        *copy.header_mut() = *header;
        copy.into_shared()
    }

    #[inline]
    fn into_shared(self) -> Message {
        // An owned buffer's count is 1 already: sharing it is the tag.
        let this = std::mem::ManuallyDrop::new(self);
        Message {
            tagged: this.tagged.map_addr(|a| a | SHARED),
            meta: this.meta,
        }
    }

    fn bundle(handler: usize, parts: &[&[u8]]) -> Message {
        let payload: usize = parts.iter().map(|p| chunks_for(p.len()) * CHUNK).sum();
        let mut msg = Message::new(handler, payload);
        msg.header_mut().flags |= FLAG_BUNDLE;
        let out = msg.payload_mut();
        let mut at = 0;
        for part in parts {
            debug_assert!(part.len() >= MSG_HEADER_SIZE, "bundle parts are messages");
            out[at..at + part.len()].copy_from_slice(part);
            // The receiver splits the bundle by each part's size field: make
            // it the part's real length, whatever the sender's header said.
            let size_at = at + std::mem::offset_of!(MsgHeader, total_size);
            out[size_at..size_at + 4].copy_from_slice(&(part.len() as u32).to_ne_bytes());
            // Runtime flags belong to the part's earlier journey (say, a
            // broadcast copy being passed on), not to this one, and so
            // does the collective field (a group key, or a trace's flow
            // number for the earlier send).
            let flags_at = at + std::mem::offset_of!(MsgHeader, flags);
            out[flags_at..flags_at + 4].fill(0);
            let coll_at = at + std::mem::offset_of!(MsgHeader, coll);
            out[coll_at..coll_at + 4].fill(0);
            at += chunks_for(part.len()) * CHUNK;
        }
        msg
    }

    // Always inlined: it runs once per message a C handler gets, and as a
    // call its prologue and epilogue cost more than its body (callgrind);
    // the copy of a shared buffer, rare, stays out of line.
    #[inline(always)]
    fn into_c_ptr(mut self) -> NonNull<u8> {
        // SAFETY: the message holds a reference to the live buffer.
        if self.is_shared() && !unsafe { self.buf().is_unique() } {
            self = unshared(self);
        }
        // Owned now, or the one holder of a shared buffer (count 1 either
        // way): writing the header is the holder's right.
        self.fix_total_size();
        // SAFETY: live, and this handle its one holder (above).
        unsafe { self.buf().set_c_len(self.len()) };
        let this = std::mem::ManuallyDrop::new(self);
        debug_assert!(
            this.tagged.addr().get() & FROM_NET == 0,
            "a message reaches C after its PE took it"
        );
        // SAFETY: a buffer's data is one chunk past its (non-null) head.
        unsafe { NonNull::new_unchecked(this.buf().data().cast::<u8>()) }
    }

    #[inline]
    unsafe fn from_c_ptr(ptr: NonNull<u8>, len: usize) -> Result<Message, usize> {
        // SAFETY: a live buffer's data, with a reference (the caller's
        // promise).
        let buf = unsafe { BufPtr::from_data(ptr) };
        // SAFETY: as above.
        let capacity = unsafe { buf.chunks() } * CHUNK;
        if len < MSG_HEADER_SIZE || len > capacity {
            return Err(capacity);
        }
        // SAFETY: as above.
        let shared = if unsafe { buf.is_unique() } {
            0
        } else {
            SHARED
        };
        Ok(Message {
            tagged: buf.tagged(shared),
            meta: meta(len as u32, 0),
        })
    }

    #[inline]
    fn fix_total_size(&mut self) {
        if self.header().total_size != self.len32() {
            self.header_mut().total_size = self.len32();
        }
    }

    #[inline]
    fn stamp_user(&mut self, pe: usize) {
        self.meta = meta(self.len32(), pe as u32);
        let header = self.header();
        // One read of the header; forwarding a message unchanged writes
        // nothing.
        if header.total_size != self.len32() || header.flags != 0 {
            self.restamp_header();
        }
    }

    fn unbundle(self) -> Result<Vec<Message>, MsgError> {
        let mut out = Vec::new();
        let mut offset = 0;
        while offset < self.payload_len() {
            let sub = self.sub_message(offset)?;
            offset += chunks_for(sub.len()) * CHUNK;
            out.push(sub);
        }
        Ok(out)
    }
}

impl AsRef<[u8]> for Message {
    /// The whole message, header first.
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("handler", &self.header().handler)
            .field("len", &self.len32())
            .field("src_pe", &self.src32())
            .field("shared", &self.is_shared())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_payload_is_new_and_a_copy_at_every_length() {
        // Around the chunk boundaries, each in the block just freed by a
        // dirty message of its size (what is not zeroed must not show).
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut dirty = Message::new(0, len);
            dirty.as_bytes_mut().fill(0xAB);
            drop(dirty);
            let got = Message::from_payload(9, &payload);
            let mut want = Message::new(9, len);
            want.payload_mut().copy_from_slice(&payload);
            assert_eq!(got.as_bytes(), want.as_bytes(), "payload of {len} bytes");
            assert_eq!(*got.header(), *want.header());
        }
    }

    /// A message of `payload` received into `buf` as the network would.
    fn receive_into_reusable(
        buf: ReusableBuffer,
        payload: &[u8],
    ) -> Result<(Message, ReusableBuffer), ReusableBuffer> {
        let bytes = Message::from_payload(3, payload).as_bytes().to_vec();
        let mut space = buf.receive(bytes.len())?;
        space.write_at(0, &bytes[..10]);
        space.write_at(10, &bytes[10..]);
        let (msg, again) = space.finish_reusable();
        Ok((msg, again.expect("received into a reusable buffer")))
    }

    #[test]
    fn reusable_buffer_takes_one_message_at_a_time_and_no_allocation() {
        let buf = ReusableBuffer::new(MSG_HEADER_SIZE + 40);
        assert_eq!(buf.capacity(), MSG_HEADER_SIZE + 48);
        let (first, buf) = receive_into_reusable(buf, b"first message").ok().unwrap();
        let addr = first.as_bytes().as_ptr();
        assert_eq!(first.payload(), b"first message");
        assert!(first.is_shared());
        // Busy while the message (or a clone) lives.
        let clone = first.clone();
        drop(first);
        let buf = receive_into_reusable(buf, b"x")
            .err()
            .expect("still in use");
        drop(clone);
        // Free again: the next message lands at the same address.
        let (second, mut buf) = receive_into_reusable(buf, b"second").ok().unwrap();
        assert_eq!(second.as_bytes().as_ptr(), addr);
        assert_eq!(second.payload(), b"second");
        assert_eq!(second.len(), MSG_HEADER_SIZE + 6);
        // A write copies the message out of the shared buffer first.
        let mut written = second.clone();
        written.payload_mut()[0] = b'S';
        assert_eq!(second.payload(), b"second");
        assert_ne!(written.as_bytes().as_ptr(), addr);
        drop((second, written));
        assert!(buf.is_free());
        // Too long for it: refused, not truncated.
        let long = vec![7u8; 49];
        assert!(receive_into_reusable(buf, &long).is_err());
    }

    #[test]
    fn header_is_32_bytes_and_payload_aligned() {
        assert_eq!(MSG_HEADER_SIZE, 32);
        let m = Message::new(5, 3);
        assert_eq!(m.len(), 35);
        assert_eq!(m.payload_len(), 3);
        assert_eq!(m.header().total_size, 35);
        assert_eq!(m.handler(), 5);
        assert_eq!(m.payload().as_ptr() as usize % 16, 0);
        assert_eq!(m.as_bytes().as_ptr() as usize % 16, 0);
    }

    #[test]
    fn alloc_includes_header() {
        let m = Message::alloc(MSG_HEADER_SIZE + 400);
        assert_eq!(m.payload_len(), 400);
        assert!(m.payload().iter().all(|&b| b == 0));
    }

    #[test]
    #[should_panic(expected = "at least its 32-byte header")]
    fn alloc_smaller_than_header_panics() {
        let _ = Message::alloc(10);
    }

    #[test]
    fn clone_of_shared_is_copy_on_write() {
        let owned = Message::from_payload(1, b"hello");
        let copy = owned.clone();
        assert!(!copy.is_shared() && !owned.is_shared());
        let mut a = owned.into_shared();
        let b = a.clone();
        assert!(a.is_shared() && b.is_shared());
        a.payload_mut()[0] = b'j';
        assert_eq!(a.payload(), b"jello");
        assert_eq!(b.payload(), b"hello");
        assert!(!a.is_shared() && b.is_shared());
    }

    #[test]
    fn from_bytes_checks_length_and_size_field() {
        assert_eq!(
            Message::from_bytes(&[0u8; 5]).unwrap_err(),
            MsgError::TooShort { len: 5 }
        );
        let m = Message::from_payload(7, b"abc");
        let mut bytes = m.as_bytes().to_vec();
        let back = Message::from_bytes(&bytes).unwrap();
        assert_eq!(back.as_bytes(), m.as_bytes());
        bytes.push(0);
        assert_eq!(
            Message::from_bytes(&bytes).unwrap_err(),
            MsgError::SizeMismatch {
                header: 35,
                actual: 36
            }
        );
    }

    #[test]
    fn shared_copy_with_new_header() {
        let m = Message::from_payload(3, &[7u8; 50]);
        let mut h = *m.header();
        h.flags = 9;
        h.root = 4;
        let c = m.to_shared_with_header(&h);
        assert!(c.is_shared());
        assert_eq!(c.header(), &h);
        assert_eq!(c.payload(), m.payload());
        assert_eq!(m.header().flags, 0);
    }

    #[test]
    fn only_an_owned_buffer_lends_its_header() {
        let mut m = Message::from_payload(3, &[7u8; 20]);
        m.owned_header_mut().expect("owned").coll = 41;
        assert_eq!(m.header().coll, 41);
        let h = *m.header();
        let mut shared = m.to_shared_with_header(&h);
        let other = shared.clone();
        assert!(shared.owned_header_mut().is_none(), "no copy, no write");
        assert!(shared.is_shared() && other.is_shared());
        assert_eq!(other.header().coll, 41);
    }

    #[test]
    fn info_slot_round_trips() {
        let mut m = Message::new(1, 0);
        m.set_info(77);
        assert_eq!(m.info(), 77);
    }

    #[test]
    fn bundle_round_trips_into_buffers_of_their_own() {
        let a = Message::from_payload(3, b"first");
        let b = Message::from_payload(4, &[9u8; 40]);
        let c = Message::new(5, 0);
        let bundle = Message::bundle(2, &[a.as_bytes(), b.as_bytes(), c.as_bytes()]);
        let subs = bundle.unbundle().unwrap();
        assert_eq!(subs.len(), 3);
        assert_eq!(subs[0].as_bytes(), a.as_bytes());
        assert_eq!(subs[1].as_bytes(), b.as_bytes());
        assert_eq!(subs[2].as_bytes(), c.as_bytes());
        // Each writable at once, without a copy: a buffer of its own.
        assert!(subs.iter().all(|s| !s.is_shared()));
        assert!(
            subs.iter()
                .all(|s| (s.payload().as_ptr() as usize).is_multiple_of(16))
        );
        let mut subs = subs;
        let at = subs[0].payload().as_ptr();
        subs[0].payload_mut()[0] = b'F';
        assert_eq!(subs[0].payload(), b"First");
        assert_eq!(subs[0].payload().as_ptr(), at);
        assert_eq!(subs[1].payload(), &[9u8; 40]);
    }

    #[test]
    fn bundle_uses_real_lengths_not_the_size_fields() {
        let mut a = Message::from_payload(3, &[1u8; 40]);
        a.header_mut().total_size = 96; // a sender's wrong size field
        let b = Message::from_payload(4, b"second");
        let subs = Message::bundle(2, &[a.as_bytes(), b.as_bytes()])
            .unbundle()
            .unwrap();
        assert_eq!(subs.len(), 2);
        assert_eq!(
            (subs[0].len(), subs[0].handler()),
            (MSG_HEADER_SIZE + 40, 3)
        );
        assert_eq!(subs[1].payload(), b"second");
    }

    #[test]
    fn a_part_or_a_restamped_message_carries_no_collective_key() {
        // A multicast copy (flags set, `coll` its group) passed on.
        let mut a = Message::from_payload(3, b"part");
        a.header_mut().flags = crate::raw::FLAG_MCAST;
        a.header_mut().coll = 77;
        let subs = Message::bundle(2, &[a.as_bytes()]).unbundle().unwrap();
        assert_eq!((subs[0].header().flags, subs[0].header().coll), (0, 0));
        // Sent on as a user message.
        a.stamp_user(1);
        assert_eq!((a.header().flags, a.header().coll), (0, 0));
        // A user message's number is its sender's to rewrite: kept.
        let mut b = Message::from_payload(3, b"user");
        b.header_mut().coll = 5;
        b.header_mut().total_size = 0;
        b.stamp_user(1);
        assert_eq!(b.header().coll, 5);
    }

    #[test]
    fn the_last_holder_of_a_shared_message_writes_it_in_place() {
        let shared = Message::from_payload(3, b"bcast").into_shared();
        let mut other = shared.clone();
        let at = shared.as_bytes().as_ptr();
        // Two holders: a write copies.
        other.payload_mut()[0] = b'B';
        assert_ne!(other.as_bytes().as_ptr(), at);
        assert_eq!(shared.payload(), b"bcast");
        // One holder left: a write takes the buffer as it is.
        let mut last = shared;
        last.payload_mut()[0] = b'B';
        assert_eq!(last.as_bytes().as_ptr(), at);
        assert!(!last.is_shared());
        assert_eq!(last.payload(), b"Bcast");
        // A reusable buffer keeps its own reference: its message copies.
        let buf = ReusableBuffer::new(MSG_HEADER_SIZE + 16);
        let (mut msg, _keep) = receive_into_reusable(buf, b"persist").ok().unwrap();
        let at = msg.as_bytes().as_ptr();
        msg.payload_mut()[0] = b'P';
        assert_ne!(msg.as_bytes().as_ptr(), at);
    }

    #[test]
    fn fix_total_size_restores_the_field() {
        let mut m = Message::new(1, 10);
        m.header_mut().total_size = 7;
        m.fix_total_size();
        assert_eq!(m.header().total_size as usize, m.len());
    }

    #[test]
    #[should_panic(expected = "exceeds the largest message")]
    fn huge_payload_is_a_clear_error() {
        let _ = Message::new(1, usize::MAX - 8);
    }

    #[test]
    fn malformed_bundle_is_an_error() {
        let mut bundle = Message::bundle(2, &[Message::new(3, 8).as_bytes()]);
        bundle.payload_mut()[8] = 0xff; // corrupt the sub-message's size field
        bundle.payload_mut()[9] = 0xff;
        assert!(bundle.unbundle().is_err());
        let mut short = Message::bundle(2, &[Message::new(3, 0).as_bytes()]);
        short.payload_mut()[8] = 4; // size smaller than a header
        assert_eq!(short.unbundle().unwrap_err(), MsgError::TooShort { len: 4 });
    }

    #[test]
    fn a_message_buffer_written_front_to_back_becomes_the_message() {
        let mut want = Message::new(4, 40);
        want.payload_mut()[..5].copy_from_slice(b"hello");
        let bytes = want.as_bytes().to_vec();
        let mut buf = MessageBuf::new(bytes.len());
        buf.write_at(0, &bytes[..10]);
        buf.write_at(10, &bytes[10..30]);
        // Then a `read` straight into the buffer, in two parts.
        let n = buf
            .receive_at(30, &mut |space| {
                assert_eq!(space.len(), bytes.len() - 30);
                let (done, _) = space.split_at_mut(10);
                Ok::<_, ()>(&mut *done.write_copy_of_slice(&bytes[30..40]))
            })
            .unwrap();
        assert_eq!(n, 10);
        let n = buf
            .receive_at(40, &mut |space| {
                Ok::<_, ()>(&mut *space.write_copy_of_slice(&bytes[40..]))
            })
            .unwrap();
        assert_eq!(n, bytes.len() - 40);
        let got = buf.finish();
        assert_eq!(got.as_bytes(), &bytes[..]);
        assert_eq!(got.payload(), want.payload());
    }

    #[test]
    #[should_panic(expected = "MessageBuf::finish before the last byte")]
    fn an_unfinished_message_buffer_is_refused() {
        let mut buf = MessageBuf::new(MSG_HEADER_SIZE + 8);
        buf.write_at(0, &[1; MSG_HEADER_SIZE]);
        let _ = buf.finish();
    }

    #[test]
    #[should_panic(expected = "receive: the filled part is not the start of the space")]
    fn a_receive_must_fill_the_start_of_its_space() {
        let mut buf = MessageBuf::new(MSG_HEADER_SIZE + 8);
        let _ = buf.receive_at(0, &mut |space| {
            let (_, rest) = space.split_at_mut(4);
            Ok::<_, ()>(&mut *rest[..4].write_copy_of_slice(&[1; 4]))
        });
    }

    #[test]
    #[should_panic(expected = "MessageBuf::finish before the last byte")]
    fn bytes_after_a_receive_count_as_unwritten() {
        let len = MSG_HEADER_SIZE + 8;
        let mut buf = MessageBuf::new(len);
        buf.write_at(0, &vec![1; len]);
        // A receive of 4 bytes at 0: bytes 4.. are unwritten again.
        let _ = buf.receive_at(0, &mut |space| {
            Ok::<_, ()>(&mut *space[..4].write_copy_of_slice(&[2; 4]))
        });
        let _ = buf.finish();
    }

    #[test]
    #[should_panic(expected = "MessageBuf::write_at")]
    fn a_message_buffer_is_written_without_gaps() {
        let mut buf = MessageBuf::new(MSG_HEADER_SIZE + 8);
        buf.write_at(4, &[1; 4]);
    }
}
