//! The CCS server of a build without the `ccs` feature: there is none.
//! `++server` (and its options) make start-up fail with an error that says
//! so; everything else of CCS (handler names, the request context, replies
//! on a process without the server) behaves as in a job run without
//! `++server`.
//!
//! # Invariants
//!
//! [`ServerHandle`] has no values, so no code path that needs a running
//! server is reachable; the compiler checks it (`match *self {}`).
use std::net::SocketAddr;
use std::sync::Arc;

use super::perf::Sample;
use super::{Reply, ServerError, Ticket};
use crate::proc::args::ServerFlags;
use crate::rt::job::Job;

/// A running server: none can exist in this build.
pub(crate) enum ServerHandle {}

impl ServerHandle {
    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        match *self {}
    }

    pub(crate) fn push_reply(&self, _ticket: Ticket, _reply: Reply) {
        match *self {}
    }

    pub(crate) fn push_sample(&self, _sample: Sample) {
        match *self {}
    }
}

/// Refuses: this build has no server.
pub(crate) fn start(
    _job: &Arc<Job>,
    _flags: &ServerFlags,
) -> Result<Arc<ServerHandle>, ServerError> {
    Err(ServerError::NotBuilt)
}

pub(crate) fn stop(handle: &ServerHandle) {
    match *handle {}
}
