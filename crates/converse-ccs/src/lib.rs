//! A client for the Converse Client-Server interface (CCS): ask the PEs of
//! a running Converse (or Charm++) job to run the handlers they registered
//! with `CcsRegisterHandler`, and read their replies.
//!
//! This is the Rust form of the manual's C client (`CcsConnect`,
//! `CcsSendRequest`, `CcsRecvResponse` …; each method carries its C name
//! as a doc alias) and speaks the protocol byte for byte as Charm++'s
//! servers do, through the `ccs-wire` crate the server side shares. The
//! `ccs` command-line tool in this package is built on it.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use converse_ccs::CcsClient;
//!
//! # fn main() -> Result<(), converse_ccs::CcsError> {
//! // The address a job prints at startup: "ccs: Server IP = 127.0.0.1, Server port = 1234 $".
//! let mut job = CcsClient::connect("127.0.0.1:1234")?;
//! println!("{} PEs on {} nodes", job.num_pes(), job.num_nodes());
//!
//! job.send_request("echo", 0, b"hello")?;
//! let reply = job.recv_response(Some(Duration::from_secs(5)))?;
//! assert_eq!(reply, b"hello");
//!
//! // Every PE runs the handler; the replies come back merged into one.
//! job.send_broadcast("count", &[])?;
//! let merged = job.recv_response(None)?;
//! # let _ = merged;
//! # Ok(())
//! # }
//! ```
//!
//! With authentication, the key of a security level (written as 32 hex
//! digits in the server's auth file) proves the client to the server and
//! the server to the client:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let key = converse_ccs::parse_key("00112233445566778899aabbccddeeff")?;
//! let mut job = converse_ccs::CcsClient::connect_with_auth("127.0.0.1:1234", key, 1)?;
//! job.send_request("echo", 0, b"signed")?;
//! let reply = job.recv_response(None)?;
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```
//!
//! # The protocol, briefly
//!
//! Every request is a TCP connection of its own: the client sends a
//! 40-byte header (data length, destination PE, handler name) and the
//! data; the server sends a 4-byte length and the reply, and closes. A
//! handler that sends no reply makes the server close the connection with
//! nothing sent: [`CcsError::NoReply`]. The exact bytes are in
//! `ccs-protocol.md` and the `ccs-wire` crate.
mod client;
mod error;
mod reply;

pub use ccs_wire::{Key, KeyError, parse_key};
pub use client::{CcsClient, ClientOptions, Credentials, DEFAULT_MAX_REPLY_LEN};
pub use error::CcsError;
