//! The process's own limits a network module may need raised.
//!
//! # Concurrency
//!
//! Process-wide settings, changed at a module's start (best effort).

/// Raises this process's limit on open descriptors (the soft one, up to
/// the hard one) so that it can hold a connection to each of the job's
/// `nodes` processes and more, if a program talks to them all: a VC's
/// connection (tcp) or a peer's open segment (shm) is a descriptor, and the usual soft limit (1,024) is below
/// a job of a thousand processes.
pub(crate) fn raise_descriptor_limit(nodes: usize) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let want = (nodes as u64).saturating_mul(2).saturating_add(256);
    let mut limit = getrlimit(Resource::Nofile);
    let Some(current) = limit.current else { return };
    if current >= want {
        return;
    }
    limit.current = Some(limit.maximum.map_or(want, |max| want.min(max)));
    // Best effort: a process that cannot raise it fails later, naming the
    // connection that needed the descriptor.
    let _ = setrlimit(Resource::Nofile, limit);
}
