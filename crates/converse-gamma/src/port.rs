//! A port's input side: its destination buffer and where the next message
//! goes (`GO_AHEAD`, `GO_BACK`), as pure bookkeeping the node's arrival
//! path drives.
//!
//! # Invariants
//!
//! - `0 <= offset < len` whenever a buffer is bound (`offset` wraps to 0
//!   when a message fills the buffer exactly: the document's "fits the
//!   destination buffer exactly").
//! - `len <= buffer's length` when it was bound; a buffer the program
//!   shrank since is written only up to its present length.
//! - A message is stored whole or truncated to the room left, never
//!   past `len`.
//!
//! # Concurrency
//!
//! None: a port belongs to one node (one PE's thread). A [`Buffer`] is
//! shared between the program and its port on that thread (`Rc`); the
//! program reads it between GAMMA calls.
use std::cell::{Ref, RefCell, RefMut};
use std::rc::Rc;

/// Where the message after a shorter one goes (`buffer_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Right after it: messages gather (`GO_AHEAD`).
    #[doc(alias = "GO_AHEAD")]
    GoAhead,
    /// At the start of the buffer again (`GO_BACK`).
    #[doc(alias = "GO_BACK")]
    GoBack,
}

/// `GO_AHEAD`, the C constant.
pub const GO_AHEAD: BufferKind = BufferKind::GoAhead;
/// `GO_BACK`, the C constant.
pub const GO_BACK: BufferKind = BufferKind::GoBack;

/// A destination buffer: bytes the program owns and arriving messages are
/// written into (the C `void *destination_buffer`). Clones share the
/// bytes. The program reads them between GAMMA calls; a borrow held
/// across one ([`wait`](crate::wait), a send) while a message arrives
/// for it aborts the job, naming the port.
#[derive(Clone, Debug, Default)]
pub struct Buffer(Rc<RefCell<Vec<u8>>>);

impl Buffer {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> Buffer {
        Buffer::from(vec![0; len])
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    /// True if it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, to read.
    pub fn borrow(&self) -> Ref<'_, Vec<u8>> {
        self.0.borrow()
    }

    /// The bytes, to write (or to resize).
    pub fn borrow_mut(&self) -> RefMut<'_, Vec<u8>> {
        self.0.borrow_mut()
    }

    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }

    /// True if both share the same bytes.
    pub fn ptr_eq(&self, other: &Buffer) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    pub(crate) fn try_borrow_mut(&self) -> Option<RefMut<'_, Vec<u8>>> {
        self.0.try_borrow_mut().ok()
    }
}

impl From<Vec<u8>> for Buffer {
    fn from(bytes: Vec<u8>) -> Buffer {
        Buffer(Rc::new(RefCell::new(bytes)))
    }
}

/// What storing one message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Where in the buffer it went.
    pub at: usize,
    /// Bytes written.
    pub written: usize,
    /// It did not fit (or found no buffer): `GAMMA_ERR_MSGTOOLONG`.
    pub truncated: bool,
}

/// Why a message could not be stored now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotNow {
    /// The program holds the buffer borrowed.
    Borrowed,
}

/// A port's destination: the buffer bound to it, how many of its bytes
/// count (`buffer_len`), the kind, and where the next message goes.
#[derive(Clone, Debug)]
pub(crate) struct Destination {
    pub buffer: Option<Buffer>,
    pub len: usize,
    pub kind: BufferKind,
    pub offset: usize,
}

impl Destination {
    pub fn new(buffer: Option<Buffer>, len: usize, kind: BufferKind) -> Destination {
        Destination {
            buffer,
            len,
            kind,
            offset: 0,
        }
    }

    /// Where the next message would start.
    pub fn next_at(&self) -> usize {
        match self.kind {
            BufferKind::GoAhead => self.offset,
            BufferKind::GoBack => 0,
        }
    }

    /// Binds a fresh buffer (`gamma_post_recv`): the next message goes to
    /// its start.
    pub fn repost(&mut self, buffer: Buffer, len: usize) {
        self.buffer = Some(buffer);
        self.len = len;
        self.offset = 0;
    }

