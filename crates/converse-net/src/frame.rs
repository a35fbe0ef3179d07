//! Frames on the byte stream between two processes, and the one reassembly
//! path every network module feeds the bytes it receives into (Nemesis's
//! `MPID_nem_handle_pkt`).
//!
//! # The frame
//!
//! A frame is a fixed 16-byte header followed by `len` payload bytes:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..2 | magic | [`FRAME_MAGIC`], little-endian: a stream that is not ours, or out of step, fails here |
//! | 2 | kind | [`FrameKind`]: a Converse message, or one of the module's own packets |
//! | 3 | flags | per kind; 0 unless a kind defines them |
//! | 4..8 | len | payload length, little-endian, at most the receiver's limit |
//! | 8..12 | src | the sending PE (or process, for the module's own packets) |
//! | 12..16 | tag | per kind (a large-message transfer's id, say); 0 otherwise |
//!
//! Every field is checked before anything is allocated or delivered: bytes
//! from the wire are never trusted, and an error names the peer.
//!
//! # Reassembly (`handle_pkt` semantics)
//!
//! A [`Reassembler`] belongs to one connection (one VC). [`Reassembler::handle`]
//! accepts the received bytes in any chunking: many frames at once, a frame
//! cut anywhere, even inside its header. Invariants, as in Nemesis:
//!
//! - A header fragment is kept in `pending` (`pending_pkt`) until the rest of
//!   the header arrives; while `pending_len > 0` no frame body is active.
//! - Once a header is complete, its body is received into `active`
//!   (`recv_active`), a buffer of exactly `len` bytes: for a `Message`
//!   frame, the buffer of the [`Message`] it becomes (so a message is
//!   copied once, from the wire into its own buffer, and allocated once,
//!   or not at all when the layer above gives one it keeps for it:
//!   [`MessageBuffers`]);
//!   for any other kind, a `Vec<u8>`. Neither is zeroed first. A module
//!   that can receive straight into it (the recv-active fast path: a `read`
//!   into the uninitialized rest of the body, [`Reassembler::receive_body`])
//!   skips the copy; one that cannot passes its buffer to `handle`.
//! - Frames are delivered in stream order, each exactly once, with its whole
//!   payload.
//! - At the end of the stream, [`Reassembler::finish`] reports a frame cut
//!   short (a truncated packet) instead of dropping it silently.
use std::fmt;

use std::sync::Arc;

use converse_msg::raw::{MessageBuf, ReadInto, ReusableBuffer, receive_into};
use converse_msg::{MSG_HEADER_SIZE, Message};

/// Size of a frame header, in bytes.
pub const FRAME_HEADER_SIZE: usize = 16;

/// The first two bytes of every frame.
pub const FRAME_MAGIC: u16 = 0xC0C5;

/// The default largest payload a [`Reassembler`] accepts: 1 GiB, the largest
/// Converse message.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 30;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A Converse message (header and payload, as `Message::as_bytes`).
    Message = 1,
    /// The module's own control traffic (connection set-up, credits, close).
    Control = 2,
    /// Large-message transfer: ready to send (Nemesis RTS, with the cookie).
    LmtRts = 3,
    /// Large-message transfer: clear to send (CTS, with the receiver's
    /// cookie).
    LmtCts = 4,
    /// Large-message transfer: a cookie exchanged during the transfer.
    LmtCookie = 5,
    /// Large-message transfer: done.
    LmtDone = 6,
    /// Large-message transfer in the Null mode: the message itself, once
    /// its receiver said clear to send (the tag is the transfer's id;
    /// received into a message buffer, as a `Message` frame's body).
    LmtData = 7,
}

impl FrameKind {
    fn from_byte(b: u8) -> Option<FrameKind> {
        Some(match b {
            1 => FrameKind::Message,
            2 => FrameKind::Control,
            3 => FrameKind::LmtRts,
            4 => FrameKind::LmtCts,
            5 => FrameKind::LmtCookie,
            6 => FrameKind::LmtDone,
            7 => FrameKind::LmtData,
            _ => return None,
        })
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// Per-kind flags.
    pub flags: u8,
    /// Payload length in bytes.
    pub len: u32,
    /// The sender.
    pub src: u32,
    /// Per-kind tag.
    pub tag: u32,
}

impl FrameHeader {
    /// The header's 16 bytes on the wire.
    pub fn encode(&self) -> [u8; FRAME_HEADER_SIZE] {
        let mut b = [0u8; FRAME_HEADER_SIZE];
        b[0..2].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[2] = self.kind as u8;
        b[3] = self.flags;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..12].copy_from_slice(&self.src.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.to_le_bytes());
        b
    }

