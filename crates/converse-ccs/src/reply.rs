//! Reading a reply: `[20-byte hash, authenticated requests only] [4-byte
//! length d] [d bytes]`, then the server closes.
//!
//! A reply may be read in several calls: a timeout leaves what was read
//! so far in the [`PendingReply`], and the next call goes on from there.
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ccs_wire::{HASH_LEN, be_u32};

use crate::error::{CcsError, io_error};

/// The most bytes a read asks for at a time while the body grows: memory
/// is committed as the server's bytes arrive, not as its length field
/// claims.
const BODY_CHUNK: usize = 64 * 1024;

/// A request sent, its reply not yet taken.
pub(crate) struct PendingReply {
    stream: TcpStream,
    /// The handler asked, for messages.
    handler: String,
    /// What an authenticated reply must start with: `hash(key, reply
    /// salt)`; `None` for a plain request.
    expected_hash: Option<[u8; HASH_LEN]>,
    /// The hash (if any) and length field, as read so far.
    head: [u8; HASH_LEN + 4],
    head_read: usize,
    /// The announced length, once the head is whole and checked.
    body_len: Option<usize>,
    body: Vec<u8>,
}

impl PendingReply {
    pub(crate) fn new(
        stream: TcpStream,
        handler: &str,
        expected_hash: Option<[u8; HASH_LEN]>,
    ) -> PendingReply {
        PendingReply {
            stream,
            handler: handler.to_owned(),
            expected_hash,
            head: [0; HASH_LEN + 4],
            head_read: 0,
            body_len: None,
            body: Vec::new(),
        }
    }

    fn head_len(&self) -> usize {
        if self.expected_hash.is_some() {
            HASH_LEN + 4
        } else {
            4
        }
    }

    /// Reads the hash and length field (if not read yet), checks them
    /// and returns the reply's length.
    pub(crate) fn read_head(
        &mut self,
        server: SocketAddr,
        max_len: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, CcsError> {
        if let Some(len) = self.body_len {
            return Ok(len);
        }
        let head_len = self.head_len();
        while self.head_read < head_len {
            let n = read_once(
                &mut self.stream,
                &mut self.head[self.head_read..head_len],
                deadline,
            )
            .map_err(|e| {
                // A server that refuses a request may reset the connection
                // rather than close it (it does when it leaves request bytes
                // unread): with nothing received, that too is "no reply".
                if self.head_read == 0 && e.kind() == io::ErrorKind::ConnectionReset {
                    CcsError::NoReply {
                        server,
                        handler: self.handler.clone(),
                    }
                } else {
                    self.io_error(server, e)
                }
            })?;
            if n == 0 {
                return Err(if self.head_read == 0 {
                    CcsError::NoReply {
                        server,
                        handler: self.handler.clone(),
                    }
                } else {
                    CcsError::ShortReply {
                        server,
                        handler: self.handler.clone(),
                        got: self.head_read as u64,
                        expected: head_len as u64,
                    }
                });
            }
            self.head_read += n;
        }
        // The hash is checked before the length is believed.
        if let Some(expected) = self.expected_hash
            && self.head[..HASH_LEN] != expected
        {
            return Err(CcsError::ReplyHashMismatch {
                server,
                handler: self.handler.clone(),
            });
        }
        let len = be_u32(&self.head[head_len - 4..head_len]);
        if len as u64 > max_len as u64 {
            return Err(CcsError::ReplyTooLong {
                server,
                handler: self.handler.clone(),
                len: len as u64,
                max: max_len,
            });
        }
        self.body_len = Some(len as usize);
        Ok(len as usize)
    }

    /// Reads the rest of the body (after [`read_head`](Self::read_head))
    /// and returns it.
    pub(crate) fn read_body(
        &mut self,
        server: SocketAddr,
        deadline: Option<Instant>,
    ) -> Result<Vec<u8>, CcsError> {
        let len = self.body_len.expect("the head is read first");
        while self.body.len() < len {
            let have = self.body.len();
            let want = (len - have).min(BODY_CHUNK);
            self.body.resize(have + want, 0);
            let read = read_once(&mut self.stream, &mut self.body[have..], deadline);
            // Only what arrived stays; a timeout keeps it for the next call.
            self.body.truncate(have + read.as_ref().map_or(0, |&n| n));
            let n = read.map_err(|e| self.io_error(server, e))?;
            if n == 0 {
                return Err(CcsError::ShortReply {
                    server,
                    handler: self.handler.clone(),
                    got: (self.head_len() + have) as u64,
                    expected: (self.head_len() + len) as u64,
                });
            }
        }
        Ok(std::mem::take(&mut self.body))
    }

    /// Whether a read would find bytes, or the server's close, waiting now.
    pub(crate) fn readable(&self, server: SocketAddr) -> Result<bool, CcsError> {
        let mut probe = [0u8; 1];
        let peeked = with_nonblocking(&self.stream, |s| s.peek(&mut probe));
        match peeked {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(CcsError::Io {
                server,
                action: format!("probing for the reply to `{}`", self.handler),
                source: e,
            }),
        }
    }

    /// As [`readable`](Self::readable), waiting up to `timeout` for a byte
    /// (or the server's close); `None` waits as long as it takes. A signal
    /// that interrupts the wait does not end it.
    pub(crate) fn readable_within(
        &self,
        server: SocketAddr,
        timeout: Option<Duration>,
    ) -> Result<bool, CcsError> {
        if timeout.is_some_and(|t| t.is_zero()) {
            return self.readable(server);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut probe = [0u8; 1];
        let failed = |e: io::Error| CcsError::Io {
            server,
            action: format!("probing for the reply to `{}`", self.handler),
            source: e,
        };
        loop {
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(false),
                },
            };
            // Every receive sets the stream's timeout for itself
            // (`read_once`): this one may leave it changed.
            self.stream.set_read_timeout(left).map_err(failed)?;
            match self.stream.peek(&mut probe) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(false);
                }
                Err(e) => return Err(failed(e)),
            }
        }
    }

    fn io_error(&self, server: SocketAddr, e: io::Error) -> CcsError {
        io_error(
            server,
            format!("waiting for the reply to `{}`", self.handler),
            e,
        )
    }
}

/// One read into `buf` that gives up at `deadline` with
/// [`io::ErrorKind::TimedOut`]; 0 means the server closed the connection.
/// A deadline already past still takes bytes that have arrived.
pub(crate) fn read_once(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let result = match left {
            Some(left) if left.is_zero() => {
                return match with_nonblocking(stream, |mut s| s.read(buf)) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(io::ErrorKind::TimedOut.into())
                    }
                    other => other,
                };
            }
            left => {
                stream.set_read_timeout(left)?;
                stream.read(buf)
            }
        };
        match result {
            // A socket timeout is WouldBlock on Unix and TimedOut on
            // Windows; the loop goes back to the deadline either way.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            other => return other,
        }
    }
}

/// Reads until `buf` is full or the server closes; returns how many bytes
/// arrived.
pub(crate) fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match read_once(stream, &mut buf[filled..], deadline)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Runs `op` on the stream in non-blocking mode, then puts it back.
fn with_nonblocking<T>(
    stream: &TcpStream,
    op: impl FnOnce(&TcpStream) -> io::Result<T>,
) -> io::Result<T> {
    stream.set_nonblocking(true)?;
    let result = op(stream);
    stream.set_nonblocking(false)?;
    result
}
