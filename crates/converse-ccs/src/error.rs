//! What goes wrong talking to a CCS server.
use std::fmt;
use std::io;
use std::net::SocketAddr;

use ccs_wire::WireError;

/// A failed CCS operation. Every variant that involves a server names it,
/// so a message alone tells the user which job it was about.
#[derive(Debug)]
#[non_exhaustive]
pub enum CcsError {
    /// The address given to connect could not be resolved.
    Resolve(io::Error),
    /// The address given to connect resolved to no address at all.
    NoAddress,
    /// A socket operation failed.
    Io {
        server: SocketAddr,
        /// What the client was doing: "connecting", "sending the request
        /// to `h`" ...
        action: String,
        source: io::Error,
    },
    /// A timeout ran out (connecting, sending, the handshake, or waiting
    /// for a reply). A reply being waited for stays pending: a later
    /// [`recv_response`](crate::CcsClient::recv_response) goes on reading
    /// it.
    Timeout { server: SocketAddr, action: String },
    /// The server closed the connection without sending a byte: the
    /// protocol's "no reply". The handler sent none, or the server refused
    /// the request (a server that requires authentication closes plain
    /// requests this way, and so does one whose check of an authenticated
    /// request fails).
    NoReply { server: SocketAddr, handler: String },
    /// The server closed the connection partway through a reply.
    ShortReply {
        server: SocketAddr,
        handler: String,
        /// Reply bytes received, counting the hash and length fields.
        got: u64,
        /// Bytes the reply needed (at least this many, if the connection
        /// closed before the length field was complete).
        expected: u64,
    },
    /// The reply's length field exceeds the client's limit
    /// ([`ClientOptions::max_reply_len`](crate::ClientOptions::max_reply_len));
    /// nothing was allocated for it and the reply is dropped.
    ReplyTooLong {
        server: SocketAddr,
        handler: String,
        len: u64,
        max: usize,
    },
    /// The reply is longer than the buffer given to
    /// [`recv_response_into`](crate::CcsClient::recv_response_into). The
    /// reply stays pending: [`recv_response`](crate::CcsClient::recv_response)
    /// takes it whole.
    BufferTooSmall {
        server: SocketAddr,
        len: usize,
        capacity: usize,
    },
    /// `ccs_getinfo`'s reply is not a layout (a node count, then one PE
    /// count per node, with at least one node and fewer than 2³¹ PEs).
    BadLayout { server: SocketAddr, len: usize },
    /// The server closed the identity handshake: it has no key for this
    /// security level, or the key differs from ours.
    AuthRefused { server: SocketAddr, level: u8 },
    /// The handshake's answer to our salt does not carry the hash of our
    /// key: the server does not hold the key we hold.
    ServerHashMismatch { server: SocketAddr, level: u8 },
    /// An authenticated reply does not start with the hash of our reply
    /// salt: it was not made by a server holding the key.
    ReplyHashMismatch { server: SocketAddr, handler: String },
    /// A PE beyond the job's PEs (as `ccs_getinfo` told them).
    BadPe {
        server: SocketAddr,
        pe: u32,
        num_pes: u32,
    },
    /// A multicast to an empty list of PEs.
    EmptyMulticast { server: SocketAddr },
    /// The request cannot be encoded (a handler name of 32 bytes or more,
    /// data of 2²⁹ bytes or more); nothing was sent.
    Request {
        server: SocketAddr,
        source: WireError,
    },
    /// [`recv_response`](crate::CcsClient::recv_response) or
    /// [`probe`](crate::CcsClient::probe) with no request waiting for its
    /// reply.
    NoRequest { server: SocketAddr },
}

