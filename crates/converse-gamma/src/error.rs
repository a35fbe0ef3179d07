//! GAMMA's errors: every function of the document "returns a negative
//! integer value in case of error"; here a typed [`Error`] whose
//! [`code`](Error::code) is that value, and the handler-visible error
//! conditions of `gamma_errno`.
//!
//! # Invariants
//!
//! Each variant has one code, negative and fixed (the C ABI returns it);
//! the message names the node and what was refused.
use std::fmt;

/// `gamma_errno` when a chunk of a message was lost (`GAMMA_ERR_FRAMELOST`).
/// The Converse machine layer delivers whole messages or ends the job, so
/// no handler sees it here.
#[doc(alias = "GAMMA_ERR_FRAMELOST")]
pub const ERR_FRAMELOST: u8 = 2;
/// `gamma_errno` when a message found no buffer, or no room left in it: it
/// was truncated to fit (`GAMMA_ERR_MSGTOOLONG`).
#[doc(alias = "GAMMA_ERR_MSGTOOLONG")]
pub const ERR_MSGTOOLONG: u8 = 3;
/// `gamma_errno` when a message could not be sent (`GAMMA_ERR_SENDFAILURE`):
/// its destination node has left the group.
#[doc(alias = "GAMMA_ERR_SENDFAILURE")]
pub const ERR_SENDFAILURE: u8 = 4;

/// Why a GAMMA call was refused. [`code`](Error::code) is the negative
/// value the C function returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The calling thread is no node of a group (`gamma_init` first).
    NotInitialized,
    /// A port or semaphore number above 1024.
    BadPort(u32),
    /// Ports and semaphores 1023 and 1024 belong to GAMMA's collectives.
    Reserved(u32),
    /// A destination node that is not in the group.
    BadNode(u32),
    /// A parallel pid that names no group of this host.
    BadParPid(u8),
    /// A port bound for output to itself (the same port of this node).
    SelfConnection(u16),
    /// A send through a port not bound for output.
    NotOutput(u16),
    /// `gamma_post_recv`/`attach_buffer` on a port not set up for input,
    /// or a buffer length beyond the buffer.
    BadBuffer(String),
    /// The first piece of a two-piece send is longer than 20 bytes.
    FirstPieceTooLong(usize),
    /// A handle no non-blocking send returned.
    UnknownHandle(u64),
    /// The destination node left the group before the send could complete
    /// (flow control waits for it).
    SendFailure(String),
    /// A wait that can never end: every other node has left the group.
    Deadlock(String),
    /// The job is ending (some node called `exit`).
    JobEnding,
    /// `mlock`/`munlock` refused (the `RLIMIT_MEMLOCK` limit, usually):
    /// the OS error.
    Lock(String),
    /// The group could not be started.
    Start(String),
}

impl Error {
    /// The negative value the C function returns.
    pub fn code(&self) -> i32 {
        match self {
            Error::NotInitialized => -1,
            Error::BadPort(_) => -2,
            Error::Reserved(_) => -3,
            Error::BadNode(_) => -4,
            Error::BadParPid(_) => -5,
            Error::SelfConnection(_) => -6,
            Error::NotOutput(_) => -7,
            Error::BadBuffer(_) => -8,
            Error::FirstPieceTooLong(_) => -9,
            Error::UnknownHandle(_) => -10,
            Error::SendFailure(_) => -11,
            Error::Deadlock(_) => -12,
            Error::JobEnding => -13,
            Error::Lock(_) => -14,
            Error::Start(_) => -15,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotInitialized => write!(f, "gamma: this thread is no node of a group"),
            Error::BadPort(p) => write!(f, "gamma: no port or semaphore {p} (they are 0..=1024)"),
            Error::Reserved(p) => {
                write!(
                    f,
                    "gamma: port or semaphore {p} is reserved to the collectives"
                )
            }
            Error::BadNode(n) => write!(f, "gamma: no node {n} in the group"),
            Error::BadParPid(p) => write!(f, "gamma: no group of parallel pid {p} reachable"),
            Error::SelfConnection(p) => write!(f, "gamma: port {p} bound for output to itself"),
            Error::NotOutput(p) => write!(f, "gamma: port {p} is not bound for output"),
            Error::BadBuffer(why) => write!(f, "gamma: {why}"),
            Error::FirstPieceTooLong(n) => write!(
                f,
                "gamma: the first piece of a two-piece send has {n} bytes, at most 20 allowed"
            ),
            Error::UnknownHandle(h) => write!(f, "gamma: no send of handle {h}"),
            Error::SendFailure(why) | Error::Deadlock(why) | Error::Start(why) => {
                write!(f, "gamma: {why}")
            }
            Error::JobEnding => write!(f, "gamma: the job is ending"),
            Error::Lock(why) => write!(f, "gamma: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// GAMMA's results.
pub type Result<T> = std::result::Result<T, Error>;