    /// Decodes and checks a header; `max_payload` bounds `len`.
    pub fn decode(
        b: &[u8; FRAME_HEADER_SIZE],
        max_payload: usize,
    ) -> Result<FrameHeader, FrameFault> {
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let magic = u16::from_le_bytes([b[0], b[1]]);
        if magic != FRAME_MAGIC {
            return Err(FrameFault::BadMagic(magic));
        }
        let kind = FrameKind::from_byte(b[2]).ok_or(FrameFault::UnknownKind(b[2]))?;
        let len = word(4);
        if len as usize > max_payload {
            return Err(FrameFault::TooLong {
                len: len as usize,
                max: max_payload,
            });
        }
        Ok(FrameHeader {
            kind,
            flags: b[3],
            len,
            src: word(8),
            tag: word(12),
        })
    }
}

/// The bytes of a whole frame: header, then `payload`.
///
/// # Panics
/// If `payload` is longer than `u32::MAX` bytes.
#[cfg(test)]
pub fn encode_frame(kind: FrameKind, flags: u8, src: u32, tag: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame payload fits in 32 bits");
    let header = FrameHeader {
        kind,
        flags,
        len,
        src,
        tag,
    };
    let mut bytes = Vec::with_capacity(FRAME_HEADER_SIZE + payload.len());
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(payload);
    bytes
}

/// What was wrong with the bytes of a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameFault {
    /// The first two bytes were not [`FRAME_MAGIC`].
    BadMagic(u16),
    /// The kind byte names no [`FrameKind`].
    UnknownKind(u8),
    /// The payload is longer than the receiver accepts.
    TooLong {
        /// Announced length.
        len: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// A `Message` frame too short to hold a message header.
    ShortMessage {
        /// Announced length.
        len: usize,
    },
    /// The stream ended inside a frame.
    Truncated {
        /// Bytes of the frame received (header included).
        got: usize,
        /// Bytes the frame needed (header included), if its header was
        /// complete.
        needed: Option<usize>,
    },
}

impl fmt::Display for FrameFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameFault::BadMagic(m) => write!(
                f,
                "bad frame magic {m:#06x} (expected {FRAME_MAGIC:#06x}): not a Converse stream, or out of step"
            ),
            FrameFault::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameFault::TooLong { len, max } => {
                write!(f, "frame of {len} bytes is longer than the limit of {max}")
            }
            FrameFault::ShortMessage { len } => write!(
                f,
                "a message frame of {len} bytes is shorter than a message header ({MSG_HEADER_SIZE} bytes)"
            ),
            FrameFault::Truncated { got, needed } => match needed {
                Some(n) => write!(f, "stream ended inside a frame: {got} of {n} bytes"),
                None => write!(
                    f,
                    "stream ended inside a frame header: {got} of {FRAME_HEADER_SIZE} bytes"
                ),
            },
        }
    }
}

/// A fault on a connection, naming the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameError {
    /// Who sent the bytes (a process or node number, as the module names it).
    pub peer: usize,
    /// What was wrong.
    pub fault: FrameFault,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed data from process {}: {}",
            self.peer, self.fault
        )
    }
}

impl std::error::Error for FrameError {}

/// The payload of a whole frame, as [`Reassembler`] delivers it.
pub enum FrameBody {
    /// The payload of a [`FrameKind::Message`] frame, received straight
    /// into the buffer of the message it is (its header's size field is
    /// as the peer wrote it: the layer above checks it).
    Message(Message),
    /// The payload of any other kind of frame.
    Bytes(Vec<u8>),
}

impl FrameBody {
    /// The payload's bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            FrameBody::Message(m) => m.as_bytes(),
            FrameBody::Bytes(b) => b,
        }
    }

    /// The payload's bytes as a vector.
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            FrameBody::Message(m) => m.as_bytes().to_vec(),
            FrameBody::Bytes(b) => b,
        }
    }
}

