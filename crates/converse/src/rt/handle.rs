//! A handle to a PE that any thread of its process may use to give it a
//! message ([`PeHandle`]): how work that finishes outside the PEs (a
//! helper thread, an I/O callback, a `std::task::Waker` woken elsewhere)
//! reaches the PE that waits for it.
//!
//! # Invariants
//!
//! - A handle names one PE of the job it was made in, a PE of this
//!   process; it keeps the job's shared state alive, not the job itself:
//!   once the job ends, [`PeHandle::post`] drops the message and says so.
//! - A posted message is outside input, as a CCS request is: it goes into
//!   the PE's inbox like a message from another PE (run by its handler, in
//!   arrival order) but quiescence detection never counted it created, so
//!   it is flagged not to be counted processed either.
//!
//! # Concurrency
//!
//! `post` pushes into the PE's inbox (a multi-producer queue) and wakes the
//! PE if it sleeps (`csd::idle`'s protocol): safe from any thread.
use std::sync::Arc;

use crate::msg::Message;
use crate::msg::message::FLAG_NO_QD;
use crate::rt::job::Job;
use crate::rt::pe;

/// A handle to a PE for any thread of its process (see the module
/// comment). Cheap to clone; `Send` and `Sync`.
#[derive(Clone)]
pub struct PeHandle {
    job: Arc<Job>,
    pe: usize,
}

impl std::fmt::Debug for PeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeHandle").field("pe", &self.pe).finish()
    }
}

impl PeHandle {
    /// A handle to the calling PE.
    ///
    /// # Panics
    /// If the calling thread is no PE.
    pub fn current() -> PeHandle {
        pe::with(|p| PeHandle {
            job: Arc::clone(&p.job),
            pe: p.pe,
        })
    }

    /// The PE's number.
    pub fn pe(&self) -> usize {
        self.pe
    }

    /// True when the calling thread is this handle's PE.
    pub fn is_current(&self) -> bool {
        pe::try_current().is_some_and(|p| p.pe == self.pe && Arc::ptr_eq(&p.job, &self.job))
    }

    /// True when the calling thread is a PE (any) of this handle's job:
    /// there an ordinary send reaches the handle's PE.
    pub fn is_in_job(&self) -> bool {
        pe::try_current().is_some_and(|p| Arc::ptr_eq(&p.job, &self.job))
    }

    /// Gives the PE `msg` from any thread: its handler runs on the PE as
    /// for a message that arrived from another PE. Returns false, dropping
    /// the message, when the job is ending.
    pub fn post(&self, mut msg: Message) -> bool {
        if self.job.is_exiting() {
            return false;
        }
        // Outside input: never counted created, so not counted processed.
        msg.header_mut().flags = FLAG_NO_QD;
        let target = self.job.pe(self.pe);
        target.inbox.push(msg);
        target.idle.wake();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::PeHandle;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn a_handle_crosses_threads() {
        send_sync::<PeHandle>();
    }
}
