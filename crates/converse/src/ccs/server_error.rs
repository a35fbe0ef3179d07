//! Why the CCS server could not start: the error `++server` gives a job
//! whose server does not come up (`StartError::Server`), in every build
//! (without the `ccs` feature, `NotBuilt`).
use std::net::IpAddr;

use crate::rt::launch::IoCause;

/// Why the CCS server could not start (`++server`): a job that asked for
/// it does not run without it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerError {
    /// `++server-auth PATH`: the file could not be read.
    AuthFileUnreadable {
        /// The file.
        path: String,
        /// Why it could not be read.
        source: IoCause,
    },
    /// `++server-auth PATH`: a line of the file is wrong.
    AuthFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        cause: ccs_wire::KeyError,
    },
    /// `++server-bind ADDR`: not an IP address.
    NotAnAddress(String),
    /// The listening socket could not be bound (the port taken, say).
    Listen {
        /// The address it would listen on.
        ip: IpAddr,
        /// The port (`++server-port`; 0 for any).
        port: u16,
        /// Why it could not.
        source: IoCause,
    },
    /// Another step of the set-up failed.
    Setup {
        /// Which (`listen`, `epoll`, `waker`, `cannot start its thread`…).
        what: &'static str,
        /// The system's error.
        source: IoCause,
    },
    /// This build has no server: the `ccs` feature is off.
    NotBuilt,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerError::AuthFileUnreadable { path, source } => {
                write!(f, "++server-auth {path}: cannot read the auth file: {source}")
            }
            ServerError::AuthFile { path, cause } => write!(f, "++server-auth {path}: {cause}"),
            ServerError::NotAnAddress(addr) => write!(f, "++server-bind {addr}: not an IP address"),
            ServerError::Listen { ip, port, source } => {
                write!(f, "CCS server: cannot listen on {ip} port {port}: {source}")
            }
            ServerError::Setup { what, source } => write!(f, "CCS server: {what}: {source}"),
            ServerError::NotBuilt => f.write_str(
                "this build of converse has no CCS server (`++server` needs the `ccs` feature, on by default)",
            ),
        }
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServerError::AuthFileUnreadable { source, .. }
            | ServerError::Listen { source, .. }
            | ServerError::Setup { source, .. } => Some(source.get()),
            ServerError::AuthFile { .. } | ServerError::NotAnAddress(_) | ServerError::NotBuilt => {
                None
            }
        }
    }
}