/// Where the layer above keeps buffers that a `Message` frame may be
/// received into instead of a new one (a persistent channel's pre-agreed
/// buffers): asked once per `Message` frame, when its header is complete.
pub trait MessageBuffers: Send + Sync {
    /// One of its buffers, ready to receive the message `header` announces
    /// ([`ReusableBuffer::receive`]), if the layer above has one free for
    /// it; `None` for a new buffer.
    fn take(&self, header: &FrameHeader) -> Option<MessageBuf>;
    /// The buffer [`MessageBuffers::take`] gave for `header`'s message, once
    /// the message is whole (the message, delivered next, still holds it).
    fn give_back(&self, header: &FrameHeader, buffer: ReusableBuffer);
}

/// A body being received: a message's buffer, or bytes (a `Vec` whose
/// length is what was received, in a capacity of the whole body). Neither
/// is zeroed first.
enum ActiveBody {
    Message(MessageBuf),
    Bytes(Vec<u8>),
}

/// The frame whose body is being received (`recv_active`).
struct Active {
    header: FrameHeader,
    body: ActiveBody,
    /// Bytes of the body (`header.len` in all) received so far.
    filled: usize,
}

impl Active {
    /// An empty body for the frame `header` announces (a `Message`
    /// frame's `len` is at least a message header: checked by the caller).
    fn new(header: FrameHeader, buffers: Option<&dyn MessageBuffers>) -> Active {
        let len = header.len as usize;
        let body = match header.kind {
            FrameKind::LmtData => ActiveBody::Message(MessageBuf::new(len)),
            FrameKind::Message => {
                ActiveBody::Message(match buffers.and_then(|b| b.take(&header)) {
                    Some(space) => {
                        assert_eq!(
                            space.len(),
                            len,
                            "MessageBuffers::take: a buffer for another length"
                        );
                        space
                    }
                    None => MessageBuf::new(len),
                })
            }
            _ => ActiveBody::Bytes(Vec::with_capacity(len)),
        };
        Active {
            header,
            body,
            filled: 0,
        }
    }

    /// Receives the next bytes of the body with `read` (see [`ReadInto`]).
    ///
    /// # Panics
    /// If `read` returns a slice that is not the start of its space.
    fn receive<E>(&mut self, read: ReadInto<'_, E>) -> Result<usize, E> {
        let n = match &mut self.body {
            ActiveBody::Message(m) => m.receive_at(self.filled, read)?,
            ActiveBody::Bytes(b) => {
                let rest = self.header.len as usize - self.filled;
                let n = receive_into(&mut b.spare_capacity_mut()[..rest], read)?;
                // SAFETY: `read` filled the first `n` bytes of the spare
                // capacity (`receive_into` checked it returned them as
                // `&mut [u8]`), and `len + n` is within the capacity.
                unsafe { b.set_len(b.len() + n) };
                n
            }
        };
        self.filled += n;
        Ok(n)
    }

    /// Copies as much of `bytes` as the body still takes; returns how many.
    fn take(&mut self, bytes: &[u8]) -> usize {
        // SAFETY: a slice is valid for reads of its length.
        unsafe { self.take_raw(bytes.as_ptr(), bytes.len()) }
    }

    /// [`Active::take`] from `len` bytes at `src`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    unsafe fn take_raw(&mut self, src: *const u8, len: usize) -> usize {
        let n = (self.header.len as usize - self.filled).min(len);
        match &mut self.body {
            // SAFETY: `src` is readable for `n <= len` bytes (the caller's
            // promise).
            ActiveBody::Message(m) => unsafe { m.write_raw_at(self.filled, src, n) },
            // SAFETY: as above; `filled + n` is at most the body's length,
            // the vector's capacity (`n` is at most what the body still
            // takes), and its first `filled` bytes are the ones received;
            // the `n` copied then are initialized.
            ActiveBody::Bytes(b) => unsafe {
                converse_msg::copy::copy_nonoverlapping(src, b.as_mut_ptr().add(self.filled), n);
                b.set_len(self.filled + n);
            },
        }
        self.filled += n;
        n
    }

    /// The whole body, and the reusable buffer it was received into (if
    /// it was).
    fn into_body(self) -> (FrameBody, Option<ReusableBuffer>) {
        match self.body {
            ActiveBody::Message(m) => {
                let (msg, reused) = m.finish_reusable();
                (FrameBody::Message(msg), reused)
            }
            ActiveBody::Bytes(b) => (FrameBody::Bytes(b), None),
        }
    }

    fn is_complete(&self) -> bool {
        self.filled == self.header.len as usize
    }
}