    /// Writes `data` where the next message goes, truncated to the room
    /// left; an empty message stores nothing and is never truncated.
    pub fn store(&mut self, data: &[u8]) -> Result<Stored, NotNow> {
        let at = self.next_at();
        if data.is_empty() {
            return Ok(Stored {
                at,
                written: 0,
                truncated: false,
            });
        }
        let Some(buffer) = &self.buffer else {
            return Ok(Stored {
                at,
                written: 0,
                truncated: true,
            });
        };
        let mut bytes = buffer.try_borrow_mut().ok_or(NotNow::Borrowed)?;
        // The program may have shrunk its buffer since binding it.
        let end = self.len.min(bytes.len());
        // A buffer shrunk below where the next message would go: no room.
        let at = at.min(end);
        let room = end - at;
        let written = data.len().min(room);
        bytes[at..at + written].copy_from_slice(&data[..written]);
        drop(bytes);
        let next = at + written;
        self.offset = match self.kind {
            BufferKind::GoAhead if next < end => next,
            _ => 0,
        };
        Ok(Stored {
            at,
            written,
            truncated: written < data.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(len: usize, kind: BufferKind) -> (Buffer, Destination) {
        let b = Buffer::new(len);
        let d = Destination::new(Some(b.clone()), len, kind);
        (b, d)
    }

    #[test]
    fn go_ahead_gathers_then_wraps_when_exactly_full() {
        let (b, mut d) = dest(6, GO_AHEAD);
        assert_eq!(
            d.store(b"ab").unwrap(),
            Stored {
                at: 0,
                written: 2,
                truncated: false
            }
        );
        assert_eq!(d.store(b"cd").unwrap().at, 2);
        assert_eq!(
            d.store(b"ef").unwrap(),
            Stored {
                at: 4,
                written: 2,
                truncated: false
            }
        );
        assert_eq!(b.to_vec(), b"abcdef");
        // Exactly full: the next one starts over.
        assert_eq!(d.store(b"x").unwrap().at, 0);
        assert_eq!(b.to_vec(), b"xbcdef");
    }

    #[test]
    fn go_ahead_overflow_is_cut_to_the_room_left() {
        let (b, mut d) = dest(5, GO_AHEAD);
        d.store(b"abc").unwrap();
        assert_eq!(
            d.store(b"defg").unwrap(),
            Stored {
                at: 3,
                written: 2,
                truncated: true
            }
        );
        assert_eq!(b.to_vec(), b"abcde");
        assert_eq!(d.next_at(), 0);
    }

    #[test]
    fn go_back_overwrites_and_truncates_a_long_message() {
        let (b, mut d) = dest(4, GO_BACK);
        d.store(b"abc").unwrap();
        assert_eq!(d.store(b"xy").unwrap().at, 0);
        assert_eq!(b.to_vec(), b"xyc\0");
        assert_eq!(
            d.store(b"123456").unwrap(),
            Stored {
                at: 0,
                written: 4,
                truncated: true
            }
        );
        assert_eq!(b.to_vec(), b"1234");
    }

    #[test]
    fn no_buffer_truncates_all_but_empty_messages() {
        let mut d = Destination::new(None, 0, GO_BACK);
        assert!(d.store(b"a").unwrap().truncated);
        assert!(!d.store(b"").unwrap().truncated);
    }

    #[test]
    fn buffer_len_below_the_buffer_limits_storage() {
        let b = Buffer::new(8);
        let mut d = Destination::new(Some(b.clone()), 3, GO_BACK);
        assert!(d.store(b"abcd").unwrap().truncated);
        assert_eq!(b.to_vec(), b"abc\0\0\0\0\0");
    }

    #[test]
    fn a_borrowed_or_shrunk_buffer_is_respected() {
        let (b, mut d) = dest(4, GO_AHEAD);
        {
            let _held = b.borrow();
            assert_eq!(d.store(b"a"), Err(NotNow::Borrowed));
        }
        b.borrow_mut().truncate(2);
        assert_eq!(
            d.store(b"abc").unwrap(),
            Stored {
                at: 0,
                written: 2,
                truncated: true
            }
        );
        d.repost(Buffer::new(1), 1);
        assert_eq!(d.store(b"z").unwrap().at, 0);
    }

    #[test]
    fn a_go_ahead_buffer_shrunk_below_the_next_place_cuts_the_message() {
        let b = Buffer::new(8);
        let mut d = Destination::new(Some(b.clone()), 8, GO_AHEAD);
        d.store(b"xyz").unwrap();
        b.borrow_mut().truncate(2);
        let stored = d.store(b"q").unwrap();
        assert_eq!((stored.at, stored.written, stored.truncated), (2, 0, true));
        assert_eq!(d.next_at(), 0);
    }
}