impl fmt::Display for CcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CcsError::Resolve(e) => write!(f, "cannot resolve the CCS server's address: {e}"),
            CcsError::NoAddress => write!(f, "the CCS server's address resolves to no address"),
            CcsError::Io {
                server,
                action,
                source,
            } => write!(f, "CCS server {server}: {action}: {source}"),
            CcsError::Timeout { server, action } => {
                write!(f, "CCS server {server}: timed out {action}")
            }
            CcsError::NoReply { server, handler } => write!(
                f,
                "CCS server {server} closed the connection without replying to `{handler}` \
                 (the handler sent no reply, or the server refused the request)"
            ),
            CcsError::ShortReply {
                server,
                handler,
                got,
                expected,
            } => write!(
                f,
                "CCS server {server} closed the connection after {got} bytes of the reply to \
                 `{handler}`, which needs {expected}"
            ),
            CcsError::ReplyTooLong {
                server,
                handler,
                len,
                max,
            } => write!(
                f,
                "CCS server {server} announced a reply of {len} bytes to `{handler}`, \
                 more than this client's limit of {max}"
            ),
            CcsError::BufferTooSmall {
                server,
                len,
                capacity,
            } => write!(
                f,
                "the reply from CCS server {server} has {len} bytes and the buffer holds \
                 {capacity}; the reply is still pending"
            ),
            CcsError::BadLayout { server, len } => write!(
                f,
                "CCS server {server} answered `ccs_getinfo` with {len} bytes that are not a \
                 job layout (a node count, then each node's PE count)"
            ),
            CcsError::AuthRefused { server, level } => write!(
                f,
                "CCS server {server} refused authentication at security level {level}: \
                 it has no key for that level, or a different one"
            ),
            CcsError::ServerHashMismatch { server, level } => write!(
                f,
                "CCS server {server} does not hold our key for security level {level}: \
                 its answer to our salt has the wrong hash"
            ),
            CcsError::ReplyHashMismatch { server, handler } => write!(
                f,
                "the reply from CCS server {server} to `{handler}` does not carry the hash \
                 of our reply salt: it was not made with our key"
            ),
            CcsError::BadPe {
                server,
                pe,
                num_pes,
            } => write!(
                f,
                "PE {pe} is out of range: the job at CCS server {server} has {num_pes} PEs"
            ),
            CcsError::EmptyMulticast { server } => {
                write!(f, "a multicast to CCS server {server} lists no PEs")
            }
            CcsError::Request { server, source } => {
                write!(f, "request to CCS server {server} not sent: {source}")
            }
            CcsError::NoRequest { server } => write!(
                f,
                "no request to CCS server {server} is waiting for its reply"
            ),
        }
    }
}

impl std::error::Error for CcsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CcsError::Resolve(e) | CcsError::Io { source: e, .. } => Some(e),
            CcsError::Request { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// An I/O error during `action`, as a [`CcsError`]: an expired socket
/// timeout becomes [`CcsError::Timeout`].
pub(crate) fn io_error(server: SocketAddr, action: impl Into<String>, e: io::Error) -> CcsError {
    let action = action.into();
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => CcsError::Timeout { server, action },
        _ => CcsError::Io {
            server,
            action,
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_server_and_the_cause() {
        let server: SocketAddr = "127.0.0.1:1234".parse().unwrap();
        let e = io_error(
            server,
            "connecting",
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        let text = e.to_string();
        assert!(
            text.contains("127.0.0.1:1234") && text.contains("connecting"),
            "{text}"
        );
        assert!(std::error::Error::source(&e).is_some());
        let t = io_error(
            server,
            "waiting for the reply",
            io::ErrorKind::TimedOut.into(),
        );
        assert!(matches!(t, CcsError::Timeout { .. }));
        assert_eq!(
            t.to_string(),
            "CCS server 127.0.0.1:1234: timed out waiting for the reply"
        );
        let bad = CcsError::BadPe {
            server,
            pe: 9,
            num_pes: 4,
        };
        assert_eq!(
            bad.to_string(),
            "PE 9 is out of range: the job at CCS server 127.0.0.1:1234 has 4 PEs"
        );
    }
}