/// Reassembles the frames of one connection from received bytes in any
/// chunking (see the module comment).
#[doc(alias = "recv_active")]
#[doc(alias = "pending_pkt")]
pub struct Reassembler {
    peer: usize,
    max_payload: usize,
    /// A header fragment (`pending_pkt`) and its length.
    pending: [u8; FRAME_HEADER_SIZE],
    pending_len: usize,
    active: Option<Active>,
    /// Set once a fault was found: the stream is out of step for good.
    failed: Option<FrameFault>,
    /// Buffers of the layer above that messages may be received into.
    buffers: Option<Arc<dyn MessageBuffers>>,
}

impl Reassembler {
    /// A reassembler for the connection from `peer`, accepting payloads of
    /// up to `max_payload` bytes.
    pub fn new(peer: usize, max_payload: usize) -> Reassembler {
        Reassembler {
            peer,
            max_payload,
            pending: [0; FRAME_HEADER_SIZE],
            pending_len: 0,
            active: None,
            failed: None,
            buffers: None,
        }
    }

    /// Receives messages into the buffers `buffers` gives, where it gives
    /// one (see [`MessageBuffers`]).
    pub fn with_buffers(mut self, buffers: Option<Arc<dyn MessageBuffers>>) -> Reassembler {
        self.set_buffers(buffers);
        self
    }

    /// As [`with_buffers`](Reassembler::with_buffers), on a reassembler
    /// made already (before its first frame).
    pub fn set_buffers(&mut self, buffers: Option<Arc<dyn MessageBuffers>>) {
        self.buffers = buffers;
    }

    fn error(&mut self, fault: FrameFault) -> FrameError {
        self.failed = Some(fault.clone());
        FrameError {
            peer: self.peer,
            fault,
        }
    }

    /// Feeds received bytes; calls `deliver(header, payload)` for every frame
    /// they complete, in order. After an error the connection is unusable:
    /// every later call returns the same error.
    #[doc(alias = "MPID_nem_handle_pkt")]
    pub fn handle(
        &mut self,
        mut bytes: &[u8],
        mut deliver: impl FnMut(FrameHeader, FrameBody),
    ) -> Result<(), FrameError> {
        if let Some(fault) = self.failed.clone() {
            return Err(self.error(fault));
        }
        while !bytes.is_empty() {
            if let Some(active) = &mut self.active {
                let n = active.take(bytes);
                bytes = &bytes[n..];
                self.deliver_if_complete(&mut deliver);
                continue;
            }
            // A header: complete the pending fragment, or decode in place.
            let header_bytes: [u8; FRAME_HEADER_SIZE] = if self.pending_len == 0
                && bytes.len() >= FRAME_HEADER_SIZE
            {
                let h = bytes[..FRAME_HEADER_SIZE].try_into().expect("16 bytes");
                bytes = &bytes[FRAME_HEADER_SIZE..];
                h
            } else {
                let n = (FRAME_HEADER_SIZE - self.pending_len).min(bytes.len());
                self.pending[self.pending_len..self.pending_len + n].copy_from_slice(&bytes[..n]);
                self.pending_len += n;
                bytes = &bytes[n..];
                if self.pending_len < FRAME_HEADER_SIZE {
                    break;
                }
                self.pending_len = 0;
                self.pending
            };
            let header = match FrameHeader::decode(&header_bytes, self.max_payload) {
                Ok(h) => h,
                Err(fault) => return Err(self.error(fault)),
            };
            let len = header.len as usize;
            if matches!(header.kind, FrameKind::Message | FrameKind::LmtData)
                && len < MSG_HEADER_SIZE
            {
                return Err(self.error(FrameFault::ShortMessage { len }));
            }
            let mut active = Active::new(header, self.buffers.as_deref());
            if len <= bytes.len() {
                // The whole body is here (every small frame): delivered at
                // once, without parking the frame as the active one and
                // looking at it again on the next turn of the loop.
                active.take(&bytes[..len]);
                bytes = &bytes[len..];
                self.deliver_done(active, &mut deliver);
            } else {
                self.active = Some(active);
            }
        }
        Ok(())
    }

    fn deliver_if_complete(&mut self, deliver: &mut impl FnMut(FrameHeader, FrameBody)) {
        if self.active.as_ref().is_some_and(Active::is_complete) {
            let done = self.active.take().expect("checked");
            self.deliver_done(done, deliver);
        }
    }

    /// Delivers `done`, whose body is complete.
    #[inline]
    fn deliver_done(&self, done: Active, deliver: &mut impl FnMut(FrameHeader, FrameBody)) {
        let header = done.header;
        let (body, reused) = done.into_body();
        if let (Some(buffers), Some(buffer)) = (&self.buffers, reused) {
            buffers.give_back(&header, buffer);
        }
        deliver(header, body);
    }

    /// The recv-active fast path, for a module that can receive straight
    /// into the active frame's body: `read` gets the rest of the body
    /// (uninitialized memory, nothing zeroed) and returns the part it
    /// filled (see [`ReadInto`]); delivers the frame if that completes it.
    /// Returns how many bytes were received, `None` when no body is being
    /// received (the next bytes are a header: use
    /// [`handle`](Reassembler::handle)).
    ///
    /// # Panics
    /// If `read` returns a slice that is not the start of its space.
    pub fn receive_body<E>(
        &mut self,
        read: ReadInto<'_, E>,
        mut deliver: impl FnMut(FrameHeader, FrameBody),
    ) -> Option<Result<usize, E>> {
        let result = self.active.as_mut()?.receive(read);
        self.deliver_if_complete(&mut deliver);
        Some(result)
    }

    /// The recv-active fast path for a module that receives from memory
    /// another process writes (shm), where a `&[u8]` of the bytes cannot
    /// be formed: copies up to `len` bytes at `src` straight into the
    /// active frame's body, delivering the frame if that completes it.
    /// Returns how many bytes it took: 0 when no body is being received
    /// (the next bytes are a header: use [`handle`](Reassembler::handle)).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    pub unsafe fn body_copy_from(
        &mut self,
        src: *const u8,
        len: usize,
        mut deliver: impl FnMut(FrameHeader, FrameBody),
    ) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        let Some(active) = self.active.as_mut() else {
            return 0;
        };
        // SAFETY: the caller's promise.
        let n = unsafe { active.take_raw(src, len) };
        self.deliver_if_complete(&mut deliver);
        n
    }

    /// True between frames: no header fragment kept, no body in progress.
    pub fn is_idle(&self) -> bool {
        self.pending_len == 0 && self.active.is_none()
    }

    /// True while a frame's body is being received (its header is in).
    pub fn in_body(&self) -> bool {
        self.active.is_some()
    }

    /// At the end of the stream: an error if it ended inside a frame.
    pub fn finish(&mut self) -> Result<(), FrameError> {
        if let Some(fault) = self.failed.clone() {
            return Err(self.error(fault));
        }
        if self.pending_len > 0 {
            let got = self.pending_len;
            return Err(self.error(FrameFault::Truncated { got, needed: None }));
        }
        if let Some(a) = &self.active {
            let fault = FrameFault::Truncated {
                got: FRAME_HEADER_SIZE + a.filled,
                needed: Some(FRAME_HEADER_SIZE + a.header.len as usize),
            };
            return Err(self.error(fault));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Frame = (FrameKind, u8, u32, u32, Vec<u8>);

    fn collect(r: &mut Reassembler, chunks: &[&[u8]]) -> Result<Vec<Frame>, FrameError> {
        let mut out = Vec::new();
        for c in chunks {
            r.handle(c, |h, p| {
                out.push((h.kind, h.flags, h.src, h.tag, p.into_vec()))
            })?;
        }
        Ok(out)
    }

    fn kind_strategy() -> impl Strategy<Value = FrameKind> {
        prop_oneof![
            Just(FrameKind::Message),
            Just(FrameKind::Control),
            Just(FrameKind::LmtRts),
            Just(FrameKind::LmtCts),
            Just(FrameKind::LmtCookie),
            Just(FrameKind::LmtDone),
            Just(FrameKind::LmtData),
        ]
    }

    /// The longest payload and the most frames of a generated stream:
    /// smaller under miri (CI runs these tests there, about a thousand
    /// times slower), where the chunking code meets the same cases, across
    /// a header, a body and a frame boundary, in fewer bytes.
    const MAX_PAYLOAD: usize = if cfg!(miri) { 64 } else { 600 };
    const MAX_FRAMES: usize = if cfg!(miri) { 6 } else { 20 };

    fn frames_strategy() -> impl Strategy<Value = Vec<Frame>> {
        prop::collection::vec(
            (
                kind_strategy(),
                any::<u8>(),
                any::<u32>(),
                any::<u32>(),
                prop::collection::vec(any::<u8>(), 0..MAX_PAYLOAD),
            )
                .prop_map(|(kind, flags, src, tag, mut payload)| {
                    // A message frame holds at least a message header.
                    if matches!(kind, FrameKind::Message | FrameKind::LmtData)
                        && payload.len() < MSG_HEADER_SIZE
                    {
                        payload.resize(MSG_HEADER_SIZE, 0);
                    }
                    (kind, flags, src, tag, payload)
                }),
            0..MAX_FRAMES,
        )
    }

    fn stream(frames: &[Frame]) -> Vec<u8> {
        frames
            .iter()
            .flat_map(|(k, f, s, t, p)| encode_frame(*k, *f, *s, *t, p))
            .collect()
    }

    /// Cuts `bytes` at the given points (taken modulo its length, sorted).
    fn cut<'a>(bytes: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = points
            .iter()
            .map(|p| {
                if bytes.is_empty() {
                    0
                } else {
                    p % (bytes.len() + 1)
                }
            })
            .collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
    }

    /// Feeds `bytes` to a reassembler in turns of at most `sizes[k]`
    /// bytes: `step` gets the next chunk and returns how much of it it
    /// took. Returns the frames delivered and whether the reassembler
    /// ended idle.
    fn feed_in_turns(
        bytes: &[u8],
        sizes: &[usize],
        mut step: impl FnMut(&mut Reassembler, &[u8], &mut dyn FnMut(FrameHeader, FrameBody)) -> usize,
    ) -> (Vec<Frame>, bool) {
        let mut r = Reassembler::new(1, DEFAULT_MAX_PAYLOAD);
        let mut got = Vec::new();
        let mut push =
            |h: FrameHeader, p: FrameBody| got.push((h.kind, h.flags, h.src, h.tag, p.into_vec()));
        let mut at = 0;
        for size in sizes.iter().cycle() {
            if at == bytes.len() {
                break;
            }
            let n = (*size).min(bytes.len() - at);
            at += step(&mut r, &bytes[at..at + n], &mut push);
        }
        let idle = r.is_idle();
        (got, idle)
    }

    proptest! {
        #[test]
        fn any_chunking_gives_back_the_frames(
            frames in frames_strategy(),
            points in prop::collection::vec(any::<usize>(), 0..40),
        ) {
            let bytes = stream(&frames);
            let mut r = Reassembler::new(7, DEFAULT_MAX_PAYLOAD);
            let got = collect(&mut r, &cut(&bytes, &points)).unwrap();
            prop_assert_eq!(got, frames);
            prop_assert!(r.is_idle());
            prop_assert!(r.finish().is_ok());
        }

        #[test]
        fn direct_receive_into_the_body_gives_the_same_frames(
            frames in frames_strategy(),
            sizes in prop::collection::vec(1usize..97, 1..40),
        ) {
            // A module that reads at most `size` bytes at a time, straight
            // into the active body when there is one (tcp).
            let (got, idle) = feed_in_turns(&stream(&frames), &sizes, |r, chunk, push| {
                let direct = r.receive_body(
                    &mut |space| {
                        let n = space.len().min(chunk.len());
                        Ok::<_, ()>(&mut *space[..n].write_copy_of_slice(&chunk[..n]))
                    },
                    &mut *push,
                );
                match direct {
                    Some(read) => read.unwrap(),
                    None => {
                        r.handle(chunk, push).unwrap();
                        chunk.len()
                    }
                }
            });
            prop_assert_eq!(got, frames);
            prop_assert!(idle);
        }

        #[test]
        fn copying_into_the_body_from_raw_bytes_gives_the_same_frames(
            frames in frames_strategy(),
            sizes in prop::collection::vec(1usize..97, 1..40),
        ) {
            // As shm does: each chunk goes first into the active body, if
            // any, and the rest through `handle`.
            let (got, idle) = feed_in_turns(&stream(&frames), &sizes, |r, chunk, push| {
                // SAFETY: `chunk` is readable for its length.
                let direct = unsafe { r.body_copy_from(chunk.as_ptr(), chunk.len(), &mut *push) };
                r.handle(&chunk[direct..], push).unwrap();
                chunk.len()
            });
            prop_assert_eq!(got, frames);
            prop_assert!(idle);
        }

        #[test]
        fn random_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..400),
            points in prop::collection::vec(any::<usize>(), 0..10),
        ) {
            let mut r = Reassembler::new(3, 1 << 12);
            let result = collect(&mut r, &cut(&bytes, &points));
            if result.is_ok() {
                // Whatever was not an error either ended between frames or
                // is reported as truncated.
                prop_assert_eq!(r.finish().is_ok(), r.is_idle());
            }
        }
    }

    #[test]
    fn empty_payloads_are_delivered() {
        let bytes = stream(&[
            (FrameKind::Control, 0, 1, 2, vec![]),
            (FrameKind::LmtDone, 0, 3, 4, vec![9]),
        ]);
        let mut r = Reassembler::new(0, 16);
        let got = collect(&mut r, &[&bytes]).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (FrameKind::Control, 0, 1, 2, vec![]));
    }

    #[test]
    fn bad_magic_is_named_with_the_peer_and_sticks() {
        let mut bytes = encode_frame(FrameKind::Message, 0, 0, 0, b"hi");
        bytes[0] ^= 0xff;
        let mut r = Reassembler::new(5, 1024);
        let err = collect(&mut r, &[&bytes]).unwrap_err();
        assert_eq!(err.peer, 5);
        assert!(matches!(err.fault, FrameFault::BadMagic(_)));
        assert!(
            err.to_string()
                .starts_with("malformed data from process 5: bad frame magic")
        );
        let good = encode_frame(FrameKind::Message, 0, 0, 0, b"ok");
        assert_eq!(
            collect(&mut r, &[&good]).unwrap_err(),
            err,
            "the stream stays failed"
        );
    }

    #[test]
    fn unknown_kind_and_overlong_frames_are_refused_before_allocation() {
        let mut bytes = encode_frame(FrameKind::Message, 0, 0, 0, b"");
        bytes[2] = 0;
        let mut r = Reassembler::new(1, 1024);
        assert_eq!(
            collect(&mut r, &[&bytes]).unwrap_err().fault,
            FrameFault::UnknownKind(0)
        );
        let mut header = FrameHeader {
            kind: FrameKind::Message,
            flags: 0,
            len: 0,
            src: 0,
            tag: 0,
        };
        header.len = u32::MAX;
        let mut r = Reassembler::new(2, 1024);
        let err = collect(&mut r, &[&header.encode()]).unwrap_err();
        assert_eq!(
            err.fault,
            FrameFault::TooLong {
                len: u32::MAX as usize,
                max: 1024
            }
        );
    }

    /// Buffers for frames tagged 99: one, handed out when free.
    struct OneBuffer(std::sync::Mutex<Option<ReusableBuffer>>);

    impl MessageBuffers for OneBuffer {
        fn take(&self, header: &FrameHeader) -> Option<MessageBuf> {
            if header.tag != 99 {
                return None;
            }
            let mut slot = self.0.lock().unwrap();
            let buffer = slot.take()?;
            match buffer.receive(header.len as usize) {
                Ok(space) => Some(space),
                Err(buffer) => {
                    *slot = Some(buffer);
                    None
                }
            }
        }
        fn give_back(&self, _: &FrameHeader, buffer: ReusableBuffer) {
            *self.0.lock().unwrap() = Some(buffer);
        }
    }

    /// The message of a `Message` frame's body.
    fn message(body: FrameBody) -> Message {
        match body {
            FrameBody::Message(m) => m,
            FrameBody::Bytes(_) => panic!("a message frame"),
        }
    }

    #[test]
    fn messages_are_received_into_the_layer_aboves_buffers_when_free() {
        let buffers = Arc::new(OneBuffer(std::sync::Mutex::new(Some(ReusableBuffer::new(
            256,
        )))));
        let mut r = Reassembler::new(1, 1024).with_buffers(Some(buffers.clone()));
        let msg = Message::from_payload(4, b"persistent");
        let frame = |tag| encode_frame(FrameKind::Message, 0, 1, tag, msg.as_bytes());
        let mut got = Vec::new();
        // Cut in the middle of the body: received across two calls.
        let f = frame(99);
        for part in [&f[..20], &f[20..]] {
            r.handle(part, |_, body| got.push(message(body))).unwrap();
        }
        let first = got.pop().unwrap();
        assert_eq!(first.payload(), b"persistent");
        assert!(first.is_shared(), "received into the reusable buffer");
        assert!(buffers.0.lock().unwrap().is_some(), "given back");
        // While it lives, the next one gets a buffer of its own; another
        // tag never asks.
        for tag in [99, 5] {
            r.handle(&frame(tag), |_, body| got.push(message(body)))
                .unwrap();
        }
        assert!(
            got.iter()
                .all(|m| !m.is_shared() && m.payload() == b"persistent")
        );
        let addr = first.as_bytes().as_ptr();
        drop(first);
        r.handle(&frame(99), |_, body| got.push(message(body)))
            .unwrap();
        let again = got.pop().unwrap();
        assert_eq!(again.as_bytes().as_ptr(), addr, "the same buffer, reused");
        // Too long for the buffer: a buffer of its own, the reusable one
        // given back untouched.
        drop(again);
        let long = Message::from_payload(4, &[1; 300]);
        r.handle(
            &encode_frame(FrameKind::Message, 0, 1, 99, long.as_bytes()),
            |_, body| got.push(message(body)),
        )
        .unwrap();
        assert_eq!(got.pop().unwrap().payload(), &[1; 300][..]);
        assert!(buffers.0.lock().unwrap().as_mut().unwrap().is_free());
    }

    #[test]
    fn truncated_streams_are_reported_at_the_end() {
        let bytes = encode_frame(FrameKind::Control, 0, 0, 0, &[1; 10]);
        let mut r = Reassembler::new(4, 1024);
        collect(&mut r, &[&bytes[..5]]).unwrap();
        assert_eq!(
            r.finish().unwrap_err().fault,
            FrameFault::Truncated {
                got: 5,
                needed: None
            }
        );
        let mut r = Reassembler::new(4, 1024);
        collect(&mut r, &[&bytes[..20]]).unwrap();
        let err = r.finish().unwrap_err();
        assert_eq!(
            err.fault,
            FrameFault::Truncated {
                got: 20,
                needed: Some(26)
            }
        );
        assert!(err.to_string().contains("20 of 26 bytes"), "{err}");
    }

    #[test]
    fn message_frames_become_messages_and_short_ones_are_refused() {
        let mut msg = Message::new(5, 3);
        msg.payload_mut().copy_from_slice(b"abc");
        let bytes = encode_frame(FrameKind::Message, 0, 1, 2, msg.as_bytes());
        let mut r = Reassembler::new(0, 1024);
        let mut got = Vec::new();
        r.handle(&bytes, |_, body| got.push(body)).unwrap();
        match got.pop() {
            Some(FrameBody::Message(m)) => {
                assert_eq!(m.as_bytes(), msg.as_bytes());
                assert_eq!(m.payload(), b"abc");
            }
            _ => panic!("a message frame arrives as a message"),
        }
        let short = encode_frame(FrameKind::Message, 0, 1, 2, &[0; MSG_HEADER_SIZE - 1]);
        let err = collect(&mut Reassembler::new(6, 1024), &[&short]).unwrap_err();
        assert_eq!(
            err.fault,
            FrameFault::ShortMessage {
                len: MSG_HEADER_SIZE - 1
            }
        );
        assert!(err.to_string().contains("process 6"), "{err}");
    }
}
